//! The transport that wakes a sleeping thread of another process: an abstract
//! `AF_UNIX` datagram socket per sleeping thread, named by a random token.
//!
//! # Design
//! The ring's armed words (`ember_xproc::wake`) hold the token of whoever sleeps; the
//! waker sends one byte to `\0ember-wake/<token>`. A thread sleeps in `ppoll` on its
//! wake socket *and* the connection's shadow kernel socket, so a FIN, an RST or the
//! peer's death (the kernel closes its sockets) wakes it too, which a futex could not.
//!
//! One socket per thread, not per process: threads of one process sleeping for
//! different connections on one shared descriptor would consume each other's wake-ups
//! (whoever reads the descriptor takes the wake-up, and poll has no atomic re-check).
//! A thread's socket is made the first time it sleeps (close-on-exec, placed high) and
//! closed when it exits; after `fork` the child's threads make their own (the token
//! records the pid it was made in).
//!
//! A token is 64 random bits: another user can send to an abstract name (they have no
//! permissions), which makes a sleeper wake, re-check and sleep again, and nothing
//! more; a wake-up for a token whose thread has gone goes nowhere.

use super::sys;
use libc::c_int;
use std::cell::Cell;
use std::num::NonZeroU64;
use std::sync::OnceLock;

/// The socket a process sends wake-ups from (unbound; shared by its threads).
static SENDER: OnceLock<c_int> = OnceLock::new();

fn addr(token: u64) -> (libc::sockaddr_un, libc::socklen_t) {
    sys::abstract_addr(format!("ember-wake/{token:016x}").as_bytes())
}

fn dgram() -> Option<c_int> {
    // SAFETY: plain arguments.
    let fd = unsafe {
        crate::real::sc!(
            libc::SYS_socket,
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    } as c_int;
    (fd >= 0).then(|| sys::move_high(fd))
}

/// Wakes the thread sleeping with `token` (maybe nobody; never blocks).
pub fn wake(token: NonZeroU64) {
    let s = *SENDER.get_or_init(|| dgram().unwrap_or(-1));
    if s < 0 {
        return;
    }
    let (a, len) = addr(token.get());
    let _ = sys::sendto(
        s,
        b"w",
        libc::MSG_DONTWAIT,
        (&a as *const libc::sockaddr_un).cast(),
        len,
    );
}

/// The calling thread's wake socket.
struct Mine {
    pid: u32,
    fd: c_int,
    token: NonZeroU64,
}

impl Drop for Mine {
    fn drop(&mut self) {
        // SAFETY: getpid has no preconditions.
        if unsafe { libc::getpid() } as u32 == self.pid {
            sys::close(self.fd);
        }
    }
}

thread_local! {
    static MINE: Cell<Option<Mine>> = const { Cell::new(None) };
}

/// The calling thread's (wake socket, token), made if needed; `None` if no socket
/// could be made (the caller then waits on the shadow socket with a short timeout).
pub fn mine() -> Option<(c_int, NonZeroU64)> {
    MINE.with(|m| {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u32;
        let cur = m.take();
        let cur = match cur {
            Some(c) if c.pid == pid => Some(c),
            Some(inherited) => {
                // Made before a fork: the parent's. Leave its descriptor to the parent
                // (closing it here would close only our copy, which is harmless, but
                // the Drop below must not close the parent's number again later).
                std::mem::forget(inherited);
                None
            }
            None => None,
        };
        let c = match cur {
            Some(c) => c,
            None => {
                let (fd, token) = bound()?;
                Mine { pid, fd, token }
            }
        };
        let out = (c.fd, c.token);
        m.set(Some(c));
        Some(out)
    })
}

/// A new wake socket with a token of its own (a thread's, an epoll set's), or `None`.
pub fn bound() -> Option<(c_int, NonZeroU64)> {
    let fd = dgram()?;
    let token = NonZeroU64::new(sys::random_u64())?;
    let (a, len) = addr(token.get());
    // SAFETY: a bind of our own socket to a valid abstract address.
    let r = unsafe { crate::real::sc!(libc::SYS_bind, fd, &a as *const libc::sockaddr_un, len) };
    if r != 0 {
        sys::close(fd);
        return None;
    }
    Some((fd, token))
}

/// Empties the calling thread's wake socket after a wake-up.
pub fn drain(fd: c_int) {
    let mut b = [0u8; 16];
    while sys::recv(fd, b.as_mut_ptr(), b.len(), libc::MSG_DONTWAIT).is_ok_and(|n| n > 0) {}
}
