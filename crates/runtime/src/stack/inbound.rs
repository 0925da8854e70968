//! What the IP layer delivers to TCP, collected while the IP layer is locked.

use super::perimeter::Segment;
use ember_core::host::{IpLayer, SegmentBytes, TcpIcmpError, TcpSegmentIn, TcpSink};
use ember_core::time::Instant;

/// What the IP layer received for TCP while the runtime held it, collected to be given
/// to the squeues once it has let go (see [`StackInner::with_ip`]).
#[derive(Default)]
pub(crate) struct Inbound(pub(super) Vec<InboundItem>);

pub(crate) enum InboundItem {
    Segment(Segment),
    IcmpError(TcpIcmpError),
}

impl TcpSink for Inbound {
    fn tcp_segment(&mut self, _ip: &mut IpLayer, _now: Instant, s: TcpSegmentIn<'_>) {
        self.0.push(InboundItem::Segment(Segment {
            src: s.src,
            dst: s.dst,
            // A segment GRO built is its own buffer, taken whole; a borrowed one is
            // copied out of its frame.
            bytes: match s.bytes {
                SegmentBytes::Shared(b) => Vec::from(b),
                SegmentBytes::Borrowed(b) => b.to_vec(),
            },
            csum_ok: s.csum_ok,
            lo: false,
            segs: s.segs,
            gso_size: s.gso_size,
        }));
    }

    fn tcp_icmp_error(&mut self, _ip: &mut IpLayer, _now: Instant, err: TcpIcmpError) {
        self.0.push(InboundItem::IcmpError(err));
    }
}
