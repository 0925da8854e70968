//! IPv4 fragmentation on send (RFC 791 §3.2, "Fragmentation and Reassembly").
//!
//! What: [`fragment_plan`] computes how to cut a payload into pieces that fit a link MTU.
//! It only plans (offsets and lengths); the caller copies the bytes and writes one header per
//! piece (with `offset / 8` in the fragment-offset field and the MF flag from the piece).
//!
//! Why a plan rather than buffers: the caller owns buffer management (it may write the
//! pieces straight into transmit buffers), and a plan is trivially testable.
//!
//! Invariants of every plan returned:
//! - pieces are contiguous and in order: the first starts at `orig_offset`, each next one
//!   starts where the previous ended, the last ends at `orig_offset + payload_len`;
//! - every piece but the last carries a non-zero multiple of 8 bytes, and every piece starts
//!   at a multiple of 8 (RFC 791: the fragment offset is counted in 8-octet units);
//! - `header_len + len <= mtu` for every piece;
//! - every piece but the last has `more_frags = true`; the last has `orig_more` (a fragment
//!   of a fragment keeps the original MF flag, RFC 791 §3.2);
//! - the planned datagram never extends past 65535 bytes including a 20-byte header
//!   (the same bound the reassembler enforces), so every offset fits the 13-bit field.
//!
//! The same `header_len` is assumed for every piece; since options that are not copied
//! (RFC 791 §3.1, copied flag) only make later headers shorter, this is conservative.

/// One fragment to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentPiece {
    /// Bytes from the start of the original datagram's payload (a multiple of 8).
    pub offset: u16,
    /// Payload bytes in this piece.
    pub len: u16,
    /// The MF ("more fragments") flag of this piece.
    pub more_frags: bool,
}

/// Why a payload cannot be fragmented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FragError {
    /// `mtu < 68` (RFC 791 §3.2: every module must forward 68-octet datagrams), or the MTU
    /// leaves fewer than 8 payload bytes after the header.
    MtuTooSmall,
    /// `orig_offset + payload_len` exceeds the largest IPv4 payload (65535 - 20).
    TooLong,
    /// `orig_offset` is not a multiple of 8, so it cannot be encoded in the fragment-offset
    /// field (an addition to the two variants of the original specification).
    Misaligned,
}

impl core::fmt::Display for FragError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            FragError::MtuTooSmall => "MTU too small to fragment",
            FragError::TooLong => "datagram too long",
            FragError::Misaligned => "fragment offset not a multiple of 8",
        })
    }
}

impl std::error::Error for FragError {}

/// RFC 791 §3.2: the minimum MTU every internet module must handle.
pub const MIN_MTU: usize = 68;

/// Largest payload of an IPv4 datagram with a minimal (20-byte) header.
pub const MAX_PAYLOAD: usize = 65535 - 20;

/// An iterator over the pieces of a fragmentation plan (see [`fragment_plan`]).
#[derive(Debug, Clone)]
pub struct FragmentPlan {
    /// Start of the next piece, in bytes from the start of the original datagram's payload.
    next: usize,
    /// End of the whole range.
    end: usize,
    /// Payload bytes per non-final piece (a multiple of 8).
    chunk: usize,
    orig_more: bool,
    done: bool,
}

impl Iterator for FragmentPlan {
    type Item = FragmentPiece;

    fn next(&mut self) -> Option<FragmentPiece> {
        if self.done {
            return None;
        }
        let remaining = self.end.saturating_sub(self.next);
        let (len, more) = if remaining <= self.chunk {
            self.done = true;
            (remaining, self.orig_more)
        } else {
            (self.chunk, true)
        };
        // Both fit: end <= MAX_PAYLOAD < u16::MAX (checked by fragment_plan).
        let piece = FragmentPiece {
            offset: u16::try_from(self.next).unwrap_or(u16::MAX),
            len: u16::try_from(len).unwrap_or(u16::MAX),
            more_frags: more,
        };
        self.next += len;
        Some(piece)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = if self.done {
            0
        } else {
            let remaining = self.end.saturating_sub(self.next);
            if remaining <= self.chunk {
                1
            } else {
                remaining.div_ceil(self.chunk.max(1))
            }
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for FragmentPlan {}

/// Plans the fragments for a payload of `payload_len` bytes sent with an IP header of
/// `header_len` bytes on a link of `mtu` bytes (RFC 791 §3.2).
///
/// If the payload fits (`header_len + payload_len <= mtu`) the plan is a single piece (the
/// caller decides whether to send it unfragmented). Otherwise every piece but the last
/// carries `(mtu - header_len)` rounded down to a multiple of 8. When the payload is itself
/// a fragment (`orig_offset`, `orig_more` from its header), offsets are relative to the
/// original datagram and the last piece keeps `orig_more`.
///
/// The plan is returned as a concrete [`FragmentPlan`] iterator (an `ExactSizeIterator`).
pub fn fragment_plan(
    payload_len: usize,
    header_len: usize,
    mtu: usize,
    orig_offset: u16,
    orig_more: bool,
) -> Result<FragmentPlan, FragError> {
    if mtu < MIN_MTU || header_len >= mtu || mtu - header_len < 8 {
        return Err(FragError::MtuTooSmall);
    }
    if orig_offset % 8 != 0 {
        return Err(FragError::Misaligned);
    }
    let start = usize::from(orig_offset);
    let end = start
        .checked_add(payload_len)
        .filter(|&e| e <= MAX_PAYLOAD)
        .ok_or(FragError::TooLong)?;
    let room = mtu - header_len;
    let chunk = if payload_len <= room {
        // Single piece: no rounding needed.
        payload_len.max(8)
    } else {
        room & !7
    };
    Ok(FragmentPlan {
        next: start,
        end,
        chunk,
        orig_more,
        done: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::reassembly::{ReasmConfig, ReasmKey, ReasmOutcome, Reassembler};
    use crate::time::Instant;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    fn plan(p: usize, h: usize, m: usize, o: u16, more: bool) -> Vec<FragmentPiece> {
        fragment_plan(p, h, m, o, more).unwrap().collect()
    }

    #[test]
    fn fits_in_one_piece() {
        assert_eq!(
            plan(1480, 20, 1500, 0, false),
            vec![FragmentPiece {
                offset: 0,
                len: 1480,
                more_frags: false
            }]
        );
        assert_eq!(
            plan(0, 20, 1500, 0, false),
            vec![FragmentPiece {
                offset: 0,
                len: 0,
                more_frags: false
            }]
        );
    }

    #[test]
    fn classic_4000_over_1500() {
        // 4000 bytes of payload, 20-byte header, 1500 MTU: 1480 + 1480 + 1040.
        assert_eq!(
            plan(4000, 20, 1500, 0, false),
            vec![
                FragmentPiece {
                    offset: 0,
                    len: 1480,
                    more_frags: true
                },
                FragmentPiece {
                    offset: 1480,
                    len: 1480,
                    more_frags: true
                },
                FragmentPiece {
                    offset: 2960,
                    len: 1040,
                    more_frags: false
                },
            ]
        );
    }

    #[test]
    fn rounds_down_to_eight() {
        // 68 - 24 = 44 -> 40 per piece.
        let v = plan(100, 24, 68, 0, false);
        assert_eq!(
            v.iter().map(|p| p.len).collect::<Vec<_>>(),
            vec![40, 40, 20]
        );
        assert_eq!(
            v.iter().map(|p| p.offset).collect::<Vec<_>>(),
            vec![0, 40, 80]
        );
    }

    #[test]
    fn refragmenting_a_fragment_keeps_orig_more() {
        let v = plan(2000, 20, 1000, 1480, true);
        assert_eq!(
            v,
            vec![
                FragmentPiece {
                    offset: 1480,
                    len: 976,
                    more_frags: true
                },
                FragmentPiece {
                    offset: 2456,
                    len: 976,
                    more_frags: true
                },
                FragmentPiece {
                    offset: 3432,
                    len: 48,
                    more_frags: true
                },
            ]
        );
        let v = plan(100, 20, 1000, 1480, true);
        assert_eq!(
            v,
            vec![FragmentPiece {
                offset: 1480,
                len: 100,
                more_frags: true
            }]
        );
        let v = plan(2000, 20, 1000, 1480, false);
        assert!(!v.last().unwrap().more_frags);
    }

    #[test]
    fn errors() {
        assert_eq!(
            fragment_plan(100, 20, 67, 0, false).unwrap_err(),
            FragError::MtuTooSmall
        );
        assert_eq!(
            fragment_plan(100, 64, 68, 0, false).unwrap_err(),
            FragError::MtuTooSmall
        );
        assert_eq!(
            fragment_plan(100, 68, 68, 0, false).unwrap_err(),
            FragError::MtuTooSmall
        );
        assert_eq!(
            fragment_plan(100, 1000, 68, 0, false).unwrap_err(),
            FragError::MtuTooSmall
        );
        assert_eq!(fragment_plan(100, 60, 68, 0, false).unwrap().count(), 13);
        assert_eq!(
            fragment_plan(65516, 20, 1500, 0, false).unwrap_err(),
            FragError::TooLong
        );
        assert_eq!(fragment_plan(65515, 20, 1500, 0, false).unwrap().len(), 45);
        assert_eq!(
            fragment_plan(16, 20, 1500, 65504, false).unwrap_err(),
            FragError::TooLong
        );
        assert_eq!(
            fragment_plan(usize::MAX, 20, usize::MAX, 8, false).unwrap_err(),
            FragError::TooLong
        );
        assert_eq!(
            fragment_plan(8, 20, 1500, 3, false).unwrap_err(),
            FragError::Misaligned
        );
    }

    #[test]
    fn huge_mtu() {
        let v = plan(65515, 20, usize::MAX, 0, false);
        assert_eq!(
            v,
            vec![FragmentPiece {
                offset: 0,
                len: 65515,
                more_frags: false
            }]
        );
    }

    proptest! {
        #[test]
        fn plans_are_valid(payload in 0usize..=MAX_PAYLOAD, hdr_words in 5usize..=15, mtu in 68usize..=65535,
                           orig_units in 0u16..8192, orig_more: bool) {
            let header_len = hdr_words * 4;
            let orig_offset = orig_units.saturating_mul(8);
            let res = fragment_plan(payload, header_len, mtu, orig_offset, orig_more);
            if usize::from(orig_offset) + payload > MAX_PAYLOAD {
                prop_assert_eq!(res.unwrap_err(), FragError::TooLong);
                return Ok(());
            }
            let plan = res.unwrap();
            let n = plan.len();
            let pieces: Vec<_> = plan.collect();
            prop_assert_eq!(pieces.len(), n);
            prop_assert!(!pieces.is_empty());
            let mut at = usize::from(orig_offset);
            for (i, p) in pieces.iter().enumerate() {
                prop_assert_eq!(usize::from(p.offset), at);
                prop_assert_eq!(p.offset % 8, 0);
                prop_assert!(header_len + usize::from(p.len) <= mtu);
                if i + 1 < pieces.len() {
                    prop_assert!(p.more_frags);
                    prop_assert!(p.len > 0 && p.len % 8 == 0);
                } else {
                    prop_assert_eq!(p.more_frags, orig_more);
                }
                at += usize::from(p.len);
            }
            prop_assert_eq!(at, usize::from(orig_offset) + payload);
        }

        #[test]
        fn plans_reassemble(payload in proptest::collection::vec(any::<u8>(), 0..4000),
                            mtu in prop_oneof![68usize..=200, 68usize..=65535], hdr_words in 5usize..=15,
                            rev: bool) {
            let header_len = hdr_words * 4;
            let pieces: Vec<_> = fragment_plan(payload.len(), header_len, mtu, 0, false).unwrap().collect();
            let mut r = Reassembler::new(ReasmConfig { max_fragments: 1000, ..ReasmConfig::default() });
            let key = ReasmKey { src: Ipv4Addr::new(1, 2, 3, 4), dst: Ipv4Addr::new(5, 6, 7, 8), protocol: 17, ident: 9 };
            let order: Vec<usize> = if rev { (0..pieces.len()).rev().collect() } else { (0..pieces.len()).collect() };
            let mut result = None;
            for (k, &i) in order.iter().enumerate() {
                let p = pieces[i];
                let data = &payload[usize::from(p.offset)..usize::from(p.offset) + usize::from(p.len)];
                match r.insert(Instant::ZERO, key, p.offset, p.more_frags, data, &[0u8; 28]) {
                    ReasmOutcome::Incomplete => prop_assert!(k + 1 < order.len()),
                    ReasmOutcome::Complete(v) => { prop_assert_eq!(k + 1, order.len()); result = Some(v); }
                    ReasmOutcome::Dropped(d) => prop_assert!(false, "dropped: {:?}", d),
                }
            }
            prop_assert_eq!(result, Some(payload));
            prop_assert_eq!(r.datagrams(), 0);
            prop_assert_eq!(r.bytes_held(), 0);
        }
    }
}
