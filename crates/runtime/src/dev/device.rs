//! The device interface between the runtime and whatever carries Ethernet frames.
//!
//! A device transmits whole frames (non-blocking: a full queue drops and counts; a device
//! may batch them until `flush`) and holds received frames until the squeue that owns its
//! receive queue polls them. When it has something new to deliver (or an earlier delivery
//! time), it calls the waker the stack gave it: from inside a squeue, the receive runs when
//! that thread leaves its squeues; from a device's interrupt thread (the TAP and AF_PACKET
//! notifiers), inline if the squeue is free; otherwise it kicks the squeue's worker. While
//! the worker is busy it simply polls (FireEngine's switch between interrupts and
//! polling).

use ember_core::time::Instant;

/// A network device as the stack drives it.
pub trait Device: Send + Sync + 'static {
    /// Queues a frame for transmission (Ethernet header included, no FCS).
    fn transmit(&self, frame: Vec<u8>);
    /// Moves up to `budget` frames that have arrived by `now` into `out`.
    fn poll_rx(&self, now: Instant, out: &mut Vec<Vec<u8>>, budget: usize);
    /// When the next frame will be ready, if one is on its way.
    fn next_rx(&self) -> Option<Instant>;
    /// Called by the stack once: `waker` is to be called when frames become ready (or the
    /// next arrival moves earlier).
    fn set_rx_waker(&self, waker: Box<dyn Fn() + Send + Sync>);
    /// Largest IP packet the device carries.
    fn mtu(&self) -> u32;
    /// Sends what `transmit` has batched, if the device batches (AF_PACKET gathers frames
    /// for one `sendmmsg`). The stack calls it when a thread leaves a squeue that
    /// transmitted on the device, and after the IP layer's own frames; a batching device
    /// also sends by itself when its batch is full, so a frame never waits longer than
    /// the rest of one squeue drain. Wrappers pass it on.
    fn flush(&self) {}
}
