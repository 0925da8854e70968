//! Synchronisation primitives, swapped for `loom`'s model-checked versions under
//! `--cfg loom` so the squeue hand-off and fusion protocols can be checked exhaustively
//! (`RUSTFLAGS="--cfg loom" cargo test -p ember-runtime --release --lib loom`).
//!
//! Locks here never poison: a panic while a lock is held is a bug that the tests catch,
//! and the stack keeps going with the data as it was left.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Condvar as RawCondvar, Mutex as RawMutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread_local;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Condvar as RawCondvar, Mutex as RawMutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread_local;

use std::time::Duration;

/// A mutex whose `lock` cannot fail.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(RawMutex<T>);

impl<T> Mutex<T> {
    pub(crate) fn new(v: T) -> Self {
        Mutex(RawMutex::new(v))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lock if nobody holds it.
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

/// A condition variable whose waits cannot fail.
#[derive(Debug, Default)]
pub(crate) struct Condvar(RawCondvar);

impl Condvar {
    pub(crate) fn new() -> Self {
        Condvar(RawCondvar::new())
    }

    pub(crate) fn wait<'a, T>(&self, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(g).unwrap_or_else(|e| e.into_inner())
    }

    /// Waits at most `d` (under loom: until notified).
    pub(crate) fn wait_timeout<'a, T>(
        &self,
        g: MutexGuard<'a, T>,
        d: Duration,
    ) -> MutexGuard<'a, T> {
        match self.0.wait_timeout(g, d) {
            Ok((g, _)) => g,
            Err(e) => e.into_inner().0,
        }
    }

    pub(crate) fn notify_one(&self) {
        self.0.notify_one();
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}

/// The CPU the calling thread runs on now (`u32::MAX` when unknown, and always under
/// loom). Cheap: glibc reads it from the thread's rseq area.
#[allow(unsafe_code)]
pub(crate) fn current_cpu() -> u32 {
    #[cfg(not(loom))]
    {
        // SAFETY: sched_getcpu takes no arguments, touches no memory of ours and has no
        // preconditions; it returns -1 on failure, mapped to "unknown".
        let c = unsafe { libc::sched_getcpu() };
        u32::try_from(c).unwrap_or(u32::MAX)
    }
    #[cfg(loom)]
    {
        u32::MAX
    }
}

/// Whether spinning while another thread finishes something can help: not when the
/// calling thread is pinned to one CPU and the other thread last ran on that same CPU
/// (two threads bound to one CPU) or is not known yet, for then the other thread may
/// need the CPU the spinner holds and spinning only delays it; parking lets it run at
/// once. A thread free to
/// move spins (the scheduler spreads two busy threads over two CPUs; parking instead
/// would let wake-up affinity stack them on one).
pub(crate) fn spin_may_help(other_cpu: u32) -> bool {
    // A pinned thread that does not know where the other thread runs (`u32::MAX`, e.g.
    // the first wait on a new connection) parks: spinning would be the costly mistake.
    !pinned() || (other_cpu != u32::MAX && other_cpu != current_cpu())
}

#[cfg(not(loom))]
std::thread_local! {
    /// (calls left before the affinity is read again, pinned to a single CPU).
    static PINNED: std::cell::Cell<(u32, bool)> = const { std::cell::Cell::new((0, false)) };
}

/// Whether the calling thread may run on one CPU only (its affinity mask, re-read every
/// 4096 calls so that a thread pinning itself later is noticed).
#[allow(unsafe_code)]
fn pinned() -> bool {
    #[cfg(not(loom))]
    {
        PINNED.with(|p| {
            let (left, pinned) = p.get();
            if left > 0 {
                p.set((left - 1, pinned));
                return pinned;
            }
            // SAFETY: cpu_set_t is plain old data (a bit array); all-zero is valid.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: sched_getaffinity writes at most `size_of::<cpu_set_t>()` bytes into
            // `set`, which is that large and lives across the call; pid 0 is this thread.
            let r = unsafe {
                libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set)
            };
            // SAFETY: CPU_COUNT only reads the set it is given.
            let pinned = r == 0 && unsafe { libc::CPU_COUNT(&set) } == 1;
            p.set((4095, pinned));
            pinned
        })
    }
    #[cfg(loom)]
    {
        false
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_current_cpu_is_known_and_spinning_for_it_is_refused() {
        let me = current_cpu();
        assert!(me < 4096, "sched_getcpu works here ({me})");
        // Pinned, the thread stays on its CPU between the two reads.
        let h = std::thread::spawn(move || {
            core_affinity::set_for_current(core_affinity::CoreId { id: me as usize });
            let mine = current_cpu();
            (mine, spin_may_help(mine), spin_may_help(u32::MAX))
        });
        let (mine, same, unknown) = h.join().unwrap();
        assert_eq!(mine, me);
        assert!(
            !same,
            "a pinned thread does not spin for one on its own CPU"
        );
        assert!(!unknown, "nor for one it does not know");
        // A thread free to move spins whatever CPU the other one used.
        if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
            let h = std::thread::spawn(|| spin_may_help(current_cpu()));
            assert!(h.join().unwrap(), "an unpinned thread spins");
        }
    }
}
