//! epoll: level, edge, oneshot, exclusive, sets shared across fork, dup'd-then-closed
//! registrations, nested sets.
//!
//! Design: the server observes, the client acts on command over the link, and every
//! observation is taken once quiet: "an event must come" is a bounded wait for it; "no event
//! may come" is checked only after everything that was sent has arrived (FIONREAD) and the
//! events already queued were drained, with a short epoll_wait. Level-triggered sets are
//! recorded as the full (tag: events) list of one epoll_wait; edge-triggered ones only as
//! "an event came on a not-ready→ready transition" and "none came without one", never as
//! counts. Registrations are identified by their tag (epoll_data), never by fd number.

use super::{connect_from, coord_pair, serve_one, unknown_role, Scenario, V4};
use crate::harness::{self, Args};
use crate::link::Link;
use crate::out;
use crate::sys::{self, Fd, QUIET, R};
use std::os::unix::io::RawFd;
use std::time::{Duration, Instant};

/// `epoll-level`.
pub const LEVEL: Scenario = Scenario {
    name: "epoll-level",
    about: "level-triggered IN|OUT|RDHUP: ready sets at quiet points through data, partial reads, a full send buffer, FIN, both shut",
    coord: coord_pair,
    role: role_level,
};
/// `epoll-edge`.
pub const EDGE: Scenario = Scenario {
    name: "epoll-edge",
    about: "EPOLLET: an event per not-ready→ready transition (IN, OUT, RDHUP), none without one",
    coord: coord_pair,
    role: role_edge,
};
/// `epoll-oneshot`.
pub const ONESHOT: Scenario = Scenario {
    name: "epoll-oneshot",
    about: "EPOLLONESHOT: disarmed after one event, re-armed by MOD (immediately if data waits); EEXIST/ENOENT",
    coord: coord_pair,
    role: role_oneshot,
};
/// `epoll-exclusive`.
pub const EXCLUSIVE: Scenario = Scenario {
    name: "epoll-exclusive",
    about: "EPOLLEXCLUSIVE on a listener shared by two processes: every connection served once; EINVAL rules",
    coord: coord_pair,
    role: role_exclusive,
};
/// `epoll-fork`.
pub const FORK: Scenario = Scenario {
    name: "epoll-fork",
    about: "one epoll set shared across fork: the child sees fds the parent adds later, the parent sees the child's DEL",
    coord: coord_pair,
    role: role_fork,
};
/// `epoll-dup-closed`.
pub const DUP_CLOSED: Scenario = Scenario {
    name: "epoll-dup-closed",
    about: "register, dup, close the original: the set still reports it; DEL by the dup is ENOENT; last close removes all",
    coord: coord_pair,
    role: role_dup_closed,
};
/// `epoll-nested`.
pub const NESTED: Scenario = Scenario {
    name: "epoll-nested",
    about:
        "an epoll set inside an epoll set (and poll on it): readiness propagates; a loop is ELOOP",
    coord: coord_pair,
    role: role_nested,
};

const IN: u32 = libc::EPOLLIN as u32;
const OUT: u32 = libc::EPOLLOUT as u32;
const RDHUP: u32 = libc::EPOLLRDHUP as u32;
const HUP: u32 = libc::EPOLLHUP as u32;
const ET: u32 = libc::EPOLLET as u32;
const ONE: u32 = libc::EPOLLONESHOT as u32;
const EXCL: u32 = libc::EPOLLEXCLUSIVE as u32;

fn ep_new() -> Fd {
    // SAFETY: plain call.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(fd >= 0, "epoll_create1: {}", sys::errname(sys::errno()));
    Fd::own(fd)
}

fn ctl(ep: RawFd, op: i32, fd: RawFd, events: u32, tag: u64) -> R<()> {
    let mut ev = libc::epoll_event { events, u64: tag };
    // SAFETY: ev is a valid epoll_event.
    let r = unsafe { libc::epoll_ctl(ep, op, fd, &mut ev) };
    if r < 0 {
        Err(sys::errno())
    } else {
        Ok(())
    }
}

/// One epoll_wait; events sorted by tag.
fn wait(ep: RawFd, ms: i32) -> Vec<(u64, u32)> {
    let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 16];
    // SAFETY: evs has room for 16 events.
    let n = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), 16, ms) };
    let mut v: Vec<(u64, u32)> = if n > 0 {
        evs[..n as usize]
            .iter()
            .map(|e| (e.u64, e.events))
            .collect()
    } else {
        Vec::new()
    };
    v.sort();
    v
}

fn show(v: &[(u64, u32)]) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.iter()
        .map(|(t, e)| format!("{t}: {}", sys::evname(*e)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Level-triggered: waits until `tag` reports all of `bits`; returns that call's list.
fn wait_for(ep: RawFd, tag: u64, bits: u32) -> Vec<(u64, u32)> {
    let end = Instant::now() + QUIET;
    loop {
        let v = wait(ep, 10);
        if v.iter().any(|(t, e)| *t == tag && e & bits == bits) || Instant::now() >= end {
            return v;
        }
    }
}

/// Whether an event for `tag` with any of `bits` comes within the bound.
fn saw(ep: RawFd, tag: u64, bits: u32) -> bool {
    let end = Instant::now() + QUIET;
    while Instant::now() < end {
        if wait(ep, 10).iter().any(|(t, e)| *t == tag && e & bits != 0) {
            return true;
        }
    }
    false
}

/// Whether no event for `tag` comes within `ms`.
fn none_for(ep: RawFd, tag: u64, ms: u64) -> bool {
    let end = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < end {
        if wait(ep, 5).iter().any(|(t, _)| *t == tag) {
            return false;
        }
    }
    true
}

/// Takes the events already queued (edge-triggered bookkeeping).
fn drain(ep: RawFd) {
    for _ in 0..100 {
        if wait(ep, 0).is_empty() {
            return;
        }
    }
}

/// Fills the send buffer of a non-blocking socket until it stays unwritable for 300 ms;
/// returns how many bytes went in (the peer is told, never the transcript).
fn fill(fd: RawFd) -> usize {
    sys::set_nonblock(fd, true);
    let chunk = vec![0x5au8; 65536];
    let mut total = 0;
    let end = Instant::now() + Duration::from_secs(8);
    while Instant::now() < end {
        match sys::send(fd, &chunk, libc::MSG_NOSIGNAL) {
            Ok(k) => total += k,
            Err(libc::EAGAIN) => {
                if sys::poll1(fd, libc::POLLOUT, 300).unwrap_or(0) == 0 {
                    break;
                }
            }
            Err(e) => panic!("fill: {}", sys::errname(e)),
        }
    }
    sys::set_nonblock(fd, false);
    total
}

fn recv_n(fd: RawFd, n: usize) -> String {
    let (d, end) = sys::recv_exact(fd, n);
    if d.len() == n {
        format!("ok {n}")
    } else {
        format!("{} then {}", d.len(), sys::show_read(&end))
    }
}

/// The client of most epoll scenarios: obeys "sendN k" / "filled n" / "shut" / "close".
fn obey(link: &Link, fds: &[RawFd]) {
    loop {
        let m = link.recv();
        let w: Vec<&str> = m.split(' ').collect();
        match w[0] {
            "send" => {
                let conn = fds[w[1].parse::<usize>().expect("conn")];
                let n: usize = w[2].parse().expect("n");
                let r = sys::send_all(conn, &vec![b'd'; n]);
                out!("send {n} on conn {}: {}", w[1], sys::show_unit(&r));
                link.send("sent");
            }
            "drain" => {
                let n: usize = w[1].parse().expect("n");
                let (d, _) = sys::recv_exact(fds[0], n);
                out!("drained the peer's send buffer: {}", d.len() == n);
                link.send("drained");
            }
            "shut" => {
                out!(
                    "shutdown(SHUT_WR): {}",
                    sys::show_unit(&sys::shutdown(fds[0], libc::SHUT_WR))
                );
                link.send("sent");
            }
            "oob" => {
                let r = sys::send(fds[0], b"!", libc::MSG_OOB | libc::MSG_NOSIGNAL);
                out!("send 1 MSG_OOB: {}", sys::show(&r));
                link.send("sent");
            }
            "end" => {
                for &fd in fds {
                    let (d, end) = sys::recv_to_end(fd);
                    out!("then {} bytes and {}", d.len(), sys::show_read(&end));
                }
                return;
            }
            _ => panic!("unknown command {m:?}"),
        }
    }
}

fn cmd(link: &Link, m: &str) {
    link.send(m);
    link.expect(if m.starts_with("drain") {
        "drained"
    } else {
        "sent"
    });
}

/// The common client: connect once and obey.
fn client(link: &Link) {
    let c = connect_from(link, V4);
    obey(link, &[c.raw()]);
}

fn role_level(role: &str, a: &Args) {
    let link = a.link(0);
    match role {
        "server" => {
            let s = serve_one(&link, V4);
            let fd = s.raw();
            let ep = ep_new();
            let e = ep.raw();
            out!(
                "EPOLL_CTL_ADD IN|OUT|RDHUP: {}",
                sys::show_unit(&ctl(e, libc::EPOLL_CTL_ADD, fd, IN | OUT | RDHUP, 1))
            );
            out!("initial: {}", show(&wait_for(e, 1, OUT)));
            cmd(&link, "send 0 100");
            out!("data arrived: {}", show(&wait_for(e, 1, IN)));
            out!("asked again: {}", show(&wait(e, 0)));
            out!("recv 50: {}", recv_n(fd, 50));
            out!("after reading 50 of 100: {}", show(&wait(e, 0)));
            out!("recv 50: {}", recv_n(fd, 50));
            out!("after reading all: {}", show(&wait(e, 0)));
            let n = fill(fd);
            out!("send buffer full: {}", show(&wait(e, 0)));
            cmd(&link, &format!("drain {n}"));
            out!("peer drained: {}", show(&wait_for(e, 1, OUT)));
            cmd(&link, "shut");
            out!("peer shut down: {}", show(&wait_for(e, 1, RDHUP)));
            out!(
                "shutdown(SHUT_WR): {}",
                sys::show_unit(&sys::shutdown(fd, libc::SHUT_WR))
            );
            out!("both shut: {}", show(&wait_for(e, 1, HUP)));
            link.send("end");
        }
        "client" => client(&link),
        _ => unknown_role(role),
    }
}

fn role_edge(role: &str, a: &Args) {
    let link = a.link(0);
    match role {
        "server" => {
            let s = serve_one(&link, V4);
            let fd = s.raw();
            let epin = ep_new();
            let epout = ep_new();
            let (i, o) = (epin.raw(), epout.raw());
            out!(
                "ADD IN|RDHUP|ET: {}",
                sys::show_unit(&ctl(i, libc::EPOLL_CTL_ADD, fd, IN | RDHUP | ET, 1))
            );
            out!(
                "not readable, nothing happens: no event: {}",
                none_for(i, 1, 50)
            );
            out!(
                "ADD OUT|ET: {}",
                sys::show_unit(&ctl(o, libc::EPOLL_CTL_ADD, fd, OUT | ET, 2))
            );
            out!("registered while writable: event: {}", saw(o, 2, OUT));
            drain(o);
            out!(
                "writable, nothing happens: no event: {}",
                none_for(o, 2, 50)
            );
            cmd(&link, "send 0 100");
            out!("not readable → readable: event: {}", saw(i, 1, IN));
            out!("all 100 arrived: {}", sys::wait_inq(fd, 100, QUIET) == 100);
            drain(i);
            out!("nothing more happens: no event: {}", none_for(i, 1, 50));
            out!("recv 50: {}", recv_n(fd, 50));
            out!(
                "partial read, still readable: no event: {}",
                none_for(i, 1, 50)
            );
            out!("recv 50: {}", recv_n(fd, 50));
            let mut b = [0u8; 8];
            out!(
                "recv: {}",
                sys::show_read(&sys::recv(fd, &mut b, libc::MSG_DONTWAIT))
            );
            cmd(&link, "send 0 10");
            out!("not readable → readable: event: {}", saw(i, 1, IN));
            out!("all 10 arrived: {}", sys::wait_inq(fd, 10, QUIET) == 10);
            out!("recv 10: {}", recv_n(fd, 10));
            let n = fill(fd);
            drain(o);
            out!("send buffer full: no event: {}", none_for(o, 2, 50));
            cmd(&link, &format!("drain {n}"));
            out!("not writable → writable: event: {}", saw(o, 2, OUT));
            drain(i);
            cmd(&link, "shut");
            out!("peer's FIN: event with RDHUP: {}", saw(i, 1, RDHUP));
            link.send("end");
        }
        "client" => client(&link),
        _ => unknown_role(role),
    }
}

fn role_oneshot(role: &str, a: &Args) {
    let link = a.link(0);
    match role {
        "server" => {
            let s = serve_one(&link, V4);
            let fd = s.raw();
            let ep = ep_new();
            let e = ep.raw();
            out!(
                "ADD IN|ONESHOT: {}",
                sys::show_unit(&ctl(e, libc::EPOLL_CTL_ADD, fd, IN | ONE, 1))
            );
            cmd(&link, "send 0 10");
            out!("data: event: {}", saw(e, 1, IN));
            cmd(&link, "send 0 10");
            out!("all 20 arrived: {}", sys::wait_inq(fd, 20, QUIET) == 20);
            out!("more data while disarmed: no event: {}", none_for(e, 1, 50));
            out!(
                "MOD IN|ONESHOT: {}",
                sys::show_unit(&ctl(e, libc::EPOLL_CTL_MOD, fd, IN | ONE, 1))
            );
            out!("data waiting at re-arm: event: {}", saw(e, 1, IN));
            out!("disarmed again: no event: {}", none_for(e, 1, 50));
            out!("recv 20: {}", recv_n(fd, 20));
            out!(
                "MOD IN|ONESHOT: {}",
                sys::show_unit(&ctl(e, libc::EPOLL_CTL_MOD, fd, IN | ONE, 1))
            );
            out!("nothing waiting: no event: {}", none_for(e, 1, 50));
            cmd(&link, "send 0 5");
            out!("data: event: {}", saw(e, 1, IN));
            out!(
                "ADD again: {}",
                sys::show_unit(&ctl(e, libc::EPOLL_CTL_ADD, fd, IN, 1))
            );
            out!(
                "DEL: {}",
                sys::show_unit(&ctl(e, libc::EPOLL_CTL_DEL, fd, 0, 0))
            );
            out!(
                "DEL again: {}",
                sys::show_unit(&ctl(e, libc::EPOLL_CTL_DEL, fd, 0, 0))
            );
            out!(
                "MOD after DEL: {}",
                sys::show_unit(&ctl(e, libc::EPOLL_CTL_MOD, fd, IN, 1))
            );
            out!("recv 5: {}", recv_n(fd, 5));
            link.send("end");
        }
        "client" => client(&link),
        _ => unknown_role(role),
    }
}

const CONNS: usize = 8;

/// Accepts and serves connections signalled on `ep` until `stop` says so; returns the count.
fn serve_exclusive(ep: RawFd, l: RawFd, stop: &Link, word: &str) -> usize {
    let mut count = 0;
    let end = Instant::now() + Duration::from_secs(15);
    let mut stopping = false;
    while Instant::now() < end {
        let evs = wait(ep, 20);
        if !evs.is_empty() || stopping {
            loop {
                // SAFETY: null address pointers are allowed.
                let c = unsafe {
                    libc::accept4(
                        l,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        libc::SOCK_CLOEXEC,
                    )
                };
                if c < 0 {
                    break;
                }
                let c = Fd::own(c);
                let (d, _) = sys::recv_exact(c.raw(), 5);
                if d == b"hello" {
                    let _ = sys::send(c.raw(), b"ok", libc::MSG_NOSIGNAL);
                }
                count += 1;
            }
        }
        if stopping {
            return count;
        }
        if let Some(m) = stop.recv_within(Duration::ZERO) {
            assert_eq!(m, word);
            stopping = true;
        }
    }
    panic!("exclusive server was never told to stop");
}

fn role_exclusive(role: &str, a: &Args) {
    let link = a.link(0);
    match role {
        "server" => {
            let (l, port) = sys::listen_on(V4, None);
            {
                let e1 = ep_new();
                let e2 = ep_new();
                out!(
                    "ADD IN|EXCLUSIVE: {}",
                    sys::show_unit(&ctl(e1.raw(), libc::EPOLL_CTL_ADD, l.raw(), IN | EXCL, 1))
                );
                out!(
                    "MOD IN|EXCLUSIVE: {}",
                    sys::show_unit(&ctl(e1.raw(), libc::EPOLL_CTL_MOD, l.raw(), IN | EXCL, 1))
                );
                out!(
                    "MOD IN: {}",
                    sys::show_unit(&ctl(e1.raw(), libc::EPOLL_CTL_MOD, l.raw(), IN, 1))
                );
                out!(
                    "ADD IN|EXCLUSIVE|ONESHOT: {}",
                    sys::show_unit(&ctl(
                        e2.raw(),
                        libc::EPOLL_CTL_ADD,
                        l.raw(),
                        IN | EXCL | ONE,
                        1
                    ))
                );
            }
            sys::set_nonblock(l.raw(), true);
            let (pl, cl) = Link::pair();
            let lfd = l.raw();
            let (pid, log) = harness::fork_child(move || {
                let ep = ep_new();
                ctl(ep.raw(), libc::EPOLL_CTL_ADD, lfd, IN | EXCL, 1).expect("child ADD");
                cl.send("ready");
                let n = serve_exclusive(ep.raw(), lfd, &cl, "stop");
                cl.send_num("count", n as u64);
            });
            let ep = ep_new();
            ctl(ep.raw(), libc::EPOLL_CTL_ADD, l.raw(), IN | EXCL, 1).expect("ADD");
            pl.expect("ready");
            link.send_num("port", port as u64);
            let mine = serve_exclusive(ep.raw(), l.raw(), &link, "all done");
            pl.send("stop");
            let theirs = pl.recv_num("count") as usize;
            let st = harness::reap_child(pid, log, "child: ");
            out!("child {st}");
            out!(
                "connections served by the two processes together: {}",
                mine + theirs
            );
        }
        "client" => {
            let port = link.recv_num("port") as u16;
            let mut good = 0;
            for _ in 0..CONNS {
                let c = sys::connect_to(V4, port).expect("connect");
                let _ = sys::send(c.raw(), b"hello", libc::MSG_NOSIGNAL);
                let (d, end) = sys::recv_to_end(c.raw());
                if d == b"ok" && end == Ok(0) {
                    good += 1;
                }
            }
            out!("connections answered \"ok\" then EOF: {good} of {CONNS}");
            link.send("all done");
        }
        _ => unknown_role(role),
    }
}

fn role_fork(role: &str, a: &Args) {
    let link = a.link(0);
    match role {
        "server" => {
            let (l, port) = sys::listen_on(V4, None);
            link.send_num("port", port as u64);
            let c1 = sys::accept_within(l.raw(), QUIET);
            let ep = ep_new();
            let (e, f1) = (ep.raw(), c1.raw());
            out!(
                "ADD conn1: {}",
                sys::show_unit(&ctl(e, libc::EPOLL_CTL_ADD, f1, IN, 1))
            );
            let (pl, cl) = Link::pair();
            let (pid, log) = harness::fork_child(move || {
                cl.expect("check1");
                out!("sees conn1 readable: {}", saw(e, 1, IN));
                out!("recv 10 on conn1: {}", recv_n(f1, 10));
                cl.send("done1");
                cl.expect("check2");
                out!(
                    "sees conn2, added by the parent after fork, readable: {}",
                    saw(e, 2, IN)
                );
                out!(
                    "DEL conn1: {}",
                    sys::show_unit(&ctl(e, libc::EPOLL_CTL_DEL, f1, 0, 0))
                );
                cl.send("done2");
                cl.expect("exit");
            });
            cmd(&link, "send 0 10");
            pl.send("check1");
            pl.expect("done1");
            link.send("connect2");
            let c2 = sys::accept_within(l.raw(), QUIET);
            out!(
                "ADD conn2 after fork: {}",
                sys::show_unit(&ctl(e, libc::EPOLL_CTL_ADD, c2.raw(), IN, 2))
            );
            cmd(&link, "send 1 10");
            pl.send("check2");
            pl.expect("done2");
            out!("recv 10 on conn2: {}", recv_n(c2.raw(), 10));
            cmd(&link, "send 0 10");
            out!(
                "all 10 arrived on conn1: {}",
                sys::wait_inq(f1, 10, QUIET) == 10
            );
            out!(
                "after the child's DEL, conn1 readable: no event: {}",
                none_for(e, 1, 50)
            );
            pl.send("exit");
            let st = harness::reap_child(pid, log, "child: ");
            out!("child {st}");
            cmd(&link, "send 1 10");
            out!(
                "after the child exited, conn2: {}",
                show(&wait_for(e, 2, IN))
            );
            out!("recv 10 on conn2: {}", recv_n(c2.raw(), 10));
            out!("recv 10 on conn1: {}", recv_n(f1, 10));
            link.send("end");
        }
        "client" => {
            let port = link.recv_num("port") as u16;
            let c1 = sys::connect_to(V4, port).expect("connect");
            // The first command may be "connect2" only after a "send".
            let m = link.recv();
            assert_eq!(m, "send 0 10");
            let r = sys::send_all(c1.raw(), &[b'd'; 10]);
            out!("send 10 on conn 0: {}", sys::show_unit(&r));
            link.send("sent");
            link.expect("connect2");
            let c2 = sys::connect_to(V4, port).expect("connect");
            obey(&link, &[c1.raw(), c2.raw()]);
        }
        _ => unknown_role(role),
    }
}

fn role_dup_closed(role: &str, a: &Args) {
    let link = a.link(0);
    match role {
        "server" => {
            let s = serve_one(&link, V4);
            let ep = ep_new();
            let e = ep.raw();
            out!(
                "ADD the socket as 7: {}",
                sys::show_unit(&ctl(e, libc::EPOLL_CTL_ADD, s.raw(), IN, 7))
            );
            let d = sys::dup_cloexec(s.raw());
            let fd = d.raw();
            out!("close the original: {}", sys::show_unit(&s.close()));
            cmd(&link, "send 0 10");
            out!("data through the dup: {}", show(&wait_for(e, 7, IN)));
            out!(
                "DEL by the dup: {}",
                sys::show_unit(&ctl(e, libc::EPOLL_CTL_DEL, fd, 0, 0))
            );
            out!(
                "ADD the dup as 8: {}",
                sys::show_unit(&ctl(e, libc::EPOLL_CTL_ADD, fd, IN, 8))
            );
            out!("both registrations: {}", show(&wait_for(e, 8, IN)));
            out!("recv 10: {}", recv_n(fd, 10));
            out!("after reading: {}", show(&wait(e, 0)));
            cmd(&link, "send 0 5");
            out!("more data: {}", show(&wait_for(e, 8, IN)));
            out!(
                "close the dup (last reference): {}",
                sys::show_unit(&d.close())
            );
            out!(
                "after the last close: no event: {}",
                none_for(e, 7, 50) && none_for(e, 8, 0)
            );
            link.send("end");
        }
        "client" => client(&link),
        _ => unknown_role(role),
    }
}

fn role_nested(role: &str, a: &Args) {
    let link = a.link(0);
    match role {
        "server" => {
            let s = serve_one(&link, V4);
            let fd = s.raw();
            let inner = ep_new();
            let outer = ep_new();
            let (i, o) = (inner.raw(), outer.raw());
            out!(
                "inner ADD socket: {}",
                sys::show_unit(&ctl(i, libc::EPOLL_CTL_ADD, fd, IN, 1))
            );
            out!(
                "outer ADD inner: {}",
                sys::show_unit(&ctl(o, libc::EPOLL_CTL_ADD, i, IN, 2))
            );
            out!(
                "inner ADD outer (a loop): {}",
                sys::show_unit(&ctl(i, libc::EPOLL_CTL_ADD, o, IN, 3))
            );
            out!("nothing yet: outer no event: {}", none_for(o, 2, 50));
            cmd(&link, "send 0 10");
            out!("data: outer {}", show(&wait_for(o, 2, IN)));
            let pr = sys::poll1(i, libc::POLLIN, 0).unwrap_or(0);
            out!("poll on the inner set: {}", sys::evname(pr as u32));
            out!("inner: {}", show(&wait(i, 0)));
            out!("recv 10: {}", recv_n(fd, 10));
            out!("after reading: outer {}", show(&wait(o, 0)));
            let pr = sys::poll1(i, libc::POLLIN, 0).unwrap_or(0);
            out!("poll on the inner set: {}", sys::evname(pr as u32));
            cmd(&link, "shut");
            out!("FIN: outer {}", show(&wait_for(o, 2, IN)));
            out!("inner: {}", show(&wait_for(i, 1, IN)));
            link.send("end");
        }
        "client" => client(&link),
        _ => unknown_role(role),
    }
}
