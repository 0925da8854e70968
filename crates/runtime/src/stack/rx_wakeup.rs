//! A device's receive wake-up: FireEngine's interrupt entering the squeue.

use super::perimeter::TcpPerimeter;
use crate::squeue::Squeue;
use std::sync::Arc;

/// A device's receive wake-up, FireEngine's interrupt entering the squeue. Called from
/// inside a squeue (a transmit on the other end of an in-memory link, say), it runs the
/// squeue's device service inline on the calling thread once that thread has left every
/// squeue and released every lock (`squeue::defer`), if the squeue is idle then: no worker
/// wake-up and no context switch between a frame's transmission and its processing.
/// Otherwise, and when called outside any squeue (where the caller may hold the IP
/// layer's lock), it kicks the squeue's worker. A thread runs at most
/// `squeue::INLINE_SERVICE_BUDGET` such services on one way out (two stacks bouncing
/// frames would otherwise keep it), and none while unwinding from a panic.
pub(super) struct RxEntry {
    pub(super) sq: std::sync::Weak<Squeue<TcpPerimeter>>,
}

impl RxEntry {
    pub(super) fn wake(self: &Arc<Self>) {
        if crate::squeue::depth() == 0 {
            let Some(sq) = self.sq.upgrade() else {
                return;
            };
            // A device's interrupt thread (no lock held, no squeue entered) receives
            // inline when the squeue is free; anyone else wakes the worker.
            if crate::squeue::is_interrupt_thread() {
                let ran = sq.try_process(|p: &mut TcpPerimeter| {
                    use crate::squeue::Perimeter;
                    p.service(std::time::Instant::now());
                });
                if ran.is_ok() {
                    return;
                }
            }
            sq.kick();
            return;
        }
        crate::squeue::defer(self.clone());
    }
}

impl crate::squeue::Deferred for RxEntry {
    fn run_deferred(&self) {
        let Some(sq) = self.sq.upgrade() else {
            return;
        };
        if std::thread::panicking() || !crate::squeue::take_inline_service() {
            sq.kick();
            return;
        }
        let ran = sq.try_process(|p: &mut TcpPerimeter| {
            use crate::squeue::Perimeter;
            p.service(std::time::Instant::now());
        });
        if ran.is_err() {
            sq.kick();
        }
    }
}
