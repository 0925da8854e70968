//! Reassembly, both kinds: IPv4 fragment reassembly (`ip::reassembly::Reassembler`,
//! RFC 791 §3.2 / RFC 815) and the TCP out-of-order `tcp::assembler::Assembler`.
//!
//! Every fragment or segment carries bytes determined by its offset (and datagram), so
//! whatever order, overlap, duplication or loss the input chooses, anything reassembled
//! must equal that function of the offset. The documented bounds are checked after every
//! call: bytes held <= max_bytes, datagrams <= max_datagrams (IP); bytes and pieces
//! within their limits, ranges sorted, disjoint and non-adjacent (TCP). A fragmentation
//! plan (`ip::fragment::fragment_plan`) fed back through the reassembler must give the
//! datagram back.
#![no_main]

use arbitrary::Arbitrary;
use ember_core::ip::fragment::fragment_plan;
use ember_core::ip::reassembly::{ReasmConfig, ReasmKey, ReasmOutcome, Reassembler};
use ember_core::tcp::assembler::{Assembler, InsertOutcome};
use ember_core::time::Instant;
use libfuzzer_sys::fuzz_target;
use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::time::Duration;

fn ip_byte(ident: u16, off: u32) -> u8 {
    (off.wrapping_mul(31) ^ u32::from(ident).wrapping_mul(7)) as u8
}

fn tcp_byte(off: u64) -> u8 {
    (off.wrapping_mul(13) ^ (off >> 8)) as u8
}

#[derive(Arbitrary, Debug)]
enum IpOp {
    Frag {
        ident: u8,
        src: bool,
        offset: u16,
        more: bool,
        len: u16,
    },
    Advance(u16),
    Config {
        timeout_ms: u16,
        max_bytes: u32,
        max_datagrams: u8,
        max_fragments: u8,
    },
    /// Fragment a whole datagram with `fragment_plan` and feed the pieces, in an order
    /// (and with duplicates) chosen by `order`.
    Plan {
        ident: u8,
        len: u16,
        mtu: u16,
        order: Vec<u8>,
    },
}

#[derive(Arbitrary, Debug)]
enum TcpOp {
    Insert { offset: u32, len: u16 },
    Drain { upto: u32 },
    Limits { max_bytes: u32, max_segments: u16 },
    Clear,
}

#[derive(Arbitrary, Debug)]
struct Input {
    cfg: (u16, u32, u8, u8),
    ip: Vec<IpOp>,
    tcp_limits: (u32, u16),
    tcp: Vec<TcpOp>,
}

fn key(ident: u8, src: bool) -> ReasmKey {
    ReasmKey {
        src: if src {
            Ipv4Addr::new(198, 18, 0, 9)
        } else {
            Ipv4Addr::new(198, 18, 0, 10)
        },
        dst: Ipv4Addr::new(198, 18, 0, 2),
        protocol: 17,
        ident: u16::from(ident % 16),
    }
}

fn check_complete(ident: u16, data: &[u8]) {
    for (i, &b) in data.iter().enumerate() {
        assert_eq!(b, ip_byte(ident, i as u32), "reassembled byte {i} wrong");
    }
}

fuzz_target!(|input: Input| {
    // ---- IPv4 reassembly ----
    let mk = |(t, b, d, f): (u16, u32, u8, u8)| ReasmConfig {
        timeout: Duration::from_millis(u64::from(t).max(1)),
        max_bytes: (b as usize % (8 << 20)).max(1),
        max_datagrams: usize::from(d).max(1),
        max_fragments: usize::from(f).max(1),
    };
    let mut cfg = mk(input.cfg);
    let mut r = Reassembler::new(cfg);
    let mut now = Instant::from_secs(10);
    for op in input.ip.iter().take(512) {
        match op {
            IpOp::Frag {
                ident,
                src,
                offset,
                more,
                len,
            } => {
                let k = key(*ident, *src);
                let start = u32::from(*offset);
                let data: Vec<u8> = (0..u32::from(*len % 9000))
                    .map(|i| ip_byte(k.ident, start + i))
                    .collect();
                let quote = [0x45u8; 28];
                if let ReasmOutcome::Complete(d) = r.insert(now, k, *offset, *more, &data, &quote) {
                    check_complete(k.ident, &d);
                }
            }
            IpOp::Advance(ms) => {
                now += Duration::from_millis(u64::from(*ms));
                if r.poll_timeout().is_some_and(|t| t <= now) {
                    let _ = r.on_timeout(now);
                    assert!(
                        r.poll_timeout().is_none_or(|t| t > now),
                        "expiry left a due datagram"
                    );
                }
            }
            IpOp::Config {
                timeout_ms,
                max_bytes,
                max_datagrams,
                max_fragments,
            } => {
                cfg = mk((*timeout_ms, *max_bytes, *max_datagrams, *max_fragments));
                r.set_config(cfg);
            }
            IpOp::Plan {
                ident,
                len,
                mtu,
                order,
            } => {
                let k = key(*ident, true);
                let len = usize::from(*len);
                let data: Vec<u8> = (0..len as u32).map(|i| ip_byte(k.ident, i)).collect();
                let Ok(plan) = fragment_plan(len, 20, usize::from(*mtu), 0, false) else {
                    continue;
                };
                let pieces: Vec<_> = plan.collect();
                // The plan covers [0, len) exactly, in order, 8-aligned, MF on all but
                // the last.
                let mut at = 0usize;
                for (i, p) in pieces.iter().enumerate() {
                    assert_eq!(usize::from(p.offset), at, "plan gap");
                    assert_eq!(p.offset % 8, 0);
                    assert_eq!(p.more_frags, i + 1 < pieces.len());
                    assert!(
                        usize::from(p.len) + 20 <= usize::from(*mtu),
                        "piece exceeds the MTU"
                    );
                    at += usize::from(p.len);
                }
                assert_eq!(at, len, "plan does not cover the payload");
                let seq: Vec<usize> = order
                    .iter()
                    .map(|&o| usize::from(o) % pieces.len().max(1))
                    .chain(0..pieces.len())
                    .collect();
                // Into the shared reassembler (which may hold other fragments of the same
                // datagram): whatever completes must carry the offset-determined bytes.
                for &i in &seq {
                    let Some(p) = pieces.get(i) else { break };
                    let s = usize::from(p.offset);
                    let e = s + usize::from(p.len);
                    match r.insert(
                        now,
                        k,
                        p.offset,
                        p.more_frags,
                        &data[s..e],
                        &data[..s.min(28)],
                    ) {
                        ReasmOutcome::Complete(d) => {
                            check_complete(k.ident, &d);
                            break;
                        }
                        ReasmOutcome::Dropped(_) => break,
                        ReasmOutcome::Incomplete => {}
                    }
                }
                // Into a fresh reassembler with the default bounds: the datagram comes back
                // exactly once every piece has arrived (duplicates are ignored), unless it
                // needs more fragments than `max_fragments`.
                let fresh_cfg = ReasmConfig::default();
                let mut fresh = Reassembler::new(fresh_cfg);
                let mut seen = vec![false; pieces.len()];
                let mut done = false;
                for &i in &seq {
                    let Some(p) = pieces.get(i) else { break };
                    let s = usize::from(p.offset);
                    let e = s + usize::from(p.len);
                    seen[i] = true;
                    let out = fresh.insert(
                        now,
                        k,
                        p.offset,
                        p.more_frags,
                        &data[s..e],
                        &data[..s.min(28)],
                    );
                    let all = seen.iter().all(|&x| x);
                    match out {
                        ReasmOutcome::Complete(d) => {
                            assert!(all, "completed before every piece arrived");
                            assert_eq!(d, data, "reassembled datagram differs");
                            done = true;
                            break;
                        }
                        ReasmOutcome::Dropped(why) => {
                            assert!(
                                pieces.len() > fresh_cfg.max_fragments,
                                "a consistent plan of {} pieces was dropped: {why:?}",
                                pieces.len()
                            );
                            done = true;
                            break;
                        }
                        ReasmOutcome::Incomplete => assert!(!all, "all pieces in but incomplete"),
                    }
                }
                assert!(done || pieces.is_empty());
            }
        }
        assert!(
            r.bytes_held() <= cfg.max_bytes,
            "{} > {}",
            r.bytes_held(),
            cfg.max_bytes
        );
        assert!(r.datagrams() <= cfg.max_datagrams);
    }

    // ---- TCP out-of-order assembler ----
    let (mb, ms) = input.tcp_limits;
    let mut max_bytes = mb as usize % (1 << 22);
    let mut max_segments = usize::from(ms);
    let mut a = Assembler::new(max_bytes, max_segments);
    let mut next = 0u64; // stream offset delivered so far
    let mut out = VecDeque::new();
    let base = u64::MAX - (1 << 24); // near the top of the offset space, too
    for op in input.tcp.iter().take(512) {
        let before = a.bytes();
        let pieces_before = a.ranges().count();
        match op {
            TcpOp::Insert { offset, len } => {
                let off = base.wrapping_add(u64::from(*offset));
                let data: Vec<u8> = (0..u64::from(*len))
                    .map(|i| tcp_byte(off.wrapping_add(i)))
                    .collect();
                match a.insert(off, &data) {
                    InsertOutcome::Stored { new_bytes } => {
                        assert!(new_bytes > 0 && new_bytes <= data.len());
                        assert_eq!(a.bytes(), before + new_bytes);
                        assert!(a.bytes() <= max_bytes, "assembler over its byte bound");
                        assert!(
                            a.ranges().count() <= max_segments,
                            "assembler over its piece bound"
                        );
                    }
                    InsertOutcome::Duplicate | InsertOutcome::Full => {
                        assert_eq!(a.bytes(), before, "refused insert changed the store");
                        assert_eq!(a.ranges().count(), pieces_before);
                    }
                }
            }
            TcpOp::Drain { upto } => {
                let from = base.wrapping_add(u64::from(*upto));
                next = next.max(from);
                let start_len = out.len();
                let n = a.drain_into(next, &mut out);
                assert_eq!(out.len() - start_len, n);
                for (i, &b) in out.iter().skip(start_len).enumerate() {
                    assert_eq!(
                        b,
                        tcp_byte(next.wrapping_add(i as u64)),
                        "drained byte wrong"
                    );
                }
                next = next.saturating_add(n as u64);
                out.clear();
                assert!(a.bytes() <= before);
            }
            TcpOp::Limits {
                max_bytes: b,
                max_segments: s,
            } => {
                max_bytes = (*b as usize % (1 << 22)).max(a.bytes());
                max_segments = usize::from(*s).max(a.ranges().count());
                a.set_limits(max_bytes, max_segments);
            }
            TcpOp::Clear => {
                a.clear();
                assert_eq!(a.bytes(), 0);
                assert!(a.is_empty());
            }
        }
        // Ranges sorted, non-empty, disjoint, non-adjacent; bytes() is their sum.
        let mut prev: Option<u64> = None;
        let mut sum = 0u64;
        for (s, e) in a.ranges() {
            assert!(e > s, "empty piece");
            if let Some(p) = prev {
                assert!(s > p, "pieces overlap or touch: {p} then {s}");
            }
            prev = Some(e);
            sum += e - s;
            assert_eq!(a.range_containing(s), Some((s, e)));
        }
        assert_eq!(sum as usize, a.bytes());
        assert_eq!(a.is_empty(), a.bytes() == 0);
    }
});
