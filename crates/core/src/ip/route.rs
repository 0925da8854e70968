//! IPv4 routing table with longest-prefix match.
//!
//! What: a bounded table of [`Route`]s (destination prefix, optional gateway, outgoing
//! interface, optional per-route MTU, metric) and a [`RouteTable::lookup`] that picks, for a
//! destination address, the route with the longest matching prefix (RFC 1812 §5.2.4.3:
//! "longest match"), ties broken by the lowest metric. `0.0.0.0/0` is the default route.
//!
//! Why this layout: lookup runs per packet on a route-cache miss, so it must be cheap and
//! must not depend on the number of routes. Routes are kept in 33 hash maps, one per prefix
//! length, keyed by the masked destination. A 64-bit mask records which prefix lengths hold at
//! least one route; lookup probes only those lengths, from /32 down, so a typical host table
//! (a few connected /24s plus a default) costs two or three hash probes. Keys are inserted
//! only by configuration, never by the network, and lookups cannot create collisions, so a
//! fixed, fast integer hasher is used (it also keeps iteration deterministic, which the
//! simulator relies on).
//!
//! Invariants:
//! - every stored route has `prefix_len <= 32` and no destination bits outside its prefix;
//! - within one (dst, prefix_len) bucket, routes are sorted by ascending metric and metrics
//!   are unique, so the first element is the preferred one;
//! - bit `n` of `present` is set iff `by_len[n]` is non-empty;
//! - `len` equals the total number of routes and never exceeds `max_routes`;
//! - `generation` changes on every successful mutation.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::Ipv4Addr;

/// Identifies a network interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct IfaceId(pub u16);

/// One route: packets to `dst/prefix_len` leave through `iface`, via `gateway` if any
/// (otherwise the destination is on-link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Destination network address (no bits set outside the prefix).
    pub dst: Ipv4Addr,
    /// Prefix length, 0..=32. `0.0.0.0/0` is the default route.
    pub prefix_len: u8,
    /// Next hop, or `None` when the destination is directly reachable on `iface`.
    pub gateway: Option<Ipv4Addr>,
    /// Outgoing interface.
    pub iface: IfaceId,
    /// Per-route MTU; `None` = the interface's MTU.
    pub mtu: Option<u16>,
    /// Preference among routes with the same prefix: lower wins.
    pub metric: u32,
}

/// Why a table operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    /// `prefix_len > 32`.
    InvalidPrefix,
    /// `dst` has bits set outside the prefix.
    HostBitsSet,
    /// A route with the same (dst, prefix_len, metric) already exists.
    Exists,
    /// No route with that (dst, prefix_len).
    NotFound,
    /// The table holds `max_routes` routes already.
    TableFull,
}

impl core::fmt::Display for RouteError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let s = match self {
            RouteError::InvalidPrefix => "prefix length greater than 32",
            RouteError::HostBitsSet => "destination has bits set outside the prefix",
            RouteError::Exists => "route already exists",
            RouteError::NotFound => "no such route",
            RouteError::TableFull => "routing table full",
        };
        f.write_str(s)
    }
}

impl std::error::Error for RouteError {}

/// The network mask for a prefix length (`len <= 32`).
fn mask(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

/// Checks a (dst, prefix_len) pair and returns the destination as an integer.
fn validate(dst: Ipv4Addr, prefix_len: u8) -> Result<u32, RouteError> {
    if prefix_len > 32 {
        return Err(RouteError::InvalidPrefix);
    }
    let d = u32::from(dst);
    if d & !mask(prefix_len) != 0 {
        return Err(RouteError::HostBitsSet);
    }
    Ok(d)
}

/// A fast, deterministic hasher for `u32` keys (a 64-bit multiply-xorshift mix). Only
/// configuration inserts keys, so flooding resistance is not needed.
#[derive(Default)]
struct PrefixHasher(u64);

impl Hasher for PrefixHasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).rotate_left(5) ^ self.0;
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n);
    }
}

type PrefixMap = HashMap<u32, Vec<Route>, BuildHasherDefault<PrefixHasher>>;

/// A bounded IPv4 routing table with longest-prefix-match lookup.
#[derive(Debug, Clone)]
pub struct RouteTable {
    /// `by_len[n]`: routes of prefix length `n`, keyed by masked destination; each bucket is
    /// sorted by ascending (unique) metric.
    by_len: Vec<PrefixMap>,
    /// Bit `n` set iff `by_len[n]` is non-empty.
    present: u64,
    len: usize,
    max_routes: usize,
    generation: u64,
}

impl RouteTable {
    /// An empty table that will hold at most `max_routes` routes.
    pub fn new(max_routes: usize) -> Self {
        RouteTable {
            by_len: (0..=32).map(|_| PrefixMap::default()).collect(),
            present: 0,
            len: 0,
            max_routes,
            generation: 0,
        }
    }

    /// Adds a route. Several routes may share a prefix if their metrics differ; the same
    /// (dst, prefix_len, metric) twice is [`RouteError::Exists`].
    pub fn add(&mut self, route: Route) -> Result<(), RouteError> {
        let key = validate(route.dst, route.prefix_len)?;
        let n = usize::from(route.prefix_len);
        let Some(map) = self.by_len.get_mut(n) else {
            return Err(RouteError::InvalidPrefix);
        };
        let bucket = map.get(&key);
        let pos = match bucket {
            Some(b) => match b.binary_search_by_key(&route.metric, |r| r.metric) {
                Ok(_) => return Err(RouteError::Exists),
                Err(pos) => pos,
            },
            None => 0,
        };
        if self.len >= self.max_routes {
            return Err(RouteError::TableFull);
        }
        map.entry(key).or_default().insert(pos, route);
        self.present |= 1u64 << n;
        self.len += 1;
        self.bump();
        Ok(())
    }

    /// Removes the lowest-metric route for exactly `dst/prefix_len` and returns it.
    pub fn remove(&mut self, dst: Ipv4Addr, prefix_len: u8) -> Result<Route, RouteError> {
        let key = validate(dst, prefix_len)?;
        let n = usize::from(prefix_len);
        let map = self.by_len.get_mut(n).ok_or(RouteError::InvalidPrefix)?;
        let bucket = map.get_mut(&key).ok_or(RouteError::NotFound)?;
        if bucket.is_empty() {
            // Not reachable (empty buckets are removed), but stay total.
            map.remove(&key);
            return Err(RouteError::NotFound);
        }
        let route = bucket.remove(0);
        if bucket.is_empty() {
            map.remove(&key);
        }
        if map.is_empty() {
            self.present &= !(1u64 << n);
        }
        self.len = self.len.saturating_sub(1);
        self.bump();
        Ok(route)
    }

    /// Removes every route through `iface` (e.g. when the interface goes down) and returns
    /// how many were removed.
    pub fn remove_iface(&mut self, iface: IfaceId) -> usize {
        let mut removed = 0;
        for (n, map) in self.by_len.iter_mut().enumerate() {
            if self.present & (1u64 << n) == 0 {
                continue;
            }
            map.retain(|_, bucket| {
                let before = bucket.len();
                bucket.retain(|r| r.iface != iface);
                removed += before - bucket.len();
                !bucket.is_empty()
            });
            if map.is_empty() {
                self.present &= !(1u64 << n);
            }
        }
        if removed > 0 {
            self.len = self.len.saturating_sub(removed);
            self.bump();
        }
        removed
    }

    /// The route for `dst`: longest matching prefix, ties broken by the lowest metric
    /// (RFC 1812 §5.2.4.3). `None` if no route (not even a default route) matches.
    pub fn lookup(&self, dst: Ipv4Addr) -> Option<&Route> {
        let d = u32::from(dst);
        let mut lens = self.present;
        while lens != 0 {
            // Highest set bit = longest remaining prefix length.
            let n = 63 - lens.leading_zeros();
            lens &= !(1u64 << n);
            let n = n as u8;
            if let Some(bucket) = self
                .by_len
                .get(usize::from(n))
                .and_then(|m| m.get(&(d & mask(n))))
            {
                if let Some(r) = bucket.first() {
                    return Some(r);
                }
            }
        }
        None
    }

    /// All routes, longest prefixes first, then by destination, then by metric (a stable
    /// order for listings).
    pub fn iter(&self) -> impl Iterator<Item = &Route> {
        let mut out: Vec<&Route> = Vec::with_capacity(self.len);
        for n in (0..=32usize).rev() {
            if self.present & (1u64 << n) == 0 {
                continue;
            }
            let start = out.len();
            if let Some(map) = self.by_len.get(n) {
                for bucket in map.values() {
                    out.extend(bucket.iter());
                }
            }
            if let Some(slice) = out.get_mut(start..) {
                slice.sort_by_key(|r| (u32::from(r.dst), r.metric));
            }
        }
        out.into_iter()
    }

    /// A counter bumped on every change; a cached lookup result is valid while it is
    /// unchanged.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the table holds no route.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The configured maximum number of routes.
    pub fn max_routes(&self) -> usize {
        self.max_routes
    }

    fn bump(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn r(dst: [u8; 4], len: u8, iface: u16, metric: u32) -> Route {
        Route {
            dst: Ipv4Addr::from(dst),
            prefix_len: len,
            gateway: None,
            iface: IfaceId(iface),
            mtu: None,
            metric,
        }
    }

    #[test]
    fn empty_table_has_no_route() {
        let t = RouteTable::new(8);
        assert!(t.is_empty());
        assert_eq!(t.lookup(Ipv4Addr::new(1, 2, 3, 4)), None);
        assert_eq!(t.iter().count(), 0);
    }

    #[test]
    fn longest_prefix_wins_and_default_route() {
        let mut t = RouteTable::new(16);
        t.add(r([0, 0, 0, 0], 0, 9, 0)).unwrap();
        t.add(r([10, 0, 0, 0], 8, 1, 0)).unwrap();
        t.add(r([10, 1, 0, 0], 16, 2, 0)).unwrap();
        t.add(r([10, 1, 2, 0], 24, 3, 0)).unwrap();
        t.add(r([10, 1, 2, 3], 32, 4, 0)).unwrap();
        let f = |a: [u8; 4]| t.lookup(Ipv4Addr::from(a)).unwrap().iface.0;
        assert_eq!(f([10, 1, 2, 3]), 4);
        assert_eq!(f([10, 1, 2, 4]), 3);
        assert_eq!(f([10, 1, 3, 4]), 2);
        assert_eq!(f([10, 2, 3, 4]), 1);
        assert_eq!(f([11, 2, 3, 4]), 9);
        assert_eq!(f([255, 255, 255, 255]), 9);
        assert_eq!(t.len(), 5);
    }

    #[test]
    fn ties_broken_by_lowest_metric() {
        let mut t = RouteTable::new(16);
        t.add(r([192, 168, 0, 0], 16, 1, 20)).unwrap();
        t.add(r([192, 168, 0, 0], 16, 2, 5)).unwrap();
        t.add(r([192, 168, 0, 0], 16, 3, 10)).unwrap();
        let a = Ipv4Addr::new(192, 168, 7, 7);
        assert_eq!(t.lookup(a).unwrap().iface, IfaceId(2));
        // remove() takes the lowest metric first.
        assert_eq!(
            t.remove(Ipv4Addr::new(192, 168, 0, 0), 16).unwrap().metric,
            5
        );
        assert_eq!(t.lookup(a).unwrap().iface, IfaceId(3));
        assert_eq!(
            t.remove(Ipv4Addr::new(192, 168, 0, 0), 16).unwrap().metric,
            10
        );
        assert_eq!(
            t.remove(Ipv4Addr::new(192, 168, 0, 0), 16).unwrap().metric,
            20
        );
        assert_eq!(
            t.remove(Ipv4Addr::new(192, 168, 0, 0), 16),
            Err(RouteError::NotFound)
        );
        assert_eq!(t.lookup(a), None);
        assert!(t.is_empty());
    }

    #[test]
    fn errors() {
        let mut t = RouteTable::new(2);
        assert_eq!(
            t.add(r([10, 0, 0, 0], 33, 1, 0)),
            Err(RouteError::InvalidPrefix)
        );
        assert_eq!(
            t.add(r([10, 0, 0, 1], 24, 1, 0)),
            Err(RouteError::HostBitsSet)
        );
        assert_eq!(
            t.add(r([1, 0, 0, 0], 0, 1, 0)),
            Err(RouteError::HostBitsSet)
        );
        t.add(r([10, 0, 0, 0], 24, 1, 0)).unwrap();
        assert_eq!(t.add(r([10, 0, 0, 0], 24, 2, 0)), Err(RouteError::Exists));
        t.add(r([10, 0, 0, 0], 24, 2, 1)).unwrap();
        assert_eq!(
            t.add(r([10, 0, 1, 0], 24, 2, 1)),
            Err(RouteError::TableFull)
        );
        // Exists is reported before TableFull.
        assert_eq!(t.add(r([10, 0, 0, 0], 24, 2, 1)), Err(RouteError::Exists));
        assert_eq!(
            t.remove(Ipv4Addr::new(10, 0, 0, 0), 40),
            Err(RouteError::InvalidPrefix)
        );
        assert_eq!(
            t.remove(Ipv4Addr::new(10, 0, 0, 1), 24),
            Err(RouteError::HostBitsSet)
        );
        assert_eq!(
            t.remove(Ipv4Addr::new(10, 0, 1, 0), 24),
            Err(RouteError::NotFound)
        );
        assert_eq!(t.len(), 2);
        let zero = RouteTable::new(0);
        let mut zero = zero;
        assert_eq!(
            zero.add(r([0, 0, 0, 0], 0, 1, 0)),
            Err(RouteError::TableFull)
        );
    }

    #[test]
    fn generation_bumps_only_on_change() {
        let mut t = RouteTable::new(4);
        let g0 = t.generation();
        t.add(r([10, 0, 0, 0], 8, 1, 0)).unwrap();
        let g1 = t.generation();
        assert_ne!(g0, g1);
        let _ = t.add(r([10, 0, 0, 0], 8, 1, 0));
        let _ = t.remove(Ipv4Addr::new(11, 0, 0, 0), 8);
        assert_eq!(t.remove_iface(IfaceId(7)), 0);
        assert_eq!(t.generation(), g1);
        assert_eq!(t.remove_iface(IfaceId(1)), 1);
        assert_ne!(t.generation(), g1);
    }

    #[test]
    fn remove_iface_removes_all_its_routes() {
        let mut t = RouteTable::new(16);
        t.add(r([0, 0, 0, 0], 0, 1, 0)).unwrap();
        t.add(r([0, 0, 0, 0], 0, 2, 1)).unwrap();
        t.add(r([10, 0, 0, 0], 8, 1, 0)).unwrap();
        t.add(r([10, 0, 0, 0], 8, 2, 3)).unwrap();
        t.add(r([172, 16, 0, 0], 12, 1, 0)).unwrap();
        assert_eq!(t.remove_iface(IfaceId(1)), 3);
        assert_eq!(t.len(), 2);
        assert!(t.iter().all(|r| r.iface == IfaceId(2)));
        assert_eq!(t.lookup(Ipv4Addr::new(10, 9, 9, 9)).unwrap().metric, 3);
        assert_eq!(
            t.lookup(Ipv4Addr::new(172, 16, 9, 9)).unwrap().prefix_len,
            0
        );
        // Room again after the removal.
        t.add(r([172, 16, 0, 0], 12, 3, 0)).unwrap();
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn iter_is_ordered() {
        let mut t = RouteTable::new(16);
        t.add(r([0, 0, 0, 0], 0, 1, 0)).unwrap();
        t.add(r([10, 2, 0, 0], 16, 1, 7)).unwrap();
        t.add(r([10, 1, 0, 0], 16, 1, 0)).unwrap();
        t.add(r([10, 1, 0, 0], 16, 1, 3)).unwrap();
        t.add(r([10, 1, 2, 3], 32, 1, 0)).unwrap();
        let v: Vec<(u8, Ipv4Addr, u32)> =
            t.iter().map(|r| (r.prefix_len, r.dst, r.metric)).collect();
        assert_eq!(
            v,
            vec![
                (32, Ipv4Addr::new(10, 1, 2, 3), 0),
                (16, Ipv4Addr::new(10, 1, 0, 0), 0),
                (16, Ipv4Addr::new(10, 1, 0, 0), 3),
                (16, Ipv4Addr::new(10, 2, 0, 0), 7),
                (0, Ipv4Addr::new(0, 0, 0, 0), 0),
            ]
        );
    }

    /// Brute-force reference: scan every route.
    fn model_lookup(routes: &[Route], dst: Ipv4Addr) -> Option<Route> {
        routes
            .iter()
            .filter(|r| u32::from(dst) & mask(r.prefix_len) == u32::from(r.dst))
            .min_by_key(|r| (core::cmp::Reverse(r.prefix_len), r.metric))
            .copied()
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u32, u8, u16, u32),
        Remove(u32, u8),
        RemoveIface(u16),
        Lookup(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Addresses from a small pool so that prefixes nest and collide often.
        let addr = prop_oneof![
            (0u32..4, 0u32..4, 0u32..4).prop_map(|(a, b, c)| 0x0a00_0000 | a << 16 | b << 8 | c),
            any::<u32>(),
        ];
        let len = prop_oneof![Just(0u8), Just(8), Just(16), Just(24), Just(32), 0u8..=34];
        prop_oneof![
            4 => (addr.clone(), len.clone(), 0u16..3, 0u32..3).prop_map(|(a, l, i, m)| Op::Add(a, l, i, m)),
            1 => (addr.clone(), len).prop_map(|(a, l)| Op::Remove(a, l)),
            1 => (0u16..3).prop_map(Op::RemoveIface),
            4 => addr.prop_map(Op::Lookup),
        ]
    }

    proptest! {
        #[test]
        fn lpm_matches_brute_force(ops in proptest::collection::vec(op(), 1..120), max in 0usize..40) {
            let mut t = RouteTable::new(max);
            let mut model: Vec<Route> = Vec::new();
            for op in ops {
                match op {
                    Op::Add(a, l, i, m) => {
                        // Mask the address half the time so that adds mostly succeed.
                        let a = if m == 0 && l <= 32 { a & mask(l) } else { a };
                        let route = Route { dst: Ipv4Addr::from(a), prefix_len: l, gateway: None, iface: IfaceId(i), mtu: Some(1500), metric: m };
                        let expected = if l > 32 {
                            Err(RouteError::InvalidPrefix)
                        } else if a & !mask(l) != 0 {
                            Err(RouteError::HostBitsSet)
                        } else if model.iter().any(|r| r.dst == route.dst && r.prefix_len == l && r.metric == m) {
                            Err(RouteError::Exists)
                        } else if model.len() >= max {
                            Err(RouteError::TableFull)
                        } else {
                            model.push(route);
                            Ok(())
                        };
                        prop_assert_eq!(t.add(route), expected);
                    }
                    Op::Remove(a, l) => {
                        let a = if l <= 32 { a & mask(l) } else { a };
                        let got = t.remove(Ipv4Addr::from(a), l);
                        if l > 32 {
                            prop_assert_eq!(got, Err(RouteError::InvalidPrefix));
                        } else {
                            let best = model.iter().enumerate()
                                .filter(|(_, r)| u32::from(r.dst) == a && r.prefix_len == l)
                                .min_by_key(|(_, r)| r.metric)
                                .map(|(i, _)| i);
                            match best {
                                Some(i) => { let m = model.remove(i); prop_assert_eq!(got, Ok(m)); }
                                None => prop_assert_eq!(got, Err(RouteError::NotFound)),
                            }
                        }
                    }
                    Op::RemoveIface(i) => {
                        let before = model.len();
                        model.retain(|r| r.iface != IfaceId(i));
                        prop_assert_eq!(t.remove_iface(IfaceId(i)), before - model.len());
                    }
                    Op::Lookup(a) => {
                        let a = Ipv4Addr::from(a);
                        prop_assert_eq!(t.lookup(a).copied(), model_lookup(&model, a));
                    }
                }
                prop_assert_eq!(t.len(), model.len());
                prop_assert_eq!(t.iter().count(), model.len());
            }
            // Final sweep: every stored route's own address resolves as the model says.
            for r in model.clone() {
                prop_assert_eq!(t.lookup(r.dst).copied(), model_lookup(&model, r.dst));
            }
        }
    }
}
