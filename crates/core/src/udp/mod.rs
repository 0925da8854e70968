//! UDP (RFC 768) endpoints: a bound address and a bounded receive queue.
//!
//! Demultiplexing, checksums and ICMP port-unreachable replies live in the host's input
//! path; this module is the per-socket state. A socket's queue holds at most
//! `capacity` payload bytes; datagrams that do not fit are dropped and counted (as
//! Linux's `UDP_MIB_RCVBUFERRORS`).

use std::collections::VecDeque;
use std::net::SocketAddrV4;

/// Default receive queue size (Linux's `net.core.rmem_default`).
pub const DEFAULT_RCVBUF: usize = 212_992;
/// Largest UDP payload over IPv4 (65535 - 20 - 8).
pub const MAX_PAYLOAD: usize = 65_507;

/// One received datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram {
    pub from: SocketAddrV4,
    pub to: SocketAddrV4,
    pub data: Vec<u8>,
}

/// A bound UDP endpoint.
#[derive(Debug)]
pub struct UdpEndpoint {
    pub local: SocketAddrV4,
    queue: VecDeque<Datagram>,
    queued_bytes: usize,
    capacity: usize,
    pub drops: u64,
    /// The DiffServ/ECN byte of datagrams sent (IP_TOS).
    pub tos: u8,
}

impl UdpEndpoint {
    pub fn new(local: SocketAddrV4, capacity: usize) -> Self {
        UdpEndpoint {
            local,
            queue: VecDeque::new(),
            queued_bytes: 0,
            capacity,
            drops: 0,
            tos: 0,
        }
    }

    /// Queues a datagram; false (and counted) if the queue is full.
    pub fn push(&mut self, d: Datagram) -> bool {
        // Count a minimum per datagram so empty datagrams cannot grow the queue unbounded.
        let cost = d.data.len().max(64);
        if self.queued_bytes + cost > self.capacity {
            self.drops += 1;
            return false;
        }
        self.queued_bytes += cost;
        self.queue.push_back(d);
        true
    }

    pub fn pop(&mut self) -> Option<Datagram> {
        let d = self.queue.pop_front()?;
        self.queued_bytes -= d.data.len().max(64);
        Some(d)
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn set_capacity(&mut self, bytes: usize) {
        self.capacity = bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn queue_is_bounded() {
        let a = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9);
        let mut e = UdpEndpoint::new(a, 1000);
        let d = |n| Datagram {
            from: a,
            to: a,
            data: vec![0; n],
        };
        assert!(e.push(d(600)));
        assert!(!e.push(d(600)));
        for _ in 0..5 {
            e.push(d(0));
        }
        assert_eq!(e.len(), 6, "one 600-byte and five empty datagrams fit");
        assert!(e.drops >= 1);
        assert_eq!(e.pop().unwrap().data.len(), 600);
    }
}
