//! poll/ppoll and select on a socket at quiet points, select with an fd near FD_SETSIZE.
//!
//! Design: the server records revents (poll) or the three fd_set bits (select) after the
//! client acted and the expected bit appeared (bounded wait), through data, urgent data, FIN
//! and both sides shut. The select scenario first moves the socket to the highest free fd below
//! FD_SETSIZE (a library that keeps per-fd tables must cope); the number itself is never printed.

use super::{coord_pair, serve_one, unknown_role, Scenario, V4};
use crate::harness::Args;
use crate::link::Link;
use crate::out;
use crate::sys::{self, Fd, ALL_EV, QUIET};
use std::os::unix::io::RawFd;
use std::time::Instant;

/// `poll`.
pub const POLL: Scenario = Scenario {
    name: "poll",
    about:
        "poll and ppoll revents at quiet points (data, FIN, both shut; events=0; NVAL; negative fd)",
    coord: coord_pair,
    role: role_poll,
};
/// `select-high-fd`.
pub const SELECT_HIGH_FD: Scenario = Scenario {
    name: "select-high-fd",
    about: "select on the socket dup'd near FD_SETSIZE-1: read/write/except bits through data, OOB, FIN",
    coord: coord_pair,
    role: role_select,
};

fn ppoll1(fd: RawFd, events: i16) -> i16 {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one valid pollfd; a zero timeout; no signal mask.
    let r = unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
    if r < 0 {
        -1
    } else {
        p.revents
    }
}

fn record(fd: RawFd, what: &str, want: i16) {
    let rev = sys::wait_revents(fd, ALL_EV, want, QUIET);
    let pp = ppoll1(fd, ALL_EV);
    out!(
        "{what}: poll {} ppoll {}",
        sys::evname(rev as u32),
        sys::evname(pp as u32)
    );
}

fn cmd(link: &Link, m: &str) {
    link.send(m);
    link.expect("ok");
}

/// A client that obeys "send n", "oob", "shut", "close".
fn client(link: &Link) {
    let c = super::connect_from(link, V4);
    let fd = c.raw();
    loop {
        let m = link.recv();
        let w: Vec<&str> = m.split(' ').collect();
        match w[0] {
            "send" => {
                let n: usize = w[1].parse().expect("n");
                out!(
                    "send {n}: {}",
                    sys::show_unit(&sys::send_all(fd, &vec![b'p'; n]))
                );
            }
            "oob" => out!(
                "send 1 MSG_OOB: {}",
                sys::show(&sys::send(fd, b"!", libc::MSG_OOB | libc::MSG_NOSIGNAL))
            ),
            "shut" => out!(
                "shutdown(SHUT_WR): {}",
                sys::show_unit(&sys::shutdown(fd, libc::SHUT_WR))
            ),
            "end" => {
                let (d, end) = sys::recv_to_end(fd);
                out!("then {} bytes and {}", d.len(), sys::show_read(&end));
                return;
            }
            _ => panic!("unknown command {m:?}"),
        }
        link.send("ok");
    }
}

/// The highest fd number below `below` that is not open.
fn free_fd_below(below: RawFd) -> RawFd {
    (3..below)
        .rev()
        // SAFETY: F_GETFD only queries.
        .find(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0)
        .expect("no free fd")
}

fn role_poll(role: &str, a: &Args) {
    let link = a.link(0);
    match role {
        "server" => {
            let s = serve_one(&link, V4);
            let fd = s.raw();
            record(fd, "initial", libc::POLLOUT);
            let r = sys::poll1(fd, 0, 0).unwrap_or(-1);
            out!("events=0 on a healthy socket: {}", sys::evname(r as u32));
            cmd(&link, "send 10");
            record(fd, "data", libc::POLLIN);
            let (d, _) = sys::recv_exact(fd, 10);
            out!("recv 10: {}", d.len());
            record(fd, "read all", 0);
            cmd(&link, "shut");
            record(fd, "peer's FIN", libc::POLLRDHUP);
            out!(
                "shutdown(SHUT_WR): {}",
                sys::show_unit(&sys::shutdown(fd, libc::SHUT_WR))
            );
            record(fd, "both shut", libc::POLLHUP);
            let r = sys::poll1(fd, 0, 0).unwrap_or(-1);
            out!("events=0 when both shut: {}", sys::evname(r as u32));
            let closed = free_fd_below(1 << 14);
            let mut ps = [
                libc::pollfd {
                    fd: closed,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: -1,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: three valid pollfds.
            let n = unsafe { libc::poll(ps.as_mut_ptr(), 3, 0) };
            out!(
                "poll of [closed fd, -1, socket]: returns {n}: {} / {} / {}",
                sys::evname(ps[0].revents as u32),
                sys::evname(ps[1].revents as u32),
                sys::evname(ps[2].revents as u32)
            );
            link.send("end");
        }
        "client" => client(&link),
        _ => unknown_role(role),
    }
}

/// select on one fd for read, write and except with timeout `ms`; "r w e" bits.
fn select1(fd: RawFd, ms: i64) -> (i32, String) {
    // SAFETY: fd_set manipulation on fds below FD_SETSIZE.
    unsafe {
        let mut r: libc::fd_set = std::mem::zeroed();
        let mut w: libc::fd_set = std::mem::zeroed();
        let mut e: libc::fd_set = std::mem::zeroed();
        libc::FD_ZERO(&mut r);
        libc::FD_ZERO(&mut w);
        libc::FD_ZERO(&mut e);
        libc::FD_SET(fd, &mut r);
        libc::FD_SET(fd, &mut w);
        libc::FD_SET(fd, &mut e);
        let mut tv = libc::timeval {
            tv_sec: (ms / 1000) as libc::time_t,
            tv_usec: ((ms % 1000) * 1000) as libc::suseconds_t,
        };
        let n = libc::select(fd + 1, &mut r, &mut w, &mut e, &mut tv);
        let bit = |set: &libc::fd_set, c: char| if libc::FD_ISSET(fd, set) { c } else { '-' };
        (
            n,
            format!("{}{}{}", bit(&r, 'r'), bit(&w, 'w'), bit(&e, 'e')),
        )
    }
}

/// Waits (bounded) until select shows `want` (a substring such as "r"), returns the last.
fn select_until(fd: RawFd, want: char) -> String {
    let end = Instant::now() + QUIET;
    loop {
        let (n, s) = select1(fd, 10);
        if n < 0 {
            return format!("select {}", sys::errname(sys::errno()));
        }
        if s.contains(want) || Instant::now() >= end {
            return format!("{n} ready: {s}");
        }
    }
}

fn role_select(role: &str, a: &Args) {
    let link = a.link(0);
    match role {
        "server" => {
            let s = serve_one(&link, V4);
            let high = free_fd_below(libc::FD_SETSIZE as RawFd);
            // SAFETY: dup2 to a free number.
            let r = unsafe { libc::dup3(s.raw(), high, libc::O_CLOEXEC) };
            assert_eq!(r, high, "dup3");
            let h = Fd::own(high);
            out!(
                "moved the socket near FD_SETSIZE: {}",
                high >= libc::FD_SETSIZE as RawFd - 64
            );
            out!("close the low fd: {}", sys::show_unit(&s.close()));
            let fd = h.raw();
            out!("initial: {}", select_until(fd, 'w'));
            let (n, st) = select1(fd, 50);
            out!("again with a timeout: {n} ready: {st}");
            cmd(&link, "send 10");
            out!("data: {}", select_until(fd, 'r'));
            let (d, _) = sys::recv_exact(fd, 10);
            out!("recv 10: {}", d.len());
            out!("read all: {}", select_until(fd, 'w'));
            cmd(&link, "oob");
            out!("urgent data: {}", select_until(fd, 'e'));
            let mut b = [0u8; 4];
            out!(
                "recv(MSG_OOB): {}",
                sys::show(&sys::recv(fd, &mut b, libc::MSG_OOB | libc::MSG_DONTWAIT))
            );
            out!("after reading it: {}", select_until(fd, 'w'));
            cmd(&link, "shut");
            out!("peer's FIN: {}", select_until(fd, 'r'));
            out!(
                "recv: {}",
                sys::show_read(&sys::recv(fd, &mut b, libc::MSG_DONTWAIT))
            );
            link.send("end");
        }
        "client" => client(&link),
        _ => unknown_role(role),
    }
}
