//! IPv4 fragment reassembly (RFC 791 §3.2, RFC 815), bounded in memory and time.
//!
//! What: [`Reassembler`] collects the fragments of datagrams identified by
//! (source, destination, protocol, identification) — RFC 791 §3.2 — and returns the whole
//! payload once every byte from 0 to the end announced by the last fragment (MF = 0) has
//! arrived. Incomplete datagrams expire `timeout` after their *first* fragment arrived
//! (RFC 791 suggests 15 s; the default here, like Linux, is 30 s); [`Reassembler::on_timeout`]
//! reports them with the quote needed for an ICMP time exceeded, code 1 (RFC 792), which is
//! only sent when fragment zero arrived.
//!
//! Why this design:
//! - Fragments of one datagram are kept in a `BTreeMap` from start offset to bytes. Because
//!   overlaps are never merged (see below), held fragments are pairwise disjoint, so an
//!   overlap test only needs the two neighbours of the new fragment, and the datagram is
//!   complete exactly when the end is known and the byte count reaches it (the "hole" list of
//!   RFC 815 is implicit: holes are the gaps between disjoint fragments).
//! - Overlap policy (defence against teardrop and overlap-rewriting attacks, as Linux does
//!   since 4.19): a fragment covering exactly the same range as a held one is a network
//!   duplicate and is ignored (the first copy wins); any other overlap discards the whole
//!   datagram ([`ReasmDrop::Overlap`]). Contradictory end information — a second last
//!   fragment with a different end, a fragment past a known end, or a last fragment ending
//!   before bytes already held — is treated the same way.
//! - Datagrams live in a `BTreeMap` keyed by [`ReasmKey`] (keys come from the network: an
//!   ordered map cannot be hash-flooded and iterates deterministically), and deadlines in an
//!   ordered set, so [`Reassembler::poll_timeout`] is O(log n) and expiry touches only what
//!   expires.
//! - Budget policy: when a new fragment would push the total above `max_bytes`, or a new
//!   datagram would exceed `max_datagrams`, the *oldest* datagrams (nearest deadline, which
//!   is the earliest first fragment while the timeout is unchanged) are evicted first, so a
//!   burst of junk cannot block reassembly for a whole timeout. A fragment that cannot fit
//!   even after evicting every other datagram, or a datagram that would need more than
//!   `max_fragments` fragments, is dropped together with its datagram
//!   ([`ReasmDrop::Budget`]). Evictions are silent (no ICMP, like Linux).
//! - Expiry happens only in [`Reassembler::on_timeout`] (the host calls it at
//!   [`Reassembler::poll_timeout`]); a fragment arriving for a datagram whose deadline has
//!   passed but which was not yet expired is still accepted.
//! - Malformed fragments ([`ReasmDrop::Malformed`], [`ReasmDrop::TooLong`]) are rejected
//!   before any state is touched: they neither create nor destroy a datagram.
//!
//! Invariants:
//! - `bytes` = sum over datagrams of held payload bytes + stored quote bytes, and is
//!   `<= max_bytes` after every call;
//! - `datagrams.len() <= max_datagrams`, and each datagram holds `<= max_fragments`
//!   fragments;
//! - fragments of a datagram are pairwise disjoint and, if the end is known, lie below it;
//! - `deadlines` holds exactly one `(deadline, seq)` entry per datagram.

use crate::time::Instant;
use core::time::Duration;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// Identifies the datagram a fragment belongs to (RFC 791 §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReasmKey {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// IP protocol number.
    pub protocol: u8,
    /// Identification field.
    pub ident: u16,
}

/// Reassembly limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReasmConfig {
    /// Lifetime of an incomplete datagram, counted from its first fragment.
    pub timeout: Duration,
    /// Bytes held by all datagrams together (payload plus stored quotes).
    pub max_bytes: usize,
    /// Incomplete datagrams held at once.
    pub max_datagrams: usize,
    /// Fragments held per datagram.
    pub max_fragments: usize,
}

impl Default for ReasmConfig {
    /// 30 s, 4 MiB, 1024 datagrams, 64 fragments per datagram.
    fn default() -> Self {
        ReasmConfig {
            timeout: Duration::from_secs(30),
            max_bytes: 4 << 20,
            max_datagrams: 1024,
            max_fragments: 64,
        }
    }
}

/// The result of inserting one fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReasmOutcome {
    /// The datagram still has holes (or the fragment was an ignored duplicate).
    Incomplete,
    /// The datagram is complete: its whole payload, from offset 0.
    Complete(Vec<u8>),
    /// The fragment was dropped (and, except for `TooLong`/`Malformed`, its datagram too).
    Dropped(ReasmDrop),
}

/// Why a fragment was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasmDrop {
    /// Conflicting overlap or contradictory end: the whole datagram was discarded.
    Overlap,
    /// `offset + len > 65535 - 20` (e.g. "ping of death"); only the fragment is dropped.
    TooLong,
    /// A memory, datagram-count or fragment-count bound; the datagram was discarded.
    Budget,
    /// Non-final fragment whose length is zero or not a multiple of 8, or an offset not a
    /// multiple of 8; only the fragment is dropped.
    Malformed,
}

/// An incomplete datagram that timed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    /// Which datagram.
    pub key: ReasmKey,
    /// IP header + first 8 payload bytes of fragment 0, if it arrived: the quote for an ICMP
    /// time exceeded, code 1 (RFC 792). `None` means no ICMP must be sent.
    pub quote: Option<Vec<u8>>,
}

/// Largest payload of a reassembled datagram (65535 minus a minimal header).
pub const MAX_PAYLOAD: usize = 65535 - 20;

/// Longest quote stored: a 60-byte header plus 8 payload bytes.
pub const MAX_QUOTE: usize = 60 + 8;

#[derive(Debug)]
struct Datagram {
    /// Start offset -> bytes. Pairwise disjoint, none empty.
    frags: BTreeMap<u32, Vec<u8>>,
    /// Payload length, once the last fragment (MF = 0) arrived.
    total: Option<u32>,
    /// Payload bytes held.
    received: u32,
    /// Header + 8 bytes of fragment 0.
    quote: Option<Vec<u8>>,
    deadline: Instant,
    seq: u64,
}

impl Datagram {
    /// Bytes charged against `max_bytes`.
    fn cost(&self) -> usize {
        self.received as usize + self.quote.as_ref().map_or(0, Vec::len)
    }

    /// End of the highest held fragment.
    fn max_end(&self) -> u32 {
        self.frags
            .iter()
            .next_back()
            .map_or(0, |(&s, d)| s + d.len() as u32)
    }

    fn is_complete(&self) -> bool {
        self.total == Some(self.received)
    }
}

/// A bounded IPv4 reassembly buffer.
#[derive(Debug)]
pub struct Reassembler {
    cfg: ReasmConfig,
    datagrams: BTreeMap<ReasmKey, Datagram>,
    /// (deadline, seq) -> key; seq makes entries unique and orders equal deadlines by age.
    deadlines: BTreeMap<(Instant, u64), ReasmKey>,
    bytes: usize,
    next_seq: u64,
}

impl Reassembler {
    /// An empty reassembler.
    pub fn new(cfg: ReasmConfig) -> Self {
        Reassembler {
            cfg,
            datagrams: BTreeMap::new(),
            deadlines: BTreeMap::new(),
            bytes: 0,
            next_seq: 0,
        }
    }

    /// Inserts one fragment: `offset` in bytes (the header field times 8), `more_frags` the
    /// MF flag, `data` the fragment's payload, `quote` the raw IP header + first 8 payload
    /// bytes (stored, truncated to [`MAX_QUOTE`], only when `offset == 0`).
    pub fn insert(
        &mut self,
        now: Instant,
        key: ReasmKey,
        offset: u16,
        more_frags: bool,
        data: &[u8],
        quote: &[u8],
    ) -> ReasmOutcome {
        // Validate the fragment on its own first: no state is touched on failure.
        let start = u32::from(offset);
        if data.len() > MAX_PAYLOAD || start as usize + data.len() > MAX_PAYLOAD {
            return ReasmOutcome::Dropped(ReasmDrop::TooLong);
        }
        let len = data.len() as u32;
        let end = start + len;
        // RFC 791 §3.2: offsets are in 8-octet units, and every fragment but the last
        // carries a multiple of 8 octets.
        if offset % 8 != 0 || (more_frags && (len == 0 || len % 8 != 0)) {
            return ReasmOutcome::Dropped(ReasmDrop::Malformed);
        }

        if !self.datagrams.contains_key(&key) {
            if let Err(d) = self.create(now, key) {
                return ReasmOutcome::Dropped(d);
            }
        }
        let Some(dg) = self.datagrams.get_mut(&key) else {
            return ReasmOutcome::Dropped(ReasmDrop::Budget);
        };

        // End consistency: the last fragment fixes the payload length.
        if !more_frags {
            if dg.total.is_some_and(|t| t != end) || dg.max_end() > end {
                self.discard(&key);
                return ReasmOutcome::Dropped(ReasmDrop::Overlap);
            }
            dg.total = Some(end);
        } else if dg.total.is_some_and(|t| end > t) {
            self.discard(&key);
            return ReasmOutcome::Dropped(ReasmDrop::Overlap);
        }

        if len > 0 {
            // Overlap checks against the (disjoint) neighbours.
            if let Some((&ps, pd)) = dg.frags.range(..=start).next_back() {
                let pe = ps + pd.len() as u32;
                if ps == start && pe == end {
                    // Exact duplicate: ignore it, keep the first copy. The MF flag may still
                    // have fixed the end above, which can complete the datagram.
                    return self.finish_if_complete(&key);
                }
                if pe > start {
                    self.discard(&key);
                    return ReasmOutcome::Dropped(ReasmDrop::Overlap);
                }
            }
            if let Some((&ns, _)) = dg.frags.range(start + 1..).next() {
                if ns < end {
                    self.discard(&key);
                    return ReasmOutcome::Dropped(ReasmDrop::Overlap);
                }
            }
            if dg.frags.len() >= self.cfg.max_fragments {
                self.discard(&key);
                return ReasmOutcome::Dropped(ReasmDrop::Budget);
            }
        }

        // Quote of fragment 0 (RFC 792 time exceeded needs it), kept once.
        let new_quote = if offset == 0 && dg.quote.is_none() {
            quote.len().min(MAX_QUOTE)
        } else {
            0
        };
        let need = len as usize + new_quote;
        if need > 0 && !self.make_room(&key, need) {
            self.discard(&key);
            return ReasmOutcome::Dropped(ReasmDrop::Budget);
        }
        let Some(dg) = self.datagrams.get_mut(&key) else {
            return ReasmOutcome::Dropped(ReasmDrop::Budget);
        };
        if new_quote > 0 {
            dg.quote = Some(quote.get(..new_quote).unwrap_or_default().to_vec());
        }
        if len > 0 {
            dg.frags.insert(start, data.to_vec());
            dg.received += len;
        }
        self.bytes += need;
        self.finish_if_complete(&key)
    }

    /// The earliest deadline of any incomplete datagram.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.keys().next().map(|&(t, _)| t)
    }

    /// Discards every datagram whose deadline is `<= now` and reports them (RFC 791 §3.2:
    /// the timer expired; RFC 792: ICMP time exceeded, code 1, if fragment zero arrived).
    pub fn on_timeout(&mut self, now: Instant) -> Vec<Expired> {
        let mut out = Vec::new();
        while let Some((&(t, _), &key)) = self.deadlines.iter().next() {
            if t > now {
                break;
            }
            let quote = self.discard(&key).and_then(|d| d.quote);
            out.push(Expired { key, quote });
        }
        out
    }

    /// Bytes held (payload plus stored quotes).
    pub fn bytes_held(&self) -> usize {
        self.bytes
    }

    /// Incomplete datagrams held.
    pub fn datagrams(&self) -> usize {
        self.datagrams.len()
    }

    /// The current configuration.
    pub fn config(&self) -> ReasmConfig {
        self.cfg
    }

    /// Replaces the configuration. A new timeout applies to datagrams created afterwards;
    /// lowered bounds are enforced at once by evicting the oldest datagrams (and any datagram
    /// holding more than `max_fragments` fragments).
    pub fn set_config(&mut self, cfg: ReasmConfig) {
        self.cfg = cfg;
        let over: Vec<ReasmKey> = self
            .datagrams
            .iter()
            .filter(|(_, d)| d.frags.len() > cfg.max_fragments)
            .map(|(k, _)| *k)
            .collect();
        for k in over {
            self.discard(&k);
        }
        while self.bytes > cfg.max_bytes || self.datagrams.len() > cfg.max_datagrams {
            if !self.evict_oldest(None) {
                break;
            }
        }
    }

    /// Creates an empty datagram for `key`, evicting the oldest if at `max_datagrams`.
    fn create(&mut self, now: Instant, key: ReasmKey) -> Result<(), ReasmDrop> {
        if self.cfg.max_datagrams == 0 {
            return Err(ReasmDrop::Budget);
        }
        while self.datagrams.len() >= self.cfg.max_datagrams {
            if !self.evict_oldest(None) {
                return Err(ReasmDrop::Budget);
            }
        }
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        // RFC 791 §3.2: the timer starts with the first fragment.
        let deadline = now + self.cfg.timeout;
        self.deadlines.insert((deadline, seq), key);
        self.datagrams.insert(
            key,
            Datagram {
                frags: BTreeMap::new(),
                total: None,
                received: 0,
                quote: None,
                deadline,
                seq,
            },
        );
        Ok(())
    }

    /// Evicts the oldest datagrams other than `keep` until `need` more bytes fit.
    fn make_room(&mut self, keep: &ReasmKey, need: usize) -> bool {
        let own = self.datagrams.get(keep).map_or(0, Datagram::cost);
        if own.saturating_add(need) > self.cfg.max_bytes {
            return false;
        }
        while self.bytes.saturating_add(need) > self.cfg.max_bytes {
            if !self.evict_oldest(Some(keep)) {
                return false;
            }
        }
        true
    }

    /// Discards the datagram with the nearest deadline, skipping `keep`. False if none.
    fn evict_oldest(&mut self, keep: Option<&ReasmKey>) -> bool {
        let victim = self.deadlines.values().find(|k| Some(*k) != keep).copied();
        match victim {
            Some(k) => {
                self.discard(&k);
                true
            }
            None => false,
        }
    }

    /// Removes a datagram and its accounting.
    fn discard(&mut self, key: &ReasmKey) -> Option<Datagram> {
        let dg = self.datagrams.remove(key)?;
        self.deadlines.remove(&(dg.deadline, dg.seq));
        self.bytes = self.bytes.saturating_sub(dg.cost());
        Some(dg)
    }

    /// If the datagram is complete, removes it and returns its payload.
    fn finish_if_complete(&mut self, key: &ReasmKey) -> ReasmOutcome {
        if !self.datagrams.get(key).is_some_and(Datagram::is_complete) {
            return ReasmOutcome::Incomplete;
        }
        let Some(dg) = self.discard(key) else {
            return ReasmOutcome::Incomplete;
        };
        let mut out = Vec::with_capacity(dg.received as usize);
        for (_, d) in dg.frags {
            out.extend_from_slice(&d);
        }
        ReasmOutcome::Complete(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(ident: u16) -> ReasmKey {
        ReasmKey {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            protocol: 17,
            ident,
        }
    }

    fn payload(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 256) as u8).collect()
    }

    const Q: &[u8] = &[0x45; 28];

    fn t(s: u64) -> Instant {
        Instant::from_secs(s)
    }

    fn ins(
        r: &mut Reassembler,
        now: Instant,
        k: ReasmKey,
        p: &[u8],
        off: usize,
        len: usize,
        mf: bool,
    ) -> ReasmOutcome {
        r.insert(now, k, off as u16, mf, &p[off..off + len], Q)
    }

    #[test]
    fn in_order() {
        let p = payload(100);
        let mut r = Reassembler::new(ReasmConfig::default());
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 0, 40, true),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 40, 40, true),
            ReasmOutcome::Incomplete
        );
        assert_eq!(r.datagrams(), 1);
        assert_eq!(r.bytes_held(), 80 + Q.len());
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 80, 20, false),
            ReasmOutcome::Complete(p)
        );
        assert_eq!(r.datagrams(), 0);
        assert_eq!(r.bytes_held(), 0);
        assert_eq!(r.poll_timeout(), None);
    }

    #[test]
    fn reverse_order() {
        let p = payload(100);
        let mut r = Reassembler::new(ReasmConfig::default());
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 80, 20, false),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 40, 40, true),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 0, 40, true),
            ReasmOutcome::Complete(p)
        );
        assert_eq!(r.bytes_held(), 0);
    }

    #[test]
    fn unfragmented_and_empty() {
        let mut r = Reassembler::new(ReasmConfig::default());
        assert_eq!(
            r.insert(t(0), key(1), 0, false, b"abc", Q),
            ReasmOutcome::Complete(b"abc".to_vec())
        );
        assert_eq!(
            r.insert(t(0), key(1), 0, false, b"", Q),
            ReasmOutcome::Complete(Vec::new())
        );
        // An empty last fragment just fixes the end.
        let p = payload(16);
        assert_eq!(
            r.insert(t(0), key(2), 16, false, b"", Q),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            ins(&mut r, t(0), key(2), &p, 8, 8, true),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            ins(&mut r, t(0), key(2), &p, 0, 8, true),
            ReasmOutcome::Complete(p)
        );
        assert_eq!(r.bytes_held(), 0);
    }

    #[test]
    fn separate_keys_do_not_mix() {
        let a = payload(48);
        let b: Vec<u8> = payload(48).iter().map(|x| !x).collect();
        let mut r = Reassembler::new(ReasmConfig::default());
        let mut k2 = key(1);
        k2.protocol = 6;
        assert_eq!(
            ins(&mut r, t(0), key(1), &a, 0, 24, true),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            ins(&mut r, t(0), k2, &b, 24, 24, false),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            ins(&mut r, t(0), k2, &b, 0, 24, true),
            ReasmOutcome::Complete(b)
        );
        assert_eq!(
            ins(&mut r, t(0), key(1), &a, 24, 24, false),
            ReasmOutcome::Complete(a)
        );
    }

    #[test]
    fn exact_duplicates_are_ignored() {
        let p = payload(48);
        let mut r = Reassembler::new(ReasmConfig::default());
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 0, 16, true),
            ReasmOutcome::Incomplete
        );
        // Same range, different content: still a duplicate; the first copy wins.
        assert_eq!(
            r.insert(t(0), key(1), 0, true, &[0xff; 16], Q),
            ReasmOutcome::Incomplete
        );
        assert_eq!(r.bytes_held(), 16 + Q.len());
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 32, 16, false),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 32, 16, false),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 16, 16, true),
            ReasmOutcome::Complete(p)
        );
    }

    #[test]
    fn duplicate_with_mf_cleared_can_complete() {
        let p = payload(32);
        let mut r = Reassembler::new(ReasmConfig::default());
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 0, 16, true),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 16, 16, true),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 16, 16, false),
            ReasmOutcome::Complete(p)
        );
    }

    #[test]
    fn overlaps_discard_the_datagram() {
        let p = payload(64);
        let cases: &[(usize, usize, bool)] = &[
            (8, 16, true),  // starts inside the held [0,16)
            (0, 24, true),  // same start, longer
            (0, 8, true),   // same start, shorter
            (24, 16, true), // runs into the held [32,48)
            (16, 24, true), // covers [32,..)
            (8, 48, false), // last, covers everything held
        ];
        for &(off, len, mf) in cases {
            let mut r = Reassembler::new(ReasmConfig::default());
            assert_eq!(
                ins(&mut r, t(0), key(1), &p, 0, 16, true),
                ReasmOutcome::Incomplete
            );
            assert_eq!(
                ins(&mut r, t(0), key(1), &p, 32, 16, true),
                ReasmOutcome::Incomplete
            );
            assert_eq!(
                ins(&mut r, t(0), key(1), &p, off, len, mf),
                ReasmOutcome::Dropped(ReasmDrop::Overlap),
                "case {off} {len} {mf}"
            );
            assert_eq!(r.datagrams(), 0);
            assert_eq!(r.bytes_held(), 0);
            assert_eq!(r.poll_timeout(), None);
            // A fresh datagram with the same key starts over.
            assert_eq!(
                ins(&mut r, t(0), key(1), &p, 16, 16, true),
                ReasmOutcome::Incomplete
            );
            assert_eq!(r.datagrams(), 1);
        }
    }

    #[test]
    fn teardrop() {
        // Classic teardrop: second fragment starts inside the first and ends before its end.
        let p = payload(64);
        let mut r = Reassembler::new(ReasmConfig::default());
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 0, 48, true),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 24, 3, false),
            ReasmOutcome::Dropped(ReasmDrop::Overlap)
        );
        assert_eq!(r.datagrams(), 0);
    }

    #[test]
    fn conflicting_ends() {
        let p = payload(64);
        let mut r = Reassembler::new(ReasmConfig::default());
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 32, 16, false),
            ReasmOutcome::Incomplete
        );
        // Second last fragment with a different end.
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 48, 16, false),
            ReasmOutcome::Dropped(ReasmDrop::Overlap)
        );
        assert_eq!(r.datagrams(), 0);
        // Non-final fragment beyond the known end.
        assert_eq!(
            ins(&mut r, t(0), key(2), &p, 32, 16, false),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            ins(&mut r, t(0), key(2), &p, 48, 8, true),
            ReasmOutcome::Dropped(ReasmDrop::Overlap)
        );
        // Last fragment ending before held data.
        assert_eq!(
            ins(&mut r, t(0), key(3), &p, 32, 16, true),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            ins(&mut r, t(0), key(3), &p, 0, 20, false),
            ReasmOutcome::Dropped(ReasmDrop::Overlap)
        );
        assert_eq!(r.datagrams(), 0);
        assert_eq!(r.bytes_held(), 0);
    }

    #[test]
    fn malformed_and_too_long_touch_no_state() {
        let mut r = Reassembler::new(ReasmConfig::default());
        let p = payload(64);
        assert_eq!(
            ins(&mut r, t(0), key(1), &p, 0, 16, true),
            ReasmOutcome::Incomplete
        );
        let before = (r.datagrams(), r.bytes_held());
        assert_eq!(
            r.insert(t(0), key(1), 16, true, &[1; 12], Q),
            ReasmOutcome::Dropped(ReasmDrop::Malformed)
        );
        assert_eq!(
            r.insert(t(0), key(1), 16, true, &[], Q),
            ReasmOutcome::Dropped(ReasmDrop::Malformed)
        );
        assert_eq!(
            r.insert(t(0), key(1), 17, false, &[1; 3], Q),
            ReasmOutcome::Dropped(ReasmDrop::Malformed)
        );
        assert_eq!(
            r.insert(t(0), key(9), 16, true, &[1; 12], Q),
            ReasmOutcome::Dropped(ReasmDrop::Malformed)
        );
        // "Ping of death": the last fragment runs past 65535 - 20.
        assert_eq!(
            r.insert(t(0), key(1), 65528, false, &[1; 16], Q),
            ReasmOutcome::Dropped(ReasmDrop::TooLong)
        );
        assert_eq!(
            r.insert(t(0), key(1), 65504, false, &[1; 12], Q),
            ReasmOutcome::Dropped(ReasmDrop::TooLong)
        );
        assert_eq!(
            r.insert(t(0), key(1), 0, false, &vec![0; 70000], Q),
            ReasmOutcome::Dropped(ReasmDrop::TooLong)
        );
        assert_eq!((r.datagrams(), r.bytes_held()), before);
        // Exactly at the limit is fine.
        assert_eq!(
            r.insert(t(0), key(2), 65504, false, &[1; 11], Q),
            ReasmOutcome::Incomplete
        );
    }

    #[test]
    fn ping_of_death_full_sequence() {
        // 1480-byte fragments up to offset 65120, then a last one that would end at 65535+.
        let mut r = Reassembler::new(ReasmConfig {
            max_fragments: 100,
            ..ReasmConfig::default()
        });
        let chunk = vec![0u8; 1480];
        let mut off = 0usize;
        while off + 1480 <= 65120 {
            assert_eq!(
                r.insert(t(0), key(1), off as u16, true, &chunk, Q),
                ReasmOutcome::Incomplete
            );
            off += 1480;
        }
        assert_eq!(
            r.insert(t(0), key(1), off as u16, false, &chunk, Q),
            ReasmOutcome::Dropped(ReasmDrop::TooLong)
        );
        assert_eq!(r.datagrams(), 1);
    }

    #[test]
    fn timeout_reports_quote_only_with_fragment_zero() {
        let p = payload(64);
        let mut r = Reassembler::new(ReasmConfig::default());
        assert_eq!(
            ins(&mut r, t(10), key(1), &p, 0, 16, true),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            ins(&mut r, t(12), key(2), &p, 16, 16, true),
            ReasmOutcome::Incomplete
        );
        // Later fragments do not extend the timer.
        assert_eq!(
            ins(&mut r, t(25), key(1), &p, 16, 16, true),
            ReasmOutcome::Incomplete
        );
        assert_eq!(r.poll_timeout(), Some(t(40)));
        assert!(r.on_timeout(t(39)).is_empty());
        let e = r.on_timeout(t(40));
        assert_eq!(
            e,
            vec![Expired {
                key: key(1),
                quote: Some(Q.to_vec())
            }]
        );
        assert_eq!(r.poll_timeout(), Some(t(42)));
        // Time going backwards expires nothing.
        assert!(r.on_timeout(t(0)).is_empty());
        let e = r.on_timeout(t(1000));
        assert_eq!(
            e,
            vec![Expired {
                key: key(2),
                quote: None
            }]
        );
        assert_eq!(r.datagrams(), 0);
        assert_eq!(r.bytes_held(), 0);
        assert_eq!(r.poll_timeout(), None);
    }

    #[test]
    fn quote_is_truncated_and_kept_once() {
        let mut r = Reassembler::new(ReasmConfig::default());
        let long = [7u8; 200];
        assert_eq!(
            r.insert(t(0), key(1), 0, true, &[0; 8], &long),
            ReasmOutcome::Incomplete
        );
        assert_eq!(r.bytes_held(), 8 + MAX_QUOTE);
        assert_eq!(
            r.insert(t(0), key(1), 0, true, &[0; 8], &[1; 28]),
            ReasmOutcome::Incomplete
        );
        assert_eq!(r.bytes_held(), 8 + MAX_QUOTE);
        let e = r.on_timeout(Instant::MAX);
        assert_eq!(e[0].quote.as_deref(), Some(&long[..MAX_QUOTE]));
    }

    #[test]
    fn max_fragments() {
        let cfg = ReasmConfig {
            max_fragments: 4,
            ..ReasmConfig::default()
        };
        let mut r = Reassembler::new(cfg);
        for i in 0..4u16 {
            assert_eq!(
                r.insert(t(0), key(1), i * 8, true, &[0; 8], Q),
                ReasmOutcome::Incomplete
            );
        }
        // A duplicate does not count.
        assert_eq!(
            r.insert(t(0), key(1), 0, true, &[0; 8], Q),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            r.insert(t(0), key(1), 32, true, &[0; 8], Q),
            ReasmOutcome::Dropped(ReasmDrop::Budget)
        );
        assert_eq!(r.datagrams(), 0);
        assert_eq!(r.bytes_held(), 0);
        // Exactly max_fragments fragments can complete.
        let p = payload(32);
        for i in 0..3usize {
            assert_eq!(
                ins(&mut r, t(0), key(2), &p, i * 8, 8, true),
                ReasmOutcome::Incomplete
            );
        }
        assert_eq!(
            ins(&mut r, t(0), key(2), &p, 24, 8, false),
            ReasmOutcome::Complete(p)
        );
    }

    #[test]
    fn many_tiny_fragments() {
        let mut r = Reassembler::new(ReasmConfig::default());
        let mut dropped = 0;
        for i in 0..1000u16 {
            match r.insert(t(0), key(1), i * 8, true, &[0; 8], Q) {
                ReasmOutcome::Incomplete => {}
                ReasmOutcome::Dropped(ReasmDrop::Budget) => dropped += 1,
                o => panic!("{o:?}"),
            }
            assert!(r.bytes_held() <= 64 * 8 + MAX_QUOTE);
        }
        assert!(dropped > 0);
    }

    #[test]
    fn max_datagrams_evicts_oldest() {
        let cfg = ReasmConfig {
            max_datagrams: 3,
            ..ReasmConfig::default()
        };
        let mut r = Reassembler::new(cfg);
        for i in 0..3u16 {
            assert_eq!(
                r.insert(t(u64::from(i)), key(i), 8, true, &[0; 8], Q),
                ReasmOutcome::Incomplete
            );
        }
        assert_eq!(
            r.insert(t(5), key(3), 8, true, &[0; 8], Q),
            ReasmOutcome::Incomplete
        );
        assert_eq!(r.datagrams(), 3);
        // key(0) was the oldest: it is gone, so this starts a new datagram.
        let exp: Vec<_> = r
            .on_timeout(Instant::MAX)
            .into_iter()
            .map(|e| e.key.ident)
            .collect();
        assert_eq!(exp, vec![1, 2, 3]);
        let mut r = Reassembler::new(ReasmConfig {
            max_datagrams: 0,
            ..cfg
        });
        assert_eq!(
            r.insert(t(0), key(1), 0, false, b"x", Q),
            ReasmOutcome::Dropped(ReasmDrop::Budget)
        );
    }

    #[test]
    fn max_bytes_evicts_oldest_or_drops_oversized() {
        let cfg = ReasmConfig {
            max_bytes: 100,
            ..ReasmConfig::default()
        };
        let mut r = Reassembler::new(cfg);
        assert_eq!(
            r.insert(t(0), key(1), 8, true, &[0; 40], &[]),
            ReasmOutcome::Incomplete
        );
        assert_eq!(
            r.insert(t(1), key(2), 8, true, &[0; 40], &[]),
            ReasmOutcome::Incomplete
        );
        assert_eq!(r.bytes_held(), 80);
        // 40 more: evict key(1).
        assert_eq!(
            r.insert(t(2), key(3), 8, true, &[0; 40], &[]),
            ReasmOutcome::Incomplete
        );
        assert_eq!(r.bytes_held(), 80);
        assert_eq!(r.datagrams(), 2);
        // Growing key(3) by 56 evicts key(2) but not key(3) itself.
        assert_eq!(
            r.insert(t(3), key(3), 48, true, &[0; 56], &[]),
            ReasmOutcome::Incomplete
        );
        assert_eq!(r.bytes_held(), 96);
        assert_eq!(r.datagrams(), 1);
        // key(3) would reach 104 on its own: dropped along with its datagram.
        assert_eq!(
            r.insert(t(3), key(3), 0, true, &[0; 8], &[]),
            ReasmOutcome::Dropped(ReasmDrop::Budget)
        );
        assert_eq!(r.datagrams(), 0);
        assert_eq!(r.bytes_held(), 0);
        // A fragment alone larger than the budget.
        assert_eq!(
            r.insert(t(3), key(4), 0, true, &[0; 104], &[]),
            ReasmOutcome::Dropped(ReasmDrop::Budget)
        );
        assert_eq!(r.datagrams(), 0);
        assert_eq!(r.poll_timeout(), None);
    }

    #[test]
    fn set_config_enforces_lower_bounds() {
        let mut r = Reassembler::new(ReasmConfig::default());
        for i in 0..10u16 {
            assert_eq!(
                r.insert(t(u64::from(i)), key(i), 0, true, &[0; 80], &[]),
                ReasmOutcome::Incomplete
            );
        }
        r.set_config(ReasmConfig {
            max_bytes: 400,
            max_datagrams: 8,
            ..ReasmConfig::default()
        });
        assert_eq!(r.datagrams(), 5);
        assert_eq!(r.bytes_held(), 400);
        assert_eq!(r.poll_timeout(), Some(t(35)));
        r.set_config(ReasmConfig {
            max_datagrams: 2,
            ..ReasmConfig::default()
        });
        assert_eq!(r.datagrams(), 2);
        assert_eq!(
            r.insert(t(0), key(8), 80, true, &[0; 8], &[]),
            ReasmOutcome::Incomplete
        );
        r.set_config(ReasmConfig {
            max_fragments: 1,
            ..ReasmConfig::default()
        });
        assert_eq!(r.datagrams(), 1);
        r.set_config(ReasmConfig {
            max_bytes: 0,
            ..ReasmConfig::default()
        });
        assert_eq!(r.datagrams(), 0);
        assert_eq!(r.bytes_held(), 0);
    }

    #[test]
    fn new_timeout_applies_to_new_datagrams() {
        let mut r = Reassembler::new(ReasmConfig::default());
        assert_eq!(
            r.insert(t(0), key(1), 0, true, &[0; 8], &[]),
            ReasmOutcome::Incomplete
        );
        r.set_config(ReasmConfig {
            timeout: Duration::from_secs(5),
            ..ReasmConfig::default()
        });
        assert_eq!(
            r.insert(t(0), key(2), 0, true, &[0; 8], &[]),
            ReasmOutcome::Incomplete
        );
        assert_eq!(r.poll_timeout(), Some(t(5)));
        assert_eq!(r.on_timeout(t(5)).len(), 1);
        assert_eq!(r.poll_timeout(), Some(t(30)));
        // A huge timeout saturates instead of overflowing.
        r.set_config(ReasmConfig {
            timeout: Duration::MAX,
            ..ReasmConfig::default()
        });
        assert_eq!(
            r.insert(t(1), key(3), 0, true, &[0; 8], &[]),
            ReasmOutcome::Incomplete
        );
        assert_eq!(r.on_timeout(Instant::MAX).len(), 2);
    }

    /// Splits `len` bytes into fragments with 8-aligned boundaries.
    fn split(len: usize, cuts: &[usize]) -> Vec<(usize, usize)> {
        let mut bounds: Vec<usize> = cuts
            .iter()
            .map(|c| (c % len.max(1)) & !7)
            .filter(|&c| c > 0 && c < len)
            .collect();
        bounds.push(0);
        bounds.push(len);
        bounds.sort_unstable();
        bounds.dedup();
        bounds.windows(2).map(|w| (w[0], w[1] - w[0])).collect()
    }

    proptest! {
        #[test]
        fn random_order_with_duplicates(
            p in proptest::collection::vec(any::<u8>(), 1..3000),
            cuts in proptest::collection::vec(any::<usize>(), 0..40),
            order in proptest::collection::vec(any::<proptest::sample::Index>(), 0..60),
            dups in proptest::collection::vec(any::<proptest::sample::Index>(), 0..10),
        ) {
            let frags = split(p.len(), &cuts);
            let mut seq: Vec<(usize, usize)> = frags.clone();
            for d in &dups {
                seq.push(*d.get(&frags));
            }
            // Shuffle by swapping with random indices.
            let n = seq.len();
            for (i, ix) in order.iter().enumerate() {
                seq.swap(i % n, ix.index(n));
            }
            let mut r = Reassembler::new(ReasmConfig::default());
            let mut done = None;
            for &(off, len) in &seq {
                let mf = off + len < p.len();
                match r.insert(t(0), key(7), off as u16, mf, &p[off..off + len], Q) {
                    ReasmOutcome::Incomplete => {}
                    ReasmOutcome::Complete(v) => {
                        // A later duplicate may complete a second copy (e.g. a single-piece
                        // datagram sent twice); every completion must be exact.
                        prop_assert_eq!(&v, &p);
                        done.get_or_insert(v);
                    }
                    ReasmOutcome::Dropped(d) => {
                        // Only a duplicate arriving after completion could be rejected, and it
                        // would start a new datagram instead; nothing else may drop.
                        prop_assert!(false, "dropped {:?}", d);
                    }
                }
                prop_assert!(r.bytes_held() <= ReasmConfig::default().max_bytes);
            }
            prop_assert_eq!(done, Some(p));
            // Duplicates arriving after completion may have started a new datagram; it holds
            // only their bytes.
            prop_assert!(r.datagrams() <= 1);
        }

        #[test]
        fn arbitrary_inserts_keep_invariants(
            ops in proptest::collection::vec((0u16..4, any::<u16>(), any::<bool>(), 0usize..200, 0u64..100), 0..200),
            max_bytes in 0usize..2000, max_datagrams in 0usize..4, max_fragments in 0usize..6,
        ) {
            let cfg = ReasmConfig { timeout: Duration::from_secs(10), max_bytes, max_datagrams, max_fragments };
            let mut r = Reassembler::new(cfg);
            for (k, off, mf, len, now) in ops {
                // Bias offsets toward small multiples of 8 so fragments interact.
                let off = if off % 4 == 0 { off } else { (off % 64) * 8 };
                let data = vec![0u8; len];
                let _ = r.insert(t(now), key(k), off, mf, &data, Q);
                prop_assert!(r.bytes_held() <= max_bytes);
                prop_assert!(r.datagrams() <= max_datagrams);
                if now % 7 == 0 {
                    let _ = r.on_timeout(t(now));
                }
                let recount: usize = r.datagrams.values().map(Datagram::cost).sum();
                prop_assert_eq!(recount, r.bytes_held());
                prop_assert_eq!(r.deadlines.len(), r.datagrams());
                for d in r.datagrams.values() {
                    prop_assert!(d.frags.len() <= max_fragments);
                }
            }
        }
    }
}
