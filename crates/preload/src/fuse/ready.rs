//! `poll`, `ppoll`, `select` and `pselect` over fused descriptors (crossproc.md,
//! "Readiness and waiting").
//!
//! A fused connection's kernel socket never shows the ring's bytes, and its kernel
//! `POLLOUT` says nothing of the ring's room. So when any descriptor of a call is
//! fused, the call is served here: the kernel's readiness of every descriptor (one
//! zero-timeout `ppoll`), merged for the fused ones with the ring's ([`Conn::ready`]);
//! if nothing is ready, the thread arms its token on the fused rings, re-checks, and
//! sleeps in `ppoll` on all the descriptors plus its wake socket, for the rest of the
//! timeout, with the caller's signal mask. A call with no fused descriptor costs one
//! table lookup per descriptor and goes to the kernel unchanged.

use super::conn::{Conn, Ready};
use super::{conn_of, sys, wake};
use libc::{c_int, pollfd};
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

const IN: i16 = libc::POLLIN | libc::POLLRDNORM;
const OUT: i16 = libc::POLLOUT | libc::POLLWRNORM;

/// The fused connections among `fds` (None where a descriptor is not fused), or None
/// if there are none.
pub fn fused_among(fds: &[pollfd]) -> Option<Vec<Option<Arc<Conn>>>> {
    let mut any = false;
    let v: Vec<Option<Arc<Conn>>> = fds
        .iter()
        .map(|p| {
            // Fused, or still able to be (its slot may come while the call waits).
            let c =
                conn_of(p.fd).filter(|c| !c.handed_over.load(std::sync::atomic::Ordering::Acquire));
            any |= c.is_some();
            c
        })
        .collect();
    any.then_some(v)
}

/// Merges the kernel's `revents` of a fused descriptor with the ring's view.
pub fn merge(events: i16, kernel: i16, r: &Ready) -> i16 {
    let mut rev = kernel;
    if r.ring_tx {
        rev &= !OUT;
        if r.writable {
            rev |= OUT;
        }
    }
    if r.readable {
        rev |= IN;
    }
    rev & (events | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL)
}

/// `ppoll(fds, timeout, mask)` with `conns[i]` the fused connection of `fds[i]`.
pub fn poll(
    fds: &mut [pollfd],
    conns: &[Option<Arc<Conn>>],
    timeout: Option<Duration>,
    mask: *const libc::sigset_t,
) -> io::Result<usize> {
    let deadline = timeout.map(|t| Instant::now() + t);
    // What the kernel must watch of a fused descriptor: its data before the switch and
    // its FIN (POLLIN), whatever the caller asked.
    let mut k: Vec<pollfd> = fds
        .iter()
        .zip(conns)
        .map(|(p, c)| pollfd {
            fd: p.fd,
            events: if c.is_some() {
                p.events | libc::POLLIN | libc::POLLRDHUP
            } else {
                p.events
            },
            revents: 0,
        })
        .collect();
    loop {
        for p in &mut k {
            p.revents = 0;
        }
        sys::ppoll_mask(&mut k, Some(Duration::ZERO), std::ptr::null())?;
        let n = collect(fds, &k, conns);
        if n > 0 || deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(n);
        }
        // Sleep: arm the rings, re-check, then the kernel and the wake socket.
        let me = wake::mine();
        if let Some((_, token)) = me {
            for (p, c) in fds.iter().zip(conns) {
                if let Some(c) = c {
                    c.arm(token, p.events & IN != 0, p.events & OUT != 0);
                }
            }
        }
        let again = fds.iter().zip(conns).any(|(p, c)| {
            c.as_ref()
                .is_some_and(|c| merge(p.events, 0, &c.ready()) & (IN | OUT) != 0)
        });
        let mut r = Ok(0);
        if !again {
            let mut all = k.clone();
            if let Some((wfd, _)) = me {
                all.push(pollfd {
                    fd: wfd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            let left = match (deadline, me) {
                (Some(d), _) => Some(d.saturating_duration_since(Instant::now())),
                // Without a wake socket, look again every 10 ms.
                (None, None) => Some(Duration::from_millis(10)),
                (None, Some(_)) => None,
            };
            r = sys::ppoll_mask(&mut all, left, mask);
            if let Some((wfd, _)) = me {
                if all.last().is_some_and(|p| p.revents != 0) {
                    wake::drain(wfd);
                }
            }
        }
        if let Some((_, token)) = me {
            for c in conns.iter().flatten() {
                c.disarm(token);
            }
        }
        r?;
    }
}

/// Writes the merged `revents` into `fds`; returns how many are non-zero.
fn collect(fds: &mut [pollfd], k: &[pollfd], conns: &[Option<Arc<Conn>>]) -> usize {
    let mut n = 0;
    for ((p, kp), c) in fds.iter_mut().zip(k).zip(conns) {
        p.revents = match c {
            Some(c) => {
                if kp.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
                    c.peer_shut();
                }
                merge(
                    p.events,
                    kp.revents & !libc::POLLRDHUP | (kp.revents & libc::POLLRDHUP & p.events),
                    &c.ready(),
                )
            }
            None => kp.revents,
        };
        if p.revents != 0 {
            n += 1;
        }
    }
    n
}

/// A `poll` timeout in milliseconds (negative: forever) as an Option.
pub fn ms(timeout: c_int) -> Option<Duration> {
    (timeout >= 0).then(|| Duration::from_millis(timeout as u64))
}

/// A `select` over fused descriptors, as `poll` (Linux's own mapping: readable is
/// `POLLIN|POLLHUP|POLLERR`, writable `POLLOUT|POLLERR`, exceptional `POLLPRI`).
///
/// # Safety
/// The sets, if not null, must be valid `fd_set`s covering `n` descriptors.
pub unsafe fn select(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: Option<Duration>,
    mask: *const libc::sigset_t,
) -> Option<io::Result<usize>> {
    let n = n.clamp(0, libc::FD_SETSIZE as c_int);
    let mut fds = Vec::new();
    // SAFETY (whole block): the caller's sets, for descriptors below `n`.
    unsafe {
        let is = |s: *mut libc::fd_set, fd: c_int| !s.is_null() && libc::FD_ISSET(fd, s);
        for fd in 0..n {
            let mut ev = 0;
            if is(r, fd) {
                ev |= libc::POLLIN;
            }
            if is(w, fd) {
                ev |= libc::POLLOUT;
            }
            if is(e, fd) {
                ev |= libc::POLLPRI;
            }
            if ev != 0 {
                fds.push(pollfd {
                    fd,
                    events: ev,
                    revents: 0,
                });
            }
        }
        let conns = fused_among(&fds)?;
        let res = poll(&mut fds, &conns, timeout, mask);
        if res.is_ok() {
            for s in [r, w, e] {
                if !s.is_null() {
                    libc::FD_ZERO(s);
                }
            }
        }
        Some(res.map(|_| {
            let mut bits = 0;
            for p in &fds {
                if p.revents & libc::POLLNVAL != 0 {
                    continue;
                }
                if !r.is_null()
                    && p.events & libc::POLLIN != 0
                    && p.revents & (IN | libc::POLLHUP | libc::POLLERR) != 0
                {
                    libc::FD_SET(p.fd, r);
                    bits += 1;
                }
                if !w.is_null()
                    && p.events & libc::POLLOUT != 0
                    && p.revents & (OUT | libc::POLLERR) != 0
                {
                    libc::FD_SET(p.fd, w);
                    bits += 1;
                }
                if !e.is_null() && p.events & libc::POLLPRI != 0 && p.revents & libc::POLLPRI != 0 {
                    libc::FD_SET(p.fd, e);
                    bits += 1;
                }
            }
            bits
        }))
    }
}
