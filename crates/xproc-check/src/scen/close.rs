//! Ends of connections: half-close, resets, unread data, and the death or stop of a process.
//!
//! Design: each step that depends on a packet having arrived waits for it first (a bounded
//! poll for the readiness bit that the packet sets: RDHUP for a FIN, ERR for an RST, or
//! FIONREAD reaching the number of bytes the peer reported sending), so what the transcript
//! records is the state once quiet, and "EOF or RST at the same call" is checked call by call
//! (recv → ECONNRESET, then EOF, send → EPIPE...). For the death scenarios the coordinator holds
//! a link to each role and sends the signal at a point a role reports; amounts that depend on
//! timing (how much the writer had queued) are never printed, only relations that TCP
//! guarantees (every byte follows the pattern; all completed sends were delivered; the sums
//! agree).

use super::{connect_from, coord_pair, serve_one, unknown_role, Scenario, V4};
use crate::harness::{Args, Coord, Env, LINK_BASE};
use crate::link::Link;
use crate::out;
use crate::sys::{self, Hash, ALL_EV, QUIET};
use std::os::unix::io::RawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// `half-close`.
pub const HALF_CLOSE: Scenario = Scenario {
    name: "half-close",
    about: "shutdown(SHUT_WR) one way, data keeps flowing the other way; ready sets, TCP states, EPIPE, EOF at the defined call",
    coord: coord_pair,
    role: role_half_close,
};
/// `linger-rst`.
pub const LINGER_RST: Scenario = Scenario {
    name: "linger-rst",
    about: "close with SO_LINGER{1,0}: the peer sees ERR, then ECONNRESET, EOF, EPIPE call by call; also with bytes unread at the RST",
    coord: coord_pair,
    role: role_linger,
};
/// `close-unread`.
pub const CLOSE_UNREAD: Scenario = Scenario {
    name: "close-unread",
    about:
        "close with unread data (none read, part read) sends RST, close after reading all sends FIN",
    coord: coord_pair,
    role: role_close_unread,
};
/// `fin-with-unread`.
pub const FIN_WITH_UNREAD: Scenario = Scenario {
    name: "fin-with-unread",
    about: "a FIN (shutdown, then close) arrives while 32 KiB are unread: all bytes then EOF; a send to the closed peer meets its RST",
    coord: coord_pair,
    role: role_fin_unread,
};
/// `sigkill-writer`.
pub const SIGKILL_WRITER: Scenario = Scenario {
    name: "sigkill-writer",
    about: "SIGKILL of a writer mid-transfer: the reader gets a prefix of the pattern holding every completed send, then EOF",
    coord: coord_kill_writer,
    role: role_kill_writer,
};
/// `sigkill-reader`.
pub const SIGKILL_READER: Scenario = Scenario {
    name: "sigkill-reader",
    about: "SIGKILL of a reader with unread data: the writer's sends fail ECONNRESET then EPIPE",
    coord: coord_kill_reader,
    role: role_kill_reader,
};
/// `sigstop-reader`.
pub const SIGSTOP_READER: Scenario = Scenario {
    name: "sigstop-reader",
    about: "SIGSTOP of the reader: the non-blocking writer reaches EAGAIN, the blocking one sleeps (no spinning); SIGCONT, drain, sums agree",
    coord: coord_stop_reader,
    role: role_stop_reader,
};

fn ready(fd: RawFd, want: i16) -> String {
    let rev = sys::wait_revents(fd, ALL_EV, want, QUIET);
    sys::evname(rev as u32)
}

fn recv1(fd: RawFd) -> String {
    let mut b = [0u8; 64];
    sys::show_read(&sys::recv(fd, &mut b, libc::MSG_DONTWAIT))
}

fn send1(fd: RawFd) -> String {
    sys::show(&sys::send(
        fd,
        b"z",
        libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
    ))
}

fn wait_state(fd: RawFd, state: &str) -> String {
    let mut last = String::new();
    sys::wait_until(QUIET, || {
        last = sys::tcp_state(fd);
        last == state
    });
    last
}

fn role_half_close(role: &str, a: &Args) {
    let link = a.link(0);
    let seed = a.seed();
    match role {
        "server" => {
            let s = serve_one(&link, V4);
            let fd = s.raw();
            link.expect("shut");
            out!(
                "after the client's shutdown: ready {}",
                ready(fd, libc::POLLIN | libc::POLLRDHUP)
            );
            out!(
                "state {}, FIONREAD {:?}",
                sys::tcp_state(fd),
                sys::fionread(fd)
            );
            let (d, end) = sys::recv_to_end(fd);
            let mut h = Hash::default();
            h.add(&d);
            out!(
                "received {}, equals pattern: {}, then {}",
                h.done(),
                d == sys::pattern(seed, 1, 5000),
                sys::show_read(&end)
            );
            out!("read again: {}", recv1(fd));
            let reply = sys::pattern(seed, 2, 100_000);
            out!(
                "send 100000 back: {}",
                sys::show_unit(&sys::send_all(fd, &reply))
            );
            out!(
                "ready {}",
                ready(fd, libc::POLLIN | libc::POLLRDHUP | libc::POLLOUT)
            );
            out!(
                "shutdown(SHUT_WR): {}",
                sys::show_unit(&sys::shutdown(fd, libc::SHUT_WR))
            );
            out!("send after both shut: {}", send1(fd));
            link.send("replied");
            link.expect("client done");
            out!("state once the client acked: {}", wait_state(fd, "CLOSE"));
            out!("ready {}", ready(fd, libc::POLLHUP));
        }
        "client" => {
            let c = connect_from(&link, V4);
            let fd = c.raw();
            let data = sys::pattern(seed, 1, 5000);
            out!("send 5000: {}", sys::show_unit(&sys::send_all(fd, &data)));
            out!(
                "shutdown(SHUT_WR): {}",
                sys::show_unit(&sys::shutdown(fd, libc::SHUT_WR))
            );
            out!("send after shutdown: {}", send1(fd));
            out!("ready after own shutdown: {}", ready(fd, libc::POLLOUT));
            link.send("shut");
            link.expect("replied");
            let (d, end) = sys::recv_to_end(fd);
            let mut h = Hash::default();
            h.add(&d);
            out!(
                "received {}, equals pattern: {}, then {}",
                h.done(),
                d == sys::pattern(seed, 2, 100_000),
                sys::show_read(&end)
            );
            out!("ready {}", ready(fd, libc::POLLHUP));
            // A socket in TIME_WAIT shows CLOSE (the kernel moved the connection to a mini-socket).
            out!("state {}", wait_state(fd, "CLOSE"));
            out!("SO_ERROR {}", sys::so_error(fd));
            link.send("client done");
        }
        _ => unknown_role(role),
    }
}

/// The calls a program makes after its peer reset the connection.
fn after_rst(fd: RawFd, what: &str) {
    out!("{what}: ready {}", ready(fd, libc::POLLERR));
    out!("{what}: FIONREAD {:?}", sys::fionread(fd));
    out!("{what}: recv {}", recv1(fd));
    out!("{what}: recv {}", recv1(fd));
    out!("{what}: recv {}", recv1(fd));
    out!("{what}: send {}", send1(fd));
    out!("{what}: SO_ERROR {}", sys::so_error(fd));
    out!("{what}: state {}", sys::tcp_state(fd));
    out!("{what}: ready {}", ready(fd, 0));
}

fn role_linger(role: &str, a: &Args) {
    let link = a.link(0);
    match role {
        "server" => {
            for round in ["read", "unread"] {
                let s = serve_one(&link, V4);
                let fd = s.raw();
                let inq = sys::wait_inq(fd, 7, QUIET);
                out!("{round}: data arrived: {}", inq >= 7);
                if round == "read" {
                    let (d, _) = sys::recv_exact(fd, 7);
                    out!("{round}: read {:?}", String::from_utf8_lossy(&d));
                }
                link.send("ready");
                link.expect("closed");
                after_rst(fd, round);
            }
        }
        "client" => {
            for round in ["read", "unread"] {
                let c = connect_from(&link, V4);
                let fd = c.raw();
                out!(
                    "{round}: send {}",
                    sys::show(&sys::send(fd, b"payload", libc::MSG_NOSIGNAL))
                );
                link.expect("ready");
                out!(
                    "{round}: SO_LINGER{{1,0}}: {}",
                    sys::show_unit(&sys::set_linger(fd, true, 0))
                );
                out!("{round}: close: {}", sys::show_unit(&c.close()));
                link.send("closed");
            }
        }
        _ => unknown_role(role),
    }
}

fn role_close_unread(role: &str, a: &Args) {
    let link = a.link(0);
    let seed = a.seed();
    let n = 3000;
    match role {
        "server" => {
            for (round, read) in [("none read", 0), ("part read", 1000), ("all read", n)] {
                let s = serve_one(&link, V4);
                let fd = s.raw();
                let inq = sys::wait_inq(fd, n as i32, QUIET);
                out!("{round}: all {n} arrived: {}", inq >= n as i32);
                if read > 0 {
                    let (d, _) = sys::recv_exact(fd, read);
                    out!("{round}: read {}", d.len());
                }
                out!("{round}: close: {}", sys::show_unit(&s.close()));
                link.send("closed");
                link.expect("next");
            }
        }
        "client" => {
            let data = sys::pattern(seed, 1, n);
            for round in ["none read", "part read", "all read"] {
                let c = connect_from(&link, V4);
                let fd = c.raw();
                out!(
                    "{round}: send {n}: {}",
                    sys::show_unit(&sys::send_all(fd, &data))
                );
                link.expect("closed");
                // Wait for what the close sent: an RST (ERR) or a FIN (RDHUP).
                let rev = sys::wait_revents(fd, ALL_EV, libc::POLLRDHUP, QUIET);
                let rst = rev & libc::POLLERR != 0;
                out!(
                    "{round}: the peer's close sent {}",
                    if rst { "RST" } else { "FIN" }
                );
                if rst {
                    after_rst(fd, round);
                } else {
                    out!("{round}: ready {}", sys::evname(rev as u32));
                    out!("{round}: recv {}", recv1(fd));
                    out!("{round}: send {}", send1(fd));
                    // Our byte drew an RST from the closed peer.
                    out!("{round}: ready {}", ready(fd, libc::POLLERR));
                    out!("{round}: send {}", send1(fd));
                    out!("{round}: send {}", send1(fd));
                    out!("{round}: recv {}", recv1(fd));
                }
                link.send("next");
            }
        }
        _ => unknown_role(role),
    }
}

fn role_fin_unread(role: &str, a: &Args) {
    let link = a.link(0);
    let seed = a.seed();
    let n = 32 * 1024;
    match role {
        "server" => {
            for round in ["shutdown", "close"] {
                let s = serve_one(&link, V4);
                let fd = s.raw();
                link.expect("done");
                out!(
                    "{round}: ready {}",
                    ready(fd, libc::POLLRDHUP | libc::POLLIN)
                );
                out!(
                    "{round}: FIONREAD {:?} state {}",
                    sys::fionread(fd),
                    sys::tcp_state(fd)
                );
                let mut r = sys::Rng::new(seed, 5);
                let mut got = Vec::new();
                let mut buf = vec![0u8; 20000];
                let end = loop {
                    let want = r.size(buf.len());
                    match sys::recv(fd, &mut buf[..want], 0) {
                        Ok(0) => break Ok(0),
                        Ok(k) => got.extend_from_slice(&buf[..k]),
                        Err(e) => break Err(e),
                    }
                };
                let mut h = Hash::default();
                h.add(&got);
                out!(
                    "{round}: received {}, equals pattern: {}, then {}",
                    h.done(),
                    got == sys::pattern(seed, 1, n),
                    sys::show_read(&end)
                );
                if round == "close" {
                    out!("{round}: send to the closed peer: {}", send1(fd));
                    out!("{round}: ready {}", ready(fd, libc::POLLERR));
                    out!("{round}: send {}", send1(fd));
                    out!("{round}: send {}", send1(fd));
                    out!("{round}: recv {}", recv1(fd));
                }
                link.send("next");
            }
        }
        "client" => {
            let data = sys::pattern(seed, 1, n);
            for round in ["shutdown", "close"] {
                let c = connect_from(&link, V4);
                let fd = c.raw();
                out!(
                    "{round}: send {n}: {}",
                    sys::show_unit(&sys::send_all(fd, &data))
                );
                if round == "shutdown" {
                    out!(
                        "{round}: shutdown(SHUT_WR): {}",
                        sys::show_unit(&sys::shutdown(fd, libc::SHUT_WR))
                    );
                    link.send("done");
                    link.expect("next");
                } else {
                    out!("{round}: close: {}", sys::show_unit(&c.close()));
                    link.send("done");
                    link.expect("next");
                }
            }
        }
        _ => unknown_role(role),
    }
}

const CYCLE: usize = 1 << 20;

fn coord_kill_writer(c: &mut Coord) {
    let (rw, wr) = Link::pair();
    let (kr, rk) = Link::pair();
    let mem = sys::memfd_page();
    let mem2 = sys::dup_cloexec(mem.raw());
    c.spawn(
        "reader",
        "reader",
        &[],
        vec![rw.into_fd(), rk.into_fd(), mem],
        Env::Inherit,
    );
    let w = c.spawn(
        "writer",
        "writer",
        &[],
        vec![wr.into_fd(), mem2],
        Env::Inherit,
    );
    kr.expect("mid");
    c.signal(w, libc::SIGKILL);
    out!("writer killed mid-transfer: {}", c.wait(w));
}

fn role_kill_writer(role: &str, a: &Args) {
    let link = a.link(0);
    let data = sys::pattern(a.seed(), 1, CYCLE);
    match role {
        "writer" => {
            let ctr = sys::shared_counter(LINK_BASE + 1);
            let c = connect_from(&link, V4);
            out!("connected");
            let mut total = 0usize;
            let end = Instant::now() + Duration::from_secs(15);
            while Instant::now() < end {
                let off = total % CYCLE;
                let len = 16384.min(CYCLE - off);
                match sys::send(c.raw(), &data[off..off + len], libc::MSG_NOSIGNAL) {
                    Ok(k) => total += k,
                    Err(e) => {
                        out!("send failed: {}", sys::errname(e));
                        return;
                    }
                }
                ctr.store(total as u64, Ordering::SeqCst);
            }
            out!("was not killed in time");
        }
        "reader" => {
            let coord = a.link(1);
            let ctr = sys::shared_counter(LINK_BASE + 2);
            let s = serve_one(&link, V4);
            let mut total = 0usize;
            let mut ok = true;
            let mut told = false;
            let mut buf = vec![0u8; 65536];
            let end = Instant::now() + Duration::from_secs(15);
            let how = loop {
                if Instant::now() > end {
                    break Err(libc::ETIMEDOUT);
                }
                match sys::recv(s.raw(), &mut buf, 0) {
                    Ok(0) => break Ok(0),
                    Ok(k) => {
                        for (i, b) in buf[..k].iter().enumerate() {
                            if *b != data[(total + i) % CYCLE] {
                                ok = false;
                            }
                        }
                        total += k;
                        if total >= 256 * 1024 && !told {
                            coord.send("mid");
                            told = true;
                        }
                    }
                    Err(e) => break Err(e),
                }
            };
            out!("received at least 256 KiB: {}", total >= 256 * 1024);
            out!("every byte follows the pattern: {ok}");
            out!("stream ended with {}", sys::show_read(&how));
            let done = ctr.load(Ordering::SeqCst) as usize;
            out!("every completed send was delivered: {}", total >= done);
        }
        _ => unknown_role(role),
    }
}

fn coord_kill_reader(c: &mut Coord) {
    let (rw, wr) = Link::pair();
    let (kr, rk) = Link::pair();
    let r = c.spawn(
        "reader",
        "reader",
        &[],
        vec![rw.into_fd(), rk.into_fd()],
        Env::Inherit,
    );
    c.spawn("writer", "writer", &[], vec![wr.into_fd()], Env::Inherit);
    kr.expect("mid");
    c.signal(r, libc::SIGKILL);
    out!("reader killed with unread data: {}", c.wait(r));
}

fn role_kill_reader(role: &str, a: &Args) {
    let link = a.link(0);
    let data = sys::pattern(a.seed(), 1, 16384);
    match role {
        "writer" => {
            let c = connect_from(&link, V4);
            let fd = c.raw();
            let end = Instant::now() + Duration::from_secs(15);
            let first = loop {
                if Instant::now() > end {
                    break libc::ETIMEDOUT;
                }
                if let Err(e) = sys::send(fd, &data, libc::MSG_NOSIGNAL) {
                    break e;
                }
            };
            out!("first failing send: {}", sys::errname(first));
            out!("next send: {}", send1(fd));
            out!("ready {}", ready(fd, 0));
            out!("recv {}", recv1(fd));
            out!("SO_ERROR {}", sys::so_error(fd));
        }
        "reader" => {
            let coord = a.link(1);
            let s = serve_one(&link, V4);
            let (d, _) = sys::recv_exact(s.raw(), 256 * 1024);
            out!("read 256 KiB: {}", d.len() == 256 * 1024);
            let inq = sys::wait_inq(s.raw(), 1, QUIET);
            out!("unread data queued: {}", inq > 0);
            coord.send("mid");
            // Killed here.
            let _ = coord.recv_within(Duration::from_secs(30));
            out!("was not killed");
        }
        _ => unknown_role(role),
    }
}

fn coord_stop_reader(c: &mut Coord) {
    let (rw, wr) = Link::pair();
    let (kr, rk) = Link::pair();
    let (kw, wk) = Link::pair();
    let r = c.spawn(
        "reader",
        "reader",
        &[],
        vec![rw.into_fd(), rk.into_fd()],
        Env::Inherit,
    );
    let w = c.spawn(
        "writer",
        "writer",
        &[],
        vec![wr.into_fd(), wk.into_fd()],
        Env::Inherit,
    );
    kr.expect("stop-me");
    c.signal(r, libc::SIGSTOP);
    let stopped = sys::wait_until(QUIET, || sys::proc_state(c.pid(r)) == 'T');
    out!("reader stopped: {stopped}");
    kw.send("stopped");
    kw.expect("blocking");
    let wpid = c.pid(w);
    let asleep = sys::wait_sleeping(wpid, QUIET);
    let cpu0 = sys::proc_cpu_ns(wpid);
    let t0 = Instant::now();
    let mut awake = 0;
    for _ in 0..15 {
        sys::sleep_ms(20);
        if sys::proc_state(wpid) != 'S' {
            awake += 1;
        }
    }
    let wall = t0.elapsed().as_nanos() as u64;
    let cpu = sys::proc_cpu_ns(wpid).saturating_sub(cpu0);
    out!(
        "blocked writer sleeps while the reader is stopped: {}",
        asleep && awake <= 3
    );
    out!("blocked writer does not spin: {}", cpu * 4 < wall);
    if !(asleep && awake <= 3 && cpu * 4 < wall) {
        eprintln!("sigstop-reader: asleep {asleep} awake-samples {awake} cpu {cpu} ns of {wall} ns state {}", sys::proc_state(wpid));
    }
    c.signal(r, libc::SIGCONT);
    kr.send("go");
}

fn role_stop_reader(role: &str, a: &Args) {
    let link = a.link(0);
    let coord = a.link(1);
    let seed = a.seed();
    match role {
        "writer" => {
            let c = connect_from(&link, V4);
            let fd = c.raw();
            let first = sys::pattern(seed, 1, 64 * 1024);
            out!(
                "send 64 KiB: {}",
                sys::show_unit(&sys::send_all(fd, &first))
            );
            let mut h = Hash::default();
            h.add(&first);
            coord.expect("stopped");
            // Non-blocking: fill until EAGAIN, until not writable for 300 ms in a row.
            sys::set_nonblock(fd, true);
            let chunk = sys::pattern(seed, 2, 65536);
            let mut eagain = false;
            let mut blocked = false;
            let end = Instant::now() + Duration::from_secs(8);
            while Instant::now() < end && !blocked {
                match sys::send(fd, &chunk, libc::MSG_NOSIGNAL) {
                    Ok(k) => h.add(&chunk[..k]),
                    Err(libc::EAGAIN) => {
                        eagain = true;
                        blocked = sys::poll1(fd, libc::POLLOUT, 300).unwrap_or(0) == 0;
                    }
                    Err(e) => {
                        out!("non-blocking send: {}", sys::errname(e));
                        break;
                    }
                }
            }
            out!("non-blocking writer reached EAGAIN: {eagain}");
            out!("then stayed not writable: {blocked}");
            out!(
                "ready {}",
                sys::evname(sys::poll1(fd, ALL_EV, 0).unwrap_or(0) as u32)
            );
            sys::set_nonblock(fd, false);
            let big = sys::pattern(seed, 3, 16 << 20);
            coord.send("blocking");
            // More than the send and receive buffers can hold, so the call must block.
            out!(
                "blocking send of 16 MiB: {}",
                sys::show(&sys::send(fd, &big, libc::MSG_NOSIGNAL))
            );
            h.add(&big);
            out!(
                "shutdown(SHUT_WR): {}",
                sys::show_unit(&sys::shutdown(fd, libc::SHUT_WR))
            );
            link.send(&format!("sent {}", h.done()));
        }
        "reader" => {
            let s = serve_one(&link, V4);
            let fd = s.raw();
            let (d, _) = sys::recv_exact(fd, 64 * 1024);
            out!("read 64 KiB: {}", d == sys::pattern(seed, 1, 64 * 1024));
            let mut h = Hash::default();
            h.add(&d);
            coord.send("stop-me");
            coord.expect("go");
            let (rest, end) = sys::recv_to_end(fd);
            h.add(&rest);
            out!("drained, then {}", sys::show_read(&end));
            let theirs = link.recv();
            let mine = format!("sent {}", h.done());
            out!("received exactly what the writer sent: {}", theirs == mine);
        }
        _ => unknown_role(role),
    }
}
