//! Wire formats: parsing and emitting the packets ember speaks.
//!
//! Every protocol gets a small `*Repr` value type holding the header fields the stack acts
//! on, with a `parse` function (bytes → repr + payload slice) and an `emit` function
//! (repr → bytes in a caller-provided buffer).
//!
//! Invariants shared by every module here:
//!
//! * **Parsing never panics** and never allocates, whatever the input: every length is
//!   checked before it is used, and a bad packet is an `Err(WireError)` that the caller
//!   counts and drops. Property tests feed random bytes and mutated valid packets into
//!   every parser.
//! * **Emitting never allocates**: it writes into `&mut [u8]` supplied by the caller. The
//!   required buffer length is documented on each `emit`; passing a shorter buffer is a
//!   caller bug, caught by a `debug_assert!` in debug builds (and by slice indexing, i.e.
//!   a panic, in release builds).
//! * Payloads are returned as sub-slices of the input (zero-copy).
//! * Round trip: for every representable repr, `parse(emit(r)) == r`.
//!
//! Header layouts are read through etherparse's zero-copy `*HeaderSlice` types where they
//! fit; TCP options, ICMP bodies and all emission are laid out by hand (etherparse's TCP
//! option reader rejects unknown kinds, which RFC 9293 requires us to skip, and its
//! owned header types are heavier than the fixed layouts we write).

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod icmp;
pub mod ipv4;
pub mod tcp;
pub mod udp;

pub use arp::{ArpOp, ArpRepr, ARP_LEN};
pub use ethernet::{ethertype, EthernetRepr, MacAddr, ETHERNET_HEADER_LEN};
pub use icmp::{icmp_type, icmp_unreach, Icmpv4Repr};
pub use ipv4::{ip_proto, Ipv4Repr, IPV4_HEADER_LEN};
pub use tcp::{SackBlock, TcpFlags, TcpOptions, TcpRepr, TCP_HEADER_LEN};
pub use udp::{UdpRepr, UDP_HEADER_LEN};

use core::fmt;

/// Why a packet could not be parsed. Every variant means "drop the packet"; the variants
/// exist for counters and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// The buffer is shorter than a header, or than a length field says it should be.
    Truncated,
    /// A field has an impossible value (bad version, header length below the minimum,
    /// a length field smaller than the header, destination port 0, ...).
    Malformed,
    /// The checksum does not verify.
    BadChecksum,
    /// A TCP option is malformed: a length byte below 2, an option running past the
    /// option space, or a known option with the wrong length (RFC 9293 MUST-7).
    BadOption,
    /// Well-formed but not something ember handles (e.g. ARP for a non-Ethernet/IPv4
    /// pairing, an unknown ARP opcode).
    Unsupported,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            WireError::Truncated => "truncated packet",
            WireError::Malformed => "malformed packet",
            WireError::BadChecksum => "bad checksum",
            WireError::BadOption => "bad TCP option",
            WireError::Unsupported => "unsupported packet",
        };
        f.write_str(s)
    }
}

impl std::error::Error for WireError {}

/// Reads a big-endian `u16` at `at`. Callers guarantee `at + 2 <= buf.len()`.
#[inline(always)]
pub(crate) fn read_u16(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([buf[at], buf[at + 1]])
}

/// Reads a big-endian `u32` at `at`. Callers guarantee `at + 4 <= buf.len()`.
#[inline(always)]
pub(crate) fn read_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

/// Writes a big-endian `u16` at `at`.
#[inline(always)]
pub(crate) fn write_u16(buf: &mut [u8], at: usize, v: u16) {
    buf[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian `u32` at `at`.
#[inline(always)]
pub(crate) fn write_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_error() {
        let all = [
            WireError::Truncated,
            WireError::Malformed,
            WireError::BadChecksum,
            WireError::BadOption,
            WireError::Unsupported,
        ];
        let mut seen = std::collections::HashSet::new();
        for e in all {
            let s = e.to_string();
            assert!(!s.is_empty());
            assert!(seen.insert(s), "messages must be distinct");
            let _: &dyn std::error::Error = &e;
        }
    }

    #[test]
    fn be_helpers() {
        let mut b = [0u8; 6];
        write_u16(&mut b, 0, 0x1234);
        write_u32(&mut b, 2, 0xdead_beef);
        assert_eq!(b, [0x12, 0x34, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(read_u16(&b, 0), 0x1234);
        assert_eq!(read_u32(&b, 2), 0xdead_beef);
    }
}
