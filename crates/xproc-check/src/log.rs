//! Transcript lines.
//!
//! Design: a process writes each transcript line with one `write(2)` to its log fd (stdout by
//! default), unbuffered, so that lines written before a SIGKILL are kept and a forked child can
//! be pointed at its own pipe (`set_fd`). Lines are short (< PIPE_BUF), so a write is atomic.
//! Use the `out!` macro; never print fds, ports, pids or timings.

use std::sync::atomic::{AtomicI32, Ordering};

static LOG_FD: AtomicI32 = AtomicI32::new(1);

/// Sends this process's transcript lines to `fd` from now on.
pub fn set_fd(fd: i32) {
    LOG_FD.store(fd, Ordering::SeqCst);
}

/// Writes one line (a newline is added).
pub fn line(s: &str) {
    let mut b = Vec::with_capacity(s.len() + 1);
    b.extend_from_slice(s.as_bytes());
    b.push(b'\n');
    let fd = LOG_FD.load(Ordering::SeqCst);
    let mut off = 0;
    while off < b.len() {
        // SAFETY: b is a valid buffer.
        let r = unsafe { libc::write(fd, b[off..].as_ptr() as *const libc::c_void, b.len() - off) };
        if r < 0 {
            if crate::sys::errno() == libc::EINTR {
                continue;
            }
            return;
        }
        off += r as usize;
    }
}

/// Writes a formatted transcript line.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::log::line(&format!($($t)*)) };
}

/// The fd transcript lines currently go to.
pub fn fd() -> i32 {
    LOG_FD.load(Ordering::SeqCst)
}
