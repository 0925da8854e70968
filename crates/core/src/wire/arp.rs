//! ARP for Ethernet/IPv4 (RFC 826).
//!
//! Only the Ethernet (htype 1) / IPv4 (ptype 0x0800, hlen 6, plen 4) pairing with opcode
//! request (1) or reply (2) is accepted; anything else is `Unsupported` and dropped.
//! The packet is 28 bytes; trailing bytes (Ethernet padding to the 60-byte minimum) are
//! ignored.
//!
//! Layout (offsets in bytes): htype 0, ptype 2, hlen 4, plen 5, op 6, sha 8, spa 14,
//! tha 18, tpa 24.

use std::net::Ipv4Addr;

use etherparse::{ArpHardwareId, ArpOperation, ArpPacketSlice, EtherType};

use super::{read_u16, write_u16, MacAddr, WireError};

/// ARP opcode (RFC 826 `ar$op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpOp {
    /// `ares_op$REQUEST` (1).
    Request,
    /// `ares_op$REPLY` (2).
    Reply,
}

impl ArpOp {
    /// The opcode value on the wire.
    pub fn to_u16(self) -> u16 {
        match self {
            ArpOp::Request => ArpOperation::REQUEST.0,
            ArpOp::Reply => ArpOperation::REPLY.0,
        }
    }
}

/// Length of an Ethernet/IPv4 ARP packet.
pub const ARP_LEN: usize = 28;

/// An Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArpRepr {
    /// Request or reply.
    pub op: ArpOp,
    /// Sender hardware address (`ar$sha`).
    pub sender_mac: MacAddr,
    /// Sender protocol address (`ar$spa`).
    pub sender_ip: Ipv4Addr,
    /// Target hardware address (`ar$tha`; zero in a request).
    pub target_mac: MacAddr,
    /// Target protocol address (`ar$tpa`).
    pub target_ip: Ipv4Addr,
}

fn mac(b: &[u8]) -> Result<MacAddr, WireError> {
    <[u8; 6]>::try_from(b)
        .map(MacAddr)
        .map_err(|_| WireError::Truncated)
}

fn ip(b: &[u8]) -> Result<Ipv4Addr, WireError> {
    <[u8; 4]>::try_from(b)
        .map(Ipv4Addr::from)
        .map_err(|_| WireError::Truncated)
}

impl ArpRepr {
    /// Parses an ARP packet (the Ethernet payload).
    ///
    /// `Truncated` if shorter than the 8-byte fixed part or than 28 bytes;
    /// `Unsupported` unless htype 1, ptype 0x0800, hlen 6, plen 4 and op 1 or 2.
    pub fn parse(buf: &[u8]) -> Result<ArpRepr, WireError> {
        if buf.len() < 8 {
            return Err(WireError::Truncated);
        }
        // The fixed part decides whether we understand the packet at all (RFC 826
        // "Packet Reception": check hardware type, protocol type and lengths).
        if read_u16(buf, 0) != ArpHardwareId::ETHERNET.0
            || read_u16(buf, 2) != EtherType::IPV4.0
            || buf[4] != 6
            || buf[5] != 4
        {
            return Err(WireError::Unsupported);
        }
        let op = match read_u16(buf, 6) {
            1 => ArpOp::Request,
            2 => ArpOp::Reply,
            _ => return Err(WireError::Unsupported),
        };
        // With hlen 6 / plen 4 this requires exactly ARP_LEN bytes.
        let pkt = ArpPacketSlice::from_slice(buf).map_err(|_| WireError::Truncated)?;
        Ok(ArpRepr {
            op,
            sender_mac: mac(pkt.sender_hw_addr())?,
            sender_ip: ip(pkt.sender_protocol_addr())?,
            target_mac: mac(pkt.target_hw_addr())?,
            target_ip: ip(pkt.target_protocol_addr())?,
        })
    }

    /// Writes the 28-byte packet into `buf[..28]`.
    ///
    /// Contract: `buf.len() >= ARP_LEN` (`debug_assert!`; a shorter buffer is a caller
    /// bug and panics on indexing in release builds).
    pub fn emit(&self, buf: &mut [u8]) {
        debug_assert!(buf.len() >= ARP_LEN, "ARP emit buffer too short");
        write_u16(buf, 0, ArpHardwareId::ETHERNET.0);
        write_u16(buf, 2, EtherType::IPV4.0);
        buf[4] = 6;
        buf[5] = 4;
        write_u16(buf, 6, self.op.to_u16());
        buf[8..14].copy_from_slice(&self.sender_mac.0);
        buf[14..18].copy_from_slice(&self.sender_ip.octets());
        buf[18..24].copy_from_slice(&self.target_mac.0);
        buf[24..28].copy_from_slice(&self.target_ip.octets());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // A who-has 10.0.0.2 tell 10.0.0.1, as seen on the wire, with Ethernet padding.
    const REQUEST: [u8; 46] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, // fixed part, op=request
        0x52, 0x54, 0x00, 0x12, 0x34, 0x56, // sha
        10, 0, 0, 1, // spa
        0, 0, 0, 0, 0, 0, // tha
        10, 0, 0, 2, // tpa
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // padding
    ];

    #[test]
    fn known_request() {
        let r = ArpRepr::parse(&REQUEST).unwrap();
        assert_eq!(
            r,
            ArpRepr {
                op: ArpOp::Request,
                sender_mac: MacAddr([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
                sender_ip: Ipv4Addr::new(10, 0, 0, 1),
                target_mac: MacAddr::ZERO,
                target_ip: Ipv4Addr::new(10, 0, 0, 2),
            }
        );
        let mut out = [0u8; ARP_LEN];
        r.emit(&mut out);
        assert_eq!(&out[..], &REQUEST[..ARP_LEN]);
    }

    #[test]
    fn truncation_at_every_length() {
        for n in 0..ARP_LEN {
            assert_eq!(
                ArpRepr::parse(&REQUEST[..n]),
                Err(WireError::Truncated),
                "len {n}"
            );
        }
        assert!(ArpRepr::parse(&REQUEST[..ARP_LEN]).is_ok());
    }

    #[test]
    fn unsupported_variants() {
        let cases: [(usize, u8); 7] = [
            (1, 6),    // htype 6 (IEEE 802)
            (2, 0x86), // ptype 0x86dd
            (4, 8),    // hlen
            (5, 16),   // plen
            (7, 3),    // op 3 (RARP request)
            (7, 0),    // op 0
            (6, 1),    // op 0x0101
        ];
        for (at, v) in cases {
            let mut p = REQUEST;
            p[at] = v;
            assert_eq!(ArpRepr::parse(&p), Err(WireError::Unsupported), "{at}={v}");
            // Unsupported wins over truncation once the fixed part is present.
            assert_eq!(ArpRepr::parse(&p[..8]), Err(WireError::Unsupported));
        }
        let mut reply = REQUEST;
        reply[7] = 2;
        assert_eq!(ArpRepr::parse(&reply).unwrap().op, ArpOp::Reply);
    }

    #[test]
    fn matches_etherparse_layout() {
        let r = ArpRepr {
            op: ArpOp::Reply,
            sender_mac: MacAddr([1, 2, 3, 4, 5, 6]),
            sender_ip: Ipv4Addr::new(1, 2, 3, 4),
            target_mac: MacAddr([6, 5, 4, 3, 2, 1]),
            target_ip: Ipv4Addr::new(4, 3, 2, 1),
        };
        let p = etherparse::ArpEthIpv4Packet {
            operation: ArpOperation::REPLY,
            sender_mac: [1, 2, 3, 4, 5, 6],
            sender_ipv4: [1, 2, 3, 4],
            target_mac: [6, 5, 4, 3, 2, 1],
            target_ipv4: [4, 3, 2, 1],
        };
        let mut out = [0u8; ARP_LEN];
        r.emit(&mut out);
        assert_eq!(out, p.to_bytes());
    }

    fn arb_repr() -> impl Strategy<Value = ArpRepr> {
        (
            any::<bool>(),
            any::<[u8; 6]>(),
            any::<[u8; 4]>(),
            any::<[u8; 6]>(),
            any::<[u8; 4]>(),
        )
            .prop_map(|(req, sm, si, tm, ti)| ArpRepr {
                op: if req { ArpOp::Request } else { ArpOp::Reply },
                sender_mac: MacAddr(sm),
                sender_ip: Ipv4Addr::from(si),
                target_mac: MacAddr(tm),
                target_ip: Ipv4Addr::from(ti),
            })
    }

    proptest! {
        #[test]
        fn round_trip(r in arb_repr(), pad in 0usize..32) {
            let mut buf = vec![0xeeu8; ARP_LEN + pad];
            r.emit(&mut buf);
            prop_assert_eq!(ArpRepr::parse(&buf), Ok(r));
        }

        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = ArpRepr::parse(&data);
        }

        #[test]
        fn mutations_never_panic(
            r in arb_repr(),
            muts in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
            cut in any::<usize>(),
        ) {
            let mut buf = vec![0u8; ARP_LEN];
            r.emit(&mut buf);
            for (i, v) in muts {
                let i = i % buf.len();
                buf[i] = v;
            }
            let n = cut % (buf.len() + 1);
            let _ = ArpRepr::parse(&buf[..n]);
        }
    }
}
