//! The synchronisation channel between the processes of a scenario.
//!
//! Design: an `AF_UNIX` `SOCK_SEQPACKET` socketpair (a preload library passes non-inet sockets
//! through), so every message keeps its boundary. Messages are short text ("port 4711", "sent",
//! "go"). Receiving is bounded (`LINK_TIMEOUT`); a missing or unexpected message is a harness
//! failure (panic, so the role exits non-zero and the coordinator reports it), never a hang.

use crate::sys::{errname, errno, Fd};
use std::os::unix::io::RawFd;
use std::time::{Duration, Instant};

/// How long a role waits for its peer's next message before declaring a harness failure.
pub const LINK_TIMEOUT: Duration = Duration::from_secs(15);

/// One end of a synchronisation channel.
pub struct Link(Fd);

impl Link {
    /// A connected pair (CLOEXEC).
    pub fn pair() -> (Link, Link) {
        let mut p = [0; 2];
        // SAFETY: p has room for two fds.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                p.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0, "socketpair: {}", errname(errno()));
        (Link(Fd::own(p[0])), Link(Fd::own(p[1])))
    }

    /// The link at a fixed fd (as set up by the coordinator).
    pub fn at(fd: RawFd) -> Link {
        Link(Fd::own(fd))
    }

    /// The underlying fd.
    pub fn fd(&self) -> RawFd {
        self.0.raw()
    }

    /// Gives up the fd (to hand it to a child).
    pub fn into_fd(self) -> Fd {
        self.0
    }

    /// Sends a message.
    pub fn send(&self, msg: &str) {
        loop {
            // SAFETY: msg is a valid buffer.
            let r = unsafe {
                libc::send(
                    self.fd(),
                    msg.as_ptr() as *const libc::c_void,
                    msg.len(),
                    libc::MSG_NOSIGNAL,
                )
            };
            if r >= 0 {
                return;
            }
            let e = errno();
            if e != libc::EINTR {
                panic!("link send {msg:?}: {}", errname(e));
            }
        }
    }

    /// Receives a message within `t`; `None` on timeout. Panics on EOF or error.
    pub fn recv_within(&self, t: Duration) -> Option<String> {
        let end = Instant::now() + t;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let mut p = libc::pollfd {
                fd: self.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut p, 1, left.as_millis().min(1000) as i32) };
            if r < 0 && errno() != libc::EINTR {
                panic!("link poll: {}", errname(errno()));
            }
            if r > 0 {
                let mut buf = [0u8; 4096];
                // SAFETY: buf is a valid buffer.
                let n = unsafe {
                    libc::recv(
                        self.fd(),
                        buf.as_mut_ptr() as *mut libc::c_void,
                        buf.len(),
                        libc::MSG_DONTWAIT,
                    )
                };
                if n < 0 {
                    let e = errno();
                    if e == libc::EINTR || e == libc::EAGAIN {
                        continue;
                    }
                    panic!("link recv: {}", errname(e));
                }
                if n == 0 {
                    panic!("link closed by peer");
                }
                return Some(String::from_utf8_lossy(&buf[..n as usize]).into_owned());
            }
            if Instant::now() >= end {
                return None;
            }
        }
    }

    /// Receives a message; a harness failure if none comes within `LINK_TIMEOUT`.
    pub fn recv(&self) -> String {
        match self.recv_within(LINK_TIMEOUT) {
            Some(m) => m,
            None => panic!("no message on the link within {LINK_TIMEOUT:?}"),
        }
    }

    /// Receives and checks a message.
    pub fn expect(&self, msg: &str) {
        let m = self.recv();
        assert_eq!(m, msg, "unexpected message on the link");
    }

    /// Receives "key N" and returns N.
    pub fn recv_num(&self, key: &str) -> u64 {
        let m = self.recv();
        let rest = m
            .strip_prefix(key)
            .and_then(|r| r.strip_prefix(' '))
            .unwrap_or_else(|| panic!("expected {key:?}, got {m:?}"));
        rest.parse()
            .unwrap_or_else(|_| panic!("bad number in {m:?}"))
    }

    /// Sends "key N".
    pub fn send_num(&self, key: &str, n: u64) {
        self.send(&format!("{key} {n}"));
    }
}
