//! Random byte streams (IPv4, IPv6, v4-mapped) and urgent data.
//!
//! Design: both ends derive the same *plan* from the seed: 4–8 phases, each moving a random
//! number of bytes client→server, server→client or both at once, and for each side the phase
//! after which it calls `shutdown(SHUT_WR)`. Unidirectional phases run in blocking mode half the
//! time; the others run a non-blocking poll loop (so both directions are in flight together and
//! nothing can deadlock). Every call's size and kind (send/write/sendto/sendmsg/writev,
//! recv/read/recvfrom/recvmsg/readv) is random, but the transcript records only what TCP
//! guarantees: per phase the byte counts, at which phase EOF is read, EPIPE after one's own
//! shutdown, and at the end the SHA-256 of each direction and whether it equals the plan. The
//! content is a seeded pattern, so a byte out of place anywhere changes the hash.
//!
//! `oob` sends urgent bytes (with SO_OOBINLINE off, then on, then in the other direction) and
//! records, at quiet points (the reader waits until POLLPRI shows the urgent byte arrived),
//! FIONREAD, SIOCATMARK, what recv(MSG_OOB) / recv / MSG_PEEK return and the poll set.

use super::{
    connect_from, coord_pair, mapped, recv_any, send_any, serve_one, unknown_role, Scenario, V4, V6,
};
use crate::harness::Args;
use crate::out;
use crate::sys::{self, Hash, Rng, ALL_EV, QUIET};
use std::net::{IpAddr, Ipv6Addr};
use std::os::unix::io::RawFd;
use std::time::{Duration, Instant};

/// `stream-random-v4`.
pub const V4S: Scenario = Scenario {
    name: "stream-random-v4",
    about: "seeded random send/recv sizes and calls both ways over 127.0.0.1, shutdown at random phases, SHA-256",
    coord: coord_pair,
    role: role_v4,
};
/// `stream-random-v6`.
pub const V6S: Scenario = Scenario {
    name: "stream-random-v6",
    about: "the same over ::1",
    coord: coord_pair,
    role: role_v6,
};
/// `stream-random-mapped`.
pub const MAPPED: Scenario = Scenario {
    name: "stream-random-mapped",
    about: "the same from an AF_INET6 socket to ::ffff:127.0.0.1; a V6ONLY listener refuses it; a dual-stack one sees a mapped peer",
    coord: coord_pair,
    role: role_mapped,
};
/// `stream-random-oob`.
pub const RANDOM_OOB: Scenario = Scenario {
    name: "stream-random-oob",
    about: "the v4 random stream with random MSG_OOB sends both ways (SO_OOBINLINE on): unfuse points at random, order kept",
    coord: coord_pair,
    role: role_random_oob,
};
/// `oob`.
pub const OOB: Scenario = Scenario {
    name: "oob",
    about: "MSG_OOB with SO_OOBINLINE off and on, both ways: recv(MSG_OOB), SIOCATMARK, FIONREAD, PEEK, poll PRI at quiet points",
    coord: coord_pair,
    role: role_oob,
};

struct Phase {
    c2s: usize,
    s2c: usize,
    blocking: bool,
}

struct Plan {
    phases: Vec<Phase>,
    cshut: usize,
    sshut: usize,
}

fn plan(seed: u64) -> Plan {
    let mut r = Rng::new(seed, 77);
    let n = r.range(4, 8) as usize;
    // Shutdowns fall in the second half, so most phases carry data both ways.
    let cshut = r.range(n as u64 / 2, n as u64 - 1) as usize;
    let sshut = r.range(n as u64 / 2, n as u64 - 1) as usize;
    let mut phases = Vec::new();
    for i in 0..n {
        let kind = r.range(0, 2);
        // Sizes spread from 1 byte to 400 KB, biased upwards (the larger of two draws).
        let a = r.size(400_000).max(r.size(400_000));
        let b = r.size(400_000).max(r.size(400_000));
        let c2s = if kind != 1 && i <= cshut { a } else { 0 };
        let s2c = if kind != 0 && i <= sshut { b } else { 0 };
        let blocking = (c2s == 0 || s2c == 0) && r.chance(1, 2);
        phases.push(Phase { c2s, s2c, blocking });
    }
    Plan {
        phases,
        cshut,
        sshut,
    }
}

fn set_mode(fd: RawFd, nonblock: bool, r: &mut Rng) {
    if r.chance(1, 2) {
        sys::set_nonblock(fd, nonblock);
    } else {
        sys::set_fionbio(fd, nonblock);
    }
}

/// Moves `out` out and `inn` bytes in; returns Err(description) if the stream ended early.
#[allow(clippy::too_many_arguments)]
fn transfer(
    fd: RawFd,
    out: &[u8],
    inn: usize,
    blocking: bool,
    r: &mut Rng,
    got: &mut Vec<u8>,
    deadline: Instant,
    oob: bool,
) -> Result<(), String> {
    set_mode(fd, !blocking, r);
    let mut sent = 0;
    let mut recvd = 0;
    let mut buf = vec![0u8; 70_000];
    while sent < out.len() || recvd < inn {
        if Instant::now() > deadline {
            return Err(format!("stalled at sent {sent} received {recvd}"));
        }
        let mut can_in = recvd < inn;
        let mut can_out = sent < out.len();
        if !blocking {
            let ev =
                if can_in { libc::POLLIN } else { 0 } | if can_out { libc::POLLOUT } else { 0 };
            let rev = sys::poll1(fd, ev, 5000).map_err(|e| format!("poll {}", sys::errname(e)))?;
            if rev == 0 {
                return Err(format!("poll timed out at sent {sent} received {recvd}"));
            }
            can_in &= rev & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
            can_out &= rev & (libc::POLLOUT | libc::POLLHUP | libc::POLLERR) != 0;
        }
        if can_in {
            let want = r.size(65_536).min(inn - recvd);
            match recv_any(fd, &mut buf[..want], r) {
                Ok(0) => return Err(format!("EOF after {recvd} of {inn}")),
                Ok(k) => {
                    got.extend_from_slice(&buf[..k]);
                    recvd += k;
                }
                Err(libc::EAGAIN) | Err(libc::EINTR) => {}
                Err(e) => return Err(format!("recv {} after {recvd} of {inn}", sys::errname(e))),
            }
        }
        if can_out {
            let want = r.size(65_536).min(out.len() - sent);
            let chunk = &out[sent..sent + want];
            let res = if oob && r.chance(1, 6) {
                // The chunk's last byte is urgent; with SO_OOBINLINE on both sides it stays in
                // the stream, so the bytes and their order are unchanged.
                sys::send(fd, chunk, libc::MSG_OOB | libc::MSG_NOSIGNAL)
            } else {
                send_any(fd, chunk, r)
            };
            match res {
                Ok(k) => sent += k,
                Err(libc::EAGAIN) | Err(libc::EINTR) => {}
                Err(e) => {
                    return Err(format!(
                        "send {} after {sent} of {}",
                        sys::errname(e),
                        out.len()
                    ))
                }
            }
        }
    }
    Ok(())
}

/// One side of the random stream. `client` says which.
pub fn stream_side(fd: RawFd, seed: u64, client: bool) {
    stream_side_oob(fd, seed, client, false)
}

/// One side of the random stream; with `oob`, some sends are MSG_OOB (SO_OOBINLINE is on).
pub fn stream_side_oob(fd: RawFd, seed: u64, client: bool, oob: bool) {
    if oob {
        let r = sys::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_OOBINLINE, 1);
        out!("SO_OOBINLINE=1: {}", sys::show_unit(&r));
    }
    let p = plan(seed);
    let (my_shut, peer_shut) = if client {
        (p.cshut, p.sshut)
    } else {
        (p.sshut, p.cshut)
    };
    let mine = |ph: &Phase| if client { ph.c2s } else { ph.s2c };
    let theirs = |ph: &Phase| if client { ph.s2c } else { ph.c2s };
    let out_total: usize = p.phases.iter().map(mine).sum();
    let in_total: usize = p.phases.iter().map(theirs).sum();
    let (my_dir, their_dir) = if client { (1, 2) } else { (2, 1) };
    let out = sys::pattern(seed, my_dir, out_total);
    let expect = sys::pattern(seed, their_dir, in_total);
    let mut r = Rng::new(seed, 100 + my_dir);
    let mut got = Vec::with_capacity(in_total);
    let mut off = 0;
    let deadline = Instant::now() + Duration::from_secs(12);
    out!(
        "plan: {} phases, my shutdown after phase {my_shut}, peer's after {peer_shut}",
        p.phases.len()
    );
    for (i, ph) in p.phases.iter().enumerate() {
        let (o, n) = (mine(ph), theirs(ph));
        let mode = if ph.blocking {
            "blocking"
        } else {
            "non-blocking"
        };
        if let Err(e) = transfer(
            fd,
            &out[off..off + o],
            n,
            ph.blocking,
            &mut r,
            &mut got,
            deadline,
            oob,
        ) {
            out!("phase {i} ({mode}): stream ended early: {e}");
            return;
        }
        off += o;
        out!("phase {i} ({mode}): sent {o} received {n}");
        if i == my_shut {
            out!(
                "phase {i}: shutdown(SHUT_WR) {}",
                sys::show_unit(&sys::shutdown(fd, libc::SHUT_WR))
            );
            let r = sys::send(fd, b"x", libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT);
            out!("phase {i}: send after own shutdown: {}", sys::show(&r));
        }
        if i == peer_shut {
            let rev = sys::poll1(fd, libc::POLLIN, 5000).unwrap_or(0);
            let mut b = [0u8; 16];
            let r = if rev == 0 {
                Err(libc::ETIMEDOUT)
            } else {
                sys::recv(fd, &mut b, libc::MSG_DONTWAIT)
            };
            out!(
                "phase {i}: read after peer's shutdown: {}",
                sys::show_read(&r)
            );
        }
    }
    let mut b = [0u8; 16];
    out!(
        "final read: {}",
        sys::show_read(&sys::recv(fd, &mut b, libc::MSG_DONTWAIT))
    );
    let mut hs = Hash::default();
    hs.add(&out);
    out!("sent: {}", hs.done());
    let mut hr = Hash::default();
    hr.add(&got);
    out!(
        "received: {}; equals the plan: {}",
        hr.done(),
        if got == expect { "yes" } else { "NO" }
    );
}

fn stream_role(role: &str, a: &Args, ip: IpAddr) {
    let link = a.link(0);
    match role {
        "server" => {
            let s = serve_one(&link, ip);
            let peer = sys::peer_addr(s.raw())
                .map(|x| sys::addr_kind(&x))
                .unwrap_or_else(sys::errname);
            out!("accepted from {peer}");
            stream_side(s.raw(), a.seed(), false);
            link.send("done");
        }
        "client" => {
            let c = connect_from(&link, ip);
            let local = sys::local_addr(c.raw())
                .map(|x| sys::addr_kind(&x))
                .unwrap_or_default();
            out!("connected from {local}");
            stream_side(c.raw(), a.seed(), true);
            link.expect("done");
        }
        _ => unknown_role(role),
    }
}

fn role_v4(role: &str, a: &Args) {
    stream_role(role, a, V4)
}

fn role_random_oob(role: &str, a: &Args) {
    let link = a.link(0);
    match role {
        "server" => {
            let s = serve_one(&link, V4);
            stream_side_oob(s.raw(), a.seed(), false, true);
            link.send("done");
        }
        "client" => {
            let c = connect_from(&link, V4);
            stream_side_oob(c.raw(), a.seed(), true, true);
            link.expect("done");
        }
        _ => unknown_role(role),
    }
}

fn role_v6(role: &str, a: &Args) {
    stream_role(role, a, V6)
}

fn role_mapped(role: &str, a: &Args) {
    let link = a.link(0);
    match role {
        "server" => {
            // The stream itself, from an AF_INET6 socket bound to ::ffff:127.0.0.1.
            let s = serve_one(&link, mapped());
            let peer = sys::peer_addr(s.raw())
                .map(|x| sys::addr_kind(&x))
                .unwrap_or_else(sys::errname);
            out!("accepted from {peer}");
            stream_side(s.raw(), a.seed(), false);
            link.expect("stream done");
            drop(s);
            // A V6ONLY wildcard listener on a port whose IPv4 side we hold bound but not
            // listening (so nothing else can answer there): the mapped connect is refused.
            let (v4hold, port) = sys::listen_on_bound_only(V4);
            let l6 = sys::listen_on_port(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port, Some(true));
            link.send_num("v6only", port as u64);
            let s = sys::accept_within(l6.raw(), sys::QUIET);
            let peer = sys::peer_addr(s.raw())
                .map(|x| sys::addr_kind(&x))
                .unwrap_or_else(sys::errname);
            out!("v6only listener accepted from {peer}");
            drop((s, l6, v4hold));
            // A dual-stack wildcard listener sees an AF_INET client as a mapped peer.
            let (l, port) = sys::listen_on(IpAddr::V6(Ipv6Addr::UNSPECIFIED), Some(false));
            link.send_num("dual", port as u64);
            let s = sys::accept_within(l.raw(), sys::QUIET);
            let peer = sys::peer_addr(s.raw())
                .map(|x| sys::addr_kind(&x))
                .unwrap_or_else(sys::errname);
            out!("dual-stack listener accepted from {peer}");
            let (data, end) = sys::recv_to_end(s.raw());
            out!(
                "dual-stack: received {:?} then {}",
                String::from_utf8_lossy(&data),
                sys::show_read(&end)
            );
            link.send("done");
        }
        "client" => {
            let c = connect_from(&link, mapped());
            let local = sys::local_addr(c.raw())
                .map(|x| sys::addr_kind(&x))
                .unwrap_or_default();
            out!("connected from {local}");
            stream_side(c.raw(), a.seed(), true);
            drop(c);
            link.send("stream done");
            let port = link.recv_num("v6only") as u16;
            let r = sys::connect_to(mapped(), port).map(|_| ());
            out!(
                "connect to ::ffff:127.0.0.1 at a V6ONLY listener: {}",
                sys::show_unit(&r)
            );
            let r = sys::connect_to(V6, port).map(|_| ());
            out!(
                "connect to ::1 at the same listener: {}",
                sys::show_unit(&r)
            );
            let port = link.recv_num("dual") as u16;
            match sys::connect_to(V4, port) {
                Ok(c) => {
                    out!("AF_INET connect to a dual-stack listener: ok");
                    let r = sys::send(c.raw(), b"mapped hello", libc::MSG_NOSIGNAL);
                    out!("send: {}", sys::show(&r));
                }
                Err(e) => out!(
                    "AF_INET connect to a dual-stack listener: {}",
                    sys::errname(e)
                ),
            }
            link.expect("done");
        }
        _ => unknown_role(role),
    }
}

fn show_bytes(r: &sys::R<usize>, b: &[u8]) -> String {
    match r {
        Ok(n) => format!("{:?}", String::from_utf8_lossy(&b[..*n])),
        Err(e) => sys::errname(*e),
    }
}

/// Records the state of the receiving side of urgent data: poll set, FIONREAD, SIOCATMARK.
fn oob_state(fd: RawFd, what: &str) {
    let rev = sys::poll1(fd, ALL_EV, 0).unwrap_or(0);
    let inq = sys::fionread(fd)
        .map(|v| v.to_string())
        .unwrap_or_else(sys::errname);
    let mark = sys::ioctl_int(fd, sys::SIOCATMARK)
        .map(|v| v.to_string())
        .unwrap_or_else(sys::errname);
    out!(
        "{what}: poll {} FIONREAD {inq} SIOCATMARK {mark}",
        sys::evname(rev as u32)
    );
}

fn recv_show(fd: RawFd, len: usize, flags: i32) -> String {
    let mut b = vec![0u8; len];
    let r = sys::recv(fd, &mut b, flags | libc::MSG_DONTWAIT);
    show_bytes(&r, &b)
}

/// Waits until the urgent byte has arrived (POLLPRI), bounded.
fn wait_pri(fd: RawFd) {
    let rev = sys::wait_revents(fd, ALL_EV, libc::POLLPRI, QUIET);
    if rev & libc::POLLPRI == 0 {
        out!(
            "urgent byte did not arrive: poll {}",
            sys::evname(rev as u32)
        );
    }
}

fn role_oob(role: &str, a: &Args) {
    let link = a.link(0);
    let f =
        |fd: RawFd, b: &[u8], flags: i32| sys::show(&sys::send(fd, b, flags | libc::MSG_NOSIGNAL));
    match role {
        "server" => {
            let s = serve_one(&link, V4);
            let fd = s.raw();
            out!(
                "recv(MSG_OOB) before any urgent data: {}",
                recv_show(fd, 1, libc::MSG_OOB)
            );
            link.send("go");
            // Part A: SO_OOBINLINE off (the default).
            link.expect("sent1");
            wait_pri(fd);
            oob_state(fd, "A urgent arrived");
            out!("A MSG_PEEK: {}", recv_show(fd, 16, libc::MSG_PEEK));
            out!("A recv: {}", recv_show(fd, 16, 0));
            oob_state(fd, "A after reading to the mark");
            out!("A recv(MSG_OOB): {}", recv_show(fd, 1, libc::MSG_OOB));
            out!("A recv(MSG_OOB) again: {}", recv_show(fd, 1, libc::MSG_OOB));
            oob_state(fd, "A after reading the urgent byte");
            link.send("read1");
            link.expect("sent2");
            // At the mark FIONREAD counts only bytes before the mark (0), so wait for POLLIN.
            let rev = sys::wait_revents(fd, ALL_EV, libc::POLLIN, QUIET);
            out!("A more data arrived: {}", rev & libc::POLLIN != 0);
            oob_state(fd, "A more data");
            let (d, _) = sys::recv_exact(fd, 3);
            out!("A recv 3: {:?}", String::from_utf8_lossy(&d));
            oob_state(fd, "A drained");
            // Part B: SO_OOBINLINE on.
            let r = sys::setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_OOBINLINE, 1);
            out!("B SO_OOBINLINE=1: {}", sys::show_unit(&r));
            link.send("inline");
            link.expect("sent3");
            wait_pri(fd);
            oob_state(fd, "B urgent arrived");
            out!("B recv(MSG_OOB): {}", recv_show(fd, 1, libc::MSG_OOB));
            out!("B recv: {}", recv_show(fd, 16, 0));
            oob_state(fd, "B at the mark");
            out!("B recv: {}", recv_show(fd, 16, 0));
            oob_state(fd, "B after the urgent byte");
            link.send("read3");
            // Part C: the other direction.
            out!("C send \"mn\": {}", f(fd, b"mn", 0));
            out!("C send \"Z\" MSG_OOB: {}", f(fd, b"Z", libc::MSG_OOB));
            link.send("sent5");
            link.expect("read5");
            let (d, end) = sys::recv_to_end(fd);
            out!(
                "tail: {:?} then {}",
                String::from_utf8_lossy(&d),
                sys::show_read(&end)
            );
        }
        "client" => {
            let c = connect_from(&link, V4);
            let fd = c.raw();
            link.expect("go");
            out!("send \"abc\": {}", f(fd, b"abc", 0));
            out!("send \"X\" MSG_OOB: {}", f(fd, b"X", libc::MSG_OOB));
            link.send("sent1");
            link.expect("read1");
            out!("send \"def\": {}", f(fd, b"def", 0));
            link.send("sent2");
            link.expect("inline");
            out!("send \"ghi\": {}", f(fd, b"ghi", 0));
            out!("send \"Y\" MSG_OOB: {}", f(fd, b"Y", libc::MSG_OOB));
            link.send("sent3");
            link.expect("read3");
            link.expect("sent5");
            wait_pri(fd);
            oob_state(fd, "C urgent arrived");
            out!("C recv(MSG_OOB): {}", recv_show(fd, 1, libc::MSG_OOB));
            out!("C recv: {}", recv_show(fd, 16, 0));
            out!("C recv: {}", recv_show(fd, 16, 0));
            link.send("read5");
            out!("send \"jkl\": {}", f(fd, b"jkl", 0));
            out!(
                "shutdown(SHUT_WR): {}",
                sys::show_unit(&sys::shutdown(fd, libc::SHUT_WR))
            );
            let (d, end) = sys::recv_to_end(fd);
            out!(
                "tail: {:?} then {}",
                String::from_utf8_lossy(&d),
                sys::show_read(&end)
            );
        }
        _ => unknown_role(role),
    }
}
