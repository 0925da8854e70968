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

/// What a device with a transmit queue of its own holds (see [`Device::tx_backlog`]);
/// defined with the link models, whose wires report one too.
pub use ember_netem::TxBacklog;

/// A network device as the stack drives it.
pub trait Device: Send + Sync + 'static {
    /// Queues a frame for transmission (Ethernet header included, no FCS).
    fn transmit(&self, frame: Vec<u8>);
    /// Queues every frame of `frames`, in order, leaving it empty: the pieces of one
    /// large segment (GSO). A device whose per-call cost is a lock or a wake-up takes them
    /// in one go; the default sends them one by one. Wrappers that look at every frame
    /// pass the batch on after looking.
    fn transmit_batch(&self, frames: &mut Vec<Vec<u8>>) {
        for f in frames.drain(..) {
            self.transmit(f);
        }
    }
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
    /// The device's own transmit backlog at `now`, so the stack can keep it short (a
    /// byte-queue limit: hold frames in its fair queue while the device holds more than
    /// about 1 ms at its rate). `None`: the device hands frames on synchronously (TAP,
    /// AF_PACKET) or drains at an unbounded rate, and keeps no queue ember can see.
    fn tx_backlog(&self, _now: Instant) -> Option<TxBacklog> {
        None
    }
    /// Whether the device accepts TCP frames larger than its MTU and segments them itself
    /// (TCP segmentation offload); if not, the stack must split them before `transmit`.
    fn tso(&self) -> bool {
        false
    }
    /// The device's own counters, kstat-style (`rx_frames`, `tx_bytes`, ...), for
    /// `Stack::kstat` (module `devN`, summed over an interface's queues). Read rarely
    /// (when someone asks), so a device may take a lock here. Wrappers add theirs to the
    /// inner device's. Default: none.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}
