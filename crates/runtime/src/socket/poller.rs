//! An epoll-like readiness multiplexer over ember sockets.
//!
//! A [`Poller`] holds registrations (socket, token, interest). `wait` reports every
//! registered socket whose readiness (level-triggered, like `poll(2)`/`epoll` without
//! `EPOLLET`) intersects its interest, and parks when there is none: a socket whose
//! squeue raises a bit in a registered interest notifies the poller. A generation
//! counter under the poller's lock closes the gap between the scan and the park.
//!
//! `wait` scans the registrations (O(registered)); it is meant for tens to thousands of
//! sockets per poller, as select-style servers use.

use super::shared::{ConnShared, ListenerShared, PollReg, Waitable};
use super::{TcpListener, TcpStream, UdpSocket};
use std::io;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

pub(crate) struct PollerInner {
    gen: Mutex<u64>,
    cv: Condvar,
}

impl PollerInner {
    pub(crate) fn notify(&self) {
        let mut g = self.gen.lock().unwrap_or_else(|e| e.into_inner());
        *g = g.wrapping_add(1);
        self.cv.notify_all();
    }
}

#[derive(Clone)]
enum Source {
    Stream(Arc<ConnShared>),
    Listener(Arc<ListenerShared>),
    Udp(Arc<super::udp::UdpShared>),
}

impl Source {
    fn waitable(&self) -> &Waitable {
        match self {
            Source::Stream(s) => &s.waitable,
            Source::Listener(l) => &l.waitable,
            Source::Udp(u) => &u.waitable,
        }
    }
}

struct Reg {
    token: usize,
    interest: u32,
    src: Source,
}

/// One readiness report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub token: usize,
    /// The socket's readiness bits ([`super::ready`]) within the interest.
    pub readiness: u32,
}

/// Waits on many ember sockets at once.
pub struct Poller {
    inner: Arc<PollerInner>,
    regs: Mutex<Vec<Reg>>,
}

impl Default for Poller {
    fn default() -> Self {
        Self::new()
    }
}

impl Poller {
    pub fn new() -> Self {
        Poller {
            inner: Arc::new(PollerInner {
                gen: Mutex::new(0),
                cv: Condvar::new(),
            }),
            regs: Mutex::new(Vec::new()),
        }
    }

    fn add(&self, src: Source, token: usize, interest: u32) -> io::Result<()> {
        let mut regs = self.regs.lock().unwrap_or_else(|e| e.into_inner());
        if regs.iter().any(|r| r.token == token) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "token already registered",
            ));
        }
        src.waitable().register(PollReg {
            poller: Arc::downgrade(&self.inner),
            interest,
        });
        regs.push(Reg {
            token,
            interest,
            src,
        });
        Ok(())
    }

    /// Registers a stream under `token` for `interest` ([`super::ready`] bits).
    pub fn add_stream(&self, s: &TcpStream, token: usize, interest: u32) -> io::Result<()> {
        self.add(Source::Stream(s.shared().clone()), token, interest)
    }

    /// Registers a listener (interest `ACCEPT`).
    pub fn add_listener(&self, l: &TcpListener, token: usize, interest: u32) -> io::Result<()> {
        self.add(Source::Listener(l.shared().clone()), token, interest)
    }

    /// Registers a UDP socket.
    pub fn add_udp(&self, u: &UdpSocket, token: usize, interest: u32) -> io::Result<()> {
        self.add(Source::Udp(u.shared().clone()), token, interest)
    }

    /// Removes a registration.
    pub fn delete(&self, token: usize) -> io::Result<()> {
        let mut regs = self.regs.lock().unwrap_or_else(|e| e.into_inner());
        let Some(i) = regs.iter().position(|r| r.token == token) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "token not registered",
            ));
        };
        let r = regs.swap_remove(i);
        let w: Weak<PollerInner> = Arc::downgrade(&self.inner);
        r.src.waitable().deregister(&w);
        Ok(())
    }

    /// Fills `events` with the ready registrations; parks up to `timeout` (`None`:
    /// forever) when none is ready. Returns how many.
    pub fn wait(&self, events: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<usize> {
        events.clear();
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let gen = *self.inner.gen.lock().unwrap_or_else(|e| e.into_inner());
            {
                let regs = self.regs.lock().unwrap_or_else(|e| e.into_inner());
                for r in regs.iter() {
                    let b = r.src.waitable().ready() & r.interest;
                    if b != 0 {
                        events.push(Event {
                            token: r.token,
                            readiness: b,
                        });
                    }
                }
            }
            if !events.is_empty() {
                return Ok(events.len());
            }
            let mut g = self.inner.gen.lock().unwrap_or_else(|e| e.into_inner());
            while *g == gen {
                match deadline {
                    None => g = self.inner.cv.wait(g).unwrap_or_else(|e| e.into_inner()),
                    Some(d) => {
                        let left = d.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            return Ok(0);
                        }
                        g = self
                            .inner
                            .cv
                            .wait_timeout(g, left)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                }
            }
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        let regs = self.regs.lock().unwrap_or_else(|e| e.into_inner());
        let w: Weak<PollerInner> = Arc::downgrade(&self.inner);
        for r in regs.iter() {
            r.src.waitable().deregister(&w);
        }
    }
}
