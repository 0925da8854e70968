//! The process's control socket: an abstract `AF_UNIX` datagram socket,
//! `\0ember-ctl/<pid>/<token>`, named in the registry's process table, served by one
//! thread the library starts at its first inet socket.
//!
//! The accepting process of a new fused connection sends the connecting process one
//! message: the connection's nonce, the arena and the slot; with the arena's memfd
//! attached (`SCM_RIGHTS`) the first time the pair meets. The receiver checks the
//! sender's credentials (`SCM_CREDENTIALS`, filled in by the kernel: same uid), that
//! the nonce is one of its own waiting connections and that the registry shows that
//! connection claimed by the sender's pid; anything else is dropped.

use super::sys;
use libc::c_int;
use std::io;

/// Message kinds: the accepting side's "your slot is here".
pub const FUSE: u64 = 1;
/// A reader's "take back what I have not read of the ring, and send it by kernel".
pub const TAKE_BACK: u64 = 2;

/// A control message: `[kind, nonce, arena id, slot]`.
pub type Msg = [u64; 4];

/// Makes the control socket; returns it and its abstract name (without the NUL).
pub fn bind() -> io::Result<(c_int, Vec<u8>)> {
    // SAFETY: plain arguments.
    let fd = unsafe {
        crate::real::sc!(
            libc::SYS_socket,
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0
        )
    } as c_int;
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = sys::move_high(fd);
    let one: c_int = 1;
    // SAFETY: an int option.
    unsafe {
        crate::real::sc!(
            libc::SYS_setsockopt,
            fd,
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            &one as *const c_int,
            std::mem::size_of::<c_int>(),
        )
    };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let name = format!("ember-ctl/{pid}/{:016x}", sys::random_u64()).into_bytes();
    let (a, len) = sys::abstract_addr(&name);
    // SAFETY: binds our socket to a valid abstract address.
    if unsafe { crate::real::sc!(libc::SYS_bind, fd, &a as *const libc::sockaddr_un, len) } != 0 {
        let e = io::Error::last_os_error();
        sys::close(fd);
        return Err(e);
    }
    Ok((fd, name))
}

/// Sends `msg` (and `fd`, if any) to the control socket named `to`, from `from` (any
/// datagram socket of ours). Never blocks: a full queue is an error.
pub fn send(from: c_int, to: &[u8], msg: &Msg, fd: Option<c_int>) -> io::Result<()> {
    let (a, alen) = sys::abstract_addr(to);
    let mut bytes = [0u8; 32];
    for (i, w) in msg.iter().enumerate() {
        bytes[8 * i..8 * i + 8].copy_from_slice(&w.to_ne_bytes());
    }
    let mut iov = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: bytes.len(),
    };
    // Room for one descriptor.
    let mut cbuf = [0u64; 4];
    // SAFETY: an all-zero msghdr is valid.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_name = (&a as *const libc::sockaddr_un as *mut libc::sockaddr_un).cast();
    m.msg_namelen = alen;
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE of an int fits in `cbuf` (32 bytes); the header pointers
        // come from the msghdr we just pointed at `cbuf`.
        unsafe {
            m.msg_control = cbuf.as_mut_ptr().cast();
            m.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<c_int>() as u32) as usize;
            let c = libc::CMSG_FIRSTHDR(&m);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<c_int>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<c_int>(), fd);
        }
    }
    // SAFETY: the msghdr points at live buffers.
    let r = unsafe {
        crate::real::sc!(
            libc::SYS_sendmsg,
            from,
            &m as *const libc::msghdr,
            libc::MSG_DONTWAIT
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A received message with the sender's credentials and the descriptor it carried.
pub struct Received {
    pub msg: Msg,
    pub pid: u32,
    pub uid: u32,
    pub fd: Option<std::os::fd::OwnedFd>,
}

/// Receives one message (blocking); `None` for a malformed one (dropped).
pub fn recv(fd: c_int) -> io::Result<Option<Received>> {
    use std::os::fd::FromRawFd;
    let mut bytes = [0u8; 64];
    let mut iov = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: bytes.len(),
    };
    let mut cbuf = [0u64; 16];
    // SAFETY: an all-zero msghdr is valid.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf.as_mut_ptr().cast();
    m.msg_controllen = std::mem::size_of_val(&cbuf);
    // SAFETY: the msghdr points at live buffers of the sizes given.
    let n = unsafe {
        crate::real::sc!(
            libc::SYS_recvmsg,
            fd,
            &mut m as *mut libc::msghdr,
            libc::MSG_CMSG_CLOEXEC
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut got_fd = None;
    let mut cred = None;
    // SAFETY: walks the control messages the kernel wrote into `cbuf`, as CMSG_* say.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&m);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let count =
                    ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / std::mem::size_of::<c_int>();
                for i in 0..count {
                    let f = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<c_int>().add(i));
                    let owned = std::os::fd::OwnedFd::from_raw_fd(f);
                    if got_fd.is_none() {
                        got_fd = Some(owned); // any further one is closed on drop
                    }
                }
            } else if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_CREDENTIALS
            {
                cred = Some(std::ptr::read_unaligned(
                    libc::CMSG_DATA(c).cast::<libc::ucred>(),
                ));
            }
            c = libc::CMSG_NXTHDR(&m, c);
        }
    }
    let Some(cred) = cred else { return Ok(None) };
    if n as usize != 32 || m.msg_flags & libc::MSG_CTRUNC != 0 {
        return Ok(None);
    }
    let mut msg = [0u64; 4];
    for (i, w) in msg.iter_mut().enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[8 * i..8 * i + 8]);
        *w = u64::from_ne_bytes(b);
    }
    Ok(Some(Received {
        msg,
        pid: cred.pid as u32,
        uid: cred.uid,
        fd: got_fd,
    }))
}
