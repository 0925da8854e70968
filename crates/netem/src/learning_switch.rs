//! A small learning Ethernet switch built from impaired wires.
//!
//! The switch has `N` ports; port `p` is joined to one host by two [`Wire`]s, host→switch
//! ("up") and switch→host ("down"), each with its own [`ImpairConfig`] and its own random
//! stream derived from the switch's seed and the port (see [`derive_seed`]).
//!
//! Forwarding follows the transparent-bridge model (IEEE 802.1D-2004 §7.7 forwarding, §7.8
//! learning, §7.9 filtering database), reduced to what a test network needs:
//!
//! * **Learning.** Every frame that reaches the switch teaches it `source MAC → ingress
//!   port`, unless the source has the group (I/G) bit set, which no station may use as a
//!   source. The table is bounded ([`MAC_TABLE_CAPACITY`] entries); when full, the entry
//!   least recently refreshed by a frame from that source is evicted. There is no time-based
//!   aging: a host that moves is relearned from its next frame.
//! * **Forwarding.** A unicast frame to a known MAC goes out of that MAC's port only, and is
//!   dropped (filtered) if that is the port it came in on: never hairpinned. Broadcast,
//!   multicast (group bit set) and unknown unicast frames are flooded to every port but the
//!   ingress one. Forwarding itself takes no time: a frame reaching the switch at `t` is
//!   handed to its egress wire(s) at `t`.
//! * **Runts.** Frames shorter than an Ethernet header (14 bytes) are carried by the wires but
//!   dropped by the switch, which cannot read their addresses.
//!
//! # Stepping
//!
//! [`Switch::step`] moves every frame that has reached the switch by `now` to its egress
//! wires, in global arrival order (ties: lower ingress port first, then send order), and
//! hands each to its egress wire at its own arrival instant, not at `now`. Hence the result
//! does not depend on how often or how late `step` is called, as long as calls come with
//! non-decreasing `now`. [`Switch::recv`] steps lazily first, so a driver may skip `step`
//! altogether. [`Switch::next_event`] is complete without stepping: it includes frames still
//! travelling towards the switch, whose arrival is when the switch next has work.
//!
//! All decisions are deterministic: the MAC table is ordered (`BTreeMap`), and the only
//! randomness lives in the seeded wires.

use std::collections::BTreeMap;

use ember_core::time::Instant;

use crate::derive_seed;
use crate::impairment::{ImpairConfig, ETH_HEADER_LEN};
use crate::one_way_link::{SendOutcome, Wire};

/// Largest number of entries in the MAC table.
pub const MAC_TABLE_CAPACITY: usize = 4096;

/// Largest number of ports; [`Switch::new`] clamps to it (each port holds two wires).
pub const MAX_PORTS: usize = 1024;

/// Random sub-streams of the switch's wires start here (links use 0 and 1).
const STREAM_BASE: u64 = 1 << 32;

/// Counters of the switching logic (per-wire counters live in each [`Wire`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwitchStats {
    /// Frames taken off the up wires by the switch.
    pub frames_in: u64,
    /// Unicast frames sent out of exactly one (known) port.
    pub forwarded: u64,
    /// Frames flooded (broadcast, multicast or unknown unicast).
    pub flooded: u64,
    /// Frames dropped because their destination lives on their ingress port.
    pub filtered: u64,
    /// Frames dropped for being shorter than an Ethernet header.
    pub runts: u64,
    /// MAC addresses added to the table.
    pub learned: u64,
    /// Known MAC addresses seen on a different port than before.
    pub moved: u64,
    /// Table entries evicted to make room.
    pub evicted: u64,
    /// Frames discarded at ingress because they were corrupted on the way in (a
    /// store-and-forward switch checks the Ethernet FCS).
    pub fcs_errors: u64,
}

#[derive(Debug, Clone)]
struct Port {
    /// Host → switch.
    up: Wire,
    /// Switch → host.
    down: Wire,
}

#[derive(Debug, Clone, Copy)]
struct MacEntry {
    port: usize,
    /// Value of `Switch::clock` when last refreshed; the key of the entry in `by_age`.
    stamp: u64,
}

type Mac = [u8; 6];

/// A learning Ethernet switch whose ports are joined to hosts by impaired wires.
#[derive(Debug, Clone)]
pub struct Switch {
    ports: Vec<Port>,
    table: BTreeMap<Mac, MacEntry>,
    /// `stamp → MAC`, oldest first: eviction order.
    by_age: BTreeMap<u64, Mac>,
    clock: u64,
    stats: SwitchStats,
}

impl Switch {
    /// A switch with `ports` ports (at most [`MAX_PORTS`]), every port direction impaired by
    /// `cfg`; the up and down wires of port `p` use sub-streams `2p` and `2p + 1` of `seed`.
    pub fn new(ports: usize, cfg: ImpairConfig, seed: u64) -> Self {
        let n = ports.min(MAX_PORTS);
        let ports = (0..n as u64)
            .map(|p| Port {
                up: Wire::new(cfg.clone(), derive_seed(seed, STREAM_BASE + 2 * p)),
                down: Wire::new(cfg.clone(), derive_seed(seed, STREAM_BASE + 2 * p + 1)),
            })
            .collect();
        Switch {
            ports,
            table: BTreeMap::new(),
            by_age: BTreeMap::new(),
            clock: 0,
            stats: SwitchStats::default(),
        }
    }

    /// The wires of `port`, mutably, to change their impairment: `(host→switch,
    /// switch→host)`. `None` for a port that does not exist.
    pub fn port_config_mut(&mut self, port: usize) -> Option<(&mut Wire, &mut Wire)> {
        self.ports.get_mut(port).map(|p| (&mut p.up, &mut p.down))
    }

    /// The wires of `port`: `(host→switch, switch→host)`.
    pub fn port(&self, port: usize) -> Option<(&Wire, &Wire)> {
        self.ports.get(port).map(|p| (&p.up, &p.down))
    }

    /// The host on `port` transmits `frame` at `now` (onto its host→switch wire).
    /// [`SendOutcome::NoSuchPort`] if the port does not exist.
    pub fn send(&mut self, now: Instant, port: usize, frame: Vec<u8>) -> SendOutcome {
        match self.ports.get_mut(port) {
            Some(p) => p.up.send(now, frame),
            None => SendOutcome::NoSuchPort,
        }
    }

    /// The host on `port` receives one frame that has arrived by `now`, earliest first.
    /// Steps the switch to `now` first. `None` if nothing is due or the port does not exist.
    pub fn recv(&mut self, now: Instant, port: usize) -> Option<Vec<u8>> {
        if port >= self.ports.len() {
            return None;
        }
        self.step(now);
        self.ports[port].down.recv(now)
    }

    /// The earliest instant at which anything happens: a frame reaching the switch (work for
    /// [`step`](Self::step)) or a frame reaching a host. May be in the past if the switch has
    /// not been stepped; `None` when nothing is in flight anywhere.
    pub fn next_event(&self) -> Option<Instant> {
        self.ports
            .iter()
            .flat_map(|p| [p.up.next_arrival(), p.down.next_arrival()])
            .flatten()
            .min()
    }

    /// Moves every frame that has reached the switch by `now` to its egress port(s), in
    /// arrival order, each at its own arrival instant (see the module documentation).
    pub fn step(&mut self, now: Instant) {
        loop {
            let mut best: Option<(Instant, usize)> = None;
            for (i, p) in self.ports.iter().enumerate() {
                if let Some(t) = p.up.next_arrival() {
                    if t <= now && best.is_none_or(|(bt, _)| t < bt) {
                        best = Some((t, i));
                    }
                }
            }
            let Some((t, i)) = best else { break };
            let Some((frame, fcs_bad)) = self.ports[i].up.recv_checked(t) else {
                break;
            };
            if fcs_bad {
                // Store and forward: a frame whose FCS fails is dropped here, so that a
                // frame reaching a host is corrupted at most once (on its last link).
                self.stats.frames_in += 1;
                self.stats.fcs_errors += 1;
                continue;
            }
            self.forward(t, i, frame);
        }
    }

    /// Number of ports.
    pub fn ports(&self) -> usize {
        self.ports.len()
    }

    /// The switching counters.
    pub fn stats(&self) -> &SwitchStats {
        &self.stats
    }

    /// The port the switch has learned for `mac`, if any.
    pub fn lookup(&self, mac: [u8; 6]) -> Option<usize> {
        self.table.get(&mac).map(|e| e.port)
    }

    /// Number of MAC table entries (at most [`MAC_TABLE_CAPACITY`]).
    pub fn mac_table_len(&self) -> usize {
        self.table.len()
    }

    /// Forwarding decision for one frame that reached the switch at `t` on `ingress`.
    fn forward(&mut self, t: Instant, ingress: usize, frame: Vec<u8>) {
        self.stats.frames_in += 1;
        if frame.len() < ETH_HEADER_LEN {
            self.stats.runts += 1;
            return;
        }
        let mut dst = [0u8; 6];
        dst.copy_from_slice(&frame[0..6]);
        let mut src = [0u8; 6];
        src.copy_from_slice(&frame[6..12]);

        // IEEE 802.1D-2004 §7.8: learn from individual (non-group) source addresses only.
        if !is_group(src) {
            self.learn(src, ingress);
        }

        // §7.7 / §7.9: group addresses and unknown unicast are flooded.
        let known = if is_group(dst) {
            None
        } else {
            self.table.get(&dst).map(|e| e.port)
        };
        match known {
            Some(p) if p == ingress => self.stats.filtered += 1,
            Some(p) => {
                self.stats.forwarded += 1;
                // Egress drops are counted by the wire itself.
                let _ = self.ports[p].down.send(t, frame);
            }
            None => {
                self.stats.flooded += 1;
                let egress: Vec<usize> = (0..self.ports.len()).filter(|&p| p != ingress).collect();
                if let Some((&last, rest)) = egress.split_last() {
                    for &p in rest {
                        let _ = self.ports[p].down.send(t, frame.clone());
                    }
                    let _ = self.ports[last].down.send(t, frame);
                }
            }
        }
    }

    /// Records `mac → port`, refreshing its age; evicts the stalest entry when full.
    fn learn(&mut self, mac: Mac, port: usize) {
        let stamp = self.clock;
        self.clock += 1;
        if let Some(e) = self.table.get_mut(&mac) {
            if e.port != port {
                self.stats.moved += 1;
                e.port = port;
            }
            self.by_age.remove(&e.stamp);
            e.stamp = stamp;
            self.by_age.insert(stamp, mac);
            return;
        }
        if self.table.len() >= MAC_TABLE_CAPACITY {
            if let Some((_, old)) = self.by_age.pop_first() {
                self.table.remove(&old);
                self.stats.evicted += 1;
            }
        }
        self.table.insert(mac, MacEntry { port, stamp });
        self.by_age.insert(stamp, mac);
        self.stats.learned += 1;
    }
}

/// The I/G bit: least significant bit of the first octet (broadcast included).
fn is_group(mac: Mac) -> bool {
    mac[0] & 1 == 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;
    use proptest::prelude::*;

    const BCAST: Mac = [0xFF; 6];

    fn mac(n: u16) -> Mac {
        let [a, b] = n.to_be_bytes();
        [0x02, 0, 0, 0, a, b]
    }

    fn eth(dst: Mac, src: Mac, tag: u8) -> Vec<u8> {
        let mut f = Vec::with_capacity(60);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&src);
        f.extend_from_slice(&[0x08, 0x00]);
        f.resize(60, tag);
        f
    }

    fn t0() -> Instant {
        Instant::ZERO
    }

    fn recv_all(sw: &mut Switch, now: Instant, port: usize) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| sw.recv(now, port)).collect()
    }

    #[test]
    fn learns_floods_and_forwards() {
        let mut sw = Switch::new(4, ImpairConfig::default(), 1);
        assert_eq!(sw.ports(), 4);
        // Unknown destination: flooded to every other port.
        let f = eth(mac(2), mac(1), 1);
        assert_eq!(sw.send(t0(), 0, f.clone()), SendOutcome::Queued);
        assert_eq!(recv_all(&mut sw, t0(), 0), Vec::<Vec<u8>>::new());
        for p in 1..4 {
            assert_eq!(recv_all(&mut sw, t0(), p), vec![f.clone()]);
        }
        assert_eq!(sw.lookup(mac(1)), Some(0));
        assert_eq!(sw.stats().flooded, 1);
        // Reply to the learned MAC goes to port 0 only, and teaches mac(2) → port 2.
        let r = eth(mac(1), mac(2), 2);
        sw.send(t0(), 2, r.clone());
        sw.step(t0());
        assert_eq!(sw.lookup(mac(2)), Some(2));
        assert_eq!(recv_all(&mut sw, t0(), 0), vec![r]);
        for p in [1, 2, 3] {
            assert!(recv_all(&mut sw, t0(), p).is_empty());
        }
        // Now unicast 0 → 2 is forwarded, not flooded.
        let g = eth(mac(2), mac(1), 3);
        sw.send(t0(), 0, g.clone());
        assert_eq!(recv_all(&mut sw, t0(), 2), vec![g]);
        assert!(recv_all(&mut sw, t0(), 1).is_empty());
        assert!(recv_all(&mut sw, t0(), 3).is_empty());
        assert_eq!(sw.stats().forwarded, 2);
        assert_eq!(sw.stats().flooded, 1);
    }

    #[test]
    fn broadcast_and_multicast_flood_even_if_known() {
        let mut sw = Switch::new(3, ImpairConfig::default(), 2);
        sw.send(t0(), 1, eth(BCAST, mac(1), 0));
        sw.step(t0());
        for p in 0..3 {
            let _ = recv_all(&mut sw, t0(), p);
        }
        let mcast = [0x01, 0x00, 0x5E, 0, 0, 1];
        for dst in [BCAST, mcast] {
            let f = eth(dst, mac(9), 1);
            sw.send(t0(), 2, f.clone());
            assert_eq!(recv_all(&mut sw, t0(), 0), vec![f.clone()]);
            assert_eq!(recv_all(&mut sw, t0(), 1), vec![f.clone()]);
            assert!(recv_all(&mut sw, t0(), 2).is_empty());
        }
        // A group source address is never learned.
        sw.send(t0(), 0, eth(mac(1), mcast, 2));
        sw.step(t0());
        assert_eq!(sw.lookup(mcast), None);
    }

    #[test]
    fn no_hairpinning() {
        let mut sw = Switch::new(3, ImpairConfig::default(), 3);
        // Two hosts behind port 0 (as if through another switch).
        sw.send(t0(), 0, eth(BCAST, mac(1), 0));
        sw.send(t0(), 0, eth(BCAST, mac(2), 0));
        sw.step(t0());
        for p in 0..3 {
            let _ = recv_all(&mut sw, t0(), p);
        }
        sw.send(t0(), 0, eth(mac(2), mac(1), 1));
        sw.step(t0());
        for p in 0..3 {
            assert!(recv_all(&mut sw, t0(), p).is_empty());
        }
        assert_eq!(sw.stats().filtered, 1);
    }

    #[test]
    fn host_move_is_relearned() {
        let mut sw = Switch::new(3, ImpairConfig::default(), 4);
        sw.send(t0(), 0, eth(BCAST, mac(1), 0));
        sw.step(t0());
        assert_eq!(sw.lookup(mac(1)), Some(0));
        sw.send(t0(), 2, eth(BCAST, mac(1), 0));
        sw.step(t0());
        assert_eq!(sw.lookup(mac(1)), Some(2));
        assert_eq!(sw.stats().moved, 1);
        assert_eq!(sw.stats().learned, 1);
    }

    #[test]
    fn mac_table_is_bounded_oldest_evicted() {
        let mut sw = Switch::new(2, ImpairConfig::default(), 5);
        let extra = 10u16;
        let total = MAC_TABLE_CAPACITY as u16 + extra;
        for n in 0..total {
            sw.send(t0(), 0, eth(BCAST, mac(n), 0));
            if n == 20 {
                // Refresh mac(0): now mac(1) is the oldest entry.
                sw.send(t0(), 0, eth(BCAST, mac(0), 0));
            }
        }
        sw.step(t0());
        assert_eq!(sw.mac_table_len(), MAC_TABLE_CAPACITY);
        assert_eq!(sw.stats().evicted, u64::from(extra));
        // mac(0) was refreshed, so mac(1)..=mac(10) were the oldest.
        assert_eq!(sw.lookup(mac(0)), Some(0));
        for n in 1..=extra {
            assert_eq!(sw.lookup(mac(n)), None, "mac {n}");
        }
        assert_eq!(sw.lookup(mac(extra + 1)), Some(0));
        assert_eq!(sw.lookup(mac(total - 1)), Some(0));
        // A frame to an evicted address is flooded again.
        let flooded = sw.stats().flooded;
        sw.send(t0(), 1, eth(mac(3), mac(60000), 0));
        sw.step(t0());
        assert_eq!(sw.stats().flooded, flooded + 1);
    }

    /// Frames corrupted on their way into the switch are dropped there (FCS check);
    /// frames corrupted on the way out reach the host, flipped in exactly one bit.
    #[test]
    fn corrupted_ingress_frames_are_dropped_egress_ones_delivered() {
        let cfg = ImpairConfig {
            corrupt: 1.0,
            ..ImpairConfig::default()
        };
        let mut sw = Switch::new(2, ImpairConfig::default(), 7);
        if let Some((up, _)) = sw.port_config_mut(0) {
            up.set_config(cfg.clone());
        }
        let f = eth(mac(2), mac(1), 1);
        for _ in 0..10 {
            sw.send(t0(), 0, f.clone());
        }
        assert!(recv_all(&mut sw, t0(), 1).is_empty());
        assert_eq!(sw.stats().fcs_errors, 10);

        let mut sw = Switch::new(2, ImpairConfig::default(), 7);
        if let Some((_, down)) = sw.port_config_mut(1) {
            down.set_config(cfg);
        }
        for _ in 0..10 {
            sw.send(t0(), 0, f.clone());
        }
        let got = recv_all(&mut sw, t0(), 1);
        assert_eq!(got.len(), 10);
        for g in got {
            let flipped: u32 = g.iter().zip(&f).map(|(a, b)| (a ^ b).count_ones()).sum();
            assert_eq!(flipped, 1);
        }
        assert_eq!(sw.stats().fcs_errors, 0);
    }

    #[test]
    fn runts_are_dropped_and_bad_ports_refused() {
        let mut sw = Switch::new(2, ImpairConfig::default(), 6);
        assert_eq!(sw.send(t0(), 0, vec![0xFF; 13]), SendOutcome::Queued);
        assert_eq!(sw.send(t0(), 0, Vec::new()), SendOutcome::Queued);
        sw.step(t0());
        assert!(recv_all(&mut sw, t0(), 1).is_empty());
        assert_eq!(sw.stats().runts, 2);
        // A bare 14-byte header is enough.
        let h = eth(BCAST, mac(1), 0)[..14].to_vec();
        sw.send(t0(), 0, h.clone());
        assert_eq!(recv_all(&mut sw, t0(), 1), vec![h]);

        assert_eq!(sw.send(t0(), 2, vec![0; 60]), SendOutcome::NoSuchPort);
        assert_eq!(
            sw.send(t0(), usize::MAX, vec![0; 60]),
            SendOutcome::NoSuchPort
        );
        assert_eq!(sw.recv(t0(), 2), None);
        assert!(sw.port_config_mut(2).is_none());
        assert!(sw.port(usize::MAX).is_none());

        let empty = Switch::new(0, ImpairConfig::default(), 0);
        assert_eq!(empty.ports(), 0);
        assert_eq!(empty.next_event(), None);
        assert_eq!(
            Switch::new(usize::MAX, ImpairConfig::default(), 0).ports(),
            MAX_PORTS
        );
    }

    #[test]
    fn timing_through_the_switch() {
        let cfg = ImpairConfig {
            delay: Duration::from_millis(2),
            ..Default::default()
        };
        let mut sw = Switch::new(2, cfg, 7);
        let f = eth(BCAST, mac(1), 0);
        sw.send(Instant::from_millis(1), 0, f.clone());
        // Next event: the frame reaching the switch.
        assert_eq!(sw.next_event(), Some(Instant::from_millis(3)));
        // Step late: the frame still leaves the switch at 3 ms, arriving at 5 ms.
        sw.step(Instant::from_millis(4));
        assert_eq!(sw.next_event(), Some(Instant::from_millis(5)));
        assert_eq!(sw.recv(Instant::from_millis(4), 1), None);
        assert_eq!(sw.recv(Instant::from_millis(5), 1), Some(f));
        assert_eq!(sw.next_event(), None);
        // Per-port impairment: drop everything towards port 1.
        let (_, down) = sw.port_config_mut(1).unwrap();
        down.set_config(ImpairConfig {
            loss: 1.0,
            ..Default::default()
        });
        sw.send(Instant::from_millis(10), 0, eth(BCAST, mac(1), 0));
        sw.step(Instant::from_millis(20));
        assert_eq!(sw.port(1).unwrap().1.stats().lost, 1);
        assert_eq!(sw.next_event(), None);
    }

    /// Runs a small impaired scenario; `eager` steps the switch after every send, otherwise
    /// the switch is first stepped (lazily, by `recv`) long after the frames reached it.
    fn scenario(seed: u64, eager: bool) -> Vec<(Instant, usize, Vec<u8>)> {
        let cfg = ImpairConfig {
            loss: 0.05,
            dup: 0.05,
            reorder: 0.05,
            corrupt: 0.02,
            delay: Duration::from_micros(300),
            jitter: Duration::from_micros(200),
            rate_bps: Some(100_000_000),
            queue_bytes: 8_000,
            ..Default::default()
        };
        let mut sw = Switch::new(4, cfg, seed);
        let mut out = Vec::new();
        for i in 0..400u16 {
            let now = Instant::from_micros(u64::from(i) * 50);
            let src = (i % 4) as usize;
            let dst = if i % 7 == 0 {
                BCAST
            } else {
                mac((i * 3 + 1) % 4)
            };
            let _ = sw.send(now, src, eth(dst, mac(src as u16), i as u8));
            if eager {
                sw.step(now);
            }
        }
        // Receive every frame at its own arrival instant by polling at each event.
        while let Some(t) = sw.next_event() {
            for p in 0..4 {
                while let Some(f) = sw.recv(t, p) {
                    out.push((t, p, f));
                }
            }
            sw.step(t);
        }
        out
    }

    #[test]
    fn deterministic_and_independent_of_stepping() {
        let a = scenario(11, true);
        assert!(a.len() > 300);
        assert_eq!(a, scenario(11, true));
        assert_eq!(a, scenario(11, false));
        assert_ne!(a, scenario(12, true));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn arbitrary_frames_and_ports_never_panic(
            seed in any::<u64>(), nports in 0usize..6, loss in any::<f64>(),
            ops in proptest::collection::vec(
                (any::<usize>(), 0u64..5_000_000, proptest::collection::vec(any::<u8>(), 0..40)),
                0..80),
        ) {
            let cfg = ImpairConfig { loss, delay: Duration::from_micros(100),
                                     ..Default::default() };
            let mut sw = Switch::new(nports, cfg, seed);
            let mut now = Instant::ZERO;
            for (port, dt, mut f) in ops {
                now += Duration::from_nanos(dt);
                let port = if port % 5 == 0 { port } else { port % (nports + 1) };
                // Make some frames broadcast or addressed to plausible MACs.
                if f.len() >= 12 && f[0] % 3 == 0 { f[0] = 0x02; f[1..6].fill(0); f[5] = f[6] % 4; }
                match dt % 4 {
                    0 => { let _ = sw.recv(now, port); }
                    1 => sw.step(now),
                    _ => {
                        let o = sw.send(now, port, f);
                        prop_assert_eq!(o == SendOutcome::NoSuchPort, port >= nports);
                    }
                }
                prop_assert!(sw.mac_table_len() <= MAC_TABLE_CAPACITY.min(sw.stats().learned as usize));
            }
            sw.step(Instant::MAX);
            // Everything that reached the switch has been moved on.
            for p in 0..nports {
                prop_assert_eq!(sw.port(p).unwrap().0.in_flight(), 0);
            }
        }
    }
}
