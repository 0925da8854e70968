//! ICMPv4 (RFC 792; RFC 1191 §4 for the next-hop MTU in "fragmentation needed").
//!
//! The message is `type(1) code(1) checksum(2) rest-of-header(4) body`, the checksum
//! covering the whole message (RFC 792). [`Icmpv4Repr::parse`] takes exactly the IP
//! payload, verifies the checksum (RFC 1122 §3.2.2: silently discard on failure) and
//! decodes the types ember acts on:
//!
//! * echo request/reply (types 8/0): identifier, sequence number, data. The code is not
//!   checked (RFC 792 says 0; tolerating others is harmless).
//! * destination unreachable (3) and time exceeded (11): the code and the quoted
//!   original datagram (IP header + at least 8 bytes), for the caller to parse with
//!   `Ipv4Repr::parse_quoted`. For code 4 (fragmentation needed, DF set) the next-hop MTU
//!   of RFC 1191 is read from bytes 6..8; for other codes it is reported as 0.
//! * everything else is `Other { icmp_type, code }`, which the caller ignores (RFC 1122
//!   §3.2.2: unknown types MUST be silently discarded).

use super::checksum;
use super::{read_u16, write_u16, WireError};

/// ICMP message types ember handles (RFC 792).
pub mod icmp_type {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 3;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
}

/// Destination-unreachable codes (RFC 792, RFC 1122 §3.2.2.1, RFC 1812 §5.2.7.1).
pub mod icmp_unreach {
    /// Net unreachable.
    pub const NET: u8 = 0;
    /// Host unreachable.
    pub const HOST: u8 = 1;
    /// Protocol unreachable.
    pub const PROTOCOL: u8 = 2;
    /// Port unreachable.
    pub const PORT: u8 = 3;
    /// Fragmentation needed and DF set (carries the next-hop MTU, RFC 1191).
    pub const FRAG_NEEDED: u8 = 4;
    /// Communication administratively prohibited (RFC 1812).
    pub const ADMIN_PROHIBITED: u8 = 13;
}

/// Length of the fixed ICMP header (type, code, checksum, 4 type-specific bytes).
pub const ICMP_HEADER_LEN: usize = 8;

/// An ICMPv4 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Icmpv4Repr<'a> {
    /// Echo request (type 8).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Data to be echoed.
        data: &'a [u8],
    },
    /// Echo reply (type 0).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Echoed data.
        data: &'a [u8],
    },
    /// Destination unreachable (type 3).
    DestUnreachable {
        /// Code (see [`icmp_unreach`]).
        code: u8,
        /// Next-hop MTU (RFC 1191); only meaningful for `FRAG_NEEDED`, 0 otherwise.
        next_hop_mtu: u16,
        /// The quoted IP header + data of the datagram that caused the error.
        original: &'a [u8],
    },
    /// Time exceeded (type 11).
    TimeExceeded {
        /// Code (0 TTL exceeded in transit, 1 reassembly time exceeded).
        code: u8,
        /// The quoted IP header + data of the datagram that caused the error.
        original: &'a [u8],
    },
    /// Any other type; the body is not decoded.
    Other {
        /// ICMP type.
        icmp_type: u8,
        /// ICMP code.
        code: u8,
    },
}

impl<'a> Icmpv4Repr<'a> {
    /// Parses an ICMP message (exactly the IP payload). `Truncated` if shorter than 8
    /// bytes; `BadChecksum` if the checksum over the whole message does not verify.
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        if buf.len() < ICMP_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if checksum::checksum(buf) != 0 {
            return Err(WireError::BadChecksum);
        }
        let icmp_type = buf[0];
        let code = buf[1];
        let body = &buf[ICMP_HEADER_LEN..];
        Ok(match icmp_type {
            icmp_type::ECHO_REQUEST => Icmpv4Repr::EchoRequest {
                ident: read_u16(buf, 4),
                seq_no: read_u16(buf, 6),
                data: body,
            },
            icmp_type::ECHO_REPLY => Icmpv4Repr::EchoReply {
                ident: read_u16(buf, 4),
                seq_no: read_u16(buf, 6),
                data: body,
            },
            icmp_type::DEST_UNREACHABLE => Icmpv4Repr::DestUnreachable {
                code,
                // RFC 1191 §4: bytes 4..6 unused, 6..8 next-hop MTU (0 from old routers).
                next_hop_mtu: if code == icmp_unreach::FRAG_NEEDED {
                    read_u16(buf, 6)
                } else {
                    0
                },
                original: body,
            },
            icmp_type::TIME_EXCEEDED => Icmpv4Repr::TimeExceeded {
                code,
                original: body,
            },
            _ => Icmpv4Repr::Other { icmp_type, code },
        })
    }

    /// The number of bytes [`Icmpv4Repr::emit`] writes: 8 + data/original length (8 for
    /// `Other`).
    pub fn buffer_len(&self) -> usize {
        ICMP_HEADER_LEN
            + match self {
                Icmpv4Repr::EchoRequest { data, .. } | Icmpv4Repr::EchoReply { data, .. } => {
                    data.len()
                }
                Icmpv4Repr::DestUnreachable { original, .. }
                | Icmpv4Repr::TimeExceeded { original, .. } => original.len(),
                Icmpv4Repr::Other { .. } => 0,
            }
    }

    /// Writes the message with its checksum into `buf[..self.buffer_len()]`.
    ///
    /// `DestUnreachable` writes `next_hop_mtu` only for code `FRAG_NEEDED` (zero
    /// otherwise, as RFC 792 requires for the unused field). `Other` is not really
    /// emittable: it writes its type and code with a zero 4-byte rest-of-header and no body.
    ///
    /// Contract: `buf.len() >= self.buffer_len()` (`debug_assert!`; a shorter buffer is a
    /// caller bug and panics on indexing in release builds). The caller keeps the message
    /// within the IP payload limit; the checksum is correct for any length.
    pub fn emit(&self, buf: &mut [u8]) {
        let len = self.buffer_len();
        debug_assert!(buf.len() >= len, "ICMP emit buffer too short");
        let (t, code, rest, body): (u8, u8, [u16; 2], &[u8]) = match *self {
            Icmpv4Repr::EchoRequest {
                ident,
                seq_no,
                data,
            } => (icmp_type::ECHO_REQUEST, 0, [ident, seq_no], data),
            Icmpv4Repr::EchoReply {
                ident,
                seq_no,
                data,
            } => (icmp_type::ECHO_REPLY, 0, [ident, seq_no], data),
            Icmpv4Repr::DestUnreachable {
                code,
                next_hop_mtu,
                original,
            } => {
                let mtu = if code == icmp_unreach::FRAG_NEEDED {
                    next_hop_mtu
                } else {
                    0
                };
                (icmp_type::DEST_UNREACHABLE, code, [0, mtu], original)
            }
            Icmpv4Repr::TimeExceeded { code, original } => {
                (icmp_type::TIME_EXCEEDED, code, [0, 0], original)
            }
            Icmpv4Repr::Other { icmp_type, code } => (icmp_type, code, [0, 0], &[]),
        };
        buf[0] = t;
        buf[1] = code;
        write_u16(buf, 2, 0);
        write_u16(buf, 4, rest[0]);
        write_u16(buf, 6, rest[1]);
        buf[ICMP_HEADER_LEN..len].copy_from_slice(body);
        let c = checksum::checksum(&buf[..len]);
        write_u16(buf, 2, c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn constants_match_etherparse() {
        use etherparse::icmpv4 as ep;
        assert_eq!(icmp_type::ECHO_REPLY, ep::TYPE_ECHO_REPLY);
        assert_eq!(icmp_type::ECHO_REQUEST, ep::TYPE_ECHO_REQUEST);
        assert_eq!(icmp_type::DEST_UNREACHABLE, ep::TYPE_DEST_UNREACH);
        assert_eq!(icmp_type::TIME_EXCEEDED, ep::TYPE_TIME_EXCEEDED);
        assert_eq!(icmp_unreach::NET, ep::CODE_DST_UNREACH_NET);
        assert_eq!(icmp_unreach::HOST, ep::CODE_DST_UNREACH_HOST);
        assert_eq!(icmp_unreach::PROTOCOL, ep::CODE_DST_UNREACH_PROTOCOL);
        assert_eq!(icmp_unreach::PORT, ep::CODE_DST_UNREACH_PORT);
        assert_eq!(icmp_unreach::FRAG_NEEDED, ep::CODE_DST_UNREACH_NEED_FRAG);
        assert_eq!(
            icmp_unreach::ADMIN_PROHIBITED,
            ep::CODE_DST_UNREACH_FILTER_PROHIB
        );
    }

    #[test]
    fn known_echo_request() {
        // `ping` style: id 0x1234, seq 1, data "abcd"; checksum computed by hand:
        // 0800 + 1234 + 0001 + 6162 + 6364 = defb -> checksum !defb = 2104.
        let pkt = [
            0x08, 0x00, 0x21, 0x04, 0x12, 0x34, 0x00, 0x01, b'a', b'b', b'c', b'd',
        ];
        let r = Icmpv4Repr::parse(&pkt).unwrap();
        assert_eq!(
            r,
            Icmpv4Repr::EchoRequest {
                ident: 0x1234,
                seq_no: 1,
                data: b"abcd"
            }
        );
        assert_eq!(r.buffer_len(), pkt.len());
        let mut out = [0u8; 12];
        r.emit(&mut out);
        assert_eq!(out, pkt);
    }

    #[test]
    fn matches_etherparse_echo_reply() {
        let data = b"0123456789abcdefXYZ";
        let r = Icmpv4Repr::EchoReply {
            ident: 0xbeef,
            seq_no: 0x0102,
            data,
        };
        let h = etherparse::Icmpv4Header::with_checksum(
            etherparse::Icmpv4Type::EchoReply(etherparse::IcmpEchoHeader {
                id: 0xbeef,
                seq: 0x0102,
            }),
            data,
        );
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut out);
        assert_eq!(&out[..8], &h.to_bytes()[..]);
        assert_eq!(&out[8..], data);
    }

    #[test]
    fn frag_needed_mtu() {
        let original = [0x45u8; 28];
        let r = Icmpv4Repr::DestUnreachable {
            code: icmp_unreach::FRAG_NEEDED,
            next_hop_mtu: 1400,
            original: &original,
        };
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut out);
        assert_eq!(&out[4..8], &[0, 0, 0x05, 0x78]);
        assert_eq!(Icmpv4Repr::parse(&out), Ok(r));

        // For other codes the field is unused: written as 0 and reported as 0.
        let port = Icmpv4Repr::DestUnreachable {
            code: icmp_unreach::PORT,
            next_hop_mtu: 1400,
            original: &original,
        };
        port.emit(&mut out);
        assert_eq!(&out[4..8], &[0, 0, 0, 0]);
        // A (bogus) value in the field of a non-FRAG_NEEDED message is ignored.
        out[6] = 0x05;
        out[2] = 0;
        out[3] = 0;
        let c = checksum::checksum(&out);
        out[2..4].copy_from_slice(&c.to_be_bytes());
        assert_eq!(
            Icmpv4Repr::parse(&out),
            Ok(Icmpv4Repr::DestUnreachable {
                code: icmp_unreach::PORT,
                next_hop_mtu: 0,
                original: &original,
            })
        );
    }

    #[test]
    fn other_types() {
        let r = Icmpv4Repr::Other {
            icmp_type: 13,
            code: 0,
        };
        assert_eq!(r.buffer_len(), 8);
        let mut out = [0xffu8; 8];
        r.emit(&mut out);
        assert_eq!(&out[4..8], &[0, 0, 0, 0]);
        assert_eq!(Icmpv4Repr::parse(&out), Ok(r));
        // With a body: still Other, body ignored.
        let mut pkt = vec![5u8, 1, 0, 0, 10, 0, 0, 1, 0x45, 0, 0, 0];
        let c = checksum::checksum(&pkt);
        pkt[2..4].copy_from_slice(&c.to_be_bytes());
        assert_eq!(
            Icmpv4Repr::parse(&pkt),
            Ok(Icmpv4Repr::Other {
                icmp_type: 5,
                code: 1
            })
        );
    }

    #[test]
    fn truncated_and_bad_checksum() {
        let r = Icmpv4Repr::TimeExceeded {
            code: 0,
            original: &[1, 2, 3, 4, 5, 6, 7, 8, 9],
        };
        let mut out = vec![0u8; r.buffer_len()];
        r.emit(&mut out);
        assert_eq!(Icmpv4Repr::parse(&out), Ok(r));
        for n in 0..8 {
            assert_eq!(Icmpv4Repr::parse(&out[..n]), Err(WireError::Truncated));
        }
        // Truncating the body breaks the checksum.
        for n in 8..out.len() {
            assert_eq!(Icmpv4Repr::parse(&out[..n]), Err(WireError::BadChecksum));
        }
        for i in 0..out.len() {
            let mut bad = out.clone();
            bad[i] ^= 0x10;
            assert_eq!(Icmpv4Repr::parse(&bad), Err(WireError::BadChecksum));
        }
        // An all-zero message (echo reply with checksum 0) does not verify.
        assert_eq!(Icmpv4Repr::parse(&[0u8; 8]), Err(WireError::BadChecksum));
    }

    fn build(kind: u8, a: u16, b: u16, code: u8, t: u8, data: &[u8]) -> Icmpv4Repr<'_> {
        match kind % 5 {
            0 => Icmpv4Repr::EchoRequest {
                ident: a,
                seq_no: b,
                data,
            },
            1 => Icmpv4Repr::EchoReply {
                ident: a,
                seq_no: b,
                data,
            },
            2 => Icmpv4Repr::DestUnreachable {
                code,
                next_hop_mtu: if code == icmp_unreach::FRAG_NEEDED {
                    a
                } else {
                    0
                },
                original: data,
            },
            3 => Icmpv4Repr::TimeExceeded {
                code,
                original: data,
            },
            _ => {
                let icmp_type = match t {
                    0 | 3 | 8 | 11 => t + 1,
                    t => t,
                };
                Icmpv4Repr::Other { icmp_type, code }
            }
        }
    }

    proptest! {
        #[test]
        fn round_trip(
            kind in 0u8..5,
            a in any::<u16>(),
            b in any::<u16>(),
            code in prop_oneof![Just(icmp_unreach::FRAG_NEEDED), any::<u8>()],
            t in any::<u8>(),
            data in proptest::collection::vec(any::<u8>(), 0..100),
        ) {
            let r = build(kind, a, b, code, t, &data);
            let mut buf = vec![0u8; r.buffer_len() + 5];
            r.emit(&mut buf);
            prop_assert_eq!(Icmpv4Repr::parse(&buf[..r.buffer_len()]), Ok(r));
        }

        #[test]
        fn mutations_never_panic(
            kind in 0u8..5,
            a in any::<u16>(),
            code in any::<u8>(),
            data in proptest::collection::vec(any::<u8>(), 0..40),
            muts in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
            cut in any::<usize>(),
        ) {
            let r = build(kind, a, a, code, code, &data);
            let mut buf = vec![0u8; r.buffer_len()];
            r.emit(&mut buf);
            for (i, v) in muts {
                let i = i % buf.len();
                buf[i] = v;
            }
            let n = cut % (buf.len() + 1);
            let _ = Icmpv4Repr::parse(&buf[..n]);
        }

        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Icmpv4Repr::parse(&data);
        }

        #[test]
        fn valid_checksum_random_bodies(mut data in proptest::collection::vec(any::<u8>(), 8..64)) {
            // Random messages with a correct checksum reach the type decoding.
            data[2] = 0;
            data[3] = 0;
            let c = checksum::checksum(&data);
            data[2..4].copy_from_slice(&c.to_be_bytes());
            // A correctly checksummed message always parses (even an all-zero one, whose
            // checksum is 0xffff).
            let r = Icmpv4Repr::parse(&data);
            prop_assert!(r.is_ok());
            if let Ok(r) = r {
                if !matches!(r, Icmpv4Repr::Other { .. }) {
                    prop_assert_eq!(r.buffer_len(), data.len());
                }
            }
        }
    }
}
