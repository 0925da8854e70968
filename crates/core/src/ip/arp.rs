//! ARP neighbour cache (RFC 826), bounded, sans-IO.
//!
//! What: maps IPv4 neighbours to link-layer addresses. [`ArpCache::resolve`] is called for
//! each outgoing packet: it returns the link address, or queues the packet (bounded per
//! neighbour) while ARP requests are retried, or drops it. [`ArpCache::learn`] is called for
//! each received ARP packet and releases the queued packets. [`ArpCache::on_timeout`] drives
//! retries and gives up after `max_retries` requests, handing back the queued packets so
//! the caller can answer them with ICMP host unreachable (RFC 1122 §2.3.2.2 asks to keep at
//! least one queued packet per unresolved neighbour; we keep up to `max_pending`).
//!
//! The cache is generic over the link address `A` (a MAC address on Ethernet) and the
//! queued packet type `P`, so it knows nothing about either.
//!
//! Entry states (in the spirit of Linux's neighbour table, simplified):
//! - *incomplete*: a request was sent; packets wait in a FIFO; retried every
//!   `retry_interval`, failed after `max_retries` requests in all;
//! - *reachable*: resolved; valid until `reachable_time` after the last confirmation (an ARP
//!   packet from the neighbour). Once expired it is no longer used: the next packet starts
//!   a new resolution (Linux would keep using the stale address while probing; we prefer
//!   not to send to an address we can no longer vouch for);
//! - *permanent*: configured with [`ArpCache::insert_static`]; never expires, is never
//!   evicted and is never changed by received ARP packets.
//!
//! RFC 826 "Packet Reception": the sender's mapping is merged into an existing entry
//! whatever its state (except permanent), and a new entry is created only when we are the
//! target (`create`).
//!
//! Bounds: at most `max_entries` entries and `max_pending` packets per incomplete entry. When
//! the table is full, an expired reachable entry is evicted, else the incomplete entry whose
//! next request is due soonest (its packets are dropped and counted in
//! [`ArpCache::evicted_packets`]), else the least recently used reachable entry. Unresolved
//! neighbours go before resolved ones so that a flood of packets to addresses nobody
//! answers for (the SYN,ACKs to a spoofed SYN flood's sources) cannot push the live
//! neighbours out of the table, nor fill it so that they cannot get back in. Permanent
//! entries are never evicted; if nothing can be evicted the new neighbour is refused.
//!
//! Cost: entries live in a `BTreeMap` (keys can be chosen by the network, so no hashing to
//! flood; deterministic iteration). Three ordered indexes keep deadlines and ages:
//! `retries` (incomplete entries by next retry: `poll_timeout` is O(log n)), `expiry`
//! (reachable entries by expiry) and `lru` (reachable entries by last use). The LRU index is
//! maintained lazily: `resolve` only stamps `last_used` in the entry (no index update on the
//! per-packet path); the index key is refreshed when the entry reaches the front of the
//! index during an eviction, so each eviction costs amortised O(log n).
//!
//! Invariants:
//! - `entries.len() <= max_entries` (after `set_config` too);
//! - `retries` holds exactly one `(next_retry, ip)` per incomplete entry, `expiry` one
//!   `(expires, ip)` and `lru` one `(lru_key, ip)` per reachable entry;
//! - `pending` equals the total number of queued packets, and each queue holds at most
//!   `max_pending` packets (as configured when they were queued).

use crate::time::Instant;
use core::fmt::Debug;
use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::Ipv4Addr;

/// Neighbour cache parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArpConfig {
    /// Lifetime of a resolved entry after its last confirmation (default 300 s).
    pub reachable_time: Duration,
    /// Time between requests for an unresolved neighbour (default 1 s).
    pub retry_interval: Duration,
    /// Requests sent in all before giving up (default 3).
    pub max_retries: u32,
    /// Packets queued per unresolved neighbour (default 64).
    pub max_pending: usize,
    /// Entries in the table (default 1024).
    pub max_entries: usize,
}

impl Default for ArpConfig {
    fn default() -> Self {
        ArpConfig {
            reachable_time: Duration::from_secs(300),
            retry_interval: Duration::from_secs(1),
            max_retries: 3,
            max_pending: 64,
            max_entries: 1024,
        }
    }
}

/// The result of [`ArpCache::resolve`]. The packet is never lost: it is either handed back
/// or kept in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolve<A, P> {
    /// The neighbour is resolved: send the packet (handed back) to this address.
    Resolved(A, P),
    /// The packet was queued until the neighbour answers; send an ARP request now iff
    /// `send_request`.
    Queued {
        /// True for the first packet to an unresolved neighbour.
        send_request: bool,
    },
    /// The packet was not queued (queue full, or table full with nothing evictable) and is
    /// handed back to be dropped or answered.
    Dropped(P),
}

/// What [`ArpCache::on_timeout`] asks the caller to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArpTimeouts<P> {
    /// Send another ARP request for each of these.
    pub requests: Vec<Ipv4Addr>,
    /// Resolution failed: the packets that were waiting, in order, to drop or answer with
    /// ICMP destination unreachable, code 1 (host unreachable).
    pub failed: Vec<(Ipv4Addr, Vec<P>)>,
}

/// Why a static entry could not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArpError {
    /// The table holds `max_entries` entries and none can be evicted.
    TableFull,
}

impl core::fmt::Display for ArpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ArpError::TableFull => f.write_str("ARP table full"),
        }
    }
}

impl std::error::Error for ArpError {}

#[derive(Debug)]
enum State<A, P> {
    Incomplete {
        queue: VecDeque<P>,
        /// Requests sent so far.
        sent: u32,
        next_retry: Instant,
    },
    Reachable {
        addr: A,
        expires: Instant,
        last_used: Instant,
        /// The key under which this entry sits in the `lru` index (lazily refreshed).
        lru_key: Instant,
    },
    Permanent {
        addr: A,
    },
}

/// A bounded ARP neighbour cache.
#[derive(Debug)]
pub struct ArpCache<A, P> {
    cfg: ArpConfig,
    entries: BTreeMap<Ipv4Addr, State<A, P>>,
    retries: BTreeSet<(Instant, Ipv4Addr)>,
    expiry: BTreeSet<(Instant, Ipv4Addr)>,
    lru: BTreeSet<(Instant, Ipv4Addr)>,
    pending: usize,
    /// Packets dropped with the incomplete entries evicted to make room.
    evicted_packets: u64,
}

impl<A: Copy + Eq + Debug, P> ArpCache<A, P> {
    /// An empty cache.
    pub fn new(cfg: ArpConfig) -> Self {
        ArpCache {
            cfg,
            entries: BTreeMap::new(),
            retries: BTreeSet::new(),
            expiry: BTreeSet::new(),
            lru: BTreeSet::new(),
            pending: 0,
            evicted_packets: 0,
        }
    }

    /// The link address of `ip` if it is resolved and not expired (or permanent).
    pub fn lookup(&self, now: Instant, ip: Ipv4Addr) -> Option<A> {
        match self.entries.get(&ip)? {
            State::Permanent { addr } => Some(*addr),
            State::Reachable { addr, expires, .. } if now < *expires => Some(*addr),
            _ => None,
        }
    }

    /// Resolves `ip` for an outgoing packet.
    ///
    /// Returns [`Resolve::Resolved`] with the address and the packet (the caller sends it),
    /// or queues the packet until the neighbour answers ([`Resolve::Queued`]; the first
    /// packet creates an incomplete entry and asks for a request), or hands it back as
    /// [`Resolve::Dropped`] when the neighbour's queue is full or the table is full of
    /// entries that cannot be evicted. With `max_pending == 0` nothing is ever queued: the
    /// packet is dropped, but the entry is still created and the first request is asked
    /// for by [`ArpCache::on_timeout`] at once.
    pub fn resolve(&mut self, now: Instant, ip: Ipv4Addr, packet: P) -> Resolve<A, P> {
        let expired = match self.entries.get_mut(&ip) {
            Some(State::Permanent { addr }) => return Resolve::Resolved(*addr, packet),
            Some(State::Reachable {
                addr,
                expires,
                last_used,
                ..
            }) => {
                if now < *expires {
                    // Lazy LRU: only the entry is stamped; see the module comment.
                    *last_used = (*last_used).max(now);
                    return Resolve::Resolved(*addr, packet);
                }
                true
            }
            Some(State::Incomplete { queue, .. }) => {
                if queue.len() < self.cfg.max_pending {
                    queue.push_back(packet);
                    self.pending += 1;
                    return Resolve::Queued {
                        send_request: false,
                    };
                }
                return Resolve::Dropped(packet);
            }
            None => false,
        };
        if expired {
            // Reuse the slot for a new resolution.
            self.take(ip);
        } else if !self.make_room(now) {
            return Resolve::Dropped(packet);
        }
        if self.cfg.max_pending == 0 {
            self.put(
                ip,
                State::Incomplete {
                    queue: VecDeque::new(),
                    sent: 0,
                    next_retry: now,
                },
            );
            return Resolve::Dropped(packet);
        }
        let mut queue = VecDeque::new();
        queue.push_back(packet);
        self.put(
            ip,
            State::Incomplete {
                queue,
                sent: 1,
                next_retry: now + self.cfg.retry_interval,
            },
        );
        Resolve::Queued { send_request: true }
    }

    /// An ARP packet (request or reply) arrived from `ip` with link address `addr`.
    ///
    /// RFC 826 "Packet Reception": if `ip` has an entry, its address is updated and its
    /// lifetime renewed (permanent entries are left alone); otherwise an entry is created
    /// only if `create` (the packet was addressed to us) and there is room. Returns the
    /// packets that were waiting for this neighbour, in order, now sendable to `addr`.
    pub fn learn(&mut self, now: Instant, ip: Ipv4Addr, addr: A, create: bool) -> Vec<P> {
        let queued = match self.entries.get(&ip) {
            Some(State::Permanent { .. }) => return Vec::new(),
            Some(_) => match self.take(ip) {
                Some(State::Incomplete { queue, .. }) => Vec::from(queue),
                _ => Vec::new(),
            },
            None => {
                if !create || !self.make_room(now) {
                    return Vec::new();
                }
                Vec::new()
            }
        };
        self.put(
            ip,
            State::Reachable {
                addr,
                expires: now + self.cfg.reachable_time,
                last_used: now,
                lru_key: now,
            },
        );
        queued
    }

    /// Adds or replaces a permanent entry for `ip` (no expiry, never evicted, not changed by
    /// received ARP). If `ip` was being resolved, its queued packets are returned, in order,
    /// now sendable to `addr`. Fails only when the table is full of entries that cannot be
    /// evicted.
    pub fn insert_static(&mut self, ip: Ipv4Addr, addr: A) -> Result<Vec<P>, ArpError> {
        let queued = match self.take(ip) {
            Some(State::Incomplete { queue, .. }) => Vec::from(queue),
            Some(_) => Vec::new(),
            None => {
                // No clock here: evict by least recent use only.
                if !self.make_room(Instant::ZERO) {
                    return Err(ArpError::TableFull);
                }
                Vec::new()
            }
        };
        self.put(ip, State::Permanent { addr });
        Ok(queued)
    }

    /// Removes the entry for `ip` (whatever its state) and returns its queued packets.
    pub fn remove(&mut self, ip: Ipv4Addr) -> Vec<P> {
        match self.take(ip) {
            Some(State::Incomplete { queue, .. }) => Vec::from(queue),
            _ => Vec::new(),
        }
    }

    /// The next retry deadline of any unresolved neighbour. Expiry of resolved entries is
    /// lazy (checked on use) and not reported here.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.retries.first().map(|&(t, _)| t)
    }

    /// Handles every retry deadline `<= now`: another request while fewer than
    /// `max_retries` were sent, otherwise the entry is removed and its packets returned.
    /// Also purges resolved entries that expired by `now`.
    pub fn on_timeout(&mut self, now: Instant) -> ArpTimeouts<P> {
        let mut out = ArpTimeouts {
            requests: Vec::new(),
            failed: Vec::new(),
        };
        // Collect first: with a zero retry interval a re-armed entry is due again at once.
        let due: Vec<Ipv4Addr> = self
            .retries
            .range(..=(now, Ipv4Addr::BROADCAST))
            .map(|&(_, ip)| ip)
            .collect();
        for ip in due {
            match self.take(ip) {
                Some(State::Incomplete { queue, sent, .. }) => {
                    if sent >= self.cfg.max_retries {
                        out.failed.push((ip, Vec::from(queue)));
                    } else {
                        self.put(
                            ip,
                            State::Incomplete {
                                queue,
                                sent: sent + 1,
                                next_retry: now + self.cfg.retry_interval,
                            },
                        );
                        out.requests.push(ip);
                    }
                }
                // Not reachable (the index only holds incomplete entries); put it back.
                Some(other) => self.put(ip, other),
                None => {}
            }
        }
        let expired: Vec<Ipv4Addr> = self
            .expiry
            .range(..=(now, Ipv4Addr::BROADCAST))
            .map(|&(_, ip)| ip)
            .collect();
        for ip in expired {
            self.take(ip);
        }
        out
    }

    /// Replaces the configuration. New lifetimes and intervals apply from the next state
    /// change of each entry; a lower `max_entries` is enforced at once by evicting resolved
    /// entries (least recently used first; permanent and incomplete entries are kept, so the
    /// table may stay above the new bound until those go away); queues longer than a new
    /// `max_pending` keep their packets but accept no more.
    pub fn set_config(&mut self, cfg: ArpConfig) {
        self.cfg = cfg;
        while self.entries.len() > self.cfg.max_entries {
            if !self.evict_one(Instant::ZERO) {
                break;
            }
        }
    }

    /// The current configuration.
    pub fn config(&self) -> ArpConfig {
        self.cfg
    }

    /// Number of entries (all states).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if the cache has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Packets queued for all unresolved neighbours.
    pub fn pending_packets(&self) -> usize {
        self.pending
    }

    /// Every entry in address order, with its link address if resolved and valid at `now`
    /// (`None` for incomplete or expired entries): for netstat-style listings.
    pub fn iter(&self, now: Instant) -> impl Iterator<Item = (Ipv4Addr, Option<A>)> + '_ {
        self.entries.iter().map(move |(&ip, st)| {
            let addr = match st {
                State::Permanent { addr } => Some(*addr),
                State::Reachable { addr, expires, .. } if now < *expires => Some(*addr),
                _ => None,
            };
            (ip, addr)
        })
    }

    /// Inserts an entry and indexes it. Any previous entry for `ip` must have been taken.
    fn put(&mut self, ip: Ipv4Addr, st: State<A, P>) {
        match &st {
            State::Incomplete {
                queue, next_retry, ..
            } => {
                self.retries.insert((*next_retry, ip));
                self.pending += queue.len();
            }
            State::Reachable {
                expires, lru_key, ..
            } => {
                self.expiry.insert((*expires, ip));
                self.lru.insert((*lru_key, ip));
            }
            State::Permanent { .. } => {}
        }
        if let Some(old) = self.entries.insert(ip, st) {
            // Callers take first; stay consistent regardless.
            self.unindex(ip, &old);
        }
    }

    /// Removes an entry and its index records.
    fn take(&mut self, ip: Ipv4Addr) -> Option<State<A, P>> {
        let st = self.entries.remove(&ip)?;
        self.unindex(ip, &st);
        Some(st)
    }

    fn unindex(&mut self, ip: Ipv4Addr, st: &State<A, P>) {
        match st {
            State::Incomplete {
                queue, next_retry, ..
            } => {
                self.retries.remove(&(*next_retry, ip));
                self.pending = self.pending.saturating_sub(queue.len());
            }
            State::Reachable {
                expires, lru_key, ..
            } => {
                self.expiry.remove(&(*expires, ip));
                self.lru.remove(&(*lru_key, ip));
            }
            State::Permanent { .. } => {}
        }
    }

    /// Evicts until there is room for one more entry. False if that is impossible.
    fn make_room(&mut self, now: Instant) -> bool {
        while self.entries.len() >= self.cfg.max_entries {
            if !self.evict_one(now) {
                return false;
            }
        }
        true
    }

    /// Packets dropped so far with incomplete entries evicted to make room.
    pub fn evicted_packets(&self) -> u64 {
        self.evicted_packets
    }

    /// Evicts one entry: an expired reachable one if any, else the incomplete entry due
    /// for its next request soonest, else the least recently used reachable one.
    fn evict_one(&mut self, now: Instant) -> bool {
        if let Some(&(exp, ip)) = self.expiry.first() {
            if exp <= now {
                self.take(ip);
                return true;
            }
        }
        if let Some(&(_, ip)) = self.retries.first() {
            if let Some(State::Incomplete { queue, .. }) = self.take(ip) {
                self.evicted_packets += queue.len() as u64;
            }
            return true;
        }
        while let Some(&(key, ip)) = self.lru.first() {
            match self.entries.get_mut(&ip) {
                Some(State::Reachable {
                    last_used, lru_key, ..
                }) => {
                    if *last_used != key {
                        // Used since indexed: move it to its real place and look again.
                        // After this its key is current, so the loop terminates.
                        let fresh = *last_used;
                        *lru_key = fresh;
                        self.lru.remove(&(key, ip));
                        self.lru.insert((fresh, ip));
                        continue;
                    }
                    self.take(ip);
                    return true;
                }
                _ => {
                    // Stale index record (cannot happen); drop it.
                    self.lru.remove(&(key, ip));
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Mac = [u8; 6];
    const M1: Mac = [2, 0, 0, 0, 0, 1];
    const M2: Mac = [2, 0, 0, 0, 0, 2];

    fn ip(n: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 0, 0, n)
    }
    fn s(n: u64) -> Instant {
        Instant::from_secs(n)
    }
    fn cache(cfg: ArpConfig) -> ArpCache<Mac, u32> {
        ArpCache::new(cfg)
    }

    #[test]
    fn resolve_queue_learn_release() {
        let mut c = cache(ArpConfig::default());
        assert_eq!(
            c.resolve(s(0), ip(1), 1),
            Resolve::Queued { send_request: true }
        );
        assert_eq!(
            c.resolve(s(0), ip(1), 2),
            Resolve::Queued {
                send_request: false
            }
        );
        assert_eq!(
            c.resolve(s(0), ip(1), 3),
            Resolve::Queued {
                send_request: false
            }
        );
        assert_eq!(c.pending_packets(), 3);
        assert_eq!(c.lookup(s(0), ip(1)), None);
        assert_eq!(c.iter(s(0)).collect::<Vec<_>>(), vec![(ip(1), None)]);
        assert_eq!(c.learn(s(0), ip(1), M1, false), vec![1, 2, 3]);
        assert_eq!(c.pending_packets(), 0);
        assert_eq!(c.poll_timeout(), None);
        assert_eq!(c.lookup(s(0), ip(1)), Some(M1));
        assert_eq!(c.resolve(s(1), ip(1), 4), Resolve::Resolved(M1, 4));
        assert_eq!(c.iter(s(1)).collect::<Vec<_>>(), vec![(ip(1), Some(M1))]);
        // A later ARP packet updates the address.
        assert!(c.learn(s(2), ip(1), M2, false).is_empty());
        assert_eq!(c.lookup(s(2), ip(1)), Some(M2));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn queue_is_bounded() {
        let mut c = cache(ArpConfig {
            max_pending: 2,
            ..ArpConfig::default()
        });
        assert_eq!(
            c.resolve(s(0), ip(1), 1),
            Resolve::Queued { send_request: true }
        );
        assert_eq!(
            c.resolve(s(0), ip(1), 2),
            Resolve::Queued {
                send_request: false
            }
        );
        assert_eq!(c.resolve(s(0), ip(1), 3), Resolve::Dropped(3));
        assert_eq!(c.pending_packets(), 2);
        assert_eq!(c.learn(s(0), ip(1), M1, false), vec![1, 2]);
    }

    #[test]
    fn retries_then_failure() {
        let mut c = cache(ArpConfig::default());
        assert_eq!(
            c.resolve(s(10), ip(1), 1),
            Resolve::Queued { send_request: true }
        );
        assert_eq!(
            c.resolve(s(10), ip(1), 2),
            Resolve::Queued {
                send_request: false
            }
        );
        assert_eq!(c.poll_timeout(), Some(s(11)));
        let t = c.on_timeout(s(10) + Duration::from_millis(999));
        assert!(t.requests.is_empty() && t.failed.is_empty());
        let t = c.on_timeout(s(11));
        assert_eq!(t.requests, vec![ip(1)]);
        assert_eq!(c.poll_timeout(), Some(s(12)));
        let t = c.on_timeout(s(12));
        assert_eq!(t.requests, vec![ip(1)]);
        // Three requests sent (10 s, 11 s, 12 s): give up at 13 s.
        let t = c.on_timeout(s(13));
        assert!(t.requests.is_empty());
        assert_eq!(t.failed, vec![(ip(1), vec![1, 2])]);
        assert_eq!(c.len(), 0);
        assert_eq!(c.pending_packets(), 0);
        assert_eq!(c.poll_timeout(), None);
        // A new packet starts over.
        assert_eq!(
            c.resolve(s(14), ip(1), 3),
            Resolve::Queued { send_request: true }
        );
    }

    #[test]
    fn zero_retry_interval_terminates() {
        let mut c = cache(ArpConfig {
            retry_interval: Duration::ZERO,
            ..ArpConfig::default()
        });
        assert_eq!(
            c.resolve(s(0), ip(1), 1),
            Resolve::Queued { send_request: true }
        );
        let mut requests = 0;
        for _ in 0..10 {
            if c.poll_timeout().is_none() {
                break;
            }
            let t = c.on_timeout(s(0));
            requests += t.requests.len();
            if !t.failed.is_empty() {
                assert_eq!(t.failed, vec![(ip(1), vec![1])]);
            }
        }
        assert_eq!(requests, 2);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn max_pending_zero_still_resolves() {
        let mut c = cache(ArpConfig {
            max_pending: 0,
            ..ArpConfig::default()
        });
        assert_eq!(c.resolve(s(0), ip(1), 1), Resolve::Dropped(1));
        assert_eq!(c.poll_timeout(), Some(s(0)));
        assert_eq!(c.on_timeout(s(0)).requests, vec![ip(1)]);
        assert_eq!(c.resolve(s(0), ip(1), 2), Resolve::Dropped(2));
        assert!(c.learn(s(0), ip(1), M1, false).is_empty());
        assert_eq!(c.resolve(s(0), ip(1), 3), Resolve::Resolved(M1, 3));
    }

    #[test]
    fn create_flag() {
        let mut c = cache(ArpConfig::default());
        assert!(c.learn(s(0), ip(1), M1, false).is_empty());
        assert_eq!(c.len(), 0);
        assert!(c.learn(s(0), ip(1), M1, true).is_empty());
        assert_eq!(c.lookup(s(0), ip(1)), Some(M1));
    }

    #[test]
    fn expiry_and_refresh() {
        let mut c = cache(ArpConfig::default());
        c.learn(s(0), ip(1), M1, true);
        assert_eq!(c.lookup(s(299), ip(1)), Some(M1));
        assert_eq!(c.lookup(s(300), ip(1)), None);
        // A confirmation renews the lifetime.
        c.learn(s(200), ip(1), M1, false);
        assert_eq!(c.lookup(s(499), ip(1)), Some(M1));
        // Use alone does not.
        assert_eq!(c.resolve(s(450), ip(1), 1), Resolve::Resolved(M1, 1));
        assert_eq!(c.lookup(s(500), ip(1)), None);
        // An expired entry is resolved again.
        assert_eq!(
            c.resolve(s(500), ip(1), 2),
            Resolve::Queued { send_request: true }
        );
        assert_eq!(c.iter(s(500)).collect::<Vec<_>>(), vec![(ip(1), None)]);
        assert_eq!(c.learn(s(501), ip(1), M2, false), vec![2]);
        assert_eq!(c.lookup(s(501), ip(1)), Some(M2));
    }

    #[test]
    fn on_timeout_purges_expired_entries() {
        let mut c = cache(ArpConfig::default());
        c.learn(s(0), ip(1), M1, true);
        c.learn(s(100), ip(2), M1, true);
        c.on_timeout(s(350));
        assert_eq!(c.len(), 1);
        assert_eq!(c.lookup(s(350), ip(2)), Some(M1));
    }

    #[test]
    fn permanent_entries() {
        let mut c = cache(ArpConfig {
            max_entries: 2,
            ..ArpConfig::default()
        });
        assert_eq!(
            c.resolve(s(0), ip(1), 1),
            Resolve::Queued { send_request: true }
        );
        // A static entry resolves a pending neighbour and releases its packets.
        assert_eq!(c.insert_static(ip(1), M1), Ok(vec![1]));
        assert_eq!(c.poll_timeout(), None);
        assert_eq!(c.insert_static(ip(2), M2), Ok(vec![]));
        // Full of permanents: nothing evictable.
        assert_eq!(c.insert_static(ip(3), M2), Err(ArpError::TableFull));
        assert_eq!(c.resolve(s(0), ip(3), 2), Resolve::Dropped(2));
        assert!(c.learn(s(0), ip(3), M1, true).is_empty());
        assert_eq!(c.len(), 2);
        // Replacing an existing static entry needs no room.
        assert_eq!(c.insert_static(ip(2), M1), Ok(vec![]));
        // Never expires, not changed by ARP.
        assert!(c.learn(s(0), ip(1), M2, true).is_empty());
        assert_eq!(c.lookup(Instant::MAX, ip(1)), Some(M1));
        assert_eq!(c.resolve(Instant::MAX, ip(1), 3), Resolve::Resolved(M1, 3));
        c.on_timeout(Instant::MAX);
        assert_eq!(c.len(), 2);
        // But can be removed.
        assert!(c.remove(ip(1)).is_empty());
        assert_eq!(c.lookup(s(0), ip(1)), None);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn lru_eviction() {
        let mut c = cache(ArpConfig {
            max_entries: 3,
            ..ArpConfig::default()
        });
        c.learn(s(0), ip(1), M1, true);
        c.learn(s(1), ip(2), M1, true);
        c.learn(s(2), ip(3), M1, true);
        assert!(matches!(c.resolve(s(10), ip(1), 0), Resolve::Resolved(..)));
        assert!(matches!(c.resolve(s(11), ip(3), 0), Resolve::Resolved(..)));
        // ip(2) is least recently used.
        c.learn(s(12), ip(4), M2, true);
        assert_eq!(c.len(), 3);
        assert_eq!(c.lookup(s(12), ip(2)), None);
        assert!(c.lookup(s(12), ip(1)).is_some());
        // Now ip(1) (used at 10) is the oldest.
        assert_eq!(
            c.resolve(s(13), ip(5), 7),
            Resolve::Queued { send_request: true }
        );
        assert_eq!(c.lookup(s(13), ip(1)), None);
        assert!(c.lookup(s(13), ip(3)).is_some());
        assert!(c.lookup(s(13), ip(4)).is_some());
    }

    #[test]
    fn expired_entries_are_evicted_first() {
        let mut c = cache(ArpConfig {
            max_entries: 3,
            ..ArpConfig::default()
        });
        c.learn(s(0), ip(2), M1, true); // expires 300
        c.learn(s(10), ip(1), M1, true); // expires 310
        c.learn(s(20), ip(3), M1, true); // expires 320
        assert!(matches!(c.resolve(s(250), ip(2), 0), Resolve::Resolved(..)));
        // At 305 ip(2) is expired though recently used; ip(1) is the LRU.
        c.learn(s(305), ip(4), M1, true);
        assert!(c.iter(s(0)).all(|(a, _)| a != ip(2)));
        assert!(c.lookup(s(305), ip(1)).is_some());
    }

    /// A table full of unresolved neighbours makes room by evicting one of them (its
    /// packets counted as evicted), before any resolved neighbour: a flood of packets to
    /// addresses nobody answers for cannot lock the live neighbours out.
    #[test]
    fn incomplete_entries_go_before_reachable_ones() {
        let mut c = cache(ArpConfig {
            max_entries: 3,
            ..ArpConfig::default()
        });
        c.learn(s(0), ip(9), M1, true);
        assert_eq!(
            c.resolve(s(0), ip(1), 1),
            Resolve::Queued { send_request: true }
        );
        assert_eq!(
            c.resolve(s(1), ip(2), 2),
            Resolve::Queued { send_request: true }
        );
        // Full: ip(1), due soonest, goes.
        assert_eq!(
            c.resolve(s(2), ip(3), 3),
            Resolve::Queued { send_request: true }
        );
        assert_eq!(c.evicted_packets(), 1);
        assert_eq!(c.pending_packets(), 2);
        assert!(c.iter(s(2)).all(|(a, _)| a != ip(1)));
        // The resolved neighbour stayed, through a run of new unresolved ones.
        for k in 10..100u8 {
            let _ = c.resolve(s(3), ip(k), u32::from(k));
            assert!(matches!(c.resolve(s(3), ip(9), 0), Resolve::Resolved(..)));
        }
        assert_eq!(c.len(), 3);
        // A neighbour that answers gets in too.
        c.learn(s(4), ip(200), M1, true);
        assert_eq!(c.lookup(s(4), ip(200)), Some(M1));
        assert_eq!(c.lookup(s(4), ip(9)), Some(M1));
    }

    #[test]
    fn time_going_backwards() {
        let mut c = cache(ArpConfig {
            max_entries: 2,
            ..ArpConfig::default()
        });
        c.learn(s(1000), ip(1), M1, true);
        assert_eq!(c.lookup(s(0), ip(1)), Some(M1));
        assert!(matches!(c.resolve(s(0), ip(1), 1), Resolve::Resolved(..)));
        c.learn(s(500), ip(2), M1, true);
        c.learn(s(0), ip(3), M1, true);
        assert_eq!(c.len(), 2);
        assert_eq!(
            c.resolve(s(5), ip(4), 1),
            Resolve::Queued { send_request: true }
        );
        let t = c.on_timeout(s(0));
        assert!(t.requests.is_empty() && t.failed.is_empty());
        assert_eq!(c.poll_timeout(), Some(s(6)));
    }

    #[test]
    fn set_config_shrinks_table() {
        let mut c = cache(ArpConfig::default());
        for i in 1..=10 {
            c.learn(s(u64::from(i)), ip(i), M1, true);
        }
        c.insert_static(ip(100), M2).unwrap();
        assert_eq!(
            c.resolve(s(20), ip(101), 1),
            Resolve::Queued { send_request: true }
        );
        c.set_config(ArpConfig {
            max_entries: 5,
            ..ArpConfig::default()
        });
        assert_eq!(c.len(), 5);
        // The incomplete entry goes first (its packet counted), then the least recently
        // learned; the static one stays.
        let left: Vec<_> = c.iter(s(20)).map(|(a, _)| a).collect();
        assert_eq!(left, vec![ip(7), ip(8), ip(9), ip(10), ip(100)]);
        assert_eq!(c.evicted_packets(), 1);
        assert_eq!(c.pending_packets(), 0);
        c.set_config(ArpConfig {
            max_entries: 0,
            ..ArpConfig::default()
        });
        assert_eq!(c.len(), 1);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Resolve(u8, u64),
        Learn(u8, bool, u64),
        Static(u8),
        Remove(u8),
        Timeout(u64),
        Config(usize, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0u8..8, 0u64..20).prop_map(|(a, t)| Op::Resolve(a, t)),
            3 => (0u8..8, any::<bool>(), 0u64..20).prop_map(|(a, c, t)| Op::Learn(a, c, t)),
            1 => (0u8..8).prop_map(Op::Static),
            1 => (0u8..8).prop_map(Op::Remove),
            3 => (0u64..20).prop_map(Op::Timeout),
            1 => (0usize..6, 0usize..4).prop_map(|(e, p)| Op::Config(e, p)),
        ]
    }

    proptest! {
        /// Every packet handed to `resolve` comes back exactly once (or is still queued, or
        /// was counted as evicted with its entry), and the bounds and indexes hold after
        /// every call.
        #[test]
        fn packets_are_conserved_and_bounds_hold(ops in proptest::collection::vec(op(), 1..200)) {
            let mut cfg = ArpConfig {
                reachable_time: Duration::from_secs(5),
                retry_interval: Duration::from_secs(1),
                max_retries: 2,
                max_pending: 3,
                max_entries: 4,
            };
            let mut c: ArpCache<Mac, u32> = ArpCache::new(cfg);
            let mut next = 0u32;
            let mut back: Vec<u32> = Vec::new();
            let mut statics = BTreeSet::new();
            let mut shrunk = false;
            let mut prev_len = 0;
            for op in ops {
                match op {
                    Op::Resolve(a, t) => {
                        let p = next;
                        next += 1;
                        match c.resolve(s(t), ip(a), p) {
                            Resolve::Resolved(m, q) => {
                                prop_assert_eq!(q, p);
                                prop_assert_eq!(Some(m), c.lookup(s(t), ip(a)));
                                back.push(q);
                            }
                            Resolve::Dropped(q) => { prop_assert_eq!(q, p); back.push(q); }
                            Resolve::Queued { .. } => prop_assert!(c.lookup(s(t), ip(a)).is_none()),
                        }
                    }
                    Op::Learn(a, cr, t) => {
                        let had = c.iter(s(t)).any(|(x, _)| x == ip(a));
                        let got = c.learn(s(t), ip(a), [a; 6], cr);
                        if !statics.contains(&a) && (had || cr) && c.iter(s(t)).any(|(x, _)| x == ip(a)) {
                            prop_assert_eq!(c.lookup(s(t), ip(a)), Some([a; 6]));
                        }
                        back.extend(got);
                    }
                    Op::Static(a) => {
                        if let Ok(got) = c.insert_static(ip(a), [0xee; 6]) {
                            statics.insert(a);
                            back.extend(got);
                        }
                    }
                    Op::Remove(a) => { statics.remove(&a); back.extend(c.remove(ip(a))); }
                    Op::Timeout(t) => {
                        let r = c.on_timeout(s(t));
                        for (_, ps) in r.failed { back.extend(ps); }
                        if let Some(d) = c.poll_timeout() { prop_assert!(d > s(t)); }
                    }
                    Op::Config(e, p) => {
                        cfg.max_entries = e;
                        cfg.max_pending = p;
                        shrunk = true;
                        c.set_config(cfg);
                    }
                }
                // Bounds and bookkeeping.
                let queued: usize = c.entries.values().map(|st| match st {
                    State::Incomplete { queue, .. } => queue.len(), _ => 0 }).sum();
                prop_assert_eq!(queued, c.pending_packets());
                prop_assert_eq!(back.len() + queued + c.evicted_packets() as usize, next as usize);
                let inc = c.entries.values().filter(|st| matches!(st, State::Incomplete { .. })).count();
                let rea = c.entries.values().filter(|st| matches!(st, State::Reachable { .. })).count();
                prop_assert_eq!(c.retries.len(), inc);
                prop_assert_eq!(c.expiry.len(), rea);
                prop_assert_eq!(c.lru.len(), rea);
                if !shrunk {
                    prop_assert!(c.len() <= cfg.max_entries);
                    prop_assert!(c.pending_packets() <= cfg.max_entries * cfg.max_pending);
                }
                // The table never grows past the bound (after a lowered bound it may only
                // keep its size while non-evictable entries remain).
                prop_assert!(c.len() <= cfg.max_entries.max(prev_len));
                prev_len = c.len();
            }
            back.sort_unstable();
            back.dedup();
            let queued = c.pending_packets();
            prop_assert_eq!(back.len() + queued + c.evicted_packets() as usize, next as usize);
        }
    }
}
