//! The registry's memory: a mapping of [`REGISTRY_SIZE`] bytes between two `PROT_NONE`
//! guard pages, backed by the registry file or by anonymous shared memory; opening and
//! checking the file; and the format-once protocol of the header.

use super::layout::valid_pid;
use super::layout::{CANDIDATE_RECORD, LISTENER_RECORD, PROCESS_RECORD};
use super::liveness::{Liveness, Probe};
use super::{
    CANDIDATES_OFFSET, CANDIDATE_CAPACITY, HEADER_LEN, LISTENERS_OFFSET, LISTENER_CAPACITY,
    PROBE_WINDOW, PROCESSES_OFFSET, PROCESS_CAPACITY, REGISTRY_SIZE, VERSION,
};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The memory a [`Registry`](super::Registry) lives in: [`REGISTRY_SIZE`] page-aligned
/// bytes with an inaccessible (`PROT_NONE`) page on each side, so that an access outside
/// the region faults instead of reading a neighbour. Unmapped on drop.
pub struct Region {
    base: NonNull<u8>,
    map: NonNull<libc::c_void>,
    map_len: usize,
}

// SAFETY: a `Region` is a mapping address; every access to the memory goes through
// atomics (or `&mut Registry` for raw writes), so it may move to and be shared between
// threads.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

impl Region {
    /// A fresh region of anonymous shared memory, all zeros (a `fork` child shares it).
    /// For tests and fuzzing; [`Registry::open`](super::Registry::open) maps the file.
    pub fn anonymous() -> io::Result<Region> {
        Region::map(None)
    }

    fn map(fd: Option<libc::c_int>) -> io::Result<Region> {
        let page = page_size();
        let body = REGISTRY_SIZE.div_ceil(page) * page;
        let map_len = body + 2 * page;
        // SAFETY: a new private reservation at an address of the kernel's choosing; it
        // touches no existing memory.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let Some(map) = NonNull::new(map) else {
            return Err(io::Error::other("mmap returned null"));
        };
        // From here on, `region` unmaps the whole reservation if anything fails.
        // SAFETY: `page < map_len`, so the offset stays inside the reservation.
        let base = unsafe { map.cast::<u8>().add(page) };
        let region = Region { base, map, map_len };
        let (flags, fd) = match fd {
            Some(fd) => (libc::MAP_SHARED | libc::MAP_FIXED, fd),
            None => (libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_FIXED, -1),
        };
        // SAFETY: MAP_FIXED over `[base, base + REGISTRY_SIZE)`, which lies inside the
        // reservation above (one page in, `body >= REGISTRY_SIZE`) that only we know of;
        // the guard pages on either side stay PROT_NONE.
        let p = unsafe {
            libc::mmap(
                region.base.as_ptr().cast(),
                REGISTRY_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(region)
    }

    /// The region's length: [`REGISTRY_SIZE`].
    pub fn len(&self) -> usize {
        REGISTRY_SIZE
    }

    /// Never empty; here for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        false
    }

    pub(super) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Copies `bytes` to `offset`, cut at the end of the region; returns how many bytes
    /// were written. `&mut self`: no thread of this process reads through this `Region`
    /// meanwhile (other processes may, as they may write anything at any time).
    pub(super) fn write(&mut self, offset: usize, bytes: &[u8]) -> usize {
        let n = bytes.len().min(REGISTRY_SIZE.saturating_sub(offset));
        if n > 0 {
            // SAFETY: `offset + n <= REGISTRY_SIZE`, inside the read-write mapping;
            // `bytes` is a separate allocation of at least `n` bytes; `&mut self` excludes
            // concurrent access from this process through this region.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.as_ptr().add(offset), n)
            };
        }
        n
    }

    /// Copies bytes from `offset` into `out`, cut at the end of the region; returns how
    /// many were read. `&mut self` as for [`write`](Region::write).
    pub(super) fn read(&mut self, offset: usize, out: &mut [u8]) -> usize {
        let n = out.len().min(REGISTRY_SIZE.saturating_sub(offset));
        if n > 0 {
            // SAFETY: `offset + n <= REGISTRY_SIZE`, inside the mapping; `out` is a
            // separate, writable allocation of at least `n` bytes; `&mut self` excludes
            // concurrent access from this process through this region.
            unsafe {
                std::ptr::copy_nonoverlapping(self.base.as_ptr().add(offset), out.as_mut_ptr(), n)
            };
        }
        n
    }

    pub(super) fn header(&self) -> &Header {
        // SAFETY: the header is the first `size_of::<Header>()` (< HEADER_LEN) bytes of
        // the mapping, which lives as long as `self`, is page-aligned, and holds only
        // atomics, which other processes may change at will.
        unsafe { &*self.base.as_ptr().cast::<Header>() }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the reservation made in `map` (the fixed mapping lies
        // inside it); nothing refers to it any more since `self` is going away.
        unsafe { libc::munmap(self.map.as_ptr(), self.map_len) };
    }
}

/// The header's magic word when the registry is formatted: `"EMBERREG"`.
pub(super) const READY: u64 = u64::from_le_bytes(*b"EMBERREG");
/// The magic word while a process formats: this tag in the high half, its pid in the low.
pub(super) const FORMATTING: u64 = (u32::from_le_bytes(*b"FMT!") as u64) << 32;

/// The header: the first 80 bytes of the first page (the rest of the page is zero and
/// unused).
#[repr(C)]
pub(super) struct Header {
    pub(super) magic: AtomicU64,
    version: AtomicU32,
    header_len: AtomicU32,
    size: AtomicU64,
    /// `[offset, capacity, record size]` of listeners, candidates and processes, then the
    /// probe window.
    layout: [AtomicU32; 10],
    pidns: AtomicU64,
    uid: AtomicU32,
    reserved: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<Header>() == 80);

const LAYOUT: [u32; 10] = [
    LISTENERS_OFFSET as u32,
    LISTENER_CAPACITY as u32,
    LISTENER_RECORD as u32,
    CANDIDATES_OFFSET as u32,
    CANDIDATE_CAPACITY as u32,
    CANDIDATE_RECORD as u32,
    PROCESSES_OFFSET as u32,
    PROCESS_CAPACITY as u32,
    PROCESS_RECORD as u32,
    PROBE_WINDOW as u32,
];

/// Who attaches: the header must name the same pid namespace and uid.
#[derive(Clone, Copy, Debug)]
pub(super) struct Identity {
    pub(super) pid: u32,
    pub(super) uid: u32,
    pub(super) pidns: u64,
}

impl Identity {
    pub(super) fn current() -> io::Result<Identity> {
        // SAFETY: getpid and geteuid cannot fail and touch no memory.
        let (pid, uid) = unsafe { (libc::getpid() as u32, libc::geteuid()) };
        Ok(Identity {
            pid,
            uid,
            pidns: namespace_inode("/proc/self/ns/pid")?,
        })
    }
}

pub(super) fn namespace_inode(path: &str) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(path)?.ino())
}

impl Header {
    fn format(&self, me: &Identity) {
        self.version.store(VERSION, Ordering::Relaxed);
        self.header_len.store(HEADER_LEN as u32, Ordering::Relaxed);
        self.size.store(REGISTRY_SIZE as u64, Ordering::Relaxed);
        for (w, v) in self.layout.iter().zip(LAYOUT) {
            w.store(v, Ordering::Relaxed);
        }
        self.pidns.store(me.pidns, Ordering::Relaxed);
        self.uid.store(me.uid, Ordering::Relaxed);
        self.reserved.store(0, Ordering::Relaxed);
    }

    fn check(&self, me: &Identity) -> io::Result<()> {
        let layout_ok = self
            .layout
            .iter()
            .zip(LAYOUT)
            .all(|(w, v)| w.load(Ordering::Relaxed) == v);
        if self.version.load(Ordering::Relaxed) != VERSION
            || self.header_len.load(Ordering::Relaxed) != HEADER_LEN as u32
            || self.size.load(Ordering::Relaxed) != REGISTRY_SIZE as u64
            || !layout_ok
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "registry of another version or layout",
            ));
        }
        if self.pidns.load(Ordering::Relaxed) != me.pidns
            || self.uid.load(Ordering::Relaxed) != me.uid
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "registry of another pid namespace or user",
            ));
        }
        Ok(())
    }
}

/// The format-once protocol. The magic word goes `0 → FORMATTING|pid → READY`, each step
/// by one process: the one whose compare-and-swap from 0 wins formats the header (the
/// tables are already zero: a fresh file or anonymous mapping), then publishes `READY`
/// (Release). Everyone else waits, at most `max_waits` sleeps of a millisecond, for
/// `READY` (Acquire), and takes over when the formatter's pid is gone. A `READY` header
/// must match this build's version and layout and the caller's pid namespace and uid.
pub(super) fn attach(
    region: &Region,
    me: &Identity,
    probe: &mut impl Probe,
    max_waits: u32,
) -> io::Result<()> {
    let h = region.header();
    let mut waits = 0;
    // Bounded even if another process rewrites the word forever.
    for _ in 0..max_waits.saturating_add(16) {
        let m = h.magic.load(Ordering::Acquire);
        if m == READY {
            return h.check(me);
        }
        let mine = FORMATTING | u64::from(me.pid);
        let take = if m == 0 {
            true
        } else if m & !0xffff_ffff == FORMATTING {
            let pid = m as u32;
            let dead = !valid_pid(pid) || probe.liveness(pid) == Liveness::Gone;
            if !dead {
                if waits >= max_waits {
                    break;
                }
                waits += 1;
                std::thread::sleep(std::time::Duration::from_millis(1));
                continue;
            }
            true
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not an ember registry",
            ));
        };
        if take
            && h.magic
                .compare_exchange(m, mine, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            h.format(me);
            if h.magic
                .compare_exchange(mine, READY, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(());
            }
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        "registry still being formatted by another process",
    ))
}

/// A descriptor closed by a raw system call (the preload library interposes `close`).
struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: closes a descriptor this value owns, once.
        unsafe { libc::syscall(libc::SYS_close, self.0) };
    }
}

fn refused(kind: io::ErrorKind, what: &str) -> io::Error {
    io::Error::new(kind, format!("registry refused: {what}"))
}

fn fstat(fd: &Fd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open; `st` is a live, writable `struct stat`.
    if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// Opens or creates the registry file and maps it: `O_RDWR|O_CREAT|O_NOFOLLOW|O_CLOEXEC`,
/// mode 0600; refuses a file that is not a regular file, owned by another user or
/// readable or writable by group or others (`PermissionDenied`; a symbolic link too), or
/// of a size other than 0 and [`REGISTRY_SIZE`] (`InvalidData`). A zero-length file is
/// extended (zeros) to the size; two processes racing both extend to the same size, which
/// is idempotent. The descriptor is closed once mapped.
pub(super) fn map_file(path: &Path) -> io::Result<Region> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL"))?;
    let flags =
        libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: `c` is a NUL-terminated path; open returns a new descriptor or -1.
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o600 as libc::c_uint) };
    if fd < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ELOOP) {
            return Err(refused(
                io::ErrorKind::PermissionDenied,
                "the path is a symbolic link",
            ));
        }
        return Err(e);
    }
    let fd = Fd(fd);
    let st = fstat(&fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(refused(
            io::ErrorKind::PermissionDenied,
            "not a regular file",
        ));
    }
    // SAFETY: geteuid cannot fail and touches no memory.
    if st.st_uid != unsafe { libc::geteuid() } {
        return Err(refused(
            io::ErrorKind::PermissionDenied,
            "owned by another user",
        ));
    }
    if st.st_mode & 0o077 != 0 {
        return Err(refused(
            io::ErrorKind::PermissionDenied,
            "open to group or others",
        ));
    }
    if st.st_size == 0 {
        // SAFETY: `fd` is open for writing; ftruncate only changes the file's length.
        if unsafe { libc::ftruncate(fd.0, REGISTRY_SIZE as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    if fstat(&fd)?.st_size != REGISTRY_SIZE as libc::off_t {
        return Err(refused(io::ErrorKind::InvalidData, "wrong size"));
    }
    Region::map(Some(fd.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::liveness::ProcProbe;

    fn me() -> Identity {
        Identity::current().unwrap()
    }

    #[test]
    fn guard_pages_fault_on_both_sides() {
        for side in [-1isize, REGISTRY_SIZE as isize] {
            let region = Region::anonymous().unwrap();
            let target = region.base().wrapping_offset(side);
            // SAFETY: fork in a test; the child only reads one byte (expected to fault) and
            // calls _exit, both async-signal-safe.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                // SAFETY: deliberately reads a guard page; the child dies of SIGSEGV.
                unsafe {
                    std::ptr::read_volatile(target);
                    libc::_exit(0);
                }
            }
            let mut status = 0;
            // SAFETY: waits for our own child; `status` is a live int.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            assert!(
                libc::WIFSIGNALED(status),
                "read at offset {side} did not fault"
            );
            assert_eq!(libc::WTERMSIG(status), libc::SIGSEGV);
        }
    }

    #[test]
    fn first_and_last_bytes_are_usable() {
        let mut region = Region::anonymous().unwrap();
        assert_eq!(region.write(REGISTRY_SIZE - 1, &[7, 8, 9]), 1);
        assert_eq!(region.write(REGISTRY_SIZE, &[1]), 0);
        assert_eq!(region.write(usize::MAX, &[1]), 0);
        assert_eq!(region.write(0, &[1, 2]), 2);
        assert_eq!(
            region.header().magic.load(Ordering::Relaxed) & 0xffff,
            0x0201
        );
    }

    #[test]
    fn format_once_then_check() {
        let region = Region::anonymous().unwrap();
        attach(&region, &me(), &mut ProcProbe::new(), 0).unwrap();
        assert_eq!(region.header().magic.load(Ordering::Relaxed), READY);
        attach(&region, &me(), &mut ProcProbe::new(), 0).unwrap();
        let other_ns = Identity {
            pidns: me().pidns + 1,
            ..me()
        };
        let e = attach(&region, &other_ns, &mut ProcProbe::new(), 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let other_uid = Identity {
            uid: me().uid + 1,
            ..me()
        };
        assert_eq!(
            attach(&region, &other_uid, &mut ProcProbe::new(), 0)
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn wrong_version_or_magic_is_invalid_data() {
        let mut region = Region::anonymous().unwrap();
        attach(&region, &me(), &mut ProcProbe::new(), 0).unwrap();
        region.write(8, &(VERSION + 1).to_le_bytes());
        assert_eq!(
            attach(&region, &me(), &mut ProcProbe::new(), 0)
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidData
        );
        region.write(0, b"garbage!");
        assert_eq!(
            attach(&region, &me(), &mut ProcProbe::new(), 0)
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn a_dead_formatter_is_taken_over() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        if super::super::liveness::probe_pid(dead) != Liveness::Gone {
            // Reused within milliseconds: the test would then check a live formatter.
            eprintln!("pid {dead} reused at once; skipping the takeover check");
            return;
        }
        let mut region = Region::anonymous().unwrap();
        region.write(0, &(FORMATTING | u64::from(dead)).to_le_bytes());
        attach(&region, &me(), &mut ProcProbe::new(), 0).unwrap();
        assert_eq!(region.header().magic.load(Ordering::Relaxed), READY);
        // A garbage pid in the formatting word is taken over as well.
        let mut region = Region::anonymous().unwrap();
        region.write(0, &FORMATTING.to_le_bytes());
        attach(&region, &me(), &mut ProcProbe::new(), 0).unwrap();
    }

    #[test]
    fn a_live_formatter_is_waited_for_then_times_out() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut region = Region::anonymous().unwrap();
        region.write(0, &(FORMATTING | u64::from(child.id())).to_le_bytes());
        let t = std::time::Instant::now();
        let e = attach(&region, &me(), &mut ProcProbe::new(), 20).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t.elapsed() >= std::time::Duration::from_millis(20));
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
        // Our own pid in the word: another thread of ours is formatting; wait, too.
        region.write(0, &(FORMATTING | u64::from(me().pid)).to_le_bytes());
        assert_eq!(
            attach(&region, &me(), &mut ProcProbe::new(), 2)
                .unwrap_err()
                .kind(),
            io::ErrorKind::TimedOut
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
