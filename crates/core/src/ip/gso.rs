//! Generic segmentation offload in software (GSO): a large TCP segment (LSO, see
//! [`crate::tcp::Tcb::set_lso_max`]) cut into the MTU-sized segments TCP would have sent
//! one by one, right before a device that cannot segment by itself.
//!
//! # Design
//! [`gso_split`] takes one Ethernet frame holding an IPv4 datagram (any header length)
//! with a TCP segment whose payload is larger than `gso_size`, and appends one frame per
//! piece of `gso_size` payload bytes (the last may be shorter). Every piece is a complete
//! frame: the Ethernet header as is; the IPv4 header with its options, total length, an
//! identification of the original's plus the piece's index, and its header checksum
//! (RFC 791 §3.1); the TCP header with all its options, the sequence number advanced by
//! the piece's offset, FIN and PSH only on the last piece (they belong to the end of the
//! data), CWR only on the first (RFC 3168 §6.1.2: one window reduction), the urgent
//! pointer rebased on the piece's first octet and URG only while it still points past
//! that octet (RFC 9293 §3.8.5), and the full TCP checksum over the pseudo-header
//! (RFC 9293 §3.1).
//!
//! The input is checked first and nothing is appended unless it is all well formed: an
//! error (never a panic) for anything that is not an unfragmented IPv4 TCP segment with
//! consistent lengths, for `gso_size` 0, and for SYN or RST segments that would need
//! more than one piece. One pass copies each payload byte once and sums it once.

use crate::wire::{checksum, ethertype, ip_proto, ETHERNET_HEADER_LEN, IPV4_HEADER_LEN};
use core::fmt;

/// Why a frame could not be split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsoError {
    /// `gso_size` is 0.
    ZeroSize,
    /// Not an Ethernet frame with an IPv4 datagram (EtherType, version, IHL).
    NotIpv4,
    /// The datagram does not carry TCP.
    NotTcp,
    /// The datagram is a fragment (MF set or a non-zero offset).
    Fragment,
    /// A length field disagrees with the frame (total length, data offset).
    BadLength,
    /// A SYN or RST segment that would need more than one piece.
    BadFlags,
}

impl fmt::Display for GsoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            GsoError::ZeroSize => "GSO size is 0",
            GsoError::NotIpv4 => "not an IPv4 frame",
            GsoError::NotTcp => "not a TCP segment",
            GsoError::Fragment => "an IP fragment",
            GsoError::BadLength => "inconsistent lengths",
            GsoError::BadFlags => "a SYN or RST cannot be split",
        };
        f.write_str(s)
    }
}

impl std::error::Error for GsoError {}

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const PSH: u8 = 0x08;
const URG: u8 = 0x20;
const CWR: u8 = 0x80;

/// Splits `frame` (14 bytes of Ethernet header, an IPv4 header, a TCP header, payload)
/// into frames of at most `gso_size` payload bytes each, appended to `out` in sequence
/// order. Returns how many were appended (1 when the payload already fits; link padding
/// after the IPv4 total length is dropped). On error `out` is left as it was.
pub fn gso_split(frame: &[u8], gso_size: usize, out: &mut Vec<Vec<u8>>) -> Result<usize, GsoError> {
    if gso_size == 0 {
        return Err(GsoError::ZeroSize);
    }
    let eth = ETHERNET_HEADER_LEN;
    if frame.len() < eth + IPV4_HEADER_LEN {
        return Err(GsoError::NotIpv4);
    }
    if frame[12..14] != ethertype::IPV4.to_be_bytes() {
        return Err(GsoError::NotIpv4);
    }
    let ip = &frame[eth..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if ip[0] >> 4 != 4 || ihl < IPV4_HEADER_LEN {
        return Err(GsoError::NotIpv4);
    }
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if total > ip.len() || total < ihl + 20 || ihl > ip.len() {
        return Err(GsoError::BadLength);
    }
    let frag = u16::from_be_bytes([ip[6], ip[7]]);
    if frag & 0x3fff != 0 {
        // MF (0x2000) or a fragment offset.
        return Err(GsoError::Fragment);
    }
    if ip[9] != ip_proto::TCP {
        return Err(GsoError::NotTcp);
    }
    let tcp = &ip[ihl..total];
    let doff = usize::from(tcp[12] >> 4) * 4;
    if doff < 20 || doff > tcp.len() {
        return Err(GsoError::BadLength);
    }
    let payload = &tcp[doff..];
    let n = payload.len().div_ceil(gso_size).max(1);
    let flags = tcp[13];
    if n > 1 && flags & (SYN | RST) != 0 {
        return Err(GsoError::BadFlags);
    }
    let ident = u16::from_be_bytes([ip[4], ip[5]]);
    let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
    let urgent = usize::from(u16::from_be_bytes([tcp[18], tcp[19]]));
    let src = [ip[12], ip[13], ip[14], ip[15]];
    let dst = [ip[16], ip[17], ip[18], ip[19]];
    let hdrs = eth + ihl + doff;
    out.reserve(n);
    for i in 0..n {
        let off = i * gso_size;
        let len = payload.len().saturating_sub(off).min(gso_size);
        let mut f = Vec::with_capacity(hdrs + len);
        f.extend_from_slice(&frame[..hdrs]);
        f.extend_from_slice(&payload[off..off + len]);
        // IPv4 (RFC 791 §3.1): total length, identification, header checksum.
        let h = &mut f[eth..eth + ihl];
        h[2..4].copy_from_slice(&((ihl + doff + len) as u16).to_be_bytes());
        h[4..6].copy_from_slice(&ident.wrapping_add(i as u16).to_be_bytes());
        h[10..12].fill(0);
        let c = checksum::checksum(h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        // TCP: sequence number, flags, urgent pointer, checksum.
        let t = &mut f[eth + ihl..];
        t[4..8].copy_from_slice(&seq.wrapping_add(off as u32).to_be_bytes());
        let mut fl = flags;
        if i + 1 < n {
            fl &= !(FIN | PSH);
        }
        if i > 0 {
            fl &= !CWR;
        }
        if flags & URG != 0 {
            // RFC 9293 §3.8.5: the pointer is an offset from this segment's sequence
            // number to the octet after the urgent data.
            if urgent > off {
                t[18..20].copy_from_slice(&((urgent - off) as u16).to_be_bytes());
            } else {
                fl &= !URG;
                t[18..20].fill(0);
            }
        }
        t[13] = fl;
        t[16..18].fill(0);
        let s = checksum::combine(
            checksum::pseudo_header(src.into(), dst.into(), ip_proto::TCP, t.len() as u16),
            checksum::sum(t),
        );
        t[16..18].copy_from_slice(&checksum::finish(s).to_be_bytes());
        out.push(f);
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Ipv4Repr, TcpFlags, TcpRepr};
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    const SRC: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const DST: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);

    /// A frame with `ip_opts` bytes of IPv4 options (a multiple of 4) and TCP timestamps.
    fn frame(payload: &[u8], flags: TcpFlags, urgent: u16, ip_opts: usize) -> Vec<u8> {
        let mut repr = TcpRepr {
            src_port: 40_000,
            dst_port: 80,
            seq: 0xffff_f000,
            ack: 77,
            flags,
            window: 1000,
            urgent,
            options: Default::default(),
        };
        repr.options.timestamps = Some((5, 6));
        let hl = repr.header_len();
        let ip = Ipv4Repr {
            src: SRC,
            dst: DST,
            protocol: ip_proto::TCP,
            ttl: 64,
            dscp_ecn: 0,
            ident: 0xfffe,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            payload_len: (hl + payload.len()) as u16,
        };
        let ihl = IPV4_HEADER_LEN + ip_opts;
        let mut f = vec![0u8; 14 + ihl + hl + payload.len()];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&ethertype::IPV4.to_be_bytes());
        ip.emit(&mut f[14..14 + IPV4_HEADER_LEN]);
        if ip_opts > 0 {
            // NOP options; fix IHL, total length and the header checksum.
            f[14 + IPV4_HEADER_LEN..14 + ihl].fill(1);
            f[14] = 0x40 | (ihl / 4) as u8;
            let tl = (ihl + hl + payload.len()) as u16;
            f[16..18].copy_from_slice(&tl.to_be_bytes());
            f[24..26].fill(0);
            let c = checksum::checksum(&f[14..14 + ihl]);
            f[24..26].copy_from_slice(&c.to_be_bytes());
        }
        let t = &mut f[14 + ihl..];
        repr.emit_header(&mut t[..hl]);
        t[hl..].copy_from_slice(payload);
        TcpRepr::fill_checksum(t, SRC, DST);
        f
    }

    /// Parses a piece with both checksums verified.
    fn parse(f: &[u8]) -> (Ipv4Repr, TcpRepr, Vec<u8>) {
        assert_eq!(&f[12..14], &ethertype::IPV4.to_be_bytes());
        let (ip, seg) = Ipv4Repr::parse(&f[14..], true).expect("IPv4 header checksum");
        let (tcp, data) = TcpRepr::parse(seg, ip.src, ip.dst, true).expect("TCP checksum");
        (ip, tcp, data.to_vec())
    }

    fn check(payload: &[u8], flags: TcpFlags, urgent: u16, ip_opts: usize, g: usize) {
        let f = frame(payload, flags, urgent, ip_opts);
        let (ip0, tcp0, _) = parse(&f);
        let mut out = vec![vec![1]];
        let n = gso_split(&f, g, &mut out).unwrap();
        assert_eq!(n, payload.len().div_ceil(g).max(1));
        assert_eq!(out.len(), n + 1);
        let mut data = Vec::new();
        for (i, p) in out[1..].iter().enumerate() {
            assert_eq!(p[..14], f[..14]);
            let (ip, tcp, d) = parse(p);
            let last = i + 1 == n;
            assert!(d.len() == g || (last && d.len() <= g));
            assert_eq!(ip.ident, ip0.ident.wrapping_add(i as u16));
            assert!(ip.dont_frag && !ip.is_fragment());
            assert_eq!(tcp.seq, tcp0.seq.wrapping_add((i * g) as u32));
            assert_eq!((tcp.ack, tcp.window), (tcp0.ack, tcp0.window));
            assert_eq!(tcp.options, tcp0.options);
            assert_eq!(tcp.flags.fin(), last && flags.fin());
            assert_eq!(tcp.flags.psh(), last && flags.psh());
            assert_eq!(tcp.flags.cwr(), i == 0 && flags.cwr());
            assert_eq!(tcp.flags.ack(), flags.ack());
            assert_eq!(tcp.flags.ece(), flags.ece());
            let off = i * g;
            let want_urg = flags.urg() && usize::from(urgent) > off;
            assert_eq!(tcp.flags.urg(), want_urg);
            if want_urg {
                // The same absolute octet, seen from this piece.
                assert_eq!(usize::from(tcp.urgent) + off, usize::from(urgent));
            }
            data.extend_from_slice(&d);
        }
        assert_eq!(data, payload);
    }

    #[test]
    fn pieces_carry_the_payload_with_their_own_headers() {
        let payload: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let f = TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN | TcpFlags::CWR;
        check(&payload, f, 0, 0, 1448);
        check(&payload, f, 0, 8, 1000);
        check(&payload, TcpFlags::ACK, 0, 0, 10_000);
        check(&payload[..1], TcpFlags::ACK | TcpFlags::FIN, 0, 0, 1448);
        check(&[], TcpFlags::ACK | TcpFlags::FIN, 0, 0, 1448);
    }

    #[test]
    fn urgent_pointer_is_rebased_and_dropped_past_the_urgent_data() {
        let payload = vec![9u8; 5000];
        let f = TcpFlags::ACK | TcpFlags::URG;
        check(&payload, f, 2500, 0, 1000);
        check(&payload, f, 1000, 0, 1000);
        check(&payload, f, 60_000, 4, 1460);
    }

    #[test]
    fn identification_and_sequence_wrap() {
        // The test frame starts at ident 0xfffe and seq 0xffff_f000.
        check(&vec![3u8; 20_000], TcpFlags::ACK, 0, 0, 1460);
    }

    #[test]
    fn malformed_frames_are_errors_and_leave_out_alone() {
        let good = frame(&[5; 3000], TcpFlags::ACK, 0, 0);
        let mut out = Vec::new();
        assert_eq!(gso_split(&good, 0, &mut out), Err(GsoError::ZeroSize));
        assert_eq!(
            gso_split(&good[..20], 1000, &mut out),
            Err(GsoError::NotIpv4)
        );
        let mut f = good.clone();
        f[12] = 0x86;
        assert_eq!(gso_split(&f, 1000, &mut out), Err(GsoError::NotIpv4));
        let mut f = good.clone();
        f[14] = 0x65;
        assert_eq!(gso_split(&f, 1000, &mut out), Err(GsoError::NotIpv4));
        let mut f = good.clone();
        f[14] = 0x44;
        assert_eq!(gso_split(&f, 1000, &mut out), Err(GsoError::NotIpv4));
        let mut f = good.clone();
        f[14 + 9] = ip_proto::UDP;
        assert_eq!(gso_split(&f, 1000, &mut out), Err(GsoError::NotTcp));
        let mut f = good.clone();
        f[14 + 6] |= 0x20;
        assert_eq!(gso_split(&f, 1000, &mut out), Err(GsoError::Fragment));
        let mut f = good.clone();
        f[14 + 7] = 1;
        assert_eq!(gso_split(&f, 1000, &mut out), Err(GsoError::Fragment));
        // Total length beyond the frame, or too short for a TCP header.
        assert_eq!(
            gso_split(&good[..good.len() - 1], 1000, &mut out),
            Err(GsoError::BadLength)
        );
        let mut f = good.clone();
        f[16..18].copy_from_slice(&30u16.to_be_bytes());
        assert_eq!(gso_split(&f, 1000, &mut out), Err(GsoError::BadLength));
        // Data offset below 5 or beyond the segment.
        let mut f = good.clone();
        f[14 + 20 + 12] = 0x40;
        assert_eq!(gso_split(&f, 1000, &mut out), Err(GsoError::BadLength));
        let small = frame(&[], TcpFlags::ACK, 0, 0);
        let mut f = small.clone();
        f[14 + 20 + 12] = 0xf0;
        assert_eq!(gso_split(&f, 1000, &mut out), Err(GsoError::BadLength));
        let syn = frame(&[1; 3000], TcpFlags::SYN, 0, 0);
        assert_eq!(gso_split(&syn, 1000, &mut out), Err(GsoError::BadFlags));
        assert!(out.is_empty());
        // Link padding after the datagram is dropped.
        let mut padded = good.clone();
        padded.extend_from_slice(&[0; 6]);
        assert_eq!(gso_split(&padded, 1000, &mut out), Ok(3));
        assert_eq!(out.iter().map(Vec::len).sum::<usize>(), good.len() + 2 * 66);
    }

    proptest! {
        #[test]
        fn split_reassembles_and_verifies(
            len in 0usize..9000,
            g in 1usize..3000,
            bits in any::<u8>(),
            urgent in any::<u16>(),
            opts in 0usize..4,
        ) {
            let payload: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let flags = TcpFlags(bits & !(SYN | RST)) | TcpFlags::ACK;
            check(&payload, flags, urgent, opts * 4, g);
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200), g in 0usize..100) {
            let mut out = Vec::new();
            let _ = gso_split(&data, g, &mut out);
        }
    }
}
