//! Ethernet II framing (IEEE 802.3 with an EtherType, RFC 894 for IPv4 over Ethernet).
//!
//! A frame is `dst(6) src(6) ethertype(2) payload`. The FCS is not seen (the NIC or the
//! kernel strips it). The payload returned by [`EthernetRepr::parse`] is the rest of the
//! frame and may include padding up to the 60-byte minimum frame; the network layer trims
//! it (IPv4 by its total length, ARP by its fixed size).
//!
//! No VLAN support: an 802.1Q frame parses with ethertype `0x8100` and the caller drops
//! it. Length-field (802.3/LLC) frames parse with their length as "ethertype" (< 0x0600)
//! and are likewise dropped by the caller.

use core::fmt;

use etherparse::Ethernet2HeaderSlice;

use super::{read_u16, write_u16, WireError};

/// A 48-bit IEEE 802 MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// `00:00:00:00:00:00` (e.g. the unknown target of an ARP request).
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// True for the all-ones broadcast address.
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// True if the group bit (least significant bit of the first octet) is set. Broadcast
    /// is a multicast address by this definition.
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// True if the group bit is clear (an individual address; [`MacAddr::ZERO`] counts).
    pub fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// EtherType values ember handles.
pub mod ethertype {
    /// Internet Protocol version 4.
    pub const IPV4: u16 = 0x0800;
    /// Address Resolution Protocol.
    pub const ARP: u16 = 0x0806;
}

/// Length of an Ethernet II header (no VLAN tag).
pub const ETHERNET_HEADER_LEN: usize = 14;

/// The fields of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Destination address.
    pub dst: MacAddr,
    /// Source address.
    pub src: MacAddr,
    /// EtherType, raw (see [`ethertype`]).
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Parses a frame. Returns the header and the payload (the rest of the frame,
    /// possibly including link padding). `Truncated` if shorter than 14 bytes.
    pub fn parse(frame: &[u8]) -> Result<(EthernetRepr, &[u8]), WireError> {
        let hdr = Ethernet2HeaderSlice::from_slice(frame).map_err(|_| WireError::Truncated)?;
        let repr = EthernetRepr {
            dst: MacAddr(hdr.destination()),
            src: MacAddr(hdr.source()),
            ethertype: hdr.ether_type().0,
        };
        Ok((repr, &frame[ETHERNET_HEADER_LEN..]))
    }

    /// Writes the 14-byte header into `buf[..14]`.
    ///
    /// Contract: `buf.len() >= ETHERNET_HEADER_LEN` (checked by `debug_assert!`; a shorter
    /// buffer is a caller bug and panics on indexing in release builds).
    pub fn emit(&self, buf: &mut [u8]) {
        debug_assert!(
            buf.len() >= ETHERNET_HEADER_LEN,
            "ethernet emit buffer too short"
        );
        buf[0..6].copy_from_slice(&self.dst.0);
        buf[6..12].copy_from_slice(&self.src.0);
        write_u16(buf, 12, self.ethertype);
    }
}

/// Reads the EtherType of a frame without parsing the rest (for quick dispatch).
pub fn peek_ethertype(frame: &[u8]) -> Option<u16> {
    if frame.len() < ETHERNET_HEADER_LEN {
        None
    } else {
        Some(read_u16(frame, 12))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn mac_classes_and_format() {
        assert!(MacAddr::BROADCAST.is_broadcast());
        assert!(MacAddr::BROADCAST.is_multicast());
        assert!(!MacAddr::BROADCAST.is_unicast());
        let mc = MacAddr([0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb]);
        assert!(mc.is_multicast() && !mc.is_broadcast() && !mc.is_unicast());
        let uc = MacAddr([0x02, 0xab, 0xcd, 0xef, 0x01, 0x23]);
        assert!(uc.is_unicast() && !uc.is_multicast() && !uc.is_broadcast());
        assert_eq!(uc.to_string(), "02:ab:cd:ef:01:23");
        assert_eq!(format!("{uc:?}"), "02:ab:cd:ef:01:23");
        assert_eq!(MacAddr::ZERO.to_string(), "00:00:00:00:00:00");
        assert_eq!(MacAddr::default(), MacAddr::ZERO);
        assert!(MacAddr::ZERO < MacAddr::BROADCAST);
    }

    #[test]
    fn known_frame() {
        let frame = [
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // dst
            0x52, 0x54, 0x00, 0x12, 0x34, 0x56, // src
            0x08, 0x06, // ARP
            0xde, 0xad, // payload
        ];
        let (r, payload) = EthernetRepr::parse(&frame).unwrap();
        assert_eq!(r.dst, MacAddr::BROADCAST);
        assert_eq!(r.src, MacAddr([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]));
        assert_eq!(r.ethertype, ethertype::ARP);
        assert_eq!(payload, &[0xde, 0xad]);
        assert_eq!(peek_ethertype(&frame), Some(0x0806));

        let mut out = [0u8; 14];
        r.emit(&mut out);
        assert_eq!(&out[..], &frame[..14]);
    }

    #[test]
    fn vlan_frame_is_reported_not_parsed() {
        let mut frame = [0u8; 18];
        frame[12] = 0x81;
        frame[13] = 0x00;
        let (r, payload) = EthernetRepr::parse(&frame).unwrap();
        assert_eq!(r.ethertype, 0x8100);
        assert_eq!(payload.len(), 4);
    }

    #[test]
    fn truncation_at_every_length() {
        let frame = [7u8; 14];
        for n in 0..14 {
            assert_eq!(EthernetRepr::parse(&frame[..n]), Err(WireError::Truncated));
            assert_eq!(peek_ethertype(&frame[..n]), None);
        }
        assert!(EthernetRepr::parse(&frame).unwrap().1.is_empty());
    }

    #[test]
    fn matches_etherparse_layout() {
        let h = etherparse::Ethernet2Header {
            source: [1, 2, 3, 4, 5, 6],
            destination: [7, 8, 9, 10, 11, 12],
            ether_type: etherparse::EtherType::IPV4,
        };
        let r = EthernetRepr {
            dst: MacAddr([7, 8, 9, 10, 11, 12]),
            src: MacAddr([1, 2, 3, 4, 5, 6]),
            ethertype: ethertype::IPV4,
        };
        let mut out = [0u8; 14];
        r.emit(&mut out);
        assert_eq!(out, h.to_bytes());
    }

    proptest! {
        #[test]
        fn round_trip(
            dst in any::<[u8; 6]>(),
            src in any::<[u8; 6]>(),
            et in any::<u16>(),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let r = EthernetRepr { dst: MacAddr(dst), src: MacAddr(src), ethertype: et };
            let mut buf = vec![0u8; 14 + payload.len()];
            buf[14..].copy_from_slice(&payload);
            r.emit(&mut buf);
            let (p, pl) = EthernetRepr::parse(&buf).unwrap();
            prop_assert_eq!(p, r);
            prop_assert_eq!(pl, &payload[..]);
        }

        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..40)) {
            let r = EthernetRepr::parse(&data);
            prop_assert_eq!(r.is_ok(), data.len() >= 14);
        }
    }
}
