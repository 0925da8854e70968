//! ICMPv4 (RFC 792) policy: when an error may be sent, and what it quotes.
//!
//! RFC 1122 §3.2.2 lists datagrams that must never draw an ICMP error: ICMP errors
//! themselves, datagrams to a broadcast or multicast address, datagrams sent as link-layer
//! broadcasts, non-initial fragments, and datagrams whose source is not a unicast host.
//! Errors are rate-limited by a [`ratelimit::TokenBucket`] (`icmp_err_interval`,
//! `icmp_err_burst`). The quote is the offending IP header and as much of its payload as
//! keeps the error within 576 bytes (RFC 1812 §4.3.2.3).

pub mod ratelimit;

use crate::wire::{icmp_type, ip_proto, Ipv4Repr, IPV4_HEADER_LEN};

/// The largest ICMP error datagram ember sends (RFC 1812 §4.3.2.3).
pub const MAX_ERROR_DATAGRAM: usize = 576;

/// May this received datagram draw an ICMP error (RFC 1122 §3.2.2)?
/// `link_broadcast`: the frame was sent to the link broadcast address.
pub fn error_allowed(
    ip: &Ipv4Repr,
    payload: &[u8],
    link_broadcast: bool,
    local_broadcast: bool,
) -> bool {
    if link_broadcast || local_broadcast || ip.dst.is_broadcast() || ip.dst.is_multicast() {
        return false;
    }
    if super::ip::is_invalid_source(ip.src) || ip.src.is_loopback() && !ip.dst.is_loopback() {
        return false;
    }
    if ip.frag_offset != 0 {
        return false;
    }
    if ip.protocol == ip_proto::ICMP {
        // Only queries (echo and the like) may draw errors; never errors.
        match payload.first() {
            Some(&t) => matches!(
                t,
                icmp_type::ECHO_REQUEST | icmp_type::ECHO_REPLY | 13 | 14 | 17 | 18
            ),
            None => false,
        }
    } else {
        true
    }
}

/// How many bytes of the offending datagram (header included) to quote.
pub fn quote_len(datagram_len: usize) -> usize {
    // 20 (our IP header) + 8 (ICMP header) + quote <= 576.
    datagram_len.min(MAX_ERROR_DATAGRAM - IPV4_HEADER_LEN - 8)
}
