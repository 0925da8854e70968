//! The armed-flag wake-up protocol between the two ends of a fused ring, independent of
//! the transport that actually wakes a sleeper (the runtime's per-process wake fd; a
//! futex later; `thread::park` in tests): that is a [`Wake`].
//!
//! # Design
//! A ring has one armed word per side (`reader_waiter`, `writer_waiter`): 0 when
//! nobody sleeps, else the non-zero token of the sleeper. A sleeper costs its peer one
//! fence and one load per publish; a sleeper that is not there costs no system call.
//!
//! * Sleeper ([`arm`], then the caller re-checks, sleeps, [`disarm`]s; or all of it in
//!   [`wait`]): store its token (SeqCst), `fence(SeqCst)`, re-check the condition
//!   (data to read, room to write); if still not ready, sleep on the transport; after
//!   waking, `disarm` (compare-exchange token → 0) and check again.
//! * Waker ([`notify`]): after publishing (the Release store of `tail`, `head`, a seal,
//!   ...), `fence(SeqCst)`, load the word; if it is non-zero, take the token
//!   (compare-exchange it to 0) and wake it. Taking makes one wake-up per arming however
//!   many publishes follow. A compare-exchange rather than a swap: if the sleeper
//!   disarmed meanwhile, the waker stores nothing into its word and wakes nobody (and,
//!   with a swap, loom reports a false lost wake-up at preemption bound 3: its
//!   version-vector modification order lets a later load read the swap's stale 0 past
//!   a newer arming, which C++'s total modification order forbids).
//!
//! The reader sleeps on `reader_waiter` and the writer's publishes wake it
//! ([`crate::ring::Producer::wake_reader`]); a writer stopped by flow control sleeps on
//! `writer_waiter` and the reader's reads (or a larger `rcv_cap`) wake it
//! ([`crate::ring::Consumer::wake_writer`]).
//!
//! # Why no wake-up is lost (Dekker)
//! The sleeper does `S1: store armed; F1: fence; L1: load the condition (tail)`, the
//! waker `S2: store tail; F2: fence; L2: load armed`. The two SeqCst fences are totally
//! ordered. If F1 comes first, L2 (after F2) must see S1 (before F1) or a later value
//! of the word, so the waker sees the token and wakes. If F2 comes first, L1 must see
//! S2 or later, so the sleeper sees the new data and does not sleep. Either way the
//! sleeper does not sleep through the publish. A later wake-up for a sleeper that
//! already left is spurious, and harmless: sleepers always re-check.
//!
//! Both fences are needed, on x86 too. Without F2, a Release store followed by a load
//! of another location may be reordered (x86's store buffer: the load of `armed` is
//! satisfied before the store of `tail` drains), so the waker reads 0 while the sleeper,
//! symmetrically without F1, reads the old tail: both miss, and the sleeper sleeps with
//! data in the ring. Release/Acquire orders a store before later stores and a load
//! before later loads, never a store before a later load; only a full fence does
//! (`mfence` or a locked instruction on x86, `dmb ish` on Arm). On x86 the sleeper's
//! SeqCst store happens to compile to `xchg`, a full barrier, but the language promises
//! nothing of a SeqCst store followed by a weaker load of another location, and Arm
//! does reorder it; so F1 stays. The loom model
//! `loom_tests::loom_wake_without_fences_is_lost` shows the lost wake-up without them.

//! # Trust
//! The peer can write any value into either word. A token read from shared memory is
//! only passed to the transport, which must treat it as untrusted (a made-up token
//! wakes nobody, or somebody spuriously); a peer that clears our armed word can stall
//! the connection, as it could by not writing. Sleepers also wait on the shadow
//! kernel socket, so a peer's death still wakes them.

use crate::sync::{
    fence, AtomicU64,
    Ordering::{AcqRel, Relaxed, SeqCst},
};
use std::num::NonZeroU64;

/// What wakes a sleeper given its token: the transport, outside this protocol.
pub trait Wake {
    /// Wakes the sleeper with this token (maybe spuriously, maybe nobody).
    fn wake(&self, token: NonZeroU64);
}

impl<F: Fn(NonZeroU64) + ?Sized> Wake for F {
    fn wake(&self, token: NonZeroU64) {
        self(token)
    }
}

/// Sleeper: announces `token` in `word`, then fences. The caller re-checks its condition
/// next, and sleeps only if it still does not hold.
pub fn arm(word: &AtomicU64, token: NonZeroU64) {
    word.store(token.get(), SeqCst);
    fence(SeqCst);
}

/// Sleeper, after waking or deciding not to sleep: clears `word` if it still holds
/// `token`. Returns true if it did (nobody had taken the wake-up).
pub fn disarm(word: &AtomicU64, token: NonZeroU64) -> bool {
    word.compare_exchange(token.get(), 0, AcqRel, Relaxed)
        .is_ok()
}

/// Waker, after publishing: if a sleeper is armed on `word`, takes its token
/// (compare-exchange to 0) and wakes it. Returns whether a wake-up was sent.
pub fn notify<W: Wake + ?Sized>(word: &AtomicU64, w: &W) -> bool {
    fence(SeqCst);
    // The fence orders this load after the publish; Relaxed is enough (module comment).
    let mut v = word.load(Relaxed);
    // Take the token only if it is still there: a sleeper that disarmed meanwhile gets
    // no store into its word and no wake-up.
    while let Some(token) = NonZeroU64::new(v) {
        match word.compare_exchange_weak(v, 0, AcqRel, Relaxed) {
            Ok(_) => {
                w.wake(token);
                return true;
            }
            Err(now) => v = now,
        }
    }
    false
}

/// How long a waiter spins re-checking before it arms and sleeps. Spinning saves the
/// wake-up's system calls when the peer is about to publish, but on a small machine
/// (two cores, client, server and a benchmark) spinning takes the CPU the peer needs,
/// so the default is small. A spin never yields the CPU (`sched_yield`): it checks,
/// hints the CPU (`spin_loop`), and then sleeps for real.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spin {
    /// Re-check this many times after the first check.
    Rounds(u32),
    /// Re-check for about this many microseconds (the clock is read every 32 rounds).
    Micros(u32),
}

impl Default for Spin {
    /// 64 rounds: a few microseconds, about the cost of one sleep and wake-up.
    fn default() -> Spin {
        Spin::Rounds(64)
    }
}

/// Checks once, then spins per `spin` while `check` returns `None`; returns the first
/// `Some` (ready), or `None` when the spin is over and the caller should arm and sleep.
pub fn spin_then<T>(spin: Spin, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    if let Some(v) = check() {
        return Some(v);
    }
    match spin {
        Spin::Rounds(n) => {
            for _ in 0..n {
                std::hint::spin_loop();
                if let Some(v) = check() {
                    return Some(v);
                }
            }
        }
        Spin::Micros(us) => {
            let until = std::time::Duration::from_micros(u64::from(us));
            let start = std::time::Instant::now();
            let mut round = 0u32;
            loop {
                std::hint::spin_loop();
                if let Some(v) = check() {
                    return Some(v);
                }
                round = round.wrapping_add(1);
                if round % 32 == 0 && start.elapsed() >= until {
                    break;
                }
            }
        }
    }
    None
}

/// The whole sleeper side: spin, then arm `word` with `token`, re-check, and `sleep`
/// until `check` returns `Some`. `sleep` blocks on the transport and returns false to
/// give up (a timeout, a signal, the shadow socket's FIN): then `wait` returns `None`.
/// The word is disarmed whenever `wait` returns. Wake-ups may be spurious (`check` is
/// called again after each).
pub fn wait<T>(
    word: &AtomicU64,
    token: NonZeroU64,
    spin: Spin,
    mut check: impl FnMut() -> Option<T>,
    mut sleep: impl FnMut() -> bool,
) -> Option<T> {
    if let Some(v) = spin_then(spin, &mut check) {
        return Some(v);
    }
    loop {
        arm(word, token);
        if let Some(v) = check() {
            disarm(word, token);
            return Some(v);
        }
        let go_on = sleep();
        disarm(word, token);
        if let Some(v) = check() {
            return Some(v);
        }
        if !go_on {
            return None;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn tok(n: u64) -> NonZeroU64 {
        NonZeroU64::new(n).unwrap()
    }

    #[test]
    fn notify_wakes_an_armed_sleeper_once_and_nobody_else() {
        let word = AtomicU64::new(0);
        let woken = Cell::new(Vec::new());
        let w = |t: NonZeroU64| {
            let mut v = woken.take();
            v.push(t.get());
            woken.set(v);
        };
        assert!(!notify(&word, &w), "nobody armed: no wake-up");
        arm(&word, tok(7));
        assert_eq!(word.load(SeqCst), 7);
        assert!(notify(&word, &w));
        assert!(!notify(&word, &w), "one wake-up per arming");
        assert_eq!(woken.take(), vec![7]);
        assert!(!disarm(&word, tok(7)), "the waker took it");
        arm(&word, tok(9));
        assert!(disarm(&word, tok(9)), "nobody took it");
        assert!(!notify(&word, &w));
        assert_eq!(woken.take(), Vec::<u64>::new());
    }

    #[test]
    fn disarm_leaves_another_token_alone() {
        let word = AtomicU64::new(0);
        arm(&word, tok(3));
        assert!(!disarm(&word, tok(4)));
        assert_eq!(word.load(SeqCst), 3);
    }

    #[test]
    fn spin_then_checks_once_then_the_rounds() {
        let calls = Cell::new(0u32);
        let never = || {
            calls.set(calls.get() + 1);
            None::<()>
        };
        assert_eq!(spin_then(Spin::Rounds(0), never), None);
        assert_eq!(calls.get(), 1);
        calls.set(0);
        assert_eq!(spin_then(Spin::Rounds(10), never), None);
        assert_eq!(calls.get(), 11);
        calls.set(0);
        let third = || {
            calls.set(calls.get() + 1);
            (calls.get() == 3).then_some(42)
        };
        assert_eq!(spin_then(Spin::Rounds(10), third), Some(42));
        assert_eq!(calls.get(), 3);
        // A time-bounded spin ends.
        let t = std::time::Instant::now();
        assert_eq!(spin_then(Spin::Micros(50), || None::<()>), None);
        assert!(t.elapsed() >= std::time::Duration::from_micros(50));
        assert_eq!(Spin::default(), Spin::Rounds(64));
    }

    #[test]
    fn wait_sleeps_armed_and_returns_disarmed() {
        let word = AtomicU64::new(0);
        let ready = Cell::new(false);
        let sleeps = Cell::new(0);
        let got = wait(
            &word,
            tok(5),
            Spin::Rounds(2),
            || ready.get().then_some("data"),
            || {
                // Asleep, the word holds the token; the "peer" publishes and notifies.
                assert_eq!(word.load(SeqCst), 5);
                sleeps.set(sleeps.get() + 1);
                if sleeps.get() == 2 {
                    ready.set(true);
                    assert!(notify(&word, &|t: NonZeroU64| assert_eq!(t.get(), 5)));
                }
                true
            },
        );
        assert_eq!(got, Some("data"));
        assert_eq!(
            sleeps.get(),
            2,
            "a spurious wake-up re-arms and sleeps again"
        );
        assert_eq!(word.load(SeqCst), 0);
        // Giving up disarms too.
        let got = wait(&word, tok(6), Spin::Rounds(0), || None::<()>, || false);
        assert_eq!(got, None);
        assert_eq!(word.load(SeqCst), 0);
    }
}
