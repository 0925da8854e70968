//! IPv4 (RFC 791) building blocks: the routing table ([`route`]), the ARP neighbour
//! cache ([`arp`]), fragment reassembly ([`reassembly`]), fragmentation ([`fragment`]),
//! software segmentation of large TCP segments ([`gso`]) and receive-side coalescing of
//! TCP segments ([`gro`]), plus address classification used by input checks.
//!
//! These are independent, bounded data structures. The [`crate::host::Host`] composes
//! them with the wire formats into an IP input and output path; the runtime will compose
//! them with its classifier and squeues in the same way.

pub mod arp;
pub mod fragment;
pub mod gro;
pub mod gso;
pub mod reassembly;
pub mod route;

pub use route::{IfaceId, Route, RouteTable};

use std::net::Ipv4Addr;

/// An address that must never appear as the source of a datagram we accept
/// (RFC 1122 §3.2.1.3: broadcast, multicast, "this network", and loopback arriving from a
/// real link are all invalid sources).
pub fn is_invalid_source(a: Ipv4Addr) -> bool {
    a.is_broadcast() || a.is_multicast() || a.is_unspecified() || a.octets()[0] == 0
}

/// The directed broadcast address of `addr/prefix_len` (none for /31 and /32).
pub fn subnet_broadcast(addr: Ipv4Addr, prefix_len: u8) -> Option<Ipv4Addr> {
    if prefix_len >= 31 {
        return None;
    }
    let mask = u32::MAX
        .checked_shl(32 - u32::from(prefix_len))
        .unwrap_or(0);
    Some(Ipv4Addr::from(u32::from(addr) | !mask))
}

/// True when `a` is inside `net/prefix_len`.
pub fn in_subnet(a: Ipv4Addr, net: Ipv4Addr, prefix_len: u8) -> bool {
    let mask = if prefix_len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix_len.min(32)))
    };
    u32::from(a) & mask == u32::from(net) & mask
}

/// A destination a connection may be opened to: a unicast address and a non-zero port
/// (`InvalidInput` otherwise, as `connect(2)` gives EINVAL-like errors).
pub fn check_destination(remote: std::net::SocketAddrV4) -> std::io::Result<()> {
    let ip = remote.ip();
    if remote.port() == 0 || ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "invalid destination",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert!(is_invalid_source(Ipv4Addr::BROADCAST));
        assert!(is_invalid_source(Ipv4Addr::new(224, 0, 0, 1)));
        assert!(is_invalid_source(Ipv4Addr::UNSPECIFIED));
        assert!(!is_invalid_source(Ipv4Addr::new(198, 18, 0, 1)));
        assert_eq!(
            subnet_broadcast(Ipv4Addr::new(198, 18, 0, 1), 24),
            Some(Ipv4Addr::new(198, 18, 0, 255))
        );
        assert_eq!(subnet_broadcast(Ipv4Addr::new(198, 18, 0, 1), 32), None);
        assert!(in_subnet(
            Ipv4Addr::new(198, 18, 3, 4),
            Ipv4Addr::new(198, 18, 0, 0),
            15
        ));
        assert!(!in_subnet(
            Ipv4Addr::new(198, 20, 3, 4),
            Ipv4Addr::new(198, 18, 0, 0),
            15
        ));
        assert!(in_subnet(
            Ipv4Addr::new(1, 2, 3, 4),
            Ipv4Addr::UNSPECIFIED,
            0
        ));
    }
}
