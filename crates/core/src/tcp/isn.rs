//! Initial sequence numbers (RFC 6528), timestamp offsets and ephemeral-port offsets.
//!
//! ISN = M + F(localip, localport, remoteip, remoteport, secretkey) where M is a clock
//! ticking every 4 µs (RFC 9293 §3.4.1) and F is SipHash-2-4 keyed with a per-stack
//! secret (RFC 6528 §3). The same keyed hash, with other domain separators, gives each
//! connection a random timestamp offset (so TSval does not leak uptime, RFC 7323 §7.1)
//! and the ephemeral-port search offset of RFC 6056 §3.3.3 (algorithm 3).
//! The secret is supplied by the driver: the core never reads a random source.

use super::seq::SeqNum;
use crate::time::Instant;
use core::hash::Hasher;
use siphasher::sip::SipHasher24;
use std::net::SocketAddrV4;

/// Keyed generator of per-connection secrets.
#[derive(Clone)]
pub struct IsnGenerator {
    key: [u8; 16],
}

impl core::fmt::Debug for IsnGenerator {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("IsnGenerator { key: <secret> }")
    }
}

impl IsnGenerator {
    /// A generator keyed with `secret` (128 bits from a good random source).
    pub fn new(secret: [u8; 16]) -> Self {
        IsnGenerator { key: secret }
    }

    fn hash(&self, domain: u8, local: SocketAddrV4, remote: SocketAddrV4) -> u64 {
        self.keyed(domain, local, remote, &[])
    }

    /// The keyed hash of a 4-tuple and `extra` words, in the hash domain `domain` (each
    /// use of the secret has its own domain, so no value can stand in for another).
    pub(super) fn keyed(
        &self,
        domain: u8,
        local: SocketAddrV4,
        remote: SocketAddrV4,
        extra: &[u32],
    ) -> u64 {
        let mut h = SipHasher24::new_with_key(&self.key);
        h.write_u8(domain);
        h.write(&local.ip().octets());
        h.write_u16(local.port());
        h.write(&remote.ip().octets());
        h.write_u16(remote.port());
        for &w in extra {
            h.write_u32(w);
        }
        h.finish()
    }

    /// RFC 6528 §3: the ISN for a connection opened at `now`.
    pub fn isn(&self, now: Instant, local: SocketAddrV4, remote: SocketAddrV4) -> SeqNum {
        let m = (now.as_nanos() / 4_000) as u32;
        SeqNum(m.wrapping_add(self.hash(0, local, remote) as u32))
    }

    /// A per-connection offset added to the timestamp clock (RFC 7323 §7.1).
    pub fn ts_offset(&self, local: SocketAddrV4, remote: SocketAddrV4) -> u32 {
        self.hash(1, local, remote) as u32
    }

    /// RFC 6056 §3.3.3: the offset at which the ephemeral-port search starts for a
    /// connection from `local_ip` to `remote`.
    pub fn port_offset(&self, local_ip: std::net::Ipv4Addr, remote: SocketAddrV4) -> u32 {
        self.hash(2, SocketAddrV4::new(local_ip, 0), remote) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn isn_is_keyed_and_clocked() {
        let a = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 1000);
        let b = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 80);
        let g1 = IsnGenerator::new([1; 16]);
        let g2 = IsnGenerator::new([2; 16]);
        let t = Instant::from_secs(10);
        assert_ne!(g1.isn(t, a, b), g2.isn(t, a, b));
        assert_ne!(g1.isn(t, a, b), g1.isn(t, b, a));
        // M advances one per 4 us.
        let later = g1.isn(t + core::time::Duration::from_micros(400), a, b);
        assert_eq!(later - g1.isn(t, a, b), 100);
        assert_ne!(g1.ts_offset(a, b), g1.ts_offset(b, a));
    }
}
