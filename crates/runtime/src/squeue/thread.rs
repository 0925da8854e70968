//! The squeue's per-thread state: how deep the calling thread is inside squeues, the work
//! it defers until it has left them, and whether it is a device's interrupt thread.
//!
//! # Design
//! A squeue (see the parent module) is the lock of its perimeter; this module is what a
//! *thread* knows about the squeues it is in. All of it is thread-local: nothing here is
//! shared between threads, so nothing here needs a lock or an atomic. The queue calls in
//! through [`DepthGuard`] (every entry into a perimeter) and the `OTHERS` flag (every
//! queued item it runs); the rest of the runtime asks questions ([`depth`],
//! [`running_others_work`], [`is_interrupt_thread`]) and hands over work ([`defer`]).
//!
//! The thread-locals:
//!
//! * `DEPTH`: how many squeues the thread is inside. Raised by [`DepthGuard::enter`] when
//!   a thread takes a perimeter (an inline entry, a caller's drain, the worker's drain) or
//!   runs a nested item ([`nested`]), lowered when the guard drops, also on unwinding.
//!   0 for an application thread. [`inline_allowed`] caps it at 2: one nested entry.
//! * `OTHERS`: the thread is running an item another thread queued (a caller draining on
//!   the other thread's behalf). Set and restored around each queued item by the queue's
//!   caller-drain; read by [`running_others_work`].
//! * `DEFERRED` (not under loom): work [`defer`]red while `DEPTH > 0`, first in first out,
//!   each `Arc` at most once. Filled by `defer`, emptied by [`run_deferred`], which runs
//!   when `DEPTH` falls back to 0 (the guard's drop) and between items of a long drain.
//! * `RUNNING` (not under loom): [`run_deferred`] is on this thread's stack. Deferred work
//!   that enters and leaves a squeue (and so calls `run_deferred` again) returns at once
//!   and its additions are run by the outer loop: iteration, never recursion.
//! * `INLINE_BUDGET_USED` (not under loom): device receive services run inline by the
//!   current outermost `run_deferred` ([`take_inline_service`]); reset to 0 when that
//!   call begins, never above [`INLINE_SERVICE_BUDGET`].
//! * `INTERRUPT` (not under loom): set once, for good, by [`set_interrupt_thread`] on a
//!   device's notifier thread; read by [`is_interrupt_thread`].
//!
//! Invariants: `DEPTH` is exactly the number of live [`DepthGuard`]s on the thread; what
//! was deferred has run by the time `DEPTH` is back to 0 (work deferred outside any squeue
//! runs at once), so a woken thread finds the squeue released; `OTHERS` is true only while
//! a queued item runs. While the thread's local storage is being torn down every accessor
//! falls back to running the work at once or answering the default, never panicking.
//!
//! Loom models only the squeue's hand-off protocol: under `--cfg loom` only `DEPTH` and
//! `OTHERS` exist (through loom's `thread_local!`), and deferral is compiled out.

use crate::sync::thread_local;
use std::cell::Cell;

thread_local! {
    /// How many squeues the current thread is inside. (Not `const`: loom's
    /// `thread_local!` takes plain initialisers.)
    #[allow(clippy::missing_const_for_thread_local)]
    static DEPTH: Cell<u32> = Cell::new(0);
    /// The thread is running an item another thread queued (draining on its behalf).
    #[allow(clippy::missing_const_for_thread_local)]
    pub(super) static OTHERS: Cell<bool> = Cell::new(false);
}

/// Whether the calling thread is running work another thread queued: readiness it
/// raises then was produced on the other thread's behalf (the spin rules of
/// `sync::spin_may_help` want the producer's CPU, not the drainer's).
pub fn running_others_work() -> bool {
    OTHERS.with(|o| o.get())
}

/// How many squeues the calling thread is inside (0 for an application thread).
pub fn depth() -> u32 {
    DEPTH.with(|d| d.get())
}

/// Work a thread does once it has left every squeue: the wake-ups of readiness raised
/// while it owned one ([`defer`]).
#[cfg(not(loom))]
pub trait Deferred: Send + Sync {
    /// Does the deferred work.
    fn run_deferred(&self);
}

#[cfg(not(loom))]
std::thread_local! {
    static DEFERRED: std::cell::RefCell<std::collections::VecDeque<std::sync::Arc<dyn Deferred>>> =
        const { std::cell::RefCell::new(std::collections::VecDeque::new()) };
    /// `run_deferred` is running on this thread (work it runs that defers more work
    /// appends to the same queue instead of recursing).
    static RUNNING: Cell<bool> = const { Cell::new(false) };
    /// Inline receive services run by the current (outermost) `run_deferred`.
    static INLINE_BUDGET_USED: Cell<u32> = const { Cell::new(0) };
}

#[cfg(not(loom))]
std::thread_local! {
    /// The thread is a device's interrupt thread ([`set_interrupt_thread`]).
    static INTERRUPT: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as a device's *interrupt thread* (the notifier of a TAP or
/// AF_PACKET queue): when it signals that frames wait, outside any squeue and holding no
/// lock, the squeue's receive service runs right there if the squeue is free, as
/// FireEngine's interrupt thread enters the squeue in process mode, instead of waking the
/// squeue's worker (one thread hand-off less per burst of frames). A busy squeue is
/// kicked as before.
#[cfg(not(loom))]
pub fn set_interrupt_thread() {
    let _ = INTERRUPT.try_with(|i| i.set(true));
}

/// Whether the calling thread was marked by [`set_interrupt_thread`].
#[cfg(not(loom))]
pub fn is_interrupt_thread() -> bool {
    INTERRUPT.try_with(|i| i.get()).unwrap_or(false)
}

/// How many device services one thread runs inline for others on its way out of its
/// squeues (two stacks on a link can bounce frames between them; past this, the
/// receiving squeues' workers take over).
#[cfg(not(loom))]
pub const INLINE_SERVICE_BUDGET: u32 = 64;

/// Runs `d` when the calling thread leaves its outermost squeue (at once outside any).
///
/// A socket's readiness is raised inside the squeue that processed the data, but the
/// thread it wakes will enter that same squeue to read: woken while the squeue is still
/// owned, it finds it busy and queues (or parks a second time). Waking it after the
/// release lets it run inline. A squeue worker, and a caller draining others' items, run
/// their deferred work between items so that a long drain does not hold wake-ups back.
/// The same work deferred twice on one thread runs once. While the thread's local
/// storage is being torn down (a socket dropped by a thread-local destructor) the work
/// runs at once.
#[cfg(not(loom))]
pub fn defer(d: std::sync::Arc<dyn Deferred>) {
    if depth() == 0 {
        d.run_deferred();
        return;
    }
    let queued = DEFERRED.try_with(|v| {
        let mut v = v.borrow_mut();
        if !v.iter().any(|x| std::sync::Arc::ptr_eq(x, &d)) {
            v.push_back(d.clone());
        }
    });
    if queued.is_err() {
        d.run_deferred();
    }
}

/// Runs the work [`defer`] queued on this thread, first in first out. Not re-entrant:
/// called from inside deferred work (which entered and left a squeue), it returns and
/// the outer call runs what was added.
#[cfg(not(loom))]
pub fn run_deferred() {
    if RUNNING.try_with(|r| r.replace(true)).unwrap_or(true) {
        return;
    }
    let _ = INLINE_BUDGET_USED.try_with(|b| b.set(0));
    struct Done;
    impl Drop for Done {
        fn drop(&mut self) {
            let _ = RUNNING.try_with(|r| r.set(false));
        }
    }
    let _done = Done;
    while let Some(d) = DEFERRED
        .try_with(|v| v.borrow_mut().pop_front())
        .ok()
        .flatten()
    {
        d.run_deferred();
    }
}

/// Takes one unit of the calling thread's inline service budget (see
/// [`INLINE_SERVICE_BUDGET`]); false when it is spent.
#[cfg(not(loom))]
pub fn take_inline_service() -> bool {
    INLINE_BUDGET_USED
        .try_with(|b| {
            let used = b.get();
            if used >= INLINE_SERVICE_BUDGET {
                false
            } else {
                b.set(used + 1);
                true
            }
        })
        .unwrap_or(false)
}

/// May the calling thread run an item inline? At depth 0 (first entry) and 1 (one nested
/// entry), not deeper.
pub fn inline_allowed() -> bool {
    depth() < 2
}

/// Marks the calling thread as one level deeper while `f` runs (a nested item run
/// directly on a perimeter the thread already owns).
pub fn nested<R>(f: impl FnOnce() -> R) -> R {
    let _d = DepthGuard::enter();
    f()
}

pub(super) struct DepthGuard;

impl DepthGuard {
    pub(super) fn enter() -> DepthGuard {
        DEPTH.with(|d| d.set(d.get() + 1));
        DepthGuard
    }
}

impl Drop for DepthGuard {
    fn drop(&mut self) {
        let left = DEPTH.with(|d| {
            let n = d.get().saturating_sub(1);
            d.set(n);
            n
        });
        #[cfg(not(loom))]
        if left == 0 {
            run_deferred();
        }
        #[cfg(loom)]
        let _ = left;
    }
}
