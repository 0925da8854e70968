//! Flow control of one direction of a fused connection (writer → reader): when a fused
//! writer must stop, and when it may go on.
//!
//! # Design
//! A fused write moves bytes straight into the reader's receive buffer, so nothing
//! like a window or an ACK clock slows a writer that is faster than its reader. Solaris
//! 10 stops it on two conditions (`tcp_fuse_output`, `tcp_fuse_rrw`), and so does ember:
//! * **the reader's buffer is full**: a write moved less than offered (or nothing). The
//!   writer is stopped until the reader has drained its buffer to the low-water mark,
//!   `min(writer's tcp_xmit_lowat, reader's buffer / 2)` and at least one byte, so that
//!   it wakes to a useful amount of room and not for every byte read; or at once if the
//!   reader can no longer receive (so the writer learns the error);
//! * **the reader has not read the last `tcp_fusion_rcv_unread_min` writes** (0: no
//!   limit): a writer sharing a CPU with a slower reader could otherwise fill the
//!   reader's buffer with many small writes before the reader runs at all. The reader's
//!   next read resumes it.
//!
//! These decisions are all here, in one type with no knowledge of where the bytes go:
//! the in-process fused path keeps one in the writer's [`Tcb`](super::Tcb) (the bytes
//! move from `Tcb` to `Tcb`, see `fusion.rs`), and a fused path between processes keeps
//! one per direction beside its ring. The owner counts and reports what it is told: a
//! new stop, a resumption.

/// The flow-control state of one fused direction. `Default` is a writer that may
/// write, with no unread writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FusedFlow {
    /// Writes that moved data the reader has not read since (Solaris
    /// `tcp_fuse_rcv_unread_cnt`).
    unread_writes: u32,
    /// Stopped by the unread-writes limit: the reader's next read resumes it.
    stopped_unread: bool,
    /// Stopped by a full receive buffer: it resumes at the low-water mark.
    stopped_full: bool,
}

/// Why a fused writer may not write now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// The writer was not stopped before this call: the owner counts a new stop.
    pub newly: bool,
}

impl FusedFlow {
    /// Before a write: `Err` if the reader has not read the last `unread_limit` writes
    /// (0: no limit). A writer stopped by a full buffer is not refused here: the write
    /// moves what room there is, as an ordinary write into a nearly full send buffer
    /// does; it is not told it may write until the low-water mark.
    pub fn admit(&mut self, unread_limit: u32) -> Result<(), Stopped> {
        if unread_limit > 0 && self.unread_writes >= unread_limit {
            let newly = !self.stopped_unread;
            self.stopped_unread = true;
            return Err(Stopped { newly });
        }
        Ok(())
    }

    /// After a write offered `offered` bytes and moved `moved` of them: a write that
    /// moved data counts as one unread write; one that moved less than offered stops
    /// the writer until the low-water mark. Returns the new stop, if this write caused
    /// one.
    pub fn wrote(&mut self, offered: usize, moved: usize) -> Option<Stopped> {
        if moved > 0 {
            self.unread_writes = self.unread_writes.saturating_add(1);
        }
        if moved < offered {
            let newly = !self.stopped_full;
            self.stopped_full = true;
            return Some(Stopped { newly });
        }
        None
    }

    /// The reader read: no write is unread any more, and a writer stopped by the
    /// unread-writes limit goes on.
    pub fn reader_read(&mut self) {
        self.unread_writes = 0;
        self.stopped_unread = false;
    }

    /// The reader's free space changed (it read, or its buffer was resized): a writer
    /// stopped by a full buffer goes on once `free` reaches the low-water mark
    /// (`min(writer_lowat, reader_cap / 2)`, at least 1), or at once if the reader can
    /// no longer receive. Returns true if that resumed it.
    pub fn reader_space(
        &mut self,
        free: usize,
        reader_cap: usize,
        writer_lowat: usize,
        can_receive: bool,
    ) -> bool {
        if !self.stopped_full {
            return false;
        }
        let mark = writer_lowat.min(reader_cap / 2).max(1);
        if free >= mark || !can_receive {
            self.stopped_full = false;
            return true;
        }
        false
    }

    /// Stopped for either reason.
    pub fn is_stopped(&self) -> bool {
        self.stopped_unread || self.stopped_full
    }

    /// Stopped by a full buffer (waiting for the low-water mark).
    pub fn is_stopped_full(&self) -> bool {
        self.stopped_full
    }

    /// May the writer be told it can write, with `room` bytes free at the reader?
    pub fn writable(&self, room: usize) -> bool {
        !self.is_stopped() && room > 0
    }

    /// Writes the reader has not read.
    pub fn unread_writes(&self) -> u32 {
        self.unread_writes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unread_writes_limit_stops_once_and_a_read_resumes() {
        let mut f = FusedFlow::default();
        for _ in 0..3 {
            assert_eq!(f.admit(3), Ok(()));
            assert_eq!(f.wrote(10, 10), None);
        }
        assert_eq!(f.admit(3), Err(Stopped { newly: true }));
        assert_eq!(f.admit(3), Err(Stopped { newly: false }));
        assert!(f.is_stopped() && !f.writable(100));
        f.reader_read();
        assert_eq!(f.unread_writes(), 0);
        assert!(!f.is_stopped() && f.writable(100));
        assert_eq!(f.admit(3), Ok(()));
    }

    #[test]
    fn no_limit_never_stops_and_empty_writes_do_not_count() {
        let mut f = FusedFlow::default();
        for _ in 0..1000 {
            assert_eq!(f.admit(0), Ok(()));
            f.wrote(1, 1);
        }
        f.wrote(0, 0);
        assert_eq!(f.unread_writes(), 1000);
        let mut g = FusedFlow::default();
        assert_eq!(g.wrote(0, 0), None);
        assert_eq!(g.unread_writes(), 0);
    }

    #[test]
    fn a_full_buffer_stops_until_the_low_water_mark() {
        let mut f = FusedFlow::default();
        assert_eq!(f.wrote(100, 40), Some(Stopped { newly: true }));
        assert_eq!(f.wrote(60, 0), Some(Stopped { newly: false }));
        assert!(f.is_stopped_full() && !f.writable(1000));
        // Writer low water 2048, reader buffer 8192: the mark is 2048.
        assert!(!f.reader_space(2047, 8192, 2048, true));
        assert!(f.is_stopped());
        assert!(f.reader_space(2048, 8192, 2048, true));
        assert!(!f.is_stopped());
        // Not stopped: nothing to resume.
        assert!(!f.reader_space(9000, 8192, 2048, true));
    }

    #[test]
    fn the_mark_follows_a_small_reader_buffer_and_is_at_least_one() {
        let mut f = FusedFlow::default();
        f.wrote(10, 0);
        // Reader buffer 1000: the mark is 500, not the writer's 2048.
        assert!(!f.reader_space(499, 1000, 2048, true));
        assert!(f.reader_space(500, 1000, 2048, true));
        f.wrote(10, 0);
        // A one-byte buffer: the mark is 1.
        assert!(!f.reader_space(0, 1, 2048, true));
        assert!(f.reader_space(1, 1, 2048, true));
    }

    #[test]
    fn a_reader_that_cannot_receive_resumes_the_writer_at_once() {
        let mut f = FusedFlow::default();
        f.wrote(10, 0);
        assert!(f.reader_space(0, 8192, 2048, false));
        assert!(!f.is_stopped());
    }

    #[test]
    fn a_read_does_not_resume_a_writer_stopped_by_a_full_buffer() {
        let mut f = FusedFlow::default();
        f.wrote(10, 5);
        f.reader_read();
        assert!(f.is_stopped_full());
        assert_eq!(f.unread_writes(), 0);
    }
}
