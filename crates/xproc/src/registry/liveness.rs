//! Is the process that owns a record still the one that wrote it? A pid alone cannot
//! say: Linux reuses pids. A process is named by (pid, start time), the start time being
//! field 22 of `/proc/<pid>/stat` (clock ticks after boot), which a reused pid does not
//! share with the dead process.
//!
//! The file is read without allocating, into a stack buffer, by raw system calls: the
//! preload library interposes `read` and `close`, and this code runs inside its
//! interposed socket calls.

use super::layout::valid_pid;

/// What `/proc` says about a pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// A process (not a zombie) with this pid exists and started at `start_time`.
    Alive {
        /// Field 22 of `/proc/<pid>/stat`.
        start_time: u64,
    },
    /// No process has this pid, or it is a zombie (dead, not yet reaped), or the pid is
    /// not one Linux can hand out.
    Gone,
    /// `/proc` could not tell (no `/proc`, out of descriptors, a line we cannot parse):
    /// nothing is collected on an `Unknown`.
    Unknown,
}

/// Reads `/proc/<pid>/stat` and tells whether the process lives and when it started.
/// Does not allocate.
pub fn probe_pid(pid: u32) -> Liveness {
    if !valid_pid(pid) {
        return Liveness::Gone;
    }
    let mut path = [0u8; 32];
    let len = stat_path(pid, &mut path);
    let mut buf = [0u8; 1024];
    // SAFETY: `path` is NUL-terminated (`stat_path` wrote the NUL inside the array, which
    // is zeroed beyond `len`); openat reads it and returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path[..=len].as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ESRCH) => Liveness::Gone,
            _ => Liveness::Unknown,
        };
    }
    let mut n = 0;
    let mut failed = None;
    for _ in 0..8 {
        if n == buf.len() {
            break;
        }
        let rest = &mut buf[n..];
        // SAFETY: `fd` is the descriptor opened above; `rest` is a live, writable buffer
        // of `rest.len()` bytes.
        let r = unsafe { libc::syscall(libc::SYS_read, fd, rest.as_mut_ptr(), rest.len()) };
        if r > 0 {
            n += (r as usize).min(rest.len());
            continue;
        }
        if r < 0 {
            failed = std::io::Error::last_os_error().raw_os_error();
            if failed == Some(libc::EINTR) {
                continue;
            }
        }
        break;
    }
    // SAFETY: closes the descriptor opened above, once; nothing else holds it.
    unsafe { libc::syscall(libc::SYS_close, fd) };
    if n == 0 {
        // ESRCH: the process was reaped between the open and the read.
        return if failed == Some(libc::ESRCH) {
            Liveness::Gone
        } else {
            Liveness::Unknown
        };
    }
    parse_stat(&buf[..n])
}

/// Writes `/proc/<pid>/stat` into `out` and returns its length (the NUL is at `len`).
fn stat_path(pid: u32, out: &mut [u8; 32]) -> usize {
    let mut digits = [0u8; 10];
    let mut d = digits.len();
    let mut p = pid;
    loop {
        d -= 1;
        digits[d] = b'0' + (p % 10) as u8;
        p /= 10;
        if p == 0 || d == 0 {
            break;
        }
    }
    let parts: [&[u8]; 3] = [b"/proc/", &digits[d..], b"/stat"];
    let mut len = 0;
    for part in parts {
        out[len..len + part.len()].copy_from_slice(part);
        len += part.len();
    }
    out[len] = 0;
    len
}

/// Parses a `/proc/<pid>/stat` line. The command name (field 2) is in parentheses and may
/// itself hold spaces and parentheses, so fields are counted from the *last* `)`; the
/// state is field 3 and the start time field 22.
pub(super) fn parse_stat(line: &[u8]) -> Liveness {
    let Some(close) = line.iter().rposition(|&b| b == b')') else {
        return Liveness::Unknown;
    };
    let mut fields = line[close + 1..]
        .split(|&b| b == b' ' || b == b'\n')
        .filter(|f| !f.is_empty());
    match fields.next() {
        Some([b'Z' | b'X' | b'x']) => return Liveness::Gone,
        Some([_]) => {}
        _ => return Liveness::Unknown,
    }
    // Fields 4..=21 skipped: the start time is the 19th field after the state.
    let Some(start) = fields.nth(18) else {
        return Liveness::Unknown;
    };
    let mut value: u64 = 0;
    for &b in start {
        if !b.is_ascii_digit() {
            return Liveness::Unknown;
        }
        let Some(v) = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
        else {
            return Liveness::Unknown;
        };
        value = v;
    }
    Liveness::Alive { start_time: value }
}

/// A source of liveness answers: `/proc` in real use, a function of the input when
/// fuzzing.
pub(super) trait Probe {
    fn liveness(&mut self, pid: u32) -> Liveness;
}

/// `/proc`, with a small cache for one scan (a table holds many records of one process).
pub(super) struct ProcProbe {
    cache: [(u32, Liveness); 8],
    len: usize,
    next: usize,
}

impl ProcProbe {
    pub(super) fn new() -> ProcProbe {
        ProcProbe {
            cache: [(0, Liveness::Unknown); 8],
            len: 0,
            next: 0,
        }
    }
}

impl Probe for ProcProbe {
    fn liveness(&mut self, pid: u32) -> Liveness {
        if let Some(&(_, l)) = self.cache[..self.len].iter().find(|(p, _)| *p == pid) {
            return l;
        }
        let l = probe_pid(pid);
        self.cache[self.next] = (pid, l);
        self.next = (self.next + 1) % self.cache.len();
        self.len = (self.len + 1).min(self.cache.len());
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse() {
        let line = b"4242 (a) b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000 1 \n";
        assert_eq!(
            parse_stat(line),
            Liveness::Alive {
                start_time: 987_654
            }
        );
        let zombie = b"4242 (x) Z 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 0 0\n";
        assert_eq!(parse_stat(zombie), Liveness::Gone);
        assert_eq!(parse_stat(b"4242 (x) S 1 2 3"), Liveness::Unknown);
        assert_eq!(parse_stat(b"no parenthesis"), Liveness::Unknown);
        let overflow = b"1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99999999999999999999999 0";
        assert_eq!(parse_stat(overflow), Liveness::Unknown);
        let junk = b"1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 12a 0";
        assert_eq!(parse_stat(junk), Liveness::Unknown);
        assert_eq!(parse_stat(b"1 (x) SS 1"), Liveness::Unknown);
    }

    #[test]
    fn paths_are_built_on_the_stack() {
        let mut out = [0u8; 32];
        let len = stat_path(4_194_304, &mut out);
        assert_eq!(&out[..=len], b"/proc/4194304/stat\0");
        let len = stat_path(7, &mut out);
        assert_eq!(&out[..=len], b"/proc/7/stat\0");
    }

    #[test]
    fn own_process_is_alive_and_matches_std() {
        let pid = std::process::id();
        let Liveness::Alive { start_time } = probe_pid(pid) else {
            panic!("own pid not alive")
        };
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after = &text[text.rfind(')').unwrap() + 1..];
        let field22: u64 = after.split_whitespace().nth(19).unwrap().parse().unwrap();
        assert_eq!(start_time, field22);
        assert_eq!(probe_pid(0), Liveness::Gone);
        assert_eq!(probe_pid(u32::MAX), Liveness::Gone);
    }

    #[test]
    fn killed_child_is_gone_while_still_a_zombie() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(matches!(probe_pid(pid), Liveness::Alive { .. }));
        child.kill().unwrap(); // SIGKILL; not reaped yet, so the pid stays ours (a zombie)
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while probe_pid(pid) != Liveness::Gone {
            assert!(
                std::time::Instant::now() < deadline,
                "killed child still alive"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        child.wait().unwrap();
    }

    #[test]
    fn proc_probe_caches_answers() {
        let mut p = ProcProbe::new();
        let me = std::process::id();
        let first = p.liveness(me);
        assert!(matches!(first, Liveness::Alive { .. }));
        for pid in 1..20 {
            p.liveness(PID_MAX_TEST - pid);
        }
        assert_eq!(p.len, 8);
        assert_eq!(p.liveness(me), first);
    }

    const PID_MAX_TEST: u32 = super::super::layout::PID_MAX;
}
