//! The connection classifier: which connection (and so which squeue) a segment belongs to.
//!
//! # Design
//! * **Connected table**: exact 4-tuple (local, remote) → the connection's squeue and its
//!   key in that squeue's slab. It is split into [`SHARDS`] shards by a hash of the tuple,
//!   each behind its own reader-writer lock, so lookups from different squeues never
//!   serialise on one global lock and inserts (connection set-up) contend only within a
//!   shard.
//! * **Bind table**: local port → listeners on that port. A listener on a specific local
//!   address is found before one on the wildcard address (FireEngine's bind hash order).
//! * Lookup order for an arriving segment: exact 4-tuple, then listener. A segment that
//!   finds neither gets the replies of RFC 9293 §3.10.7.1 (built by the caller).
//!
//! The squeue of a new connection is decided by the caller (see `stack`): the caller's
//! CPU for an outbound connection, the receive queue's for an inbound one, the client's
//! for a loopback one.

use crate::socket::ListenerShared;
use ember_core::slab::Key;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, RwLock};

/// Shards of the connected table.
pub const SHARDS: usize = 64;

/// Where a connection lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLoc {
    pub sq: usize,
    pub key: Key,
}

/// (local, remote).
pub type Tuple = (SocketAddrV4, SocketAddrV4);

/// A symmetric-enough flow hash of a 4-tuple (FxHash-like mixing; stable for the life of
/// the process). Also used to pick receive queues (software RSS).
pub fn flow_hash(t: &Tuple) -> u64 {
    let a = u64::from(u32::from(*t.0.ip())) << 16 | u64::from(t.0.port());
    let b = u64::from(u32::from(*t.1.ip())) << 16 | u64::from(t.1.port());
    let mut h = (a ^ b.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h ^= h >> 31;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^ (h >> 29)
}

#[derive(Default, Clone, Copy)]
struct TupleHasher;

impl BuildHasher for TupleHasher {
    type Hasher = FlowHasher;
    fn build_hasher(&self) -> FlowHasher {
        FlowHasher(0)
    }
}

/// Hashes what `Tuple`'s `Hash` feeds it (addresses and ports) with a cheap mix; the
/// shard index already spread the keys, and tuples are not attacker-chosen enough to
/// matter for a per-shard table bounded by the connection limit.
pub struct FlowHasher(u64);

impl Hasher for FlowHasher {
    fn finish(&self) -> u64 {
        let mut h = self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^= h >> 32;
        h
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x100_0000_01B3);
        }
    }
    fn write_u16(&mut self, n: u16) {
        self.0 = (self.0.rotate_left(16) ^ u64::from(n)).wrapping_mul(0x100_0000_01B3);
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0.rotate_left(32) ^ u64::from(n)).wrapping_mul(0x100_0000_01B3);
    }
}

/// The classifier of one stack.
pub struct Classifier {
    conns: Vec<RwLock<HashMap<Tuple, ConnLoc, TupleHasher>>>,
    binds: RwLock<HashMap<u16, Vec<Arc<ListenerShared>>>>,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier {
            conns: (0..SHARDS)
                .map(|_| RwLock::new(HashMap::with_hasher(TupleHasher)))
                .collect(),
            binds: RwLock::new(HashMap::new()),
        }
    }
}

fn shard(t: &Tuple) -> usize {
    (flow_hash(t) % SHARDS as u64) as usize
}

impl Classifier {
    /// The connection with exactly this 4-tuple.
    pub fn lookup(&self, t: &Tuple) -> Option<ConnLoc> {
        self.conns[shard(t)]
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(t)
            .copied()
    }

    /// Adds a connection; `false` (and nothing changed) if the tuple is taken.
    pub fn insert(&self, t: Tuple, loc: ConnLoc) -> bool {
        let mut m = self.conns[shard(&t)]
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if m.contains_key(&t) {
            return false;
        }
        m.insert(t, loc);
        true
    }

    /// Removes a connection if the entry is still `loc` (a newer incarnation may have
    /// taken the tuple).
    pub fn remove(&self, t: &Tuple, loc: ConnLoc) {
        let mut m = self.conns[shard(t)]
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if m.get(t) == Some(&loc) {
            m.remove(t);
        }
    }

    /// Replaces the entry for `t` (TIME-WAIT reuse).
    pub fn replace(&self, t: Tuple, loc: ConnLoc) {
        self.conns[shard(&t)]
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(t, loc);
    }

    /// Is any connection using local port `port` (any address)? Scans every shard:
    /// for `bind`/`listen` only, never per packet.
    pub fn port_in_use(&self, port: u16) -> bool {
        self.conns.iter().any(|s| {
            s.read()
                .unwrap_or_else(|e| e.into_inner())
                .keys()
                .any(|(l, _)| l.port() == port)
        })
    }

    /// Connections in the table.
    pub fn len(&self) -> usize {
        self.conns
            .iter()
            .map(|s| s.read().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The listener for a segment to `local`: a specific address first, then the
    /// wildcard.
    pub fn listener(&self, local: SocketAddrV4) -> Option<Arc<ListenerShared>> {
        let b = self.binds.read().unwrap_or_else(|e| e.into_inner());
        let v = b.get(&local.port())?;
        v.iter()
            .find(|l| l.local.ip() == local.ip())
            .or_else(|| v.iter().find(|l| l.local.ip().is_unspecified()))
            .cloned()
    }

    /// Adds a listener unless its address clashes with another one (same port and the
    /// same address, or either wildcard): `AddrInUse`, as Linux's `bind`.
    pub fn add_listener(&self, l: Arc<ListenerShared>) -> std::io::Result<()> {
        let mut b = self.binds.write().unwrap_or_else(|e| e.into_inner());
        let v = b.entry(l.local.port()).or_default();
        let clash = v.iter().any(|o| {
            o.local.ip() == l.local.ip()
                || o.local.ip().is_unspecified()
                || l.local.ip().is_unspecified()
        });
        if clash {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                "address already in use",
            ));
        }
        v.push(l);
        Ok(())
    }

    /// Removes a listener.
    pub fn remove_listener(&self, l: &Arc<ListenerShared>) {
        let mut b = self.binds.write().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = b.get_mut(&l.local.port()) {
            v.retain(|o| !Arc::ptr_eq(o, l));
            if v.is_empty() {
                b.remove(&l.local.port());
            }
        }
    }

    /// Every listener (stack shutdown wakes their acceptors).
    pub fn listeners(&self) -> Vec<Arc<ListenerShared>> {
        self.binds
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .flatten()
            .cloned()
            .collect()
    }

    /// Is there a listener on `port` at `ip` (or the wildcard)?
    pub fn listening(&self, ip: Ipv4Addr, port: u16) -> bool {
        self.listener(SocketAddrV4::new(ip, port)).is_some()
    }
}
