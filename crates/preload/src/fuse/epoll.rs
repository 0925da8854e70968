//! `epoll` over fused descriptors: a user-level interest list beside the program's
//! kernel epoll set (Onload's `EF_UL_EPOLL=1` hybrid, crossproc.md "Readiness and
//! waiting").
//!
//! # Design
//! * A fused descriptor stays in the kernel set, registered under a cookie
//!   ([`COOKIE`] | fd) instead of the program's `epoll_data`, which the library keeps
//!   with the program's events. The kernel's events for it (data before the switch, a
//!   FIN, `HUP`, `ERR`, `RDHUP`, `PRI`) are merged with the ring's readiness
//!   ([`super::ready::merge`]) and reported with the program's data.
//! * The set gets one wake socket of its own (an abstract datagram socket named by a
//!   token, `wake.rs`), registered under [`WAKE`]. A thread about to sleep in
//!   `epoll_wait` arms that token on every fused ring of the set, re-checks, and
//!   sleeps in the kernel's `epoll_wait`, which the wake socket, any kernel event or
//!   the timeout ends.
//! * Level-triggered entries are reported while ready. Edge-triggered ones when the
//!   kernel reports an edge of the shadow, or the ring moved (new bytes published, or
//!   the reader read) since the entry was last reported while ready. `EPOLLONESHOT`
//!   disables an entry once reported, until `EPOLL_CTL_MOD`, as the kernel does.
//! * Sets are keyed by the epoll descriptor's number in this process: a set shared
//!   across `fork`, or reached through a `dup` of its descriptor, is not followed yet.

use super::conn::Conn;
use super::ready::merge;
use super::{sys, wake};
use libc::{c_int, epoll_event};
use std::collections::HashMap;
use std::io;
use std::num::NonZeroU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `epoll_data` the library gives a fused descriptor in the kernel set (| the fd).
pub const COOKIE: u64 = 0xe3be_0000_0000_0000;
/// `epoll_data` of the set's wake socket.
pub const WAKE: u64 = 0xe3be_ffff_ffff_fffe;
const MASK: u64 = 0xffff_0000_0000_0000;

struct Entry {
    /// The connection: the registration is the kernel's, on the open file, and lives
    /// on when the descriptor it was made with is closed while a `dup` of it remains.
    conn: Arc<Conn>,
    events: u32,
    data: u64,
    /// Disabled by `EPOLLONESHOT` after a report.
    off: bool,
    /// Edge-triggered: the ring positions when last reported while ready.
    seen_in: u64,
    seen_out: u64,
}

struct Set {
    entries: HashMap<c_int, Entry>,
    wake: Option<(c_int, NonZeroU64)>,
}

static SETS: Mutex<Option<HashMap<c_int, Set>>> = Mutex::new(None);

fn sets() -> std::sync::MutexGuard<'static, Option<HashMap<c_int, Set>>> {
    SETS.lock().unwrap_or_else(|e| e.into_inner())
}

fn real_ctl(epfd: c_int, op: c_int, fd: c_int, ev: Option<epoll_event>) -> io::Result<()> {
    let mut e = ev.unwrap_or(epoll_event { events: 0, u64: 0 });
    let p = if ev.is_some() {
        &mut e as *mut epoll_event
    } else {
        std::ptr::null_mut()
    };
    // SAFETY: an epoll_event that lives across the call, or null for DEL.
    let r = unsafe { crate::real::sc!(libc::SYS_epoll_ctl, epfd, op, fd, p) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A wake socket for set `epfd`, registered in it.
fn set_wake(epfd: c_int) -> Option<(c_int, NonZeroU64)> {
    let (fd, token) = wake::bound()?;
    if real_ctl(
        epfd,
        libc::EPOLL_CTL_ADD,
        fd,
        Some(epoll_event {
            events: libc::EPOLLIN as u32,
            u64: WAKE,
        }),
    )
    .is_err()
    {
        sys::close(fd);
        return None;
    }
    Some((fd, token))
}

/// `epoll_ctl` of a fused descriptor `fd` (`c` its connection). `None`: not handled
/// here (the caller passes the call on).
/// # Safety
/// `ev`, if not null, must point to an `epoll_event`.
pub unsafe fn ctl(
    epfd: c_int,
    op: c_int,
    fd: c_int,
    ev: *mut epoll_event,
    c: &Arc<Conn>,
) -> Option<io::Result<()>> {
    let user = if ev.is_null() {
        None
    } else {
        // SAFETY: the caller's event.
        Some(unsafe { std::ptr::read_unaligned(ev) })
    };
    let mut g = sets();
    let all = g.get_or_insert_with(HashMap::new);
    match op {
        libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD => {
            let user = user?;
            // The kernel watches what only it can see; EPOLLOUT is the ring's.
            let kev = epoll_event {
                events: (user.events & !(libc::EPOLLOUT as u32)) | libc::EPOLLRDHUP as u32,
                u64: COOKIE | fd as u32 as u64,
            };
            if let Err(e) = real_ctl(epfd, op, fd, Some(kev)) {
                return Some(Err(e));
            }
            let set = all.entry(epfd).or_insert_with(|| {
                // Only a descriptor marked so takes the set's lock when it is closed
                // (closing any other descriptor, even inside this module, never does).
                crate::fdtab::track(epfd, crate::fdtab::Kind::EPOLL);
                Set {
                    entries: HashMap::new(),
                    wake: None,
                }
            });
            if set.wake.is_none() {
                set.wake = set_wake(epfd);
            }
            // Armed from the start, and again after each report: a ring's publish then
            // makes the set's own kernel descriptor readable (its wake socket is in it),
            // for a program that polls the epoll descriptor itself or nests it in
            // another set.
            if let Some((_, t)) = set.wake {
                c.arm(
                    t,
                    user.events & libc::EPOLLIN as u32 != 0,
                    user.events & libc::EPOLLOUT as u32 != 0,
                );
            }
            set.entries.insert(
                fd,
                Entry {
                    conn: c.clone(),
                    events: user.events,
                    data: user.u64,
                    off: false,
                    seen_in: u64::MAX,
                    seen_out: u64::MAX,
                },
            );
            Some(Ok(()))
        }
        libc::EPOLL_CTL_DEL => {
            if let Err(e) = real_ctl(epfd, op, fd, None) {
                return Some(Err(e));
            }
            if let Some(s) = all.get_mut(&epfd) {
                s.entries.remove(&fd);
            }
            Some(Ok(()))
        }
        _ => None,
    }
}

/// The set `epfd` was closed.
pub fn closed(epfd: c_int) {
    if let Some(all) = sets().as_mut() {
        if let Some(s) = all.remove(&epfd) {
            if let Some((fd, _)) = s.wake {
                sys::close(fd);
            }
        }
    }
}

/// Whether set `epfd` has fused entries (then `epoll_wait` is served here).
pub fn has_fused(epfd: c_int) -> bool {
    sets()
        .as_ref()
        .and_then(|a| a.get(&epfd))
        .is_some_and(|s| !s.entries.is_empty())
}

fn real_wait(
    epfd: c_int,
    out: &mut [epoll_event],
    timeout: Option<Duration>,
    mask: *const libc::sigset_t,
) -> io::Result<usize> {
    let ms: c_int = match timeout {
        None => -1,
        Some(d) => {
            d.as_millis().min(c_int::MAX as u128) as c_int
                + c_int::from(d.subsec_nanos() % 1_000_000 != 0)
        }
    };
    // SAFETY: `out` is valid for its length; the mask is the caller's (or null).
    let r = unsafe {
        crate::real::sc!(
            libc::SYS_epoll_pwait,
            epfd,
            out.as_mut_ptr(),
            out.len(),
            ms,
            mask,
            8usize
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `epoll_pwait(epfd, out, timeout, mask)` for a set with fused entries.
pub fn wait(
    epfd: c_int,
    out: &mut [epoll_event],
    timeout: Option<Duration>,
    mask: *const libc::sigset_t,
) -> io::Result<usize> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut kbuf = vec![epoll_event { events: 0, u64: 0 }; out.len().max(1) + 16];
    let mut first = true;
    loop {
        // The kernel's events, without waiting (the first time) or after a sleep.
        let got = real_wait(epfd, &mut kbuf, Some(Duration::ZERO), std::ptr::null())?;
        let n = report(epfd, out, &kbuf[..got]);
        if n > 0 || deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(n);
        }
        let _ = first;
        first = false;
        // Sleep: arm the set's token on its rings, re-check, then the kernel set.
        let (conns, token) = {
            let g = sets();
            let Some(set) = g.as_ref().and_then(|a| a.get(&epfd)) else {
                return real_wait(epfd, out, timeout, mask);
            };
            let conns: Vec<(Arc<Conn>, u32)> = set
                .entries
                .iter()
                .filter(|(_, e)| !e.off)
                .map(|(_, e)| (e.conn.clone(), e.events))
                .collect();
            (conns, set.wake.map(|w| w.1))
        };
        if let Some(t) = token {
            for (c, ev) in &conns {
                c.arm(
                    t,
                    ev & libc::EPOLLIN as u32 != 0,
                    ev & libc::EPOLLOUT as u32 != 0,
                );
            }
        }
        let ready_now = conns.iter().any(|(c, ev)| {
            let r = c.ready();
            (r.readable && ev & libc::EPOLLIN as u32 != 0)
                || (r.ring_tx && r.writable && ev & libc::EPOLLOUT as u32 != 0)
        });
        let mut r = Ok(0);
        if !ready_now {
            let left = match (deadline, token) {
                (Some(d), _) => Some(d.saturating_duration_since(Instant::now())),
                (None, None) => Some(Duration::from_millis(10)),
                (None, Some(_)) => None,
            };
            // Wait for anything; the events are collected again above.
            let mut one = [epoll_event { events: 0, u64: 0 }; 1];
            r = real_wait_peek(epfd, &mut one, left, mask);
        }
        r?;
    }
}

/// Waits until set `epfd` has an event, without taking it... the kernel has no such
/// call, so the event taken is put back: level-triggered kernel entries report again;
/// for the wake socket the byte is drained here.
fn real_wait_peek(
    epfd: c_int,
    one: &mut [epoll_event; 1],
    left: Option<Duration>,
    mask: *const libc::sigset_t,
) -> io::Result<usize> {
    let n = real_wait(epfd, one, left, mask)?;
    if n == 1 {
        PENDING.with(|p| p.set(Some(one[0])));
    }
    Ok(n)
}

thread_local! {
    /// A kernel event taken by the sleep, to be reported by the next collection.
    static PENDING: std::cell::Cell<Option<epoll_event>> = const { std::cell::Cell::new(None) };
}

/// Merges the kernel's events `k` of set `epfd` with the rings', into `out`.
fn report(epfd: c_int, out: &mut [epoll_event], k: &[epoll_event]) -> usize {
    let mut kernel: Vec<epoll_event> = k.to_vec();
    if let Some(p) = PENDING.with(|p| p.take()) {
        kernel.push(p);
    }
    let mut n = 0;
    let mut g = sets();
    let set = g.as_mut().and_then(|a| a.get_mut(&epfd));
    // Kernel events of fused descriptors, by fd.
    let mut fused_k: HashMap<c_int, u32> = HashMap::new();
    for e in &kernel {
        let data = e.u64;
        if data == WAKE {
            if let Some(s) = set.as_ref() {
                if let Some((fd, _)) = s.wake {
                    wake::drain(fd);
                }
            }
            continue;
        }
        if data & MASK == COOKIE {
            *fused_k.entry((data & 0xffff_ffff) as c_int).or_default() |= e.events;
            continue;
        }
        if n < out.len()
            && !out[..n]
                .iter()
                .any(|o| o.u64 == data && o.events == e.events)
        {
            out[n] = *e;
            n += 1;
        }
    }
    let Some(set) = set else { return n };
    // A connection whose every descriptor is closed left the kernel's set with it.
    set.entries
        .retain(|_, e| e.conn.refs.load(std::sync::atomic::Ordering::Acquire) > 0);
    for (fd, e) in set.entries.iter_mut() {
        if n >= out.len() {
            break;
        }
        if e.off {
            continue;
        }
        let c = e.conn.clone();
        let kev = fused_k.get(fd).copied().unwrap_or(0);
        if kev & (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0 {
            c.peer_shut();
        }
        let r = c.ready();
        let mut rev = merge(e.events as i16, kev as i16, &r) as u16 as u32;
        // RDHUP and the flags beyond poll's 16 bits.
        rev |= kev & libc::EPOLLRDHUP as u32 & e.events;
        if !r.ring_tx && e.events & libc::EPOLLOUT as u32 != 0 {
            // Not writing into the ring: the kernel socket's room is the answer.
            let mut p = libc::pollfd {
                fd: *fd,
                events: libc::POLLOUT,
                revents: 0,
            };
            // SAFETY: one pollfd.
            unsafe { crate::real::sc!(libc::SYS_poll, &mut p as *mut libc::pollfd, 1usize, 0) };
            if p.revents & libc::POLLOUT != 0 {
                rev |= libc::EPOLLOUT as u32;
            }
        }
        if e.events & libc::EPOLLET as u32 != 0 {
            // An edge: the kernel saw one, or the ring moved since the last report.
            let mut edge = kev & !(libc::EPOLLOUT as u32);
            if rev & libc::EPOLLIN as u32 != 0 && r.in_seq != e.seen_in {
                edge |= libc::EPOLLIN as u32;
            }
            if rev & libc::EPOLLOUT as u32 != 0 && r.out_seq != e.seen_out {
                edge |= libc::EPOLLOUT as u32;
            }
            if rev & libc::EPOLLIN as u32 != 0 {
                e.seen_in = r.in_seq;
            } else {
                e.seen_in = u64::MAX;
            }
            if rev & libc::EPOLLOUT as u32 != 0 {
                e.seen_out = r.out_seq;
            } else {
                e.seen_out = u64::MAX;
            }
            rev &= edge | libc::EPOLLHUP as u32 | libc::EPOLLERR as u32;
            if edge == 0 {
                rev = 0;
            }
        }
        if let Some((_, t)) = set.wake {
            if !e.off {
                c.arm(
                    t,
                    e.events & libc::EPOLLIN as u32 != 0,
                    e.events & libc::EPOLLOUT as u32 != 0,
                );
            }
        }
        if rev != 0 {
            out[n] = epoll_event {
                events: rev,
                u64: e.data,
            };
            n += 1;
            if e.events & libc::EPOLLONESHOT as u32 != 0 {
                e.off = true;
            }
        }
    }
    n
}
