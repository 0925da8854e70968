//! TCP header and options (RFC 9293 §3.1, §3.2; RFC 7323 window scale and timestamps;
//! RFC 2018 SACK).
//!
//! Header layout (offsets in bytes): source port 0, destination port 2, sequence number
//! 4, acknowledgment number 8, data offset (upper 4 bits) 12, flags 13, window 14,
//! checksum 16, urgent pointer 18, options 20..data offset*4.
//!
//! # Parsing
//!
//! [`TcpRepr::parse`] checks, in order: 20 bytes present (`Truncated`), data offset >= 5
//! (`Malformed`), data offset*4 <= buffer (`Truncated`), segment <= 65535 bytes
//! (`Malformed`), the checksum over the pseudo-header when asked (`BadChecksum`), then
//! the options (`BadOption`). The checksum comes before the options so that a corrupted
//! segment is reported as such. Reserved header bits are ignored (RFC 9293 §3.1).
//!
//! Options are parsed by hand (RFC 9293 §3.1 "Options", §3.2): etherparse's option
//! iterator rejects unknown kinds, but RFC 9293 requires skipping them.
//!
//! * kind 0 (EOL) ends the list; kind 1 (NOP) is a single byte; every other kind has a
//!   length byte (MUST-68) counting the kind and length bytes.
//! * A length byte < 2, a missing length byte, or an option running past the option
//!   space is an illegal option length: `Err(BadOption)` and the caller drops the segment
//!   (MUST-7).
//! * Known kinds with the wrong length are `Err(BadOption)`: MSS (2) len 4, window scale
//!   (3) len 3, SACK-permitted (4) len 2, SACK (5) len 2+8n with n in 1..=4, timestamps
//!   (8) len 10.
//! * Unknown kinds are skipped by their length (MUST-6).
//! * Options are accepted in any order and on any segment (MUST-5); the TCP layer
//!   decides which it honours (e.g. MSS and window scale only on a SYN).
//! * A repeated option: the last occurrence wins.
//!
//! # Emission
//!
//! Options are written in Linux's order and padding, because conformance scripts
//! (packetdrill-style) compare bytes:
//!
//! 1. MSS (kind 2, len 4), if present.
//! 2. With timestamps: `SACK-permitted, TS` if SACK is permitted, else `NOP, NOP, TS`.
//!    Without timestamps: `NOP, NOP, SACK-permitted` if SACK is permitted.
//! 3. `NOP, WS` if window scale is present.
//! 4. `NOP, NOP, SACK(blocks)` if there are SACK blocks, with as many blocks as fit in
//!    the 40-byte option space (3 next to timestamps, 4 otherwise).
//!
//! So a Linux SYN is `MSS, SACK-permitted, TS, NOP, WS` (20 bytes) and a data segment
//! with timestamps `NOP, NOP, TS` (12 bytes). Every piece is a multiple of 4 bytes, so
//! no trailing padding is ever needed.

use core::fmt;
use core::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign, Not};
use std::net::Ipv4Addr;

use etherparse::err::tcp::HeaderSliceError;
use etherparse::TcpHeaderSlice;

use super::checksum;
use super::ip_proto;
use super::{read_u16, read_u32, write_u16, write_u32, WireError};

/// TCP option kinds (IANA "TCP Option Kind Numbers").
pub mod option_kind {
    /// End of option list (RFC 9293 §3.2).
    pub const EOL: u8 = 0;
    /// No-operation (RFC 9293 §3.2).
    pub const NOP: u8 = 1;
    /// Maximum segment size (RFC 9293 §3.2, §3.7.1).
    pub const MSS: u8 = 2;
    /// Window scale (RFC 7323 §2).
    pub const WINDOW_SCALE: u8 = 3;
    /// SACK permitted (RFC 2018 §2).
    pub const SACK_PERMITTED: u8 = 4;
    /// SACK (RFC 2018 §3).
    pub const SACK: u8 = 5;
    /// Timestamps (RFC 7323 §3).
    pub const TIMESTAMPS: u8 = 8;
}

/// The 8 flag bits of header byte 13 (RFC 9293 §3.1; ECE/CWR from RFC 3168).
#[derive(Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// No more data from sender.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// Synchronize sequence numbers.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// Reset the connection.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// Push function.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// Acknowledgment field is significant.
    pub const ACK: TcpFlags = TcpFlags(0x10);
    /// Urgent pointer field is significant.
    pub const URG: TcpFlags = TcpFlags(0x20);
    /// ECN-Echo (RFC 3168).
    pub const ECE: TcpFlags = TcpFlags(0x40);
    /// Congestion window reduced (RFC 3168).
    pub const CWR: TcpFlags = TcpFlags(0x80);

    /// No flags.
    pub const fn empty() -> TcpFlags {
        TcpFlags(0)
    }
    /// True if no flag is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// True if every flag of `f` is set in `self`.
    pub fn contains(self, f: TcpFlags) -> bool {
        self.0 & f.0 == f.0
    }
    /// True if any flag of `f` is set in `self`.
    pub fn intersects(self, f: TcpFlags) -> bool {
        self.0 & f.0 != 0
    }
    /// FIN is set.
    pub fn fin(self) -> bool {
        self.contains(Self::FIN)
    }
    /// SYN is set.
    pub fn syn(self) -> bool {
        self.contains(Self::SYN)
    }
    /// RST is set.
    pub fn rst(self) -> bool {
        self.contains(Self::RST)
    }
    /// PSH is set.
    pub fn psh(self) -> bool {
        self.contains(Self::PSH)
    }
    /// ACK is set.
    pub fn ack(self) -> bool {
        self.contains(Self::ACK)
    }
    /// URG is set.
    pub fn urg(self) -> bool {
        self.contains(Self::URG)
    }
    /// ECE is set.
    pub fn ece(self) -> bool {
        self.contains(Self::ECE)
    }
    /// CWR is set.
    pub fn cwr(self) -> bool {
        self.contains(Self::CWR)
    }
}

impl BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

impl BitOrAssign for TcpFlags {
    fn bitor_assign(&mut self, rhs: TcpFlags) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for TcpFlags {
    type Output = TcpFlags;
    fn bitand(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 & rhs.0)
    }
}

impl BitAndAssign for TcpFlags {
    fn bitand_assign(&mut self, rhs: TcpFlags) {
        self.0 &= rhs.0;
    }
}

impl Not for TcpFlags {
    type Output = TcpFlags;
    fn not(self) -> TcpFlags {
        TcpFlags(!self.0)
    }
}

impl fmt::Debug for TcpFlags {
    /// Prints the set flags joined by `|` in bit order, e.g. `SYN|ACK`; `(none)` if empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 8] = ["FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"];
        if self.0 == 0 {
            return f.write_str("(none)");
        }
        let mut first = true;
        for (bit, name) in NAMES.iter().enumerate() {
            if self.0 & (1 << bit) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

/// One SACK block (RFC 2018 §3): the sequence space `[left, right)` was received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SackBlock {
    /// First sequence number of the block.
    pub left: u32,
    /// Sequence number just after the block.
    pub right: u32,
}

/// Maximum number of SACK blocks carried (RFC 2018 §3: at most 4 fit in 40 bytes).
pub const MAX_SACK_BLOCKS: usize = 4;
/// Maximum size of the TCP option space (data offset 15 → 60-byte header).
pub const MAX_OPTIONS_LEN: usize = 40;

/// The TCP options ember understands.
///
/// Invariant: `sack[sack_len..]` are all `SackBlock::default()`, so the derived equality
/// compares exactly the blocks in use.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpOptions {
    /// Maximum segment size (kind 2).
    pub mss: Option<u16>,
    /// Window scale shift count (kind 3) as received; may exceed 14 (RFC 7323 §2.3), the
    /// TCP layer clamps it.
    pub window_scale: Option<u8>,
    /// SACK permitted (kind 4).
    pub sack_permitted: bool,
    /// Timestamps (kind 8): `(TSval, TSecr)`.
    pub timestamps: Option<(u32, u32)>,
    sack: [SackBlock; MAX_SACK_BLOCKS],
    sack_len: u8,
}

impl fmt::Debug for TcpOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpOptions")
            .field("mss", &self.mss)
            .field("window_scale", &self.window_scale)
            .field("sack_permitted", &self.sack_permitted)
            .field("timestamps", &self.timestamps)
            .field("sack", &self.sack_blocks())
            .finish()
    }
}

impl TcpOptions {
    /// The SACK blocks (kind 5), at most 4.
    pub fn sack_blocks(&self) -> &[SackBlock] {
        &self.sack[..usize::from(self.sack_len).min(MAX_SACK_BLOCKS)]
    }

    /// Sets the SACK blocks; keeps at most the first 4.
    pub fn set_sack_blocks(&mut self, blocks: &[SackBlock]) {
        let n = blocks.len().min(MAX_SACK_BLOCKS);
        self.sack = [SackBlock::default(); MAX_SACK_BLOCKS];
        self.sack[..n].copy_from_slice(&blocks[..n]);
        self.sack_len = n as u8;
    }

    /// Removes all SACK blocks.
    pub fn clear_sack_blocks(&mut self) {
        self.sack = [SackBlock::default(); MAX_SACK_BLOCKS];
        self.sack_len = 0;
    }

    /// Length of everything but the SACK blocks (at most 20 bytes).
    fn base_len(&self) -> usize {
        let mut n = 0;
        if self.mss.is_some() {
            n += 4;
        }
        if self.timestamps.is_some() {
            n += 12; // SACK-permitted + TS, or NOP NOP TS
        } else if self.sack_permitted {
            n += 4; // NOP NOP SACK-permitted
        }
        if self.window_scale.is_some() {
            n += 4; // NOP WS
        }
        n
    }

    /// How many SACK blocks are emitted: as many as fit after the other options
    /// (`NOP NOP kind len` + 8 bytes per block within 40 bytes).
    fn emitted_sack_blocks(&self, base: usize) -> usize {
        let room = MAX_OPTIONS_LEN.saturating_sub(base + 4) / 8;
        self.sack_blocks().len().min(room)
    }

    /// Encoded length in bytes (a multiple of 4, <= 40). SACK blocks that do not fit in
    /// 40 bytes are not counted (and not emitted).
    pub fn encoded_len(&self) -> usize {
        let base = self.base_len();
        match self.emitted_sack_blocks(base) {
            0 => base,
            n => base + 4 + 8 * n,
        }
    }

    /// Writes the options in Linux's order (see the module comment) into
    /// `buf[..self.encoded_len()]` and returns the number of bytes written.
    ///
    /// Contract: `buf.len() >= self.encoded_len()` (`debug_assert!`; a shorter buffer is
    /// a caller bug and panics on indexing in release builds).
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        use option_kind::*;
        debug_assert!(
            buf.len() >= self.encoded_len(),
            "TCP options buffer too short"
        );
        let mut i = 0;
        if let Some(mss) = self.mss {
            buf[i] = MSS;
            buf[i + 1] = 4;
            write_u16(buf, i + 2, mss);
            i += 4;
        }
        if let Some((tsval, tsecr)) = self.timestamps {
            if self.sack_permitted {
                buf[i] = SACK_PERMITTED;
                buf[i + 1] = 2;
            } else {
                buf[i] = NOP;
                buf[i + 1] = NOP;
            }
            buf[i + 2] = TIMESTAMPS;
            buf[i + 3] = 10;
            write_u32(buf, i + 4, tsval);
            write_u32(buf, i + 8, tsecr);
            i += 12;
        } else if self.sack_permitted {
            buf[i..i + 4].copy_from_slice(&[NOP, NOP, SACK_PERMITTED, 2]);
            i += 4;
        }
        if let Some(shift) = self.window_scale {
            buf[i..i + 4].copy_from_slice(&[NOP, WINDOW_SCALE, 3, shift]);
            i += 4;
        }
        let n = self.emitted_sack_blocks(i);
        if n > 0 {
            buf[i..i + 4].copy_from_slice(&[NOP, NOP, SACK, (2 + 8 * n) as u8]);
            i += 4;
            for b in &self.sack[..n] {
                write_u32(buf, i, b.left);
                write_u32(buf, i + 4, b.right);
                i += 8;
            }
        }
        debug_assert_eq!(i, self.encoded_len());
        i
    }

    /// Parses an option list (the header bytes `20..data offset*4`) by the rules in the
    /// module comment. Never panics; `Err(BadOption)` on an illegal length.
    pub fn parse(opts: &[u8]) -> Result<TcpOptions, WireError> {
        use option_kind::*;
        let mut out = TcpOptions::default();
        let mut i = 0;
        while i < opts.len() {
            let kind = opts[i];
            match kind {
                EOL => break,
                NOP => {
                    i += 1;
                    continue;
                }
                _ => {}
            }
            // Every other kind has a length byte (MUST-68) covering kind + length + data.
            let len = match opts.get(i + 1) {
                Some(&l) => usize::from(l),
                None => return Err(WireError::BadOption),
            };
            if len < 2 || len > opts.len() - i {
                return Err(WireError::BadOption); // MUST-7: illegal option length
            }
            let body = &opts[i + 2..i + len];
            match kind {
                MSS => {
                    if len != 4 {
                        return Err(WireError::BadOption);
                    }
                    out.mss = Some(read_u16(body, 0));
                }
                WINDOW_SCALE => {
                    if len != 3 {
                        return Err(WireError::BadOption);
                    }
                    out.window_scale = Some(body[0]);
                }
                SACK_PERMITTED => {
                    if len != 2 {
                        return Err(WireError::BadOption);
                    }
                    out.sack_permitted = true;
                }
                SACK => {
                    // RFC 2018 §3: length 2 + 8n. Ten bytes of options make n <= 4.
                    let n = (len - 2) / 8;
                    if (len - 2) % 8 != 0 || n == 0 || n > MAX_SACK_BLOCKS {
                        return Err(WireError::BadOption);
                    }
                    out.clear_sack_blocks();
                    for (k, slot) in out.sack.iter_mut().take(n).enumerate() {
                        *slot = SackBlock {
                            left: read_u32(body, 8 * k),
                            right: read_u32(body, 8 * k + 4),
                        };
                    }
                    out.sack_len = n as u8;
                }
                TIMESTAMPS => {
                    if len != 10 {
                        return Err(WireError::BadOption);
                    }
                    out.timestamps = Some((read_u32(body, 0), read_u32(body, 4)));
                }
                _ => {} // MUST-6: skip unknown options by their length.
            }
            i += len;
        }
        Ok(out)
    }
}

/// Length of the TCP header without options.
pub const TCP_HEADER_LEN: usize = 20;

/// A TCP segment header with its options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number (as on the wire, whether or not ACK is set).
    pub ack: u32,
    /// Control flags.
    pub flags: TcpFlags,
    /// Window (unscaled, as on the wire).
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// Options.
    pub options: TcpOptions,
}

impl TcpRepr {
    /// Parses a segment (`buf` = the IP payload); data offset >= 5 and data offset*4 <=
    /// `buf.len()`; checksum over the pseudo-header verified when `verify_checksum`.
    /// Returns the repr and the payload.
    pub fn parse(
        buf: &[u8],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        verify_checksum: bool,
    ) -> Result<(TcpRepr, &[u8]), WireError> {
        let hdr = TcpHeaderSlice::from_slice(buf).map_err(|e| match e {
            HeaderSliceError::Len(_) => WireError::Truncated,
            HeaderSliceError::Content(_) => WireError::Malformed,
        })?;
        // The pseudo-header length is 16 bits; a longer "segment" cannot be real.
        let seg_len = u16::try_from(buf.len()).map_err(|_| WireError::Malformed)?;
        if verify_checksum {
            let s = checksum::combine(
                checksum::pseudo_header(src, dst, ip_proto::TCP, seg_len),
                checksum::sum(buf),
            );
            if checksum::finish(s) != 0 {
                return Err(WireError::BadChecksum);
            }
        }
        let header = hdr.slice();
        let options = TcpOptions::parse(&header[TCP_HEADER_LEN..])?;
        let repr = TcpRepr {
            src_port: hdr.source_port(),
            dst_port: hdr.destination_port(),
            seq: hdr.sequence_number(),
            ack: hdr.acknowledgment_number(),
            flags: TcpFlags(header[13]),
            window: hdr.window_size(),
            urgent: hdr.urgent_pointer(),
            options,
        };
        Ok((repr, &buf[header.len()..]))
    }

    /// The reset RFC 9293 §3.10.7.1 sends in answer to `self` (a segment carrying
    /// `payload_len` octets that found no connection): `<SEQ=SEG.ACK><CTL=RST>` if it had
    /// ACK, else `<SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>`. `None` for a RST (never
    /// answered) and, as FireEngine's classifier does, for a segment with URG.
    pub fn reset_reply(&self, payload_len: usize) -> Option<TcpRepr> {
        if self.flags.rst() || self.flags.urg() {
            return None;
        }
        let mut r = TcpRepr {
            src_port: self.dst_port,
            dst_port: self.src_port,
            ..TcpRepr::default()
        };
        if self.flags.ack() {
            r.seq = self.ack;
            r.flags = TcpFlags::RST;
        } else {
            let seg_len =
                payload_len as u32 + u32::from(self.flags.syn()) + u32::from(self.flags.fin());
            r.ack = self.seq.wrapping_add(seg_len);
            r.flags = TcpFlags::RST | TcpFlags::ACK;
        }
        Some(r)
    }

    /// Header length in bytes: `20 + options.encoded_len()` (a multiple of 4, <= 60).
    pub fn header_len(&self) -> usize {
        TCP_HEADER_LEN + self.options.encoded_len()
    }

    /// Writes header + options into `buf[..self.header_len()]` with the checksum field
    /// set to 0 (see [`TcpRepr::fill_checksum`]). Reserved bits are written as zero.
    ///
    /// Contract: `buf.len() >= self.header_len()` (`debug_assert!`; a shorter buffer is a
    /// caller bug and panics on indexing in release builds).
    pub fn emit_header(&self, buf: &mut [u8]) {
        let hlen = self.header_len();
        debug_assert!(buf.len() >= hlen, "TCP emit buffer too short");
        write_u16(buf, 0, self.src_port);
        write_u16(buf, 2, self.dst_port);
        write_u32(buf, 4, self.seq);
        write_u32(buf, 8, self.ack);
        buf[12] = ((hlen / 4) as u8) << 4;
        buf[13] = self.flags.0;
        write_u16(buf, 14, self.window);
        write_u16(buf, 16, 0);
        write_u16(buf, 18, self.urgent);
        self.options.emit(&mut buf[TCP_HEADER_LEN..hlen]);
    }

    /// Computes the checksum of `seg` (header + payload, in place) over the IPv4
    /// pseudo-header (RFC 9293 §3.1) and stores it in bytes 16..18. Whatever the checksum
    /// field held before is ignored.
    ///
    /// Contract (`debug_assert!`): `20 <= seg.len() <= 65535`.
    pub fn fill_checksum(seg: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr) {
        debug_assert!(seg.len() >= TCP_HEADER_LEN, "TCP segment too short");
        debug_assert!(seg.len() <= usize::from(u16::MAX), "TCP segment too long");
        write_u16(seg, 16, 0);
        let s = checksum::combine(
            checksum::pseudo_header(src, dst, ip_proto::TCP, seg.len() as u16),
            checksum::sum(seg),
        );
        write_u16(seg, 16, checksum::finish(s));
    }

    /// Convenience: [`TcpRepr::emit_header`] then [`TcpRepr::fill_checksum`]. `buf` is the
    /// whole segment: `header_len()` bytes for the header, then the payload already in
    /// place. Same contracts as those two functions.
    pub fn emit(&self, buf: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr) {
        self.emit_header(buf);
        Self::fill_checksum(buf, src, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const DST: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

    fn blocks(v: &[(u32, u32)]) -> Vec<SackBlock> {
        v.iter()
            .map(|&(left, right)| SackBlock { left, right })
            .collect()
    }

    fn linux_syn() -> TcpRepr {
        TcpRepr {
            src_port: 45678,
            dst_port: 80,
            seq: 0x1234_5678,
            ack: 0,
            flags: TcpFlags::SYN,
            window: 64240,
            urgent: 0,
            options: TcpOptions {
                mss: Some(1460),
                window_scale: Some(7),
                sack_permitted: true,
                timestamps: Some((123_456, 0)),
                ..Default::default()
            },
        }
    }

    /// A Linux-style SYN, byte for byte (checksum filled in by the test).
    const LINUX_SYN_HDR: [u8; 40] = [
        0xb2, 0x6e, 0x00, 0x50, // ports 45678 -> 80
        0x12, 0x34, 0x56, 0x78, // seq
        0x00, 0x00, 0x00, 0x00, // ack
        0xa0, 0x02, // data offset 10, SYN
        0xfa, 0xf0, // window 64240
        0x00, 0x00, // checksum (0 here)
        0x00, 0x00, // urgent
        0x02, 0x04, 0x05, 0xb4, // MSS 1460
        0x04, 0x02, // SACK permitted
        0x08, 0x0a, 0x00, 0x01, 0xe2, 0x40, 0x00, 0x00, 0x00, 0x00, // TS 123456, 0
        0x01, // NOP
        0x03, 0x03, 0x07, // WS 7
    ];

    #[test]
    fn flags_api_and_debug() {
        let f = TcpFlags::SYN | TcpFlags::ACK;
        assert!(f.syn() && f.ack() && !f.fin() && !f.rst() && !f.psh() && !f.urg());
        assert!(f.contains(TcpFlags::SYN));
        assert!(!f.contains(TcpFlags::SYN | TcpFlags::FIN));
        assert!(f.intersects(TcpFlags::SYN | TcpFlags::FIN));
        assert_eq!(f & TcpFlags::ACK, TcpFlags::ACK);
        assert_eq!(format!("{f:?}"), "SYN|ACK");
        assert_eq!(format!("{:?}", TcpFlags::default()), "(none)");
        assert_eq!(
            format!("{:?}", TcpFlags(0xff)),
            "FIN|SYN|RST|PSH|ACK|URG|ECE|CWR"
        );
        let mut g = TcpFlags::FIN;
        g |= TcpFlags::PSH | TcpFlags::ECE | TcpFlags::CWR;
        assert!(g.fin() && g.psh() && g.ece() && g.cwr());
        g &= !TcpFlags::FIN;
        assert!(!g.fin() && g.psh());
        assert!(TcpFlags::empty().is_empty());
        assert!(TcpFlags::empty().contains(TcpFlags::empty()));
        let all = [
            TcpFlags::FIN,
            TcpFlags::SYN,
            TcpFlags::RST,
            TcpFlags::PSH,
            TcpFlags::ACK,
            TcpFlags::URG,
            TcpFlags::ECE,
            TcpFlags::CWR,
        ];
        let mut acc = TcpFlags::empty();
        for f in all {
            assert_eq!(f.0.count_ones(), 1);
            assert!(!acc.intersects(f));
            acc |= f;
        }
        assert_eq!(acc.0, 0xff);
    }

    #[test]
    fn linux_syn_layout() {
        let r = linux_syn();
        assert_eq!(r.options.encoded_len(), 20);
        assert_eq!(r.header_len(), 40);
        let mut buf = [0u8; 40];
        r.emit_header(&mut buf);
        assert_eq!(buf, LINUX_SYN_HDR);

        r.emit(&mut buf, SRC, DST);
        let (p, payload) = TcpRepr::parse(&buf, SRC, DST, true).unwrap();
        assert_eq!(p, r);
        assert!(payload.is_empty());
    }

    #[test]
    fn linux_syn_matches_etherparse() {
        use etherparse::TcpOptionElement as E;
        let r = linux_syn();
        let mut h = etherparse::TcpHeader::new(45678, 80, 0x1234_5678, 64240);
        h.syn = true;
        h.set_options(&[
            E::MaximumSegmentSize(1460),
            E::SelectiveAcknowledgementPermitted,
            E::Timestamp(123_456, 0),
            E::Noop,
            E::WindowScale(7),
        ])
        .unwrap();
        h.checksum = h
            .calc_checksum_ipv4_raw(SRC.octets(), DST.octets(), &[])
            .unwrap();
        let mut buf = [0u8; 40];
        r.emit(&mut buf, SRC, DST);
        assert_eq!(&buf[..], &h.to_bytes()[..]);
    }

    #[test]
    fn option_layouts() {
        use option_kind::*;
        let mut o = TcpOptions {
            timestamps: Some((1, 2)),
            ..Default::default()
        };
        // Data segment with timestamps: NOP NOP TS.
        let mut b = [0u8; 40];
        assert_eq!(o.emit(&mut b), 12);
        assert_eq!(b[..12], [NOP, NOP, TIMESTAMPS, 10, 0, 0, 0, 1, 0, 0, 0, 2]);

        // SYN without timestamps: MSS, NOP NOP SACK-permitted, NOP WS.
        let o2 = TcpOptions {
            mss: Some(536),
            window_scale: Some(14),
            sack_permitted: true,
            ..Default::default()
        };
        assert_eq!(o2.emit(&mut b), 12);
        assert_eq!(
            b[..12],
            [
                MSS,
                4,
                0x02,
                0x18,
                NOP,
                NOP,
                SACK_PERMITTED,
                2,
                NOP,
                WINDOW_SCALE,
                3,
                14
            ]
        );

        // Timestamps + 4 SACK blocks: only 3 fit (12 + 4 + 24 = 40).
        o.set_sack_blocks(&blocks(&[(1, 2), (3, 4), (5, 6), (7, 8)]));
        assert_eq!(o.sack_blocks().len(), 4);
        assert_eq!(o.encoded_len(), 40);
        assert_eq!(o.emit(&mut b), 40);
        assert_eq!(b[12..16], [NOP, NOP, SACK, 26]);
        assert_eq!(b[16..24], [0, 0, 0, 1, 0, 0, 0, 2]);
        assert_eq!(b[32..40], [0, 0, 0, 5, 0, 0, 0, 6]);

        // Without timestamps all 4 fit (4 + 32 = 36).
        let mut o3 = TcpOptions::default();
        o3.set_sack_blocks(&blocks(&[(1, 2), (3, 4), (5, 6), (7, 8), (9, 10)]));
        assert_eq!(o3.sack_blocks().len(), 4, "keeps at most 4");
        assert_eq!(o3.encoded_len(), 36);
        assert_eq!(o3.emit(&mut b), 36);
        assert_eq!(b[..4], [NOP, NOP, SACK, 34]);
        assert_eq!(b[28..36], [0, 0, 0, 7, 0, 0, 0, 8]);

        // Everything at once: MSS + SACKP/TS + WS = 20, leaving room for 2 blocks.
        let mut all = linux_syn().options;
        all.set_sack_blocks(&blocks(&[(1, 2), (3, 4), (5, 6)]));
        assert_eq!(all.encoded_len(), 40);
        all.emit(&mut b);
        assert_eq!(b[20..24], [NOP, NOP, SACK, 18]);

        // Nothing.
        assert_eq!(TcpOptions::default().encoded_len(), 0);
        assert_eq!(TcpOptions::default().emit(&mut []), 0);
        o3.clear_sack_blocks();
        assert_eq!(o3, TcpOptions::default());
    }

    #[test]
    fn set_sack_blocks_keeps_equality_canonical() {
        let mut a = TcpOptions::default();
        a.set_sack_blocks(&blocks(&[(1, 2), (3, 4)]));
        a.set_sack_blocks(&blocks(&[(5, 6)]));
        let mut b = TcpOptions::default();
        b.set_sack_blocks(&blocks(&[(5, 6)]));
        assert_eq!(a, b);
        assert_eq!(a.sack_blocks(), &blocks(&[(5, 6)])[..]);
        assert!(format!("{a:?}").contains("left: 5"));
    }

    /// Builds a segment with the given raw option bytes (padded with EOL to 4) and a
    /// correct checksum.
    fn seg_with_options(opts: &[u8], payload: &[u8]) -> Vec<u8> {
        let olen = opts.len().div_ceil(4) * 4;
        assert!(olen <= 40);
        let hlen = 20 + olen;
        let mut buf = vec![0u8; hlen + payload.len()];
        let r = TcpRepr {
            src_port: 1000,
            dst_port: 2000,
            seq: 7,
            ack: 9,
            flags: TcpFlags::ACK,
            window: 100,
            ..Default::default()
        };
        r.emit_header(&mut buf);
        buf[12] = ((hlen / 4) as u8) << 4;
        buf[20..20 + opts.len()].copy_from_slice(opts);
        buf[hlen..].copy_from_slice(payload);
        TcpRepr::fill_checksum(&mut buf, SRC, DST);
        buf
    }

    fn parse_opts(opts: &[u8]) -> Result<TcpOptions, WireError> {
        let seg = seg_with_options(opts, b"data");
        let r = TcpRepr::parse(&seg, SRC, DST, true);
        // The raw option parser agrees with the segment parser.
        let olen = opts.len().div_ceil(4) * 4;
        let mut padded = opts.to_vec();
        padded.resize(olen, 0);
        assert_eq!(TcpOptions::parse(&padded), r.map(|(r, _)| r.options));
        if let Ok((_, payload)) = r {
            assert_eq!(payload, b"data");
        }
        r.map(|(r, _)| r.options)
    }

    #[test]
    fn illegal_option_lengths() {
        // MUST-7: length 0 / 1, overrunning, missing length byte.
        assert_eq!(parse_opts(&[30, 0, 0, 0]), Err(WireError::BadOption));
        assert_eq!(parse_opts(&[30, 1, 0, 0]), Err(WireError::BadOption));
        assert_eq!(parse_opts(&[1, 1, 30, 8]), Err(WireError::BadOption));
        assert_eq!(parse_opts(&[1, 1, 1, 2]), Err(WireError::BadOption)); // no length
        assert_eq!(parse_opts(&[2, 0, 0, 0]), Err(WireError::BadOption));
        assert_eq!(parse_opts(&[8, 1, 0, 0]), Err(WireError::BadOption));
        assert_eq!(parse_opts(&[1, 1, 1, 30]), Err(WireError::BadOption)); // no length
                                                                           // Overrunning into the payload is still overrunning the option space.
        assert_eq!(parse_opts(&[30, 6, 0, 0]), Err(WireError::BadOption));
        // An option exactly filling the space is fine.
        assert!(parse_opts(&[30, 4, 0, 0]).is_ok());
        assert!(parse_opts(&[30, 40].iter().copied().chain([0; 38]).collect::<Vec<_>>()).is_ok());
    }

    #[test]
    fn wrong_length_known_options() {
        let bad: [&[u8]; 12] = [
            &[2, 3, 5, 0],                          // MSS len 3
            &[2, 5, 5, 180, 0],                     // MSS len 5
            &[3, 2, 1, 1],                          // WS len 2
            &[3, 4, 7, 0],                          // WS len 4
            &[4, 3, 0, 1],                          // SACKP len 3
            &[4, 4, 0, 0],                          // SACKP len 4
            &[5, 2, 1, 1],                          // SACK with no block
            &[5, 6, 0, 0, 0, 0],                    // SACK len 6
            &[5, 11, 0, 0, 0, 1, 0, 0, 0, 2, 0],    // SACK len 11
            &[8, 8, 0, 0, 0, 1, 0, 0],              // TS len 8
            &[8, 12, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0], // TS len 12
            &[1, 1, 8, 9, 0, 0, 0, 1, 0, 0, 0],     // TS len 9
        ];
        for opts in bad {
            assert_eq!(parse_opts(opts), Err(WireError::BadOption), "{opts:?}");
        }
        // SACK with 5 blocks (len 42) cannot fit: overrun.
        let mut five = vec![5u8, 42];
        five.extend([0u8; 38]);
        assert_eq!(TcpOptions::parse(&five), Err(WireError::BadOption));
    }

    #[test]
    fn unknown_options_skipped_and_eol() {
        // MPTCP-ish (30, len 12), TFO cookie (34, len 10), an experimental kind (254,
        // len 4), kind 255 len 2; then MSS.
        let mut opts = vec![30, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        opts.extend([34, 10, 0, 2, 0, 0, 0, 0, 0, 0]);
        opts.extend([254, 4, 0xf9, 0x89, 255, 2]);
        opts.extend([2, 4, 0x05, 0xdc]);
        let o = parse_opts(&opts).unwrap();
        assert_eq!(o.mss, Some(1500));
        assert_eq!(
            o,
            TcpOptions {
                mss: Some(1500),
                ..Default::default()
            }
        );
        // EOL ends the list: bytes after it (even garbage) are ignored.
        let o = parse_opts(&[3, 3, 2, 0, 30, 0, 2, 1]).unwrap();
        assert_eq!(o.window_scale, Some(2));
        assert_eq!(o.mss, None);
        // All EOLs / all NOPs.
        assert_eq!(parse_opts(&[0; 40]).unwrap(), TcpOptions::default());
        assert_eq!(parse_opts(&[1; 40]).unwrap(), TcpOptions::default());
    }

    #[test]
    fn any_order_unaligned_and_duplicates() {
        // Reverse of Linux's order, no alignment NOPs, window scale above 14 kept raw.
        let mut opts = vec![3, 3, 15]; // WS 15
        opts.extend([8, 10, 0, 0, 0, 5, 0, 0, 0, 6]); // TS
        opts.extend([4, 2]); // SACKP
        opts.extend([5, 10, 0, 0, 0, 1, 0, 0, 0, 2]); // SACK 1 block
        opts.extend([2, 4, 0x02, 0x00]); // MSS 512
        let o = parse_opts(&opts).unwrap();
        assert_eq!(o.window_scale, Some(15));
        assert_eq!(o.timestamps, Some((5, 6)));
        assert!(o.sack_permitted);
        assert_eq!(o.sack_blocks(), &blocks(&[(1, 2)])[..]);
        assert_eq!(o.mss, Some(512));

        // Duplicates: the last one wins (including SACK, which replaces all blocks).
        let mut dup = vec![2, 4, 0, 100, 2, 4, 0, 200];
        dup.extend([5, 18, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4]);
        dup.extend([5, 10, 0, 0, 0, 9, 0, 0, 0, 10]);
        let o = parse_opts(&dup).unwrap();
        assert_eq!(o.mss, Some(200));
        let mut expect = TcpOptions {
            mss: Some(200),
            ..Default::default()
        };
        expect.set_sack_blocks(&blocks(&[(9, 10)]));
        assert_eq!(o, expect);
        let o = parse_opts(
            &[3, 3, 1, 3, 3, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 1, 8, 10]
                .iter()
                .copied()
                .chain([0, 0, 0, 2, 0, 0, 0, 2])
                .collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(o.window_scale, Some(2));
        assert_eq!(o.timestamps, Some((2, 2)));
    }

    #[test]
    fn header_errors() {
        let r = linux_syn();
        let mut seg = vec![0u8; r.header_len() + 5];
        seg[40..].copy_from_slice(b"hello");
        r.emit(&mut seg, SRC, DST);
        // Truncation inside the header.
        for n in 0..40 {
            assert_eq!(
                TcpRepr::parse(&seg[..n], SRC, DST, false),
                Err(WireError::Truncated),
                "len {n}"
            );
        }
        // Truncating the payload breaks the checksum but parses without verification.
        for n in 40..seg.len() {
            assert_eq!(
                TcpRepr::parse(&seg[..n], SRC, DST, true),
                Err(WireError::BadChecksum)
            );
            let (p, pl) = TcpRepr::parse(&seg[..n], SRC, DST, false).unwrap();
            assert_eq!(p, r);
            assert_eq!(pl, &b"hello"[..n - 40]);
        }
        // Data offset < 5.
        for off in 0u8..5 {
            let mut s = seg.clone();
            s[12] = off << 4;
            assert_eq!(
                TcpRepr::parse(&s, SRC, DST, false),
                Err(WireError::Malformed)
            );
        }
        // Data offset beyond the buffer.
        let mut s = seg.clone();
        s[12] = 15 << 4;
        assert_eq!(
            TcpRepr::parse(&s, SRC, DST, false),
            Err(WireError::Truncated)
        );
        // Every single-bit flip is caught by the checksum.
        for bit in 0..seg.len() * 8 {
            let mut s = seg.clone();
            s[bit / 8] ^= 1 << (bit % 8);
            assert!(TcpRepr::parse(&s, SRC, DST, true).is_err(), "bit {bit}");
        }
        // Wrong pseudo-header.
        assert_eq!(
            TcpRepr::parse(&seg, SRC, Ipv4Addr::new(10, 0, 0, 3), true),
            Err(WireError::BadChecksum)
        );
        // Reserved bits are ignored.
        let mut s = seg.clone();
        s[12] |= 0x0f;
        TcpRepr::fill_checksum(&mut s, SRC, DST);
        assert_eq!(TcpRepr::parse(&s, SRC, DST, true).unwrap().0, r);
        // Checksum before options: a corrupted option byte is reported as BadChecksum.
        let mut s = seg.clone();
        s[21] = 0;
        assert_eq!(
            TcpRepr::parse(&s, SRC, DST, true),
            Err(WireError::BadChecksum)
        );
        assert_eq!(
            TcpRepr::parse(&s, SRC, DST, false),
            Err(WireError::BadOption)
        );
    }

    #[test]
    fn fill_checksum_matches_etherparse_with_payload() {
        let mut r = TcpRepr {
            src_port: 443,
            dst_port: 50000,
            seq: 0xdead_beef,
            ack: 0x0102_0304,
            flags: TcpFlags::ACK | TcpFlags::PSH,
            window: 501,
            urgent: 0,
            options: TcpOptions {
                timestamps: Some((0xaabb_ccdd, 0x1122_3344)),
                ..Default::default()
            },
        };
        r.options.set_sack_blocks(&blocks(&[(100, 200)]));
        let payload = b"GET / HTTP/1.1\r\n\r\n!";
        let hl = r.header_len();
        let mut seg = vec![0u8; hl + payload.len()];
        seg[hl..].copy_from_slice(payload);
        r.emit(&mut seg, SRC, DST);
        let (h, _) = etherparse::TcpHeader::from_slice(&seg).unwrap();
        assert_eq!(
            h.calc_checksum_ipv4_raw(SRC.octets(), DST.octets(), payload)
                .unwrap(),
            u16::from_be_bytes([seg[16], seg[17]])
        );
        assert!(h.ack && h.psh && !h.syn);
        let (p, pl) = TcpRepr::parse(&seg, SRC, DST, true).unwrap();
        assert_eq!(p, r);
        assert_eq!(pl, payload);
    }

    fn arb_options() -> impl Strategy<Value = TcpOptions> {
        (
            proptest::option::of(any::<u16>()),
            proptest::option::of(any::<u8>()),
            any::<bool>(),
            proptest::option::of(any::<(u32, u32)>()),
            proptest::collection::vec(any::<(u32, u32)>(), 0..6),
        )
            .prop_map(|(mss, ws, sp, ts, sack)| {
                let mut o = TcpOptions {
                    mss,
                    window_scale: ws,
                    sack_permitted: sp,
                    timestamps: ts,
                    ..Default::default()
                };
                o.set_sack_blocks(&blocks(&sack));
                o
            })
    }

    fn arb_repr() -> impl Strategy<Value = TcpRepr> {
        (
            any::<(u16, u16, u32, u32)>(),
            any::<(u8, u16, u16)>(),
            arb_options(),
        )
            .prop_map(
                |((src_port, dst_port, seq, ack), (flags, window, urgent), options)| TcpRepr {
                    src_port,
                    dst_port,
                    seq,
                    ack,
                    flags: TcpFlags(flags),
                    window,
                    urgent,
                    options,
                },
            )
    }

    /// What a peer sees: the SACK blocks that fit.
    fn expected_after_wire(r: &TcpRepr) -> TcpRepr {
        let mut e = *r;
        let n = (r.options.encoded_len() - r.options.base_len()).saturating_sub(4) / 8;
        let kept: Vec<SackBlock> = r.options.sack_blocks()[..n].to_vec();
        e.options.set_sack_blocks(&kept);
        e
    }

    /// One option element for the model-based parser test.
    #[derive(Debug, Clone)]
    enum Elem {
        Nop,
        Mss(u16),
        Ws(u8),
        SackP,
        Sack(Vec<(u32, u32)>),
        Ts(u32, u32),
        Unknown(u8, Vec<u8>),
    }

    fn arb_elem() -> impl Strategy<Value = Elem> {
        prop_oneof![
            Just(Elem::Nop),
            any::<u16>().prop_map(Elem::Mss),
            any::<u8>().prop_map(Elem::Ws),
            Just(Elem::SackP),
            proptest::collection::vec(any::<(u32, u32)>(), 1..5).prop_map(Elem::Sack),
            any::<(u32, u32)>().prop_map(|(a, b)| Elem::Ts(a, b)),
            (
                any::<u8>().prop_filter("unknown kind", |k| ![0, 1, 2, 3, 4, 5, 8].contains(k)),
                proptest::collection::vec(any::<u8>(), 0..12)
            )
                .prop_map(|(k, d)| Elem::Unknown(k, d)),
        ]
    }

    fn encode(elems: &[Elem]) -> Vec<u8> {
        let mut v = Vec::new();
        for e in elems {
            match e {
                Elem::Nop => v.push(1),
                Elem::Mss(m) => {
                    v.extend([2, 4]);
                    v.extend(m.to_be_bytes());
                }
                Elem::Ws(s) => v.extend([3, 3, *s]),
                Elem::SackP => v.extend([4, 2]),
                Elem::Sack(b) => {
                    v.extend([5, (2 + 8 * b.len()) as u8]);
                    for (l, r) in b {
                        v.extend(l.to_be_bytes());
                        v.extend(r.to_be_bytes());
                    }
                }
                Elem::Ts(a, b) => {
                    v.extend([8, 10]);
                    v.extend(a.to_be_bytes());
                    v.extend(b.to_be_bytes());
                }
                Elem::Unknown(k, d) => {
                    v.extend([*k, (2 + d.len()) as u8]);
                    v.extend(d);
                }
            }
        }
        v
    }

    fn model(elems: &[Elem]) -> TcpOptions {
        let mut o = TcpOptions::default();
        for e in elems {
            match e {
                Elem::Mss(m) => o.mss = Some(*m),
                Elem::Ws(s) => o.window_scale = Some(*s),
                Elem::SackP => o.sack_permitted = true,
                Elem::Sack(b) => o.set_sack_blocks(&blocks(b)),
                Elem::Ts(a, b) => o.timestamps = Some((*a, *b)),
                Elem::Nop | Elem::Unknown(..) => {}
            }
        }
        o
    }

    /// Option-ish bytes: mostly small values (known kinds and short lengths), so random
    /// lists exercise every length check, not just "unknown kind, huge length".
    fn option_byte() -> impl Strategy<Value = u8> {
        prop_oneof![3 => 0u8..12, 1 => any::<u8>()]
    }

    proptest! {
        #[test]
        fn round_trip(r in arb_repr(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let hl = r.header_len();
            prop_assert!(hl % 4 == 0 && (20..=60).contains(&hl));
            let mut seg = vec![0u8; hl + payload.len()];
            seg[hl..].copy_from_slice(&payload);
            r.emit(&mut seg, SRC, DST);
            let (p, pl) = TcpRepr::parse(&seg, SRC, DST, true).unwrap();
            prop_assert_eq!(p, expected_after_wire(&r));
            prop_assert_eq!(pl, &payload[..]);
            // Re-emitting the parsed repr gives the same bytes.
            let mut again = vec![0u8; seg.len()];
            again[hl..].copy_from_slice(&payload);
            p.emit(&mut again, SRC, DST);
            prop_assert_eq!(again, seg);
        }

        #[test]
        fn options_emit_len_and_fit(o in arb_options()) {
            let n = o.encoded_len();
            prop_assert!(n % 4 == 0 && n <= 40);
            let mut buf = [0xeeu8; 40];
            prop_assert_eq!(o.emit(&mut buf), n);
            prop_assert!(buf[n..].iter().all(|&b| b == 0xee), "wrote past encoded_len");
            // With timestamps at most 3 blocks go out, without 4.
            let sent = TcpOptions::parse(&buf[..n]).unwrap().sack_blocks().len();
            let cap = if o.timestamps.is_some() { 3 } else { 4 };
            prop_assert!(sent <= cap);
        }

        #[test]
        fn option_parser_matches_model(
            elems in proptest::collection::vec(arb_elem(), 0..8),
            pad in 0usize..4,
        ) {
            let mut bytes = encode(&elems);
            prop_assume!(bytes.len() + pad <= 40);
            bytes.extend(std::iter::repeat_n(0u8, pad)); // EOL padding
            prop_assert_eq!(TcpOptions::parse(&bytes), Ok(model(&elems)));
        }

        #[test]
        fn options_never_panic(opts in proptest::collection::vec(option_byte(), 0..48)) {
            // Ok or BadOption, never anything else.
            match TcpOptions::parse(&opts) {
                Ok(o) => prop_assert!(o.sack_blocks().len() <= 4),
                Err(e) => prop_assert_eq!(e, WireError::BadOption),
            }
        }

        #[test]
        fn random_options_in_valid_header(
            opts in proptest::collection::vec(option_byte(), 0..=40),
        ) {
            let seg = seg_with_options(&opts, b"xyz");
            match TcpRepr::parse(&seg, SRC, DST, true) {
                Ok((_, pl)) => prop_assert_eq!(pl, b"xyz"),
                Err(e) => prop_assert_eq!(e, WireError::BadOption),
            }
        }

        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..80), v in any::<bool>()) {
            if let Ok((_, pl)) = TcpRepr::parse(&data, SRC, DST, v) {
                prop_assert!(pl.len() + 20 <= data.len());
            }
        }

        #[test]
        fn mutations_never_panic(
            r in arb_repr(),
            muts in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            cut in any::<usize>(),
        ) {
            let mut seg = vec![0u8; r.header_len() + 8];
            r.emit(&mut seg, SRC, DST);
            for (i, v) in muts {
                let i = i % seg.len();
                seg[i] = v;
            }
            let n = cut % (seg.len() + 1);
            for v in [false, true] {
                let _ = TcpRepr::parse(&seg[..n], SRC, DST, v);
            }
        }
    }
}
