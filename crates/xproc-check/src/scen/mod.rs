//! The scenario registry and the helpers the scenarios share.
//!
//! Design: a scenario is a name, a one-line description, a coordinator function (which starts
//! the roles and waits for them) and a role function (dispatching on the role name). The roles
//! of most scenarios are a `server` and a `client` joined by one link; the server listens on an
//! ephemeral port and sends it over the link. Helpers here pick the I/O call at random (send,
//! write, sendto, sendmsg, writev / recv, read, recvfrom, recvmsg, readv) so the random stream
//! scenarios cover every entry point a library must interpose.

use crate::harness::{Args, Coord, Env};
use crate::link::Link;
use crate::sys::{self, Fd, Rng, R};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::unix::io::RawFd;

mod close;
mod epoll;
mod io;
mod peers;
mod polls;
mod procs;
mod signals;
mod stream;

/// One scenario.
pub struct Scenario {
    /// Name used by `run`.
    pub name: &'static str,
    /// What it checks, in one line.
    pub about: &'static str,
    /// Starts the roles and waits for them.
    pub coord: fn(&mut Coord),
    /// Runs one role.
    pub role: fn(&str, &Args),
}

/// All scenarios, in the order `list` prints them.
pub static ALL: &[Scenario] = &[
    stream::V4S,
    stream::V6S,
    stream::MAPPED,
    stream::RANDOM_OOB,
    stream::OOB,
    close::HALF_CLOSE,
    close::LINGER_RST,
    close::CLOSE_UNREAD,
    close::FIN_WITH_UNREAD,
    peers::PEER_NOT_EMBER,
    peers::RAW_SYSCALL_CLIENT,
    peers::STALE_REGISTRY,
    procs::FORK_SHARED,
    procs::EXEC_INHERIT,
    procs::EXEC_STATIC,
    procs::POSIX_SPAWN,
    procs::SYSTEM,
    procs::VFORK,
    procs::SCM_RIGHTS,
    close::SIGKILL_WRITER,
    close::SIGKILL_READER,
    close::SIGSTOP_READER,
    signals::SIGNALS,
    epoll::LEVEL,
    epoll::EDGE,
    epoll::ONESHOT,
    epoll::EXCLUSIVE,
    epoll::FORK,
    epoll::DUP_CLOSED,
    epoll::NESTED,
    polls::POLL,
    polls::SELECT_HIGH_FD,
    io::IOCTLS,
    io::SENDFILE_SPLICE,
    io::READV_WRITEV,
];

/// 127.0.0.1.
pub const V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// ::1.
pub const V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

/// ::ffff:127.0.0.1.
pub fn mapped() -> IpAddr {
    IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped())
}

/// The default coordinator: a server and a client with the full environment.
pub fn coord_pair(c: &mut Coord) {
    c.server_client(&[], Env::Inherit, Env::Inherit);
}

/// Listens on `ip`, sends "port N" over `link`, accepts one connection (bounded) and closes
/// the listener.
pub fn serve_one(link: &Link, ip: IpAddr) -> Fd {
    let (l, port) = sys::listen_on(ip, None);
    link.send_num("port", port as u64);
    let s = sys::accept_within(l.raw(), sys::QUIET);
    drop(l);
    s
}

/// Receives "port N" over `link` and connects to `ip:N` (a harness failure if it cannot).
pub fn connect_from(link: &Link, ip: IpAddr) -> Fd {
    let port = link.recv_num("port") as u16;
    match sys::connect_to(ip, port) {
        Ok(fd) => fd,
        Err(e) => panic!("connect {ip}: {}", sys::errname(e)),
    }
}

/// Sends a prefix of `b` through a randomly chosen call (send, write, sendto, sendmsg with
/// two iovecs, writev with up to three); returns what the call returned.
pub fn send_any(fd: RawFd, b: &[u8], r: &mut Rng) -> R<usize> {
    let flags = libc::MSG_NOSIGNAL;
    match r.range(0, 4) {
        0 => sys::send(fd, b, flags),
        1 => sys::write(fd, b),
        2 => {
            // SAFETY: b is valid; no destination address on a connected socket.
            let n = unsafe {
                libc::sendto(
                    fd,
                    b.as_ptr() as *const libc::c_void,
                    b.len(),
                    flags,
                    std::ptr::null(),
                    0,
                )
            };
            if n < 0 {
                Err(sys::errno())
            } else {
                Ok(n as usize)
            }
        }
        k => {
            let cut1 = if b.is_empty() {
                0
            } else {
                r.range(0, b.len() as u64) as usize
            };
            let cut2 = cut1
                + if b.len() > cut1 {
                    r.range(0, (b.len() - cut1) as u64) as usize
                } else {
                    0
                };
            let iov = [
                libc::iovec {
                    iov_base: b.as_ptr() as *mut libc::c_void,
                    iov_len: cut1,
                },
                libc::iovec {
                    iov_base: b[cut1..].as_ptr() as *mut libc::c_void,
                    iov_len: cut2 - cut1,
                },
                libc::iovec {
                    iov_base: b[cut2..].as_ptr() as *mut libc::c_void,
                    iov_len: b.len() - cut2,
                },
            ];
            let n = if k == 3 {
                // SAFETY: a zeroed msghdr is valid; iov points at live buffers.
                let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
                m.msg_iov = iov.as_ptr() as *mut libc::iovec;
                m.msg_iovlen = 3;
                // SAFETY: m is a valid msghdr.
                unsafe { libc::sendmsg(fd, &m, flags) }
            } else {
                // SAFETY: iov points at live buffers.
                unsafe { libc::writev(fd, iov.as_ptr(), 3) }
            };
            if n < 0 {
                Err(sys::errno())
            } else {
                Ok(n as usize)
            }
        }
    }
}

/// Receives into `b` through a randomly chosen call (recv, read, recvfrom, recvmsg, readv).
pub fn recv_any(fd: RawFd, b: &mut [u8], r: &mut Rng) -> R<usize> {
    match r.range(0, 4) {
        0 => sys::recv(fd, b, 0),
        1 => sys::read(fd, b),
        2 => {
            // SAFETY: b is valid; null address pointers are allowed.
            let n = unsafe {
                libc::recvfrom(
                    fd,
                    b.as_mut_ptr() as *mut libc::c_void,
                    b.len(),
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
            if n < 0 {
                Err(sys::errno())
            } else {
                Ok(n as usize)
            }
        }
        k => {
            let len = b.len();
            let cut = if len == 0 {
                0
            } else {
                r.range(0, len as u64) as usize
            };
            let (x, y) = b.split_at_mut(cut);
            let iov = [
                libc::iovec {
                    iov_base: x.as_mut_ptr() as *mut libc::c_void,
                    iov_len: x.len(),
                },
                libc::iovec {
                    iov_base: y.as_mut_ptr() as *mut libc::c_void,
                    iov_len: y.len(),
                },
            ];
            let n = if k == 3 {
                // SAFETY: a zeroed msghdr is valid; iov points at live buffers.
                let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
                m.msg_iov = iov.as_ptr() as *mut libc::iovec;
                m.msg_iovlen = 2;
                // SAFETY: m is a valid msghdr.
                unsafe { libc::recvmsg(fd, &mut m, 0) }
            } else {
                // SAFETY: iov points at live buffers.
                unsafe { libc::readv(fd, iov.as_ptr(), 2) }
            };
            if n < 0 {
                Err(sys::errno())
            } else {
                Ok(n as usize)
            }
        }
    }
}

/// Panics with a message naming an unknown role (a harness bug).
pub fn unknown_role(role: &str) -> ! {
    panic!("unknown role {role}")
}
