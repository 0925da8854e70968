//! The data calls: `read`, `write`, `readv`, `writev`, `recv`, `recvfrom`, `recvmsg`,
//! `recvmmsg`, `send`, `sendto`, `sendmsg`, `sendmmsg`, `sendfile`, `sendfile64`,
//! `splice`, and the fortified `__read_chk`, `__recv_chk`, `__recvfrom_chk`.
//!
//! All of them pass through to the kernel today; the fused data path branches here on
//! the descriptor's entry in `fdtab`.

use crate::fuse;
use crate::real::real;
use libc::{
    c_int, c_uint, c_void, iovec, mmsghdr, msghdr, off64_t, off_t, size_t, sockaddr, socklen_t,
    ssize_t, timespec,
};

mod next {
    use super::*;
    real! {
        fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
        fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t;
        fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
        fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t;
        fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t;
        fn recvfrom(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
        fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t;
        fn recvmmsg(fd: c_int, vec: *mut mmsghdr, vlen: c_uint, flags: c_int, timeout: *mut timespec) -> c_int;
        fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t;
        fn sendto(fd: c_int, buf: *const c_void, n: size_t, flags: c_int, addr: *const sockaddr, len: socklen_t) -> ssize_t;
        fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t;
        fn sendmmsg(fd: c_int, vec: *mut mmsghdr, vlen: c_uint, flags: c_int) -> c_int;
        fn sendfile(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t;
        fn sendfile64(out: c_int, inp: c_int, off: *mut off64_t, n: size_t) -> ssize_t;
        fn splice(fd_in: c_int, off_in: *mut off64_t, fd_out: c_int, off_out: *mut off64_t, n: size_t, flags: c_uint) -> ssize_t;
        fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t;
        fn __recv_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int) -> ssize_t;
        fn __recvfrom_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
    }
}

/// `recvmmsg` on a fused socket, as the kernel's loop does it: one `recvmsg` per
/// entry; after an error the count so far, if any; `MSG_WAITFORONE` makes the entries
/// after the first non-blocking. (The timeout, checked by the kernel only between
/// entries, is not applied.)
#[no_mangle]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    vec: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
    timeout: *mut timespec,
) -> c_int {
    if !vec.is_null() && fuse::conn_of(fd).is_some() {
        let mut flags = flags;
        let mut n = 0;
        for i in 0..vlen.min(libc::UIO_MAXIOV as c_uint) as usize {
            // SAFETY: the caller's array of `vlen` entries.
            let e = unsafe { &mut *vec.add(i) };
            // SAFETY: the entry's msghdr.
            let r = unsafe { recvmsg(fd, &mut e.msg_hdr, flags & !libc::MSG_WAITFORONE) };
            if r < 0 {
                return if n > 0 { n } else { -1 };
            }
            e.msg_len = r as c_uint;
            n += 1;
            if flags & libc::MSG_WAITFORONE != 0 {
                flags |= libc::MSG_DONTWAIT;
            }
        }
        return n;
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::recvmmsg(fd, vec, vlen, flags, timeout) }
}

/// `sendmmsg` on a fused socket: one `sendmsg` per entry, as the kernel's loop.
#[no_mangle]
pub unsafe extern "C" fn sendmmsg(
    fd: c_int,
    vec: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
) -> c_int {
    if !vec.is_null() && fuse::conn_of(fd).is_some() {
        let mut n = 0;
        for i in 0..vlen.min(libc::UIO_MAXIOV as c_uint) as usize {
            // SAFETY: the caller's array of `vlen` entries.
            let e = unsafe { &mut *vec.add(i) };
            // SAFETY: the entry's msghdr.
            let r = unsafe { sendmsg(fd, &e.msg_hdr, flags) };
            if r < 0 {
                return if n > 0 { n } else { -1 };
            }
            e.msg_len = r as c_uint;
            n += 1;
        }
        return n;
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::sendmmsg(fd, vec, vlen, flags) }
}

/// The scatter list of `iov[..cnt]` as slices.
///
/// # Safety
/// `iov` must point to `cnt` iovecs, each valid for writing its length.
unsafe fn iov_mut<'a>(iov: *const iovec, cnt: usize) -> Vec<&'a mut [u8]> {
    (0..cnt)
        .filter_map(|i| {
            // SAFETY: the caller's contract.
            let v = unsafe { &*iov.add(i) };
            (v.iov_len > 0 && !v.iov_base.is_null()).then(|| unsafe {
                std::slice::from_raw_parts_mut(v.iov_base.cast::<u8>(), v.iov_len)
            })
        })
        .collect()
}

/// The gather list of `iov[..cnt]` as slices.
///
/// # Safety
/// `iov` must point to `cnt` iovecs, each valid for reading its length.
unsafe fn iov_ref<'a>(iov: *const iovec, cnt: usize) -> Vec<&'a [u8]> {
    (0..cnt)
        .filter_map(|i| {
            // SAFETY: the caller's contract.
            let v = unsafe { &*iov.add(i) };
            (v.iov_len > 0 && !v.iov_base.is_null())
                .then(|| unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len) })
        })
        .collect()
}

fn bad_iov(cnt: c_int) -> bool {
    !(0..=libc::UIO_MAXIOV).contains(&cnt)
}

/// A receive buffer for `recv(fd, buf, n, flags)`: the caller's, or with `MSG_TRUNC`
/// and no buffer (TCP's "discard n bytes") a scratch one of at most 1 MiB.
///
/// # Safety
/// `buf`, if not null, must be valid for `n` bytes.
unsafe fn recv_buf(buf: *mut c_void, n: size_t, flags: c_int, scratch: &mut Vec<u8>) -> &mut [u8] {
    if buf.is_null() && flags & libc::MSG_TRUNC != 0 && n > 0 {
        scratch.resize(n.min(1 << 20), 0);
        return &mut scratch[..];
    }
    // SAFETY: the caller's contract.
    unsafe { slice_mut(buf, n) }
}

/// A buffer argument as a slice (empty for a null pointer or zero length).
///
/// # Safety
/// `buf` must be valid for `n` bytes.
unsafe fn slice_mut<'a>(buf: *mut c_void, n: size_t) -> &'a mut [u8] {
    if buf.is_null() || n == 0 {
        &mut []
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(buf.cast(), n) }
    }
}

/// # Safety
/// `buf` must be valid for `n` bytes.
unsafe fn slice_ref<'a>(buf: *const c_void, n: size_t) -> &'a [u8] {
    if buf.is_null() || n == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(buf.cast(), n) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    if let Some(c) = fuse::conn_of(fd) {
        // SAFETY: the caller's buffer.
        return fuse::c_ret(c.read(fd, &mut [unsafe { slice_mut(buf, n) }], 0));
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::read(fd, buf, n) }
}

#[no_mangle]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    if n <= buflen {
        if let Some(c) = fuse::conn_of(fd) {
            // SAFETY: the caller's buffer.
            return fuse::c_ret(c.read(fd, &mut [unsafe { slice_mut(buf, n) }], 0));
        }
    }
    // SAFETY: the caller's arguments, passed on (glibc aborts if n > buflen).
    unsafe { next::__read_chk(fd, buf, n, buflen) }
}

#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    if let Some(c) = fuse::conn_of(fd) {
        if flags & libc::MSG_OOB == 0 {
            let mut scratch = Vec::new();
            // SAFETY: the caller's buffer.
            return fuse::c_ret(c.read(
                fd,
                &mut [unsafe { recv_buf(buf, n, flags, &mut scratch) }],
                flags,
            ));
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::recv(fd, buf, n, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    if n <= buflen && flags & libc::MSG_OOB == 0 {
        if let Some(c) = fuse::conn_of(fd) {
            // SAFETY: the caller's buffer.
            return fuse::c_ret(c.read(fd, &mut [unsafe { slice_mut(buf, n) }], flags));
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::__recv_chk(fd, buf, n, buflen, flags) }
}

/// `recvfrom` on a connected TCP socket fills no address: the kernel leaves `*len` as
/// 0 for a stream socket's data. So does the fused path.
///
/// # Safety
/// `len`, if not null, must be valid.
unsafe fn no_addr(len: *mut socklen_t) {
    if !len.is_null() {
        // SAFETY: the caller's contract.
        unsafe { *len = 0 };
    }
}

#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    if let Some(c) = fuse::conn_of(fd) {
        if flags & libc::MSG_OOB == 0 {
            let mut scratch = Vec::new();
            // SAFETY: the caller's buffer and length.
            let r = fuse::c_ret(c.read(
                fd,
                &mut [unsafe { recv_buf(buf, n, flags, &mut scratch) }],
                flags,
            ));
            if r >= 0 {
                unsafe { no_addr(len) };
            }
            return r;
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::recvfrom(fd, buf, n, flags, addr, len) }
}

#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    if n <= buflen {
        // SAFETY: the caller's arguments.
        return unsafe { recvfrom(fd, buf, n, flags, addr, len) };
    }
    // SAFETY: the caller's arguments, passed on (glibc aborts: n > buflen).
    unsafe { next::__recvfrom_chk(fd, buf, n, buflen, flags, addr, len) }
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    if !bad_iov(cnt) {
        if let Some(c) = fuse::conn_of(fd) {
            // SAFETY: the caller's iovecs.
            let mut v = unsafe { iov_mut(iov, cnt as usize) };
            return fuse::c_ret(c.read(fd, &mut v, 0));
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::readv(fd, iov, cnt) }
}

#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    if !msg.is_null() && flags & libc::MSG_OOB == 0 {
        if let Some(c) = fuse::conn_of(fd) {
            // SAFETY: the caller's msghdr.
            let m = unsafe { &mut *msg };
            if m.msg_iovlen <= libc::UIO_MAXIOV as usize {
                // SAFETY: the caller's iovecs.
                let mut v = unsafe { iov_mut(m.msg_iov, m.msg_iovlen) };
                let r = fuse::c_ret(c.read(fd, &mut v, flags));
                if r >= 0 {
                    m.msg_namelen = 0;
                    m.msg_controllen = 0;
                    m.msg_flags = 0;
                }
                return r;
            }
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::recvmsg(fd, msg, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    if let Some(c) = fuse::conn_of(fd) {
        // SAFETY: the caller's buffer.
        return fuse::c_ret(c.write(fd, &[unsafe { slice_ref(buf, n) }], 0));
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::write(fd, buf, n) }
}

#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    if let Some(c) = fuse::conn_of(fd) {
        // SAFETY: the caller's buffer.
        return fuse::c_ret(c.write(fd, &[unsafe { slice_ref(buf, n) }], flags));
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::send(fd, buf, n, flags) }
}

#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> ssize_t {
    if let Some(c) = fuse::conn_of(fd) {
        // A connected stream socket ignores the address, as the kernel's TCP does.
        // SAFETY: the caller's buffer.
        return fuse::c_ret(c.write(fd, &[unsafe { slice_ref(buf, n) }], flags));
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::sendto(fd, buf, n, flags, addr, len) }
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    if !bad_iov(cnt) {
        if let Some(c) = fuse::conn_of(fd) {
            // SAFETY: the caller's iovecs.
            let v = unsafe { iov_ref(iov, cnt as usize) };
            return fuse::c_ret(c.write(fd, &v, 0));
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::writev(fd, iov, cnt) }
}

/// A fused connection whose descriptor goes to another process (`SCM_RIGHTS`) is
/// handed over to the kernel first: the receiver may not be under ember.
///
/// # Safety
/// `m` must be a valid msghdr.
unsafe fn hand_over_passed(m: &msghdr) {
    if m.msg_control.is_null() || m.msg_controllen == 0 || !crate::fdtab::active() {
        return;
    }
    // SAFETY: walks the caller's control messages as CMSG_* say.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(m);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let n = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<c_int>();
                for i in 0..n {
                    let f = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<c_int>().add(i));
                    if let Some(conn) = fuse::conn_of(f) {
                        fuse::keep_errno(|| conn.hand_over());
                    }
                }
            }
            c = libc::CMSG_NXTHDR(m, c);
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    if !msg.is_null() {
        // SAFETY: the caller's msghdr.
        unsafe { hand_over_passed(&*msg) };
    }
    if !msg.is_null() {
        if let Some(c) = fuse::conn_of(fd) {
            // SAFETY: the caller's msghdr.
            let m = unsafe { &*msg };
            if m.msg_iovlen <= libc::UIO_MAXIOV as usize && m.msg_controllen == 0 {
                // SAFETY: the caller's iovecs.
                let v = unsafe { iov_ref(m.msg_iov, m.msg_iovlen) };
                return fuse::c_ret(c.write(fd, &v, flags));
            }
        }
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::sendmsg(fd, msg, flags) }
}

/// `sendfile` into a fused socket: the file's bytes through a buffer into the ring.
///
/// # Safety
/// `off`, if not null, must be valid.
unsafe fn sendfile_fused(
    c: &fuse::conn::Conn,
    out: c_int,
    inp: c_int,
    off: *mut off64_t,
    n: size_t,
) -> ssize_t {
    let mut buf = vec![0u8; n.min(256 << 10)];
    let got = if off.is_null() {
        // SAFETY: a read into our buffer, through the interposer (the input may itself
        // be a fused socket).
        unsafe { read(inp, buf.as_mut_ptr().cast(), buf.len()) }
    } else {
        // SAFETY: `off` is the caller's.
        unsafe {
            crate::real::sc!(libc::SYS_pread64, inp, buf.as_mut_ptr(), buf.len(), *off) as ssize_t
        }
    };
    if got <= 0 {
        return got;
    }
    let r = fuse::c_ret(c.write(out, &[&buf[..got as usize]], 0));
    if r > 0 && !off.is_null() {
        // SAFETY: `off` is the caller's.
        unsafe { *off += r as off64_t };
    } else if r > 0 && (r as usize) < got as usize {
        // Read more than was sent from a file without an offset: give the rest back.
        // SAFETY: a seek of the caller's input descriptor.
        unsafe { crate::real::sc!(libc::SYS_lseek, inp, r as i64 - got as i64, libc::SEEK_CUR) };
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn sendfile(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t {
    if let Some(c) = fuse::conn_of(out) {
        // off_t is off64_t on the 64-bit targets ember runs on.
        // SAFETY: the caller's arguments.
        return unsafe { sendfile_fused(&c, out, inp, off.cast(), n) };
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::sendfile(out, inp, off, n) }
}

#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    inp: c_int,
    off: *mut off64_t,
    n: size_t,
) -> ssize_t {
    if let Some(c) = fuse::conn_of(out) {
        // SAFETY: the caller's arguments.
        return unsafe { sendfile_fused(&c, out, inp, off, n) };
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::sendfile64(out, inp, off, n) }
}

#[no_mangle]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut off64_t,
    fd_out: c_int,
    off_out: *mut off64_t,
    n: size_t,
    flags: c_uint,
) -> ssize_t {
    // A fused socket on either end: its bytes through a buffer (the kernel's splice
    // cannot see the ring). Sockets take no offsets.
    let (ci, co) = (fuse::conn_of(fd_in), fuse::conn_of(fd_out));
    if ci.is_some() || co.is_some() {
        let mut buf = vec![0u8; n.min(64 << 10)];
        let nb = if flags & libc::SPLICE_F_NONBLOCK != 0 {
            libc::MSG_DONTWAIT
        } else {
            0
        };
        let got = match &ci {
            Some(c) => fuse::c_ret(c.read(fd_in, &mut [&mut buf[..]], nb)),
            // SAFETY: the caller's input (a pipe, when the output is a socket).
            None => unsafe {
                crate::real::sc!(libc::SYS_read, fd_in, buf.as_mut_ptr(), buf.len()) as ssize_t
            },
        };
        if got <= 0 {
            return got;
        }
        return match &co {
            Some(c) => fuse::c_ret(c.write(fd_out, &[&buf[..got as usize]], nb)),
            // SAFETY: the caller's output (a pipe).
            None => unsafe {
                crate::real::sc!(libc::SYS_write, fd_out, buf.as_ptr(), got as usize) as ssize_t
            },
        };
    }
    // SAFETY: the caller's arguments, passed on.
    unsafe { next::splice(fd_in, off_in, fd_out, off_out, n, flags) }
}
