//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! The checksum is the ones'-complement of the ones'-complement sum of the data taken as
//! big-endian 16-bit words (an odd trailing byte is padded with a zero low byte).
//!
//! Representation: a *partial sum* is a `u32` holding a ones'-complement sum. Any `u32`
//! is a valid partial sum (values are meaningful modulo `0xffff`, with end-around carry),
//! and partial sums are added with [`combine`], never with `+`. [`sum`] always returns a
//! value `<= 0xffff`, and the value is `0` exactly when every byte of the input is zero.
//!
//! Speed: [`sum`] adds 32-bit words into eight independent 64-bit lanes without carries
//! (vectorised by the compiler), and folds each block's total, and the tail's 8-byte
//! words, into a 64-bit accumulator with end-around carry. Ones'-complement addition is the same modulo
//! `2^16 - 1` at any word width because `2^64 - 1` is a multiple of `2^16 - 1` (RFC 1071
//! §2(C), "parallel summation"); the end-around carry makes the accumulator unable to
//! overflow, so inputs of any length (64 KiB and far beyond) are summed correctly. Words
//! are read little-endian (a plain load on x86/ARM) and the folded result is byte-swapped
//! once at the end, which RFC 1071 §2(B) ("byte order independence") shows is equivalent
//! to summing big-endian words.

use std::net::Ipv4Addr;

/// Adds `w` to `acc` with end-around carry (64-bit ones'-complement addition).
#[inline(always)]
fn add64(acc: u64, w: u64) -> u64 {
    let (s, carry) = acc.overflowing_add(w);
    // If `carry`, then `s <= 2^64 - 2`, so adding 1 cannot overflow.
    s + u64::from(carry)
}

/// Reads 8 bytes little-endian. `b.len() >= 8` is guaranteed by every caller (fixed-size
/// chunks), so the copy cannot fail; it compiles to a single load.
#[inline(always)]
fn le64(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_le_bytes(w)
}

/// Folds a 32-bit ones'-complement sum to 16 bits (two steps suffice for any `u32`).
#[inline(always)]
fn fold16(s: u32) -> u16 {
    let s = (s & 0xffff) + (s >> 16);
    let s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// The ones'-complement sum of `data` as big-endian 16-bit words (RFC 1071 §4.1), an odd
/// final byte being padded with zero.
///
/// Returns a partial sum `<= 0xffff` suitable for [`combine`] and [`finish`]. Correct for
/// any input length (no intermediate can overflow, see the module comment). To sum a
/// buffer in pieces, every piece but the last must have an even length.
pub fn sum(data: &[u8]) -> u32 {
    let mut acc: u64 = 0;
    // The bulk, in blocks of at most 1 MiB: 32-bit words added into eight independent
    // 64-bit lanes with plain (carry-free) additions, which the compiler turns into
    // vector code. A lane takes at most 2^15 words of < 2^32 per block, so no lane and
    // no sum of the eight can overflow; each block's total joins `acc` with end-around
    // carry like any other 64-bit word.
    let blocks = data.chunks_exact(32);
    let whole = data.len() - blocks.remainder().len();
    for block in data[..whole].chunks(1 << 20) {
        let mut lanes = [0u64; 8];
        for c in block.chunks_exact(32) {
            for (i, lane) in lanes.iter_mut().enumerate() {
                let w = u32::from_le_bytes([c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]]);
                *lane += u64::from(w);
            }
        }
        acc = add64(acc, lanes.iter().sum::<u64>());
    }
    let mut rest = blocks.remainder();
    while rest.len() >= 8 {
        acc = add64(acc, le64(rest));
        rest = &rest[8..];
    }
    if rest.len() >= 4 {
        acc = add64(
            acc,
            u64::from(u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]])),
        );
        rest = &rest[4..];
    }
    if rest.len() >= 2 {
        acc = add64(acc, u64::from(u16::from_le_bytes([rest[0], rest[1]])));
        rest = &rest[2..];
    }
    if let Some(&b) = rest.first() {
        // Big-endian: the odd byte is the high half of a zero-padded word, which is the
        // low half of the little-endian word we sum in.
        acc = add64(acc, u64::from(b));
    }
    // Fold 64 -> 32 with end-around carry, then 32 -> 16, then undo the little-endian
    // reading with one byte swap (RFC 1071 §2(B)).
    let (s, carry) = (acc as u32).overflowing_add((acc >> 32) as u32);
    let s = s + u32::from(carry);
    u32::from(fold16(s).swap_bytes())
}

/// Ones'-complement addition of two partial sums (for any `u32` values).
#[inline]
pub fn combine(a: u32, b: u32) -> u32 {
    let (s, carry) = a.overflowing_add(b);
    // If `carry`, then `s <= 2^32 - 2`, so adding 1 cannot overflow.
    s + u32::from(carry)
}

/// The partial sum of the TCP/UDP pseudo-header for IPv4 (RFC 9293 §3.1, RFC 768):
/// source address, destination address, zero, protocol, and the transport length
/// (header + data) in bytes.
#[inline]
pub fn pseudo_header(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, len: u16) -> u32 {
    let s = u32::from(src);
    let d = u32::from(dst);
    // At most six 16-bit terms: no overflow.
    (s >> 16) + (s & 0xffff) + (d >> 16) + (d & 0xffff) + u32::from(protocol) + u32::from(len)
}

/// Folds a partial sum to 16 bits and complements it, giving the checksum field value.
///
/// When verifying, sum everything *including* the received checksum field: the data is
/// intact iff `finish(..) == 0`.
#[inline]
pub fn finish(sum: u32) -> u16 {
    !fold16(sum)
}

/// The Internet checksum of `data`: `finish(sum(data))`.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    finish(sum(data))
}

/// Incrementally updates a checksum after one 16-bit word of the covered data changed
/// from `old_word` to `new_word` (RFC 1624 eqn. 3: `HC' = ~(~HC + ~m + m')`).
///
/// The result equals a full recomputation except in the degenerate case where the new
/// data is entirely zero (then recomputation gives `0xffff` and this gives `0`, the
/// other ones'-complement zero). That case cannot arise for IP headers (version field)
/// nor for TCP/UDP (the pseudo-header holds the protocol number).
#[inline]
pub fn update(old_checksum: u16, old_word: u16, new_word: u16) -> u16 {
    let s = u32::from(!old_checksum) + u32::from(!old_word) + u32::from(new_word);
    !fold16(s)
}

/// Like [`update`] for a 32-bit quantity (two adjacent 16-bit words at an even offset),
/// e.g. an IPv4 address change under NAT. Same degenerate case as [`update`].
#[inline]
pub fn update32(old_checksum: u16, old: u32, new: u32) -> u16 {
    let s = u32::from(!old_checksum)
        + u32::from(!((old >> 16) as u16))
        + u32::from(!(old as u16))
        + (new >> 16)
        + (new & 0xffff);
    !fold16(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Obviously-correct reference: big-endian 16-bit words into a u64, folded at the end.
    fn naive_sum(data: &[u8]) -> u16 {
        let mut acc: u64 = 0;
        for pair in data.chunks(2) {
            let hi = u64::from(pair[0]) << 8;
            let lo = pair.get(1).map_or(0, |&b| u64::from(b));
            acc += hi | lo;
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to ddf2 (folded).
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&data), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
        assert_eq!(checksum(&data), 0x220d);
    }

    #[test]
    fn known_ipv4_header() {
        // A classic textbook header whose checksum field (b861) is correct.
        let hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&hdr), 0, "a correct header verifies to 0");
        let mut z = hdr;
        z[10] = 0;
        z[11] = 0;
        assert_eq!(checksum(&z), 0xb861);
    }

    #[test]
    fn empty_and_zero() {
        assert_eq!(sum(&[]), 0);
        assert_eq!(checksum(&[]), 0xffff);
        assert_eq!(sum(&[0; 37]), 0);
        assert_eq!(finish(0), 0xffff);
        assert_eq!(finish(0xffff), 0);
        assert_eq!(finish(0x1_fffe), 0);
    }

    #[test]
    fn odd_lengths_pad_low_byte() {
        assert_eq!(sum(&[0xab]), 0xab00);
        assert_eq!(sum(&[0x01, 0x02, 0x03]), 0x0102 + 0x0300);
        for len in 0..80 {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(sum(&data), u32::from(naive_sum(&data)), "len {len}");
        }
    }

    #[test]
    fn large_inputs_do_not_overflow() {
        // 64 KiB + some, all ones: the worst case for carries.
        let data = vec![0xffu8; 65_536 + 13];
        assert_eq!(sum(&data), u32::from(naive_sum(&data)));
        let data = vec![0xffu8; 4 << 20];
        assert_eq!(sum(&data), u32::from(naive_sum(&data)));
        let data: Vec<u8> = (0..200_001u32).map(|i| (i ^ (i >> 7)) as u8).collect();
        assert_eq!(sum(&data), u32::from(naive_sum(&data)));
    }

    #[test]
    fn combine_extremes() {
        assert_eq!(combine(u32::MAX, u32::MAX), u32::MAX);
        assert_eq!(combine(u32::MAX, 1), 1);
        assert_eq!(combine(0, 0), 0);
        assert_eq!(finish(combine(u32::MAX, 0)), 0);
    }

    #[test]
    fn pseudo_header_known() {
        let s = pseudo_header(
            Ipv4Addr::new(192, 168, 0, 1),
            Ipv4Addr::new(192, 168, 0, 199),
            17,
            0x1234,
        );
        assert_eq!(s, 0xc0a8 + 0x0001 + 0xc0a8 + 0x00c7 + 17 + 0x1234);
        let max = pseudo_header(Ipv4Addr::BROADCAST, Ipv4Addr::BROADCAST, 255, u16::MAX);
        assert_eq!(max, 5 * 0xffff + 255);
    }

    #[test]
    fn update_known() {
        // Change the TTL/protocol word of the textbook header (4011 -> 3f11).
        let mut hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        let hc = checksum(&hdr);
        hdr[8] = 0x3f;
        assert_eq!(update(hc, 0x4011, 0x3f11), checksum(&hdr));
    }

    proptest! {
        #[test]
        fn sum_matches_naive(data in proptest::collection::vec(any::<u8>(), 0..1500)) {
            prop_assert_eq!(sum(&data), u32::from(naive_sum(&data)));
            prop_assert!(sum(&data) <= 0xffff);
        }

        #[test]
        fn sum_is_zero_iff_all_zero(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            prop_assert_eq!(sum(&data) == 0, data.iter().all(|&b| b == 0));
        }

        #[test]
        fn concatenation_with_even_split(
            data in proptest::collection::vec(any::<u8>(), 0..600),
            split in any::<usize>(),
        ) {
            let split = (split % (data.len() + 1)) & !1;
            let (a, b) = data.split_at(split);
            prop_assert_eq!(finish(combine(sum(a), sum(b))), checksum(&data));
        }

        #[test]
        fn combine_is_ones_complement_add(a in any::<u32>(), b in any::<u32>()) {
            let m = |x: u64| x % 0xffff;
            prop_assert_eq!(
                m(u64::from(combine(a, b))),
                m(u64::from(a) + u64::from(b))
            );
        }

        #[test]
        fn verification_of_emitted_checksum(
            mut data in proptest::collection::vec(any::<u8>(), 4..300),
        ) {
            // Put the checksum in bytes 2..4 and verify the whole thing sums to -0.
            data[2] = 0;
            data[3] = 0;
            let c = checksum(&data);
            data[2..4].copy_from_slice(&c.to_be_bytes());
            prop_assert_eq!(checksum(&data), 0);
        }

        #[test]
        fn update_matches_recompute(
            mut data in proptest::collection::vec(any::<u8>(), 4..200),
            idx in any::<usize>(),
            new_word in any::<u16>(),
        ) {
            // Word 0 is a fixed non-zero word (like an IP version field), so the packet
            // is never all-zero; word 1 holds the checksum; change another word.
            if data.len() % 2 == 1 { data.push(0); }
            data[0] = 0x45;
            data[2] = 0;
            data[3] = 0;
            let words = data.len() / 2;
            prop_assume!(words > 2);
            let w = 2 + idx % (words - 2);
            let hc = checksum(&data);
            let old = u16::from_be_bytes([data[2 * w], data[2 * w + 1]]);
            data[2 * w..2 * w + 2].copy_from_slice(&new_word.to_be_bytes());
            prop_assert_eq!(update(hc, old, new_word), checksum(&data));
        }

        #[test]
        fn update32_matches_recompute(
            mut data in proptest::collection::vec(any::<u8>(), 8..200),
            idx in any::<usize>(),
            new in any::<u32>(),
        ) {
            if data.len() % 2 == 1 { data.push(0); }
            data[0] = 0x45;
            data[2] = 0;
            data[3] = 0;
            let words = data.len() / 2;
            prop_assume!(words > 3);
            // A 32-bit quantity at any even offset from word 2 on.
            let w = 2 + idx % (words - 3);
            let hc = checksum(&data);
            let at = 2 * w;
            let old = u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
            data[at..at + 4].copy_from_slice(&new.to_be_bytes());
            prop_assert_eq!(update32(hc, old, new), checksum(&data));
        }
    }
}
