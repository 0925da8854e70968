//! UDP header (RFC 768, RFC 1122 §4.1).
//!
//! Layout: source port 0, destination port 2, length 4, checksum 6; 8 bytes. The length
//! covers header + data; the checksum covers the IPv4 pseudo-header, the header and the
//! data. On IPv4 a checksum field of 0 means "not computed" and is accepted; a computed
//! checksum of 0 is therefore transmitted as `0xffff` (RFC 768).
//!
//! Parsing checks, in order: 8 bytes present (`Truncated`), length field >= 8
//! (`Malformed`), length field <= buffer (`Truncated`; bytes beyond the length are
//! ignored), destination port non-zero (`Malformed`), then the checksum when asked
//! (`BadChecksum`, RFC 1122 §4.1.3.4 MUST discard silently).

use std::net::Ipv4Addr;

use etherparse::UdpHeaderSlice;

use super::checksum;
use super::ip_proto;
use super::{write_u16, WireError};

/// Length of the UDP header.
pub const UDP_HEADER_LEN: usize = 8;

/// The fields of a UDP header that ember keeps (length and checksum are derived).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpRepr {
    /// Source port (0 = none, allowed by RFC 768).
    pub src_port: u16,
    /// Destination port (never 0 on a parsed datagram).
    pub dst_port: u16,
}

impl UdpRepr {
    /// Parses a datagram (`buf` = the IP payload). Length field >= 8 and <= `buf.len()`
    /// (trailing bytes beyond the length are ignored); checksum 0 means "none" on IPv4 and
    /// is accepted; otherwise verified against the pseudo-header when `verify_checksum`.
    /// Destination port 0 is `Malformed`. Returns the repr and the payload.
    pub fn parse(
        buf: &[u8],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        verify_checksum: bool,
    ) -> Result<(UdpRepr, &[u8]), WireError> {
        let hdr = UdpHeaderSlice::from_slice(buf).map_err(|_| WireError::Truncated)?;
        let len = usize::from(hdr.length());
        if len < UDP_HEADER_LEN {
            return Err(WireError::Malformed);
        }
        if len > buf.len() {
            return Err(WireError::Truncated);
        }
        if hdr.destination_port() == 0 {
            return Err(WireError::Malformed);
        }
        let dgram = &buf[..len];
        if verify_checksum && hdr.checksum() != 0 {
            let s = checksum::combine(
                checksum::pseudo_header(src, dst, ip_proto::UDP, hdr.length()),
                checksum::sum(dgram),
            );
            if checksum::finish(s) != 0 {
                return Err(WireError::BadChecksum);
            }
        }
        let repr = UdpRepr {
            src_port: hdr.source_port(),
            dst_port: hdr.destination_port(),
        };
        Ok((repr, &dgram[UDP_HEADER_LEN..]))
    }

    /// Writes the header into `buf[..8]`, where `buf` = 8 header bytes followed by the
    /// payload, already in place. The length field is `buf.len()`; the checksum covers the
    /// pseudo-header and all of `buf` (a computed 0 is sent as `0xffff`).
    ///
    /// Contract (`debug_assert!`): `8 <= buf.len() <= 65535`. A shorter buffer panics on
    /// indexing in release builds; a longer one would be a corrupt datagram.
    pub fn emit(&self, buf: &mut [u8], src: Ipv4Addr, dst: Ipv4Addr) {
        debug_assert!(buf.len() >= UDP_HEADER_LEN, "UDP emit buffer too short");
        debug_assert!(buf.len() <= usize::from(u16::MAX), "UDP datagram too long");
        let len = buf.len() as u16;
        write_u16(buf, 0, self.src_port);
        write_u16(buf, 2, self.dst_port);
        write_u16(buf, 4, len);
        write_u16(buf, 6, 0);
        let s = checksum::combine(
            checksum::pseudo_header(src, dst, ip_proto::UDP, len),
            checksum::sum(buf),
        );
        let c = match checksum::finish(s) {
            0 => 0xffff,
            c => c,
        };
        write_u16(buf, 6, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SRC: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 10);
    const DST: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 1);

    fn dgram(r: UdpRepr, payload: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; 8 + payload.len()];
        buf[8..].copy_from_slice(payload);
        r.emit(&mut buf, SRC, DST);
        buf
    }

    #[test]
    fn matches_etherparse() {
        let payload = b"hello, udp";
        let r = UdpRepr {
            src_port: 5353,
            dst_port: 53,
        };
        let buf = dgram(r, payload);
        let mut h = etherparse::UdpHeader::without_ipv4_checksum(5353, 53, payload.len()).unwrap();
        h.checksum = h
            .calc_checksum_ipv4_raw(SRC.octets(), DST.octets(), payload)
            .unwrap();
        assert_eq!(&buf[..8], &h.to_bytes());
        let (p, pl) = UdpRepr::parse(&buf, SRC, DST, true).unwrap();
        assert_eq!(p, r);
        assert_eq!(pl, payload);
    }

    #[test]
    fn known_answer() {
        // 10.0.0.1:1024 -> 10.0.0.2:53, payload "ab". Pseudo-header: 0a00+0001+0a00+0002
        // +0011+000a = 0x141e; header: 0400+0035+000a = 0x043f; data 6162.
        // Sum = 0x141e + 0x043f + 0x6162 = 0x79bf -> checksum 0x8640.
        let pkt = [0x04, 0x00, 0x00, 0x35, 0x00, 0x0a, 0x86, 0x40, b'a', b'b'];
        let (s, d) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let (r, pl) = UdpRepr::parse(&pkt, s, d, true).unwrap();
        assert_eq!(
            r,
            UdpRepr {
                src_port: 1024,
                dst_port: 53
            }
        );
        assert_eq!(pl, b"ab");
        let mut out = pkt;
        out[..8].fill(0);
        r.emit(&mut out, s, d);
        assert_eq!(out, pkt);
    }

    #[test]
    fn zero_checksum_accepted_and_computed_zero_sent_as_ffff() {
        let r = UdpRepr {
            src_port: 1,
            dst_port: 2,
        };
        let mut buf = dgram(r, b"xyz");
        buf[6] = 0;
        buf[7] = 0;
        assert!(UdpRepr::parse(&buf, SRC, DST, true).is_ok());

        // Find a payload word making the computed checksum 0: choose the last payload
        // word so the whole sum is 0xffff.
        let mut buf = vec![0u8; 10];
        r.emit(&mut buf, SRC, DST);
        let c = u16::from_be_bytes([buf[6], buf[7]]);
        let mut fixed = vec![0u8; 10];
        // With the checksum field zero, the sum S satisfies !S = c. Adding c as the last
        // word makes the sum 0xffff, i.e. a computed checksum of 0.
        fixed[8..10].copy_from_slice(&c.to_be_bytes());
        r.emit(&mut fixed, SRC, DST);
        assert_eq!(&fixed[6..8], &[0xff, 0xff]);
        assert!(UdpRepr::parse(&fixed, SRC, DST, true).is_ok());
    }

    #[test]
    fn malformed_and_truncated() {
        let r = UdpRepr {
            src_port: 4000,
            dst_port: 4001,
        };
        let buf = dgram(r, b"payload!");
        for n in 0..buf.len() {
            assert_eq!(
                UdpRepr::parse(&buf[..n], SRC, DST, false),
                Err(WireError::Truncated),
                "len {n}"
            );
        }
        // Length below 8.
        for l in 0u16..8 {
            let mut b = buf.clone();
            b[4..6].copy_from_slice(&l.to_be_bytes());
            assert_eq!(
                UdpRepr::parse(&b, SRC, DST, false),
                Err(WireError::Malformed)
            );
        }
        // Destination port 0.
        let mut b = dgram(
            UdpRepr {
                src_port: 9,
                dst_port: 0,
            },
            b"",
        );
        assert_eq!(
            UdpRepr::parse(&b, SRC, DST, true),
            Err(WireError::Malformed)
        );
        b[3] = 1;
        assert_eq!(
            UdpRepr::parse(&b, SRC, DST, true),
            Err(WireError::BadChecksum)
        );
        assert!(UdpRepr::parse(&b, SRC, DST, false).is_ok());
        // Trailing bytes beyond the length are ignored.
        let mut long = buf.clone();
        long.extend_from_slice(&[9, 9, 9]);
        let (_, pl) = UdpRepr::parse(&long, SRC, DST, true).unwrap();
        assert_eq!(pl, b"payload!");
    }

    #[test]
    fn bad_checksum_detected() {
        let r = UdpRepr {
            src_port: 4000,
            dst_port: 4001,
        };
        let buf = dgram(r, b"some data");
        for i in 0..buf.len() {
            if i == 4 || i == 5 {
                continue; // length changes are caught by other checks
            }
            let mut b = buf.clone();
            b[i] ^= 0x01;
            if b[6] == 0 && b[7] == 0 {
                continue;
            }
            let res = UdpRepr::parse(&b, SRC, DST, true);
            assert!(
                res == Err(WireError::BadChecksum) || res == Err(WireError::Malformed),
                "byte {i}: {res:?}"
            );
        }
        // Wrong addresses in the pseudo-header.
        assert_eq!(
            UdpRepr::parse(&buf, DST, SRC.to_bits().wrapping_add(1).into(), true),
            Err(WireError::BadChecksum)
        );
    }

    proptest! {
        #[test]
        fn round_trip(
            src_port in any::<u16>(),
            dst_port in 1u16..,
            payload in proptest::collection::vec(any::<u8>(), 0..200),
            s in any::<[u8; 4]>(),
            d in any::<[u8; 4]>(),
        ) {
            let r = UdpRepr { src_port, dst_port };
            let (s, d) = (Ipv4Addr::from(s), Ipv4Addr::from(d));
            let mut buf = vec![0u8; 8 + payload.len()];
            buf[8..].copy_from_slice(&payload);
            r.emit(&mut buf, s, d);
            prop_assert!(buf[6] != 0 || buf[7] != 0);
            let (p, pl) = UdpRepr::parse(&buf, s, d, true).unwrap();
            prop_assert_eq!(p, r);
            prop_assert_eq!(pl, &payload[..]);
        }

        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..40), v in any::<bool>()) {
            let _ = UdpRepr::parse(&data, SRC, DST, v);
        }

        #[test]
        fn mutations_never_panic(
            payload in proptest::collection::vec(any::<u8>(), 0..40),
            muts in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
            cut in any::<usize>(),
        ) {
            let mut buf = dgram(UdpRepr { src_port: 1, dst_port: 2 }, &payload);
            for (i, v) in muts {
                let i = i % buf.len();
                buf[i] = v;
            }
            let n = cut % (buf.len() + 1);
            for v in [false, true] {
                if let Ok((_, pl)) = UdpRepr::parse(&buf[..n], SRC, DST, v) {
                    prop_assert!(pl.len() + 8 <= n);
                }
            }
        }
    }
}
