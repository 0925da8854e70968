//! A deliberately broken preload library (built by build.rs), to prove the gate can fail.
//!
//! Design: it interposes only `sendmsg` and sends a copy of the message whose first byte is
//! inverted, through the real `sendmsg` found with `dlsym(RTLD_NEXT)`. The harness's own
//! channels never use `sendmsg` for data, so scenarios still run to completion, but any
//! scenario that sends stream bytes with `sendmsg` (readv-writev, the random streams) records a
//! different SHA-256 — which `compare` must report. Nothing else is touched.

use std::ffi::c_void;

#[repr(C)]
pub struct IoVec {
    base: *mut u8,
    len: usize,
}

#[repr(C)]
pub struct MsgHdr {
    name: *mut c_void,
    namelen: u32,
    iov: *mut IoVec,
    iovlen: usize,
    control: *mut c_void,
    controllen: usize,
    flags: i32,
}

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const u8) -> *mut c_void;
}

const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;

type SendMsg = unsafe extern "C" fn(i32, *const MsgHdr, i32) -> isize;

/// # Safety
/// Called by C code with a valid msghdr.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: i32, msg: *const MsgHdr, flags: i32) -> isize {
    let real: SendMsg = std::mem::transmute(dlsym(RTLD_NEXT, c"sendmsg".as_ptr() as *const u8));
    let m = &*msg;
    let mut copy = Vec::new();
    for i in 0..m.iovlen {
        let v = &*m.iov.add(i);
        copy.extend_from_slice(std::slice::from_raw_parts(v.base, v.len));
    }
    if let Some(b) = copy.first_mut() {
        *b = !*b;
    }
    let mut iov = IoVec {
        base: copy.as_mut_ptr(),
        len: copy.len(),
    };
    let m2 = MsgHdr {
        name: m.name,
        namelen: m.namelen,
        iov: &mut iov,
        iovlen: 1,
        control: m.control,
        controllen: m.controllen,
        flags: m.flags,
    };
    real(fd, &m2, flags)
}
