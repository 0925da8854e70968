//! # ember-microbench
//!
//! This crate only holds ember's hot-path micro-benchmarks (criterion, in `benches/`) and
//! the few helpers they share; nothing else depends on it and it is not published.
//!
//! | bench target | what it measures |
//! | --- | --- |
//! | `wire` | emitting and parsing a whole Ethernet + IPv4 + TCP (timestamps) frame with 0, 1460 and the largest payload an IPv4 datagram holds, both checksums included; the TCP header alone |
//! | `checksum` | `ember_core::wire::checksum::sum` over 20, 1500, 9000 and 65536 bytes |
//! | `classifier` | connected-table lookups that hit and miss with 1, 1,000 and 100,000 connections; `flow_hash` |
//! | `squeue` | entering an idle squeue inline (process mode, `enter`, `call`) and the queued paths |
//! | `fused` | a write then a read of 1 B, 1 KiB and 64 KiB on one thread over a fused pair (group `fused`) and an unfused loopback pair (group `loopback`) |
//!
//! Run them all (about two minutes), one target, or one group or benchmark by filter:
//!
//! ```text
//! cargo bench -p ember-microbench
//! cargo bench -p ember-microbench --bench wire
//! cargo bench -p ember-microbench --bench fused -- loopback
//! cargo bench -p ember-microbench -- --quick
//! ```
//!
//! Every group uses the same short configuration ([`SAMPLE_SIZE`], [`MEASUREMENT_TIME`],
//! [`WARM_UP_TIME`]) so the whole suite stays quick; the figures are for spotting
//! regressions on one machine, not for publishing (`docs/PERFORMANCE.md` and the
//! runtime's `rr` and `stream` examples are for that).
//!
//! What lives here, so that the benches measure only the call under test: the frame
//! builder and parser ([`DataSegment`], [`parse_frame`]), distinct classifier tuples and
//! connection locations ([`tuple()`], [`absent_tuple`], [`conn_locs`]) and a trivial squeue
//! perimeter ([`Counter`]).

use ember_core::slab::Slab;
use ember_core::wire::{
    ethertype, ip_proto, EthernetRepr, Ipv4Repr, MacAddr, TcpFlags, TcpOptions, TcpRepr, WireError,
    ETHERNET_HEADER_LEN, IPV4_HEADER_LEN,
};
use ember_runtime::classifier::{ConnLoc, Tuple};
use ember_runtime::squeue::Perimeter;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

/// Samples per benchmark.
pub const SAMPLE_SIZE: usize = 20;
/// Measurement time per benchmark.
pub const MEASUREMENT_TIME: Duration = Duration::from_secs(2);
/// Warm-up time per benchmark.
pub const WARM_UP_TIME: Duration = Duration::from_millis(500);

/// Source address of the benchmark frames.
pub const SRC_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// Destination address of the benchmark frames.
pub const DST_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

/// Length of the TCP header of a data segment with the timestamps option
/// (`NOP, NOP, TS`: 20 + 12 bytes).
pub const TCP_TS_HEADER_LEN: usize = 32;

/// The largest payload of a TCP segment with timestamps in one IPv4 datagram: the total
/// length field is 16 bits, so 65535 - 20 - 32 bytes (a "64 KiB" segment as TSO/LRO
/// hand them over).
pub const MAX_TCP_TS_PAYLOAD: usize = u16::MAX as usize - IPV4_HEADER_LEN - TCP_TS_HEADER_LEN;

/// The headers of one established-state data segment (ACK|PSH, timestamps option) in
/// an Ethernet frame from [`SRC_IP`] to [`DST_IP`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataSegment {
    /// The Ethernet II header (IPv4 EtherType).
    pub eth: EthernetRepr,
    /// The IPv4 header (no options, DF set).
    pub ip: Ipv4Repr,
    /// The TCP header (ACK|PSH, `NOP, NOP, TS` options: 32 bytes).
    pub tcp: TcpRepr,
}

impl DataSegment {
    /// The headers for a segment carrying `payload_len` bytes, `None` if that does not
    /// fit in one IPv4 datagram (more than [`MAX_TCP_TS_PAYLOAD`]).
    pub fn new(payload_len: usize) -> Option<DataSegment> {
        let mut options = TcpOptions::default();
        options.timestamps = Some((0x0102_0304, 0x0506_0708));
        let tcp = TcpRepr {
            src_port: 45_678,
            dst_port: 80,
            seq: 0x1234_5678,
            ack: 0x9abc_def0,
            flags: TcpFlags::ACK | TcpFlags::PSH,
            window: 65_535,
            urgent: 0,
            options,
        };
        let seg_len = u16::try_from(tcp.header_len() + payload_len).ok()?;
        if usize::from(seg_len) + IPV4_HEADER_LEN > usize::from(u16::MAX) {
            return None;
        }
        let ip = Ipv4Repr {
            src: SRC_IP,
            dst: DST_IP,
            protocol: ip_proto::TCP,
            ttl: 64,
            dscp_ecn: 0,
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            payload_len: seg_len,
        };
        let eth = EthernetRepr {
            dst: MacAddr([0x02, 0, 0, 0, 0, 2]),
            src: MacAddr([0x02, 0, 0, 0, 0, 1]),
            ethertype: ethertype::IPV4,
        };
        Some(DataSegment { eth, ip, tcp })
    }

    /// Length of the whole frame: Ethernet header + IPv4 datagram.
    pub fn frame_len(&self) -> usize {
        ETHERNET_HEADER_LEN + self.ip.total_len()
    }

    /// Writes the three headers into `frame[..self.frame_len()]`, whose payload (after
    /// the TCP header) is already in place, and fills in both checksums: what the stack
    /// does for every segment it sends.
    ///
    /// Contract: `frame.len() >= self.frame_len()` (the emitters' own contracts).
    pub fn emit(&self, frame: &mut [u8]) {
        let frame = &mut frame[..self.frame_len()];
        self.eth.emit(frame);
        let dgram = &mut frame[ETHERNET_HEADER_LEN..];
        self.ip.emit(dgram);
        self.tcp
            .emit(&mut dgram[IPV4_HEADER_LEN..], self.ip.src, self.ip.dst);
    }

    /// A complete frame with a patterned payload of `payload_len` bytes, `None` if the
    /// payload is too long (see [`DataSegment::new`]).
    pub fn frame(payload_len: usize) -> Option<Vec<u8>> {
        let seg = DataSegment::new(payload_len)?;
        let mut frame = vec![0u8; seg.frame_len()];
        let start = seg.frame_len() - payload_len;
        for (i, b) in frame[start..].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31).wrapping_add(7);
        }
        seg.emit(&mut frame);
        Some(frame)
    }
}

/// Parses a whole Ethernet + IPv4 + TCP frame as the receive path does, verifying the
/// IPv4 header checksum and the TCP checksum. Returns the TCP header and the payload.
/// `Unsupported` for a frame that is not IPv4 or a datagram that is not TCP.
pub fn parse_frame(frame: &[u8]) -> Result<(Ipv4Repr, TcpRepr, &[u8]), WireError> {
    let (eth, dgram) = EthernetRepr::parse(frame)?;
    if eth.ethertype != ethertype::IPV4 {
        return Err(WireError::Unsupported);
    }
    let (ip, seg) = Ipv4Repr::parse(dgram, true)?;
    if ip.protocol != ip_proto::TCP {
        return Err(WireError::Unsupported);
    }
    let (tcp, payload) = TcpRepr::parse(seg, ip.src, ip.dst, true)?;
    Ok((ip, tcp, payload))
}

/// The `i`-th of a family of distinct connected-table tuples: local 10.0.0.1:80, remote
/// 10.64.0.0 + `i` on port 1024 + `i` mod 60,000. Distinct for every `i < 2^22`.
pub fn tuple(i: u32) -> Tuple {
    let remote = Ipv4Addr::from(0x0a40_0000u32.wrapping_add(i & 0x003f_ffff));
    (
        SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80),
        SocketAddrV4::new(remote, 1024 + (i % 60_000) as u16),
    )
}

/// The `i`-th of a family of tuples that [`tuple()`] never yields (remote addresses in
/// 10.128.0.0/10): lookups of these miss.
pub fn absent_tuple(i: u32) -> Tuple {
    let remote = Ipv4Addr::from(0x0a80_0000u32.wrapping_add(i & 0x003f_ffff));
    (
        SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 80),
        SocketAddrV4::new(remote, 1024 + (i % 60_000) as u16),
    )
}

/// `n` distinct connection locations spread over `squeues` squeues (at least 1), with
/// keys issued by a slab as the stack's are.
pub fn conn_locs(n: usize, squeues: usize) -> Vec<ConnLoc> {
    let mut slab = Slab::default();
    let squeues = squeues.max(1);
    (0..n)
        .map(|i| ConnLoc {
            sq: i % squeues,
            key: slab.insert(()),
        })
        .collect()
}

/// A squeue perimeter with nothing but a counter: no timers, nothing to service, so
/// entering its squeue costs only the squeue itself.
#[derive(Debug, Default)]
pub struct Counter {
    /// Incremented by the benchmark's work items.
    pub n: u64,
}

impl Perimeter for Counter {
    fn service(&mut self, _now: Instant) -> bool {
        false
    }

    fn next_deadline(&self) -> Option<Instant> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ember_runtime::classifier::{flow_hash, Classifier};
    use ember_runtime::squeue::{Mode, Squeue};
    use std::collections::HashSet;

    #[test]
    fn frames_round_trip_through_the_parser() {
        for len in [0, 1, 1460, MAX_TCP_TS_PAYLOAD] {
            let seg = DataSegment::new(len).unwrap();
            assert_eq!(seg.tcp.header_len(), TCP_TS_HEADER_LEN);
            let frame = DataSegment::frame(len).unwrap();
            assert_eq!(frame.len(), 14 + 20 + 32 + len);
            let (ip, tcp, payload) = parse_frame(&frame).unwrap();
            assert_eq!(ip, seg.ip);
            assert_eq!(tcp, seg.tcp);
            assert_eq!(payload.len(), len);
            assert_eq!(payload, &frame[frame.len() - len..]);
        }
    }

    #[test]
    fn oversized_payloads_are_refused() {
        assert!(DataSegment::new(MAX_TCP_TS_PAYLOAD + 1).is_none());
        assert!(DataSegment::frame(65_536).is_none());
    }

    #[test]
    fn a_corrupted_frame_fails_its_checksum() {
        let mut frame = DataSegment::frame(100).unwrap();
        let last = frame.len() - 1;
        frame[last] ^= 0x40;
        assert_eq!(parse_frame(&frame).unwrap_err(), WireError::BadChecksum);
        let mut frame = DataSegment::frame(0).unwrap();
        frame[12] = 0x08;
        frame[13] = 0x06; // ARP
        assert_eq!(parse_frame(&frame).unwrap_err(), WireError::Unsupported);
    }

    #[test]
    fn tuples_are_distinct_and_absent_ones_miss() {
        let n = 10_000u32;
        let all: HashSet<Tuple> = (0..n).map(tuple).collect();
        assert_eq!(all.len(), n as usize);
        assert!((0..n).map(absent_tuple).all(|t| !all.contains(&t)));

        let c = Classifier::default();
        let locs = conn_locs(n as usize, 4);
        for (i, loc) in locs.iter().enumerate() {
            assert!(c.insert(tuple(i as u32), *loc));
        }
        assert_eq!(c.len(), n as usize);
        assert_eq!(c.lookup(&tuple(1234)), Some(locs[1234]));
        assert_eq!(locs[1234].sq, 1234 % 4);
        assert_eq!(c.lookup(&absent_tuple(1234)), None);
        assert_ne!(flow_hash(&tuple(1)), flow_hash(&tuple(2)));
    }

    #[test]
    fn counter_squeue_runs_inline_and_queued() {
        let sq = Squeue::new(
            0,
            Counter::default(),
            Duration::from_secs(1),
            Duration::ZERO,
        );
        assert_eq!(sq.try_process(|p: &mut Counter| p.n += 1).ok(), Some(()));
        sq.enter(Mode::Fill, 1, |p: &mut Counter| p.n += 10);
        assert_eq!(sq.call(2, |p: &mut Counter| p.n), 11);
        let s = sq.stats().snapshot();
        assert_eq!((s.inline, s.queued), (2, 2));
    }
}
