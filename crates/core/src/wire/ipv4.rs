//! IPv4 header (RFC 791, with RFC 1122 §3.2.1 receive checks).
//!
//! Parsing validates, in order: at least 20 bytes (`Truncated`), version 4 and IHL >= 5
//! (`Malformed`), the whole header present (`Truncated`), total length >= header length
//! (`Malformed`), the header checksum when asked (`BadChecksum`, RFC 1122 §3.2.1.2: MUST
//! verify and silently discard), then total length <= buffer (`Truncated`; skipped for a
//! quoted header, which may be cut short). Bytes beyond the total length are link padding
//! and are trimmed. Options (IHL > 5) are skipped and never interpreted: ember
//! neither needs nor trusts them (source routing in particular is a known attack vector).
//! The reserved flag bit is ignored.
//!
//! Emission always writes a 20-byte header without options, with a correct checksum.
//!
//! Layout (offsets in bytes): ver/ihl 0, dscp/ecn 1, total length 2, ident 4,
//! flags/fragment offset 6, ttl 8, protocol 9, checksum 10, src 12, dst 16.

use std::net::Ipv4Addr;

use etherparse::err::ipv4::HeaderSliceError;
use etherparse::Ipv4HeaderSlice;

use super::checksum;
use super::{write_u16, WireError};

/// IP protocol numbers ember handles.
pub mod ip_proto {
    /// Internet Control Message Protocol.
    pub const ICMP: u8 = 1;
    /// Transmission Control Protocol.
    pub const TCP: u8 = 6;
    /// User Datagram Protocol.
    pub const UDP: u8 = 17;
}

/// Length of an IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;

/// Flag bit "don't fragment" in the flags/offset word.
const FLAG_DF: u16 = 0x4000;
/// Flag bit "more fragments" in the flags/offset word.
const FLAG_MF: u16 = 0x2000;
/// Fragment offset mask (in 8-byte units).
const FRAG_MASK: u16 = 0x1fff;

/// The fields of an IPv4 header that ember uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Protocol of the payload (see [`ip_proto`]).
    pub protocol: u8,
    /// Time to live.
    pub ttl: u8,
    /// The whole second byte: DSCP (upper 6 bits) and ECN (lower 2 bits).
    pub dscp_ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment flag.
    pub dont_frag: bool,
    /// More Fragments flag.
    pub more_frags: bool,
    /// Fragment offset in BYTES (the wire field times 8; always a multiple of 8).
    pub frag_offset: u16,
    /// Payload length in bytes (total length minus header length).
    pub payload_len: u16,
}

/// The checks common to [`Ipv4Repr::parse`] and [`Ipv4Repr::parse_quoted`]: a complete
/// header, version 4, IHL >= 5, total length >= header length, and (when `verify`) the
/// header checksum. Does not compare the total length with the buffer. Returns the repr,
/// the header length and the total length.
fn parse_header(buf: &[u8], verify: bool) -> Result<(Ipv4Repr, usize, usize), WireError> {
    let hdr = Ipv4HeaderSlice::from_slice(buf).map_err(|e| match e {
        HeaderSliceError::Len(_) => WireError::Truncated,
        HeaderSliceError::Content(_) => WireError::Malformed,
    })?;
    let header_len = hdr.slice().len();
    let total_len = usize::from(hdr.total_len());
    if total_len < header_len {
        return Err(WireError::Malformed);
    }
    // RFC 791 §3.1 / RFC 1122 §3.2.1.2 (MUST verify, silently discard on failure): a
    // correct header, checksum field included, sums to -0.
    if verify && checksum::checksum(hdr.slice()) != 0 {
        return Err(WireError::BadChecksum);
    }
    let repr = header_repr(&hdr, (total_len - header_len) as u16);
    Ok((repr, header_len, total_len))
}

fn header_repr(hdr: &Ipv4HeaderSlice<'_>, payload_len: u16) -> Ipv4Repr {
    Ipv4Repr {
        src: hdr.source_addr(),
        dst: hdr.destination_addr(),
        protocol: hdr.protocol().0,
        ttl: hdr.ttl(),
        dscp_ecn: (hdr.dcp().value() << 2) | hdr.ecn().value(),
        ident: hdr.identification(),
        dont_frag: hdr.dont_fragment(),
        more_frags: hdr.more_fragments(),
        frag_offset: hdr.fragments_offset().byte_offset(),
        payload_len,
    }
}

impl Ipv4Repr {
    /// Parses a datagram: version 4, IHL >= 5, IHL*4 <= total length <= buf.len() (link
    /// padding beyond total length is trimmed), header checksum verified when
    /// `verify_checksum`. Options (IHL > 5) are skipped. Returns the repr and the payload
    /// slice (exactly `payload_len` bytes).
    pub fn parse(buf: &[u8], verify_checksum: bool) -> Result<(Ipv4Repr, &[u8]), WireError> {
        let (repr, header_len, total_len) = parse_header(buf, verify_checksum)?;
        if total_len > buf.len() {
            return Err(WireError::Truncated);
        }
        Ok((repr, &buf[header_len..total_len]))
    }

    /// Parses the IPv4 header quoted inside an ICMP error (RFC 792; RFC 1812 §4.3.2.3
    /// allows routers to quote more than 8 bytes): the header must be complete and its
    /// checksum right, but the datagram may be truncated. Returns the repr (whose
    /// `payload_len` is the ORIGINAL payload length from the quoted header) and whatever
    /// payload bytes follow the header, up to the total length.
    pub fn parse_quoted(buf: &[u8]) -> Result<(Ipv4Repr, &[u8]), WireError> {
        let (repr, header_len, total_len) = parse_header(buf, true)?;
        let end = total_len.min(buf.len());
        Ok((repr, &buf[header_len..end]))
    }

    /// Writes a 20-byte header (no options) with total length `20 + payload_len` and a
    /// correct header checksum into `buf[..20]`. The payload is not touched.
    ///
    /// Contract (caller bugs, checked by `debug_assert!`): `buf.len() >= 20`;
    /// `payload_len <= 65515` (the total length saturates at 65535 in release builds);
    /// `frag_offset` a multiple of 8 (the low 3 bits are dropped in release builds).
    pub fn emit(&self, buf: &mut [u8]) {
        debug_assert!(buf.len() >= IPV4_HEADER_LEN, "IPv4 emit buffer too short");
        debug_assert!(
            self.total_len() <= usize::from(u16::MAX),
            "IPv4 payload too long"
        );
        debug_assert!(
            self.frag_offset % 8 == 0,
            "fragment offset not a multiple of 8"
        );
        let total = self.total_len().min(usize::from(u16::MAX)) as u16;
        let mut flags_frag = (self.frag_offset >> 3) & FRAG_MASK;
        if self.dont_frag {
            flags_frag |= FLAG_DF;
        }
        if self.more_frags {
            flags_frag |= FLAG_MF;
        }
        buf[0] = 0x45; // version 4, IHL 5
        buf[1] = self.dscp_ecn;
        write_u16(buf, 2, total);
        write_u16(buf, 4, self.ident);
        write_u16(buf, 6, flags_frag);
        buf[8] = self.ttl;
        buf[9] = self.protocol;
        buf[10] = 0;
        buf[11] = 0;
        buf[12..16].copy_from_slice(&self.src.octets());
        buf[16..20].copy_from_slice(&self.dst.octets());
        let c = checksum::checksum(&buf[..IPV4_HEADER_LEN]);
        write_u16(buf, 10, c);
    }

    /// True if this datagram is a fragment (`more_frags || frag_offset != 0`).
    pub fn is_fragment(&self) -> bool {
        self.more_frags || self.frag_offset != 0
    }

    /// Total length of the datagram as emitted: `20 + payload_len`.
    pub fn total_len(&self) -> usize {
        IPV4_HEADER_LEN + usize::from(self.payload_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A UDP datagram 192.168.0.1 -> 192.168.0.199, ttl 64, DF, total length 0x73,
    /// checksum b861 (the textbook example).
    fn textbook() -> Vec<u8> {
        let mut v = vec![
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        v.extend((0..0x73 - 20).map(|i| i as u8));
        v
    }

    fn textbook_repr() -> Ipv4Repr {
        Ipv4Repr {
            src: Ipv4Addr::new(192, 168, 0, 1),
            dst: Ipv4Addr::new(192, 168, 0, 199),
            protocol: ip_proto::UDP,
            ttl: 64,
            dscp_ecn: 0,
            ident: 0,
            dont_frag: true,
            more_frags: false,
            frag_offset: 0,
            payload_len: 0x73 - 20,
        }
    }

    /// Recomputes the header checksum of a hand-edited header.
    fn fix_checksum(buf: &mut [u8]) {
        let hl = usize::from(buf[0] & 0xf) * 4;
        buf[10] = 0;
        buf[11] = 0;
        let c = checksum::checksum(&buf[..hl]);
        buf[10..12].copy_from_slice(&c.to_be_bytes());
    }

    #[test]
    fn known_answer() {
        let pkt = textbook();
        let (r, payload) = Ipv4Repr::parse(&pkt, true).unwrap();
        assert_eq!(r, textbook_repr());
        assert_eq!(payload, &pkt[20..]);
        assert!(!r.is_fragment());
        assert_eq!(r.total_len(), 0x73);

        let mut out = [0u8; 20];
        r.emit(&mut out);
        assert_eq!(&out[..], &pkt[..20]);
    }

    #[test]
    fn padding_is_trimmed() {
        let mut pkt = textbook();
        pkt.extend_from_slice(&[0xaa; 10]);
        let (r, payload) = Ipv4Repr::parse(&pkt, true).unwrap();
        assert_eq!(usize::from(r.payload_len), payload.len());
        assert_eq!(payload, &textbook()[20..]);
    }

    #[test]
    fn truncation_at_every_length() {
        let pkt = textbook();
        for n in 0..pkt.len() {
            assert_eq!(
                Ipv4Repr::parse(&pkt[..n], true),
                Err(WireError::Truncated),
                "len {n}"
            );
        }
    }

    #[test]
    fn bad_version_and_ihl() {
        for v in [0u8, 1, 5, 6, 15] {
            let mut pkt = textbook();
            pkt[0] = (v << 4) | 5;
            fix_checksum(&mut pkt);
            assert_eq!(Ipv4Repr::parse(&pkt, true), Err(WireError::Malformed));
        }
        for ihl in 0u8..5 {
            let mut pkt = textbook();
            pkt[0] = 0x40 | ihl;
            assert_eq!(Ipv4Repr::parse(&pkt, false), Err(WireError::Malformed));
            assert_eq!(Ipv4Repr::parse_quoted(&pkt), Err(WireError::Malformed));
        }
    }

    #[test]
    fn total_length_checks() {
        // Total length below the header length.
        for tl in [0u16, 1, 19] {
            let mut pkt = textbook();
            pkt[2..4].copy_from_slice(&tl.to_be_bytes());
            fix_checksum(&mut pkt);
            assert_eq!(Ipv4Repr::parse(&pkt, true), Err(WireError::Malformed));
            assert_eq!(Ipv4Repr::parse_quoted(&pkt), Err(WireError::Malformed));
        }
        // Total length beyond the buffer.
        let mut pkt = textbook();
        pkt[2..4].copy_from_slice(&0x74u16.to_be_bytes());
        fix_checksum(&mut pkt);
        assert_eq!(Ipv4Repr::parse(&pkt, true), Err(WireError::Truncated));
        // Exactly the header.
        let mut pkt = textbook();
        pkt[2..4].copy_from_slice(&20u16.to_be_bytes());
        fix_checksum(&mut pkt);
        let (r, payload) = Ipv4Repr::parse(&pkt, true).unwrap();
        assert_eq!(r.payload_len, 0);
        assert!(payload.is_empty());
    }

    #[test]
    fn bad_checksum() {
        let mut pkt = textbook();
        pkt[11] ^= 1;
        assert_eq!(Ipv4Repr::parse(&pkt, true), Err(WireError::BadChecksum));
        assert!(Ipv4Repr::parse(&pkt, false).is_ok());
        assert_eq!(Ipv4Repr::parse_quoted(&pkt), Err(WireError::BadChecksum));
        // A flipped bit anywhere in the header is caught.
        for bit in 0..160 {
            let mut pkt = textbook();
            pkt[bit / 8] ^= 1 << (bit % 8);
            let r = Ipv4Repr::parse(&pkt, true);
            assert!(r.is_err(), "bit {bit} flip accepted");
        }
    }

    #[test]
    fn options_are_skipped() {
        // IHL 7: 8 bytes of options (a record-route-ish blob and an EOL).
        let base = textbook();
        let mut pkt = base[..20].to_vec();
        pkt.extend_from_slice(&[0x07, 0x07, 0x04, 0, 0, 0, 0, 0x00]);
        pkt.extend_from_slice(&base[20..]);
        pkt[0] = 0x47;
        let tl = pkt.len() as u16;
        pkt[2..4].copy_from_slice(&tl.to_be_bytes());
        fix_checksum(&mut pkt);
        let (r, payload) = Ipv4Repr::parse(&pkt, true).unwrap();
        assert_eq!(r, textbook_repr());
        assert_eq!(payload, &base[20..]);
        // Header (with options) longer than the buffer.
        assert_eq!(Ipv4Repr::parse(&pkt[..24], true), Err(WireError::Truncated));
        assert_eq!(
            Ipv4Repr::parse_quoted(&pkt[..24]),
            Err(WireError::Truncated)
        );
        // Quoted with options and 4 payload bytes.
        let (q, qp) = Ipv4Repr::parse_quoted(&pkt[..32]).unwrap();
        assert_eq!(q, textbook_repr());
        assert_eq!(qp, &base[20..24]);
    }

    #[test]
    fn fragments() {
        let mut r = textbook_repr();
        r.dont_frag = false;
        r.more_frags = true;
        r.frag_offset = 1480;
        assert!(r.is_fragment());
        let mut buf = vec![0u8; r.total_len()];
        r.emit(&mut buf);
        assert_eq!(&buf[6..8], &[0x20, 0xb9]); // MF | 185
        assert_eq!(Ipv4Repr::parse(&buf, true).unwrap().0, r);
        let mut last = r;
        last.more_frags = false;
        assert!(last.is_fragment());
        last.frag_offset = 0;
        assert!(!last.is_fragment());
        // The largest offset.
        r.frag_offset = 8191 * 8;
        r.emit(&mut buf);
        assert_eq!(Ipv4Repr::parse(&buf, true).unwrap().0.frag_offset, 65528);
    }

    #[test]
    fn quoted_truncated_datagram() {
        let pkt = textbook();
        // Header + the first 8 bytes of data, as RFC 792 requires at minimum.
        let (r, payload) = Ipv4Repr::parse_quoted(&pkt[..28]).unwrap();
        assert_eq!(r, textbook_repr());
        assert_eq!(payload, &pkt[20..28]);
        // The whole datagram plus trailing bytes: trimmed to total length.
        let mut long = pkt.clone();
        long.extend_from_slice(&[1, 2, 3]);
        let (_, payload) = Ipv4Repr::parse_quoted(&long).unwrap();
        assert_eq!(payload, &pkt[20..]);
        for n in 0..20 {
            assert_eq!(Ipv4Repr::parse_quoted(&pkt[..n]), Err(WireError::Truncated));
        }
        assert_eq!(Ipv4Repr::parse_quoted(&pkt[..20]).unwrap().1, &[] as &[u8]);
    }

    #[test]
    fn matches_etherparse_layout() {
        let r = Ipv4Repr {
            src: Ipv4Addr::new(10, 1, 2, 3),
            dst: Ipv4Addr::new(172, 16, 0, 9),
            protocol: ip_proto::TCP,
            ttl: 63,
            dscp_ecn: (46 << 2) | 1,
            ident: 0xbeef,
            dont_frag: false,
            more_frags: true,
            frag_offset: 64,
            payload_len: 1000,
        };
        let mut h = etherparse::Ipv4Header::new(
            1000,
            63,
            etherparse::IpNumber::TCP,
            [10, 1, 2, 3],
            [172, 16, 0, 9],
        )
        .unwrap();
        h.dscp = etherparse::IpDscp::try_new(46).unwrap();
        h.ecn = etherparse::IpEcn::try_new(1).unwrap();
        h.identification = 0xbeef;
        h.dont_fragment = false;
        h.more_fragments = true;
        h.fragment_offset = etherparse::IpFragOffset::try_new(8).unwrap();
        h.header_checksum = h.calc_header_checksum();
        let mut out = [0u8; 20];
        r.emit(&mut out);
        assert_eq!(&out[..], &h.to_bytes()[..]);
    }

    fn arb_repr() -> impl Strategy<Value = Ipv4Repr> {
        (
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            any::<u8>(),
            any::<u8>(),
            any::<u8>(),
            any::<u16>(),
            any::<(bool, bool)>(),
            0u16..8192,
            0u16..=65515,
        )
            .prop_map(|(s, d, protocol, ttl, dscp_ecn, ident, (df, mf), fo, pl)| {
                Ipv4Repr {
                    src: Ipv4Addr::from(s),
                    dst: Ipv4Addr::from(d),
                    protocol,
                    ttl,
                    dscp_ecn,
                    ident,
                    dont_frag: df,
                    more_frags: mf,
                    frag_offset: fo * 8,
                    payload_len: pl,
                }
            })
    }

    proptest! {
        #[test]
        fn round_trip(r in arb_repr()) {
            let mut hdr = [0u8; 20];
            r.emit(&mut hdr);
            // Parse the header alone as a quoted header (no payload needed)...
            let (q, qp) = Ipv4Repr::parse_quoted(&hdr).unwrap();
            prop_assert_eq!(q, r);
            prop_assert!(qp.is_empty());
            // ...and the full datagram with a payload.
            if r.payload_len <= 2000 {
                let mut buf = vec![0x5au8; r.total_len() + 3];
                buf[..20].copy_from_slice(&hdr);
                let (p, payload) = Ipv4Repr::parse(&buf, true).unwrap();
                prop_assert_eq!(p, r);
                prop_assert_eq!(payload.len(), usize::from(r.payload_len));
            }
        }

        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..80), v in any::<bool>()) {
            let _ = Ipv4Repr::parse(&data, v);
            let _ = Ipv4Repr::parse_quoted(&data);
        }

        #[test]
        fn never_panics_plausible(
            mut data in proptest::collection::vec(any::<u8>(), 20..120),
            ihl in 0u8..16,
        ) {
            // Mostly-valid headers reach the deeper checks.
            data[0] = 0x40 | ihl;
            let tl = data.len() as u16 ^ (u16::from(data[2]) & 0x3);
            data[2..4].copy_from_slice(&tl.to_be_bytes());
            if let Ok((r, p)) = Ipv4Repr::parse(&data, false) {
                prop_assert_eq!(p.len(), usize::from(r.payload_len));
                prop_assert!(usize::from(r.payload_len) + usize::from(ihl) * 4 <= data.len());
            }
            let _ = Ipv4Repr::parse_quoted(&data);
        }

        #[test]
        fn mutations_never_panic(
            r in arb_repr(),
            muts in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            cut in any::<usize>(),
        ) {
            let mut r = r;
            r.payload_len %= 64;
            let mut buf = vec![0u8; r.total_len()];
            r.emit(&mut buf);
            for (i, v) in muts {
                let i = i % buf.len();
                buf[i] = v;
            }
            let n = cut % (buf.len() + 1);
            for verify in [false, true] {
                if let Ok((p, payload)) = Ipv4Repr::parse(&buf[..n], verify) {
                    prop_assert_eq!(payload.len(), usize::from(p.payload_len));
                }
            }
            let _ = Ipv4Repr::parse_quoted(&buf[..n]);
        }
    }
}
