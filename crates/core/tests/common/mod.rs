//! Test harness for driving `Tcb`s by hand (packetdrill style) and in pairs.
//!
//! * [`One`]: a single `Tcb` under test; the test plays the peer, injecting segments built
//!   with [`Peer`] and inspecting what the `Tcb` sends.
//! * [`Pair`]: two `Tcb`s joined by a fixed-delay path on a virtual clock, with a filter
//!   that can drop, or observe, any segment in either direction.
#![allow(dead_code)]

use ember_core::tcp::tcb::ConnSpec;
use ember_core::tcp::{SeqNum, State, Tcb, TcpSettings};
use ember_core::time::Instant;
use ember_core::wire::{TcpFlags, TcpOptions, TcpRepr};
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

pub const CLIENT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 40000);
pub const SERVER: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 80);
pub const CLIENT_ISS: u32 = 1_000_000;
pub const SERVER_ISS: u32 = 3_000_000;

/// A segment as sent: header and payload.
#[derive(Debug, Clone)]
pub struct Seg {
    pub repr: TcpRepr,
    pub data: Vec<u8>,
}

impl Seg {
    pub fn flags(&self) -> TcpFlags {
        self.repr.flags
    }
    pub fn seq(&self) -> u32 {
        self.repr.seq
    }
    pub fn ack(&self) -> u32 {
        self.repr.ack
    }
    pub fn len(&self) -> usize {
        self.data.len()
    }
    pub fn is_pure_ack(&self) -> bool {
        self.data.is_empty() && self.repr.flags == TcpFlags::ACK
    }
}

/// Settings with the given changes applied to the defaults.
pub fn settings(f: impl FnOnce(&mut TcpSettings)) -> TcpSettings {
    let mut s = TcpSettings::default();
    f(&mut s);
    s
}

fn spec(local: SocketAddrV4, remote: SocketAddrV4, iss: u32, mtu: u32) -> ConnSpec {
    ConnSpec {
        local,
        remote,
        iss: SeqNum(iss),
        ts_offset: 0,
        mtu,
    }
}

/// Builds segments as the peer of a `One` would send them.
#[derive(Debug, Clone)]
pub struct Peer {
    pub port: u16,
    pub our_port: u16,
    /// The peer's next sequence number.
    pub seq: u32,
    /// What the peer acknowledges.
    pub ack: u32,
    pub window: u16,
    /// Timestamp the peer sends (None = no timestamps).
    pub tsval: Option<u32>,
    pub tsecr: u32,
}

impl Peer {
    pub fn seg(&self, flags: TcpFlags, data_len: usize) -> TcpRepr {
        let _ = data_len;
        TcpRepr {
            src_port: self.port,
            dst_port: self.our_port,
            seq: self.seq,
            ack: self.ack,
            flags,
            window: self.window,
            urgent: 0,
            options: {
                let mut o = TcpOptions::default();
                o.timestamps = self.tsval.map(|v| (v, self.tsecr));
                o
            },
        }
    }

    /// A pure ACK.
    pub fn ack_seg(&self) -> TcpRepr {
        self.seg(TcpFlags::ACK, 0)
    }

    /// An ACK with SACK blocks (absolute sequence numbers).
    pub fn sack(&self, blocks: &[(u32, u32)]) -> TcpRepr {
        let mut r = self.ack_seg();
        let b: Vec<_> = blocks
            .iter()
            .map(|&(l, r)| ember_core::wire::SackBlock { left: l, right: r })
            .collect();
        r.options.set_sack_blocks(&b);
        r
    }
}

/// One `Tcb` under test.
pub struct One {
    pub tcb: Tcb,
    pub now: Instant,
    /// Everything the `Tcb` has sent, oldest first (tests drain it).
    pub sent: VecDeque<Seg>,
}

impl One {
    /// An active opener (client) that has sent its SYN.
    pub fn client(s: TcpSettings) -> One {
        let now = Instant::from_secs(100);
        let tcb = Tcb::connect(now, spec(CLIENT, SERVER, CLIENT_ISS, 1500), s);
        let mut o = One {
            tcb,
            now,
            sent: VecDeque::new(),
        };
        o.flush();
        o
    }

    /// A passive opener that received `syn` and sent its SYN,ACK.
    pub fn server(s: TcpSettings, syn: &TcpRepr) -> One {
        let now = Instant::from_secs(100);
        let tcb = Tcb::accept(now, spec(SERVER, CLIENT, SERVER_ISS, 1500), s, syn);
        let mut o = One {
            tcb,
            now,
            sent: VecDeque::new(),
        };
        o.flush();
        o
    }

    /// A client that completed the handshake with a peer offering `opts`, with the given
    /// peer window. Returns the test's view of the peer.
    pub fn established(s: TcpSettings, opts: TcpOptions, window: u16) -> (One, Peer) {
        One::established_after(s, opts, window, Duration::ZERO)
    }

    /// Like [`One::established`], with the SYN,ACK arriving `rtt` after the SYN (so the
    /// connection starts with an RTT sample of `rtt`).
    pub fn established_after(
        s: TcpSettings,
        opts: TcpOptions,
        window: u16,
        rtt: Duration,
    ) -> (One, Peer) {
        let mut o = One::client(s);
        let syn = o.sent.pop_front().expect("SYN");
        assert!(syn.flags().syn());
        o.now += rtt;
        let tsval = opts.timestamps.map(|(v, _)| v);
        let mut synack = TcpRepr {
            src_port: SERVER.port(),
            dst_port: CLIENT.port(),
            seq: SERVER_ISS,
            ack: CLIENT_ISS + 1,
            flags: TcpFlags::SYN | TcpFlags::ACK,
            window,
            urgent: 0,
            options: opts,
        };
        if let (Some(v), Some((ours, _))) = (tsval, syn.repr.options.timestamps) {
            synack.options.timestamps = Some((v, ours));
        }
        o.input(&synack, &[]);
        assert_eq!(o.tcb.state(), State::Established);
        let ack = o.sent.pop_front().expect("ACK of SYN,ACK");
        assert!(ack.flags().ack() && !ack.flags().syn());
        assert!(o.sent.is_empty(), "nothing but the ACK of the SYN,ACK");
        let peer = Peer {
            port: SERVER.port(),
            our_port: CLIENT.port(),
            seq: SERVER_ISS + 1,
            ack: CLIENT_ISS + 1,
            window,
            tsval: tsval.map(|v| v + 1),
            tsecr: ack.repr.options.timestamps.map_or(0, |t| t.0),
        };
        (o, peer)
    }

    /// Feeds a segment and collects the output.
    pub fn input(&mut self, seg: &TcpRepr, payload: &[u8]) {
        self.tcb.handle_segment(self.now, seg, payload);
        self.flush();
    }

    /// Collects everything the `Tcb` wants to send now.
    pub fn flush(&mut self) {
        let mut guard = 0;
        while let Some(out) = self.tcb.poll_transmit(self.now) {
            let mut data = vec![0; out.payload_len()];
            out.copy_payload(&mut data);
            self.sent.push_back(Seg {
                repr: out.repr,
                data,
            });
            guard += 1;
            assert!(guard < 100_000, "poll_transmit never stops");
        }
    }

    /// Application write.
    pub fn write(&mut self, data: &[u8]) -> usize {
        let n = self.tcb.send(self.now, data).unwrap_or(0);
        self.flush();
        n
    }

    /// Application read of everything available.
    pub fn read_all(&mut self) -> Vec<u8> {
        let mut v = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = self.tcb.recv(self.now, &mut buf) {
            if n == 0 {
                break;
            }
            v.extend_from_slice(&buf[..n]);
        }
        self.flush();
        v
    }

    /// Advances virtual time by `d`, running every timer that falls due on the way.
    pub fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        while let Some(t) = self.tcb.poll_timeout() {
            if t > end {
                break;
            }
            self.now = self.now.max(t);
            self.tcb.handle_timeout(self.now);
            self.flush();
        }
        self.now = end;
    }

    /// Advances to the next deadline and runs it; returns the time advanced.
    pub fn next_timer(&mut self) -> Option<Duration> {
        let t = self.tcb.poll_timeout()?;
        let d = t.saturating_duration_since(self.now);
        self.now = self.now.max(t);
        self.tcb.handle_timeout(self.now);
        self.flush();
        Some(d)
    }

    /// Takes the next sent segment.
    pub fn pop(&mut self) -> Seg {
        self.sent.pop_front().expect("expected a segment")
    }

    pub fn take_all(&mut self) -> Vec<Seg> {
        self.sent.drain(..).collect()
    }
}

/// Which way a segment travels in a [`Pair`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    AtoB,
    BtoA,
}

/// Decides, for each segment on a [`Pair`]'s path, whether it gets through.
pub type Filter = Box<dyn FnMut(Instant, Dir, &Seg) -> bool>;

/// Two `Tcb`s talking over a fixed one-way delay, under a virtual clock.
pub struct Pair {
    pub a: Tcb,
    pub b: Option<Tcb>,
    pub now: Instant,
    pub delay: Duration,
    in_flight: VecDeque<(Instant, Dir, Seg)>,
    /// Called for every segment; return false to drop it.
    pub filter: Filter,
    bs: TcpSettings,
    /// Every segment put on the path (after the filter), for inspection.
    pub log: Vec<(Instant, Dir, Seg)>,
}

impl Pair {
    /// `a` actively opens to `b` (created from the SYN when it arrives).
    pub fn new(a_set: TcpSettings, b_set: TcpSettings, delay: Duration) -> Pair {
        let now = Instant::from_secs(100);
        let a = Tcb::connect(now, spec(CLIENT, SERVER, CLIENT_ISS, 1500), a_set);
        Pair {
            a,
            b: None,
            now,
            delay,
            in_flight: VecDeque::new(),
            filter: Box::new(|_, _, _| true),
            bs: b_set,
            log: Vec::new(),
        }
    }

    pub fn b(&mut self) -> &mut Tcb {
        self.b.as_mut().expect("b exists once the SYN arrived")
    }

    fn collect(&mut self) {
        let mut outs = Vec::new();
        while let Some(o) = self.a.poll_transmit(self.now) {
            let mut data = vec![0; o.payload_len()];
            o.copy_payload(&mut data);
            outs.push((Dir::AtoB, Seg { repr: o.repr, data }));
        }
        if let Some(b) = self.b.as_mut() {
            while let Some(o) = b.poll_transmit(self.now) {
                let mut data = vec![0; o.payload_len()];
                o.copy_payload(&mut data);
                outs.push((Dir::BtoA, Seg { repr: o.repr, data }));
            }
        }
        for (d, s) in outs {
            if (self.filter)(self.now, d, &s) {
                self.log.push((self.now, d, s.clone()));
                self.in_flight.push_back((self.now + self.delay, d, s));
            }
        }
    }

    fn deliver(&mut self, d: Dir, s: Seg) {
        match d {
            Dir::AtoB => {
                if self.b.is_none() {
                    if s.repr.flags.syn() && !s.repr.flags.ack() {
                        let t = Tcb::accept(
                            self.now,
                            spec(SERVER, CLIENT, SERVER_ISS, 1500),
                            self.bs.clone(),
                            &s.repr,
                        );
                        self.b = Some(t);
                    }
                } else if let Some(b) = self.b.as_mut() {
                    b.handle_segment(self.now, &s.repr, &s.data);
                }
            }
            Dir::BtoA => self.a.handle_segment(self.now, &s.repr, &s.data),
        }
    }

    /// Runs until virtual time `until` (or until nothing is pending).
    pub fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            self.collect();
            let next_seg = self.in_flight.iter().map(|x| x.0).min();
            let next_tmr = [
                self.a.poll_timeout(),
                self.b.as_ref().and_then(|b| b.poll_timeout()),
            ]
            .into_iter()
            .flatten()
            .min();
            let next = match (next_seg, next_tmr) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => break,
            };
            if next > end {
                break;
            }
            self.now = self.now.max(next);
            // Deliver everything due, in order.
            let mut i = 0;
            while i < self.in_flight.len() {
                if self.in_flight[i].0 <= self.now {
                    let (_, d, s) = self.in_flight.remove(i).expect("index checked");
                    self.deliver(d, s);
                } else {
                    i += 1;
                }
            }
            if self.a.poll_timeout().is_some_and(|t| t <= self.now) {
                self.a.handle_timeout(self.now);
            }
            if let Some(b) = self.b.as_mut() {
                if b.poll_timeout().is_some_and(|t| t <= self.now) {
                    b.handle_timeout(self.now);
                }
            }
        }
        self.collect();
        self.now = self.now.max(end);
    }

    /// Reads everything available at `b`.
    pub fn read_b(&mut self) -> Vec<u8> {
        let now = self.now;
        let mut v = Vec::new();
        let mut buf = [0u8; 65536];
        while let Ok(n) = self.b().recv(now, &mut buf) {
            if n == 0 {
                break;
            }
            v.extend_from_slice(&buf[..n]);
        }
        v
    }

    /// Reads everything available at `a`.
    pub fn read_a(&mut self) -> Vec<u8> {
        let mut v = Vec::new();
        let mut buf = [0u8; 65536];
        while let Ok(n) = self.a.recv(self.now, &mut buf) {
            if n == 0 {
                break;
            }
            v.extend_from_slice(&buf[..n]);
        }
        v
    }
}

/// Deterministic test data.
pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}
