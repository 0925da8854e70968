//! SYN cookies (RFC 4987 §3.6): a listener whose SYN queue is full answers a SYN without
//! keeping any state, and rebuilds the connection from the ACK that completes the
//! handshake.
//!
//! # Design
//! The SYN,ACK's initial sequence number carries what the listener would have kept:
//!
//! ```text
//! ISS = H1(4-tuple) + ISN' + (count << 24) + ((H2(4-tuple, count, opts, ISN') + (m << 21)) mod 2^24)
//! ```
//!
//! ISN' is the client's ISN; `count` ticks every 64 s (its low 8 bits travel); `m` indexes [`MSS_TABLE`], the
//! largest entry not above the peer's MSS; H1 and H2 are the stack's keyed SipHash
//! ([`IsnGenerator`]) in hash domains of their own. The ACK's `SEG.ACK - 1` gives back
//! ISS and `SEG.SEQ - 1` the client's ISN; the cookie is accepted when `count` is at
//! most [`MAX_AGE`] ticks old and the low 21 bits left after taking H2 off are zero (a
//! blind guess succeeds with probability about 3 / 2^21 per try; a cookie off by one
//! fails).
//!
//! When the SYN carried timestamps (RFC 7323), the low 6 bits of the SYN,ACK's TSval
//! carry the options a cookie has no room for, as Linux does: the window scale (4 bits,
//! 15 = none) and SACK-permitted (1 bit), with bit 5 set. The peer echoes them in every
//! TSecr; they are part of H2's input, so a forged echo fails the cookie. The encoded
//! TSval is never above the clock (64 is taken off when it would be), so the
//! connection's later timestamps never go backwards. Without timestamps a cookie
//! connection has neither window scaling nor SACK (the RFC 4987 trade-off); its MSS is
//! rounded down to a table entry.
//!
//! The rebuilt connection takes no RTT sample from the handshake: the SYN,ACK's send
//! time is not kept (RFC 6298 §3 Karn would not allow one either way for a SYN,ACK the
//! stack does not remember sending).

use super::isn::IsnGenerator;
use super::seq::SeqNum;
use super::tcb::{ConnSpec, Tcb};
use super::timers::Timer;
use super::TcpSettings;
use crate::time::Instant;
use crate::wire::{TcpFlags, TcpOptions, TcpRepr};
use std::net::SocketAddrV4;

/// MSS values a cookie can carry (3 bits): the usual Ethernet, tunnel and jumbo sizes,
/// loopback's, and for peers below 536 the lowest `tcp_mss_min` (the connection is then
/// raised to its `tcp_mss_min`, as any connection is).
pub const MSS_TABLE: [u16; 8] = [48, 536, 1220, 1440, 1460, 4312, 8960, 65_483];

/// Length of one cookie tick in milliseconds.
pub const TICK_MS: u64 = 64_000;

/// A cookie older than this many ticks (2 to 3 minutes) is refused.
pub const MAX_AGE: u32 = 2;

/// TSecr low bits for "the SYN carried no timestamps".
const NO_TS: u32 = 64;
/// Bit 5 of an encoded TSval: options are encoded below it.
const TS_MARK: u32 = 1 << 5;
/// Window scale field value for "no window scaling".
const NO_WSCALE: u32 = 15;

const DOMAIN_H1: u8 = 3;
const DOMAIN_H2: u8 = 4;

fn count_at(now: Instant) -> u32 {
    (now.as_millis() / TICK_MS) as u32
}

/// What a cookie SYN,ACK needs besides the usual `Tcb::accept`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CookieSynAck {
    /// Our ISS (the cookie).
    pub iss: SeqNum,
    /// The timestamp offset to give the SYN,ACK's `Tcb` so that its TSval carries the
    /// options (equal to the connection's own offset when the SYN had no timestamps).
    pub ts_offset: u32,
}

/// The options bits of a SYN (6 bits with the mark, or [`NO_TS`]).
fn opts_bits(syn: &TcpRepr, wscale_ok: bool, sack_ok: bool) -> u32 {
    if syn.options.timestamps.is_none() {
        return NO_TS;
    }
    let ws = match syn.options.window_scale {
        Some(w) if wscale_ok => u32::from(w.min(14)),
        _ => NO_WSCALE,
    };
    let sack = u32::from(syn.options.sack_permitted && sack_ok) << 4;
    TS_MARK | sack | ws
}

fn mss_index(mss: u16) -> u32 {
    MSS_TABLE.iter().rposition(|&m| m <= mss).unwrap_or(0) as u32
}

/// RFC 4987 §3.6: the cookie for `syn`, received at `now` on `local` from `remote`.
/// `ts_offset` is the connection's timestamp offset (`IsnGenerator::ts_offset`);
/// `peer_mss` the MSS the SYN offers (or the default when it offers none);
/// `wscale_ok`/`sack_ok` whether the listener would take those options.
#[allow(clippy::too_many_arguments)]
pub fn encode(
    g: &IsnGenerator,
    now: Instant,
    local: SocketAddrV4,
    remote: SocketAddrV4,
    syn: &TcpRepr,
    ts_offset: u32,
    peer_mss: u16,
    (wscale_ok, sack_ok): (bool, bool),
) -> CookieSynAck {
    let count = count_at(now);
    let opts = opts_bits(syn, wscale_ok, sack_ok);
    let m = mss_index(peer_mss);
    let h1 = g.keyed(DOMAIN_H1, local, remote, &[]) as u32;
    let h2 = g.keyed(DOMAIN_H2, local, remote, &[count, opts, syn.seq]) as u32;
    let iss = h1
        .wrapping_add(syn.seq)
        .wrapping_add(count << 24)
        .wrapping_add(h2.wrapping_add(m << 21) & 0x00FF_FFFF);
    let ts_offset = if opts == NO_TS {
        ts_offset
    } else {
        let clock = (now.as_millis() as u32).wrapping_add(ts_offset);
        let mut enc = (clock & !63) | opts;
        if (enc.wrapping_sub(clock) as i32) > 0 {
            enc = enc.wrapping_sub(64);
        }
        enc.wrapping_sub(now.as_millis() as u32)
    };
    CookieSynAck {
        iss: SeqNum(iss),
        ts_offset,
    }
}

/// Checks the cookie an ACK (`seg`, arriving at a listener at `now`) returns. On
/// success gives the SYN the cookie stands for: the client's ISN, the table MSS, and
/// the window scale, SACK-permitted and timestamps the TSecr carried back; its window
/// is the ACK's (the SYN's own was not kept).
pub fn decode(
    g: &IsnGenerator,
    now: Instant,
    local: SocketAddrV4,
    remote: SocketAddrV4,
    seg: &TcpRepr,
) -> Option<TcpRepr> {
    let f = seg.flags;
    if !f.ack() || f.syn() || f.rst() {
        return None;
    }
    let iss = seg.ack.wrapping_sub(1);
    let client_isn = seg.seq.wrapping_sub(1);
    let opts = match seg.options.timestamps {
        Some((_, tsecr)) if tsecr & TS_MARK != 0 => tsecr & 63,
        Some(_) => return None,
        None => NO_TS,
    };
    let h1 = g.keyed(DOMAIN_H1, local, remote, &[]) as u32;
    let v = iss.wrapping_sub(h1).wrapping_sub(client_isn);
    let now_count = count_at(now);
    let age = now_count.wrapping_sub(v >> 24) & 0xFF;
    if age > MAX_AGE {
        return None;
    }
    let count = now_count.wrapping_sub(age);
    let h2 = g.keyed(DOMAIN_H2, local, remote, &[count, opts, client_isn]) as u32;
    let d = v.wrapping_sub(h2) & 0x00FF_FFFF;
    if d & 0x001F_FFFF != 0 {
        return None;
    }
    let mss = MSS_TABLE[(d >> 21) as usize];
    let mut options = TcpOptions::default();
    options.mss = Some(mss);
    if opts != NO_TS {
        let ws = opts & 0xF;
        options.window_scale = (ws != NO_WSCALE).then_some(ws as u8);
        options.sack_permitted = opts & (1 << 4) != 0;
        options.timestamps = seg.options.timestamps.map(|(tsval, _)| (tsval, 0));
    }
    Some(TcpRepr {
        src_port: seg.src_port,
        dst_port: seg.dst_port,
        seq: client_isn,
        ack: 0,
        flags: TcpFlags::SYN,
        window: seg.window,
        urgent: 0,
        options,
    })
}

/// Whether a listener checks ACKs for cookies: with `tcp_syncookies` = `mode`, and its
/// last cookie sent at `last`. Always with mode 2; with mode 1 only within [`MAX_AGE`] + 1
/// ticks of a cookie (as Linux), so that a listener that never needed cookies offers no
/// cookie check to blind guesses; never with mode 0.
pub fn checks_acks(mode: u32, last: Option<Instant>, now: Instant) -> bool {
    match mode {
        0 => false,
        1 => last.is_some_and(|t| {
            now.saturating_duration_since(t).as_millis()
                <= u128::from(TICK_MS) * u128::from(MAX_AGE + 1)
        }),
        _ => true,
    }
}

/// The cookie SYN,ACK answering `syn` (received at `now` on `local` from `remote`, whose
/// route has MTU `mtu`): exactly what `Tcb::accept` with these settings would send, with
/// the cookie as its ISS, built by a `Tcb` dropped right after. `user_mss`: the
/// listener's TCP_MAXSEG, if set.
#[allow(clippy::too_many_arguments)]
pub fn syn_ack(
    g: &IsnGenerator,
    now: Instant,
    local: SocketAddrV4,
    remote: SocketAddrV4,
    syn: &TcpRepr,
    set: &TcpSettings,
    mtu: u32,
    user_mss: Option<u32>,
) -> Option<TcpRepr> {
    let peer_mss = syn.options.mss.unwrap_or(set.mss_def.min(65_535) as u16);
    // With timestamps off (`tstamp` 0) the SYN's are not taken: the cookie is made as
    // for a SYN without them.
    let mut syn = *syn;
    if set.tstamp == 0 {
        syn.options.timestamps = None;
    }
    let c = encode(
        g,
        now,
        local,
        remote,
        &syn,
        g.ts_offset(local, remote),
        peer_mss,
        (set.wscale >= 1, set.sack >= 1),
    );
    let spec = ConnSpec {
        local,
        remote,
        iss: c.iss,
        ts_offset: c.ts_offset,
        mtu,
    };
    // Without timestamps the cookie has no room for window scaling and SACK-permitted:
    // the SYN,ACK must not offer them either (as Linux clears them), or the peer would
    // scale windows the rebuilt connection does not.
    if syn.options.timestamps.is_none() {
        syn.options.window_scale = None;
        syn.options.sack_permitted = false;
    }
    let mut tcb = Tcb::accept(now, spec, set.clone(), &syn);
    if let Some(m) = user_mss {
        // Range-checked when it was set on the listener.
        let _ = tcb.set_user_mss(m);
    }
    tcb.poll_transmit(now).map(|out| out.repr)
}

/// The connection an ACK returning a valid cookie stands for: a passive `Tcb` in
/// SYN-RECEIVED whose SYN,ACK went out with the cookie; feed it `seg` next (it
/// completes the handshake). `None` if the cookie is not valid.
pub fn rebuild(
    g: &IsnGenerator,
    now: Instant,
    local: SocketAddrV4,
    remote: SocketAddrV4,
    seg: &TcpRepr,
    set: &TcpSettings,
    mtu: u32,
) -> Option<Tcb> {
    // With timestamps off the SYN,ACK carried none: a peer's TSecr echoes no cookie.
    let mut seg = *seg;
    if set.tstamp == 0 {
        seg.options.timestamps = None;
    }
    let seg = &seg;
    let syn = decode(g, now, local, remote, seg)?;
    let spec = ConnSpec {
        local,
        remote,
        iss: SeqNum(seg.ack.wrapping_sub(1)),
        ts_offset: g.ts_offset(local, remote),
        mtu,
    };
    let mut tcb = Tcb::accept(now, spec, set.clone(), &syn);
    tcb.cookie_syn_ack_sent(now);
    Some(tcb)
}

impl Tcb {
    /// A `Tcb` made by `Tcb::accept` from a decoded cookie: the SYN,ACK went out when
    /// the cookie was made, so SND.NXT = ISS + 1 and the retransmission timer runs; no
    /// RTT sample is timed. Feed it the ACK next.
    pub fn cookie_syn_ack_sent(&mut self, now: Instant) {
        self.snd.nxt = self.snd.iss + 1;
        // The window the SYN,ACK offered (its right edge).
        self.select_window(true);
        self.rtt.timed = None;
        self.retry.series_start = Some(now);
        self.timers.set(Timer::Retransmit, now + self.rtt.rto());
        self.ack.due = false;
        self.ack.last_sent = self.rcv.nxt;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn a() -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 80)
    }
    fn b() -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 40_000)
    }

    fn syn(ts: bool, ws: Option<u8>, sack: bool, mss: Option<u16>) -> TcpRepr {
        TcpRepr {
            src_port: 40_000,
            dst_port: 80,
            seq: 0xFFFF_FFF0,
            flags: TcpFlags::SYN,
            window: 64_240,
            options: {
                let mut o = TcpOptions::default();
                o.mss = mss;
                o.window_scale = ws;
                o.sack_permitted = sack;
                o.timestamps = ts.then_some((123_456, 0));
                o
            },
            ..TcpRepr::default()
        }
    }

    /// The ACK a peer answers the cookie SYN,ACK with.
    fn ack_for(s: &TcpRepr, c: CookieSynAck, now: Instant) -> TcpRepr {
        let tsval = (now.as_millis() as u32).wrapping_add(c.ts_offset);
        TcpRepr {
            seq: s.seq.wrapping_add(1),
            ack: c.iss.raw().wrapping_add(1),
            flags: TcpFlags::ACK,
            window: 501,
            options: {
                let mut o = TcpOptions::default();
                o.timestamps = s.options.timestamps.map(|_| (123_999, tsval));
                o
            },
            ..*s
        }
    }

    #[test]
    fn round_trip_with_timestamps_keeps_options() {
        let g = IsnGenerator::new([7; 16]);
        let now = Instant::from_millis(5_000_123);
        for (ws, sack, mss) in [
            (Some(7), true, Some(1460)),
            (None, false, Some(1400)),
            (Some(14), false, None),
            (Some(200), true, Some(65_495)),
        ] {
            let s = syn(true, ws, sack, mss);
            let c = encode(&g, now, a(), b(), &s, 99, mss.unwrap_or(536), (true, true));
            // The TSval never runs ahead of the connection's clock.
            let clock = (now.as_millis() as u32).wrapping_add(99);
            let enc = (now.as_millis() as u32).wrapping_add(c.ts_offset);
            assert!(clock.wrapping_sub(enc) < 64, "{clock} {enc}");
            let later = now + core::time::Duration::from_secs(100);
            let got = decode(&g, later, a(), b(), &ack_for(&s, c, now)).expect("valid");
            assert_eq!(got.seq, s.seq);
            assert_eq!(got.options.window_scale, ws.map(|w| w.min(14)));
            assert_eq!(got.options.sack_permitted, sack);
            assert_eq!(got.options.timestamps, Some((123_999, 0)));
            let want = MSS_TABLE[mss_index(mss.unwrap_or(536)) as usize];
            assert_eq!(got.options.mss, Some(want));
            assert!(want <= mss.unwrap_or(536));
        }
    }

    #[test]
    fn without_timestamps_no_wscale_no_sack() {
        let g = IsnGenerator::new([7; 16]);
        let now = Instant::from_millis(1);
        let s = syn(false, Some(7), true, Some(1460));
        let c = encode(&g, now, a(), b(), &s, 99, 1460, (true, true));
        assert_eq!(c.ts_offset, 99);
        let got = decode(&g, now, a(), b(), &ack_for(&s, c, now)).unwrap();
        assert_eq!(got.options.window_scale, None);
        assert!(!got.options.sack_permitted);
        assert_eq!(got.options.mss, Some(1460));
    }

    /// A SYN without timestamps that offers window scaling and SACK gets a cookie
    /// SYN,ACK offering neither (the cookie cannot carry them), and the connection rebuilt
    /// from its ACK has neither: both ends agree.
    #[test]
    fn syn_ack_without_timestamps_offers_no_wscale_or_sack() {
        let g = IsnGenerator::new([7; 16]);
        let now = Instant::from_millis(77_000);
        let set = TcpSettings::default();
        let s = syn(false, Some(8), true, Some(1460));
        let r = syn_ack(&g, now, a(), b(), &s, &set, 1500, None).expect("a SYN,ACK");
        assert!(r.flags.syn() && r.flags.ack());
        assert_eq!(r.options.window_scale, None);
        assert!(!r.options.sack_permitted);
        assert_eq!(r.options.timestamps, None);
        assert_eq!(r.options.mss, Some(1460));
        let ack = TcpRepr {
            seq: s.seq.wrapping_add(1),
            ack: r.seq.wrapping_add(1),
            flags: TcpFlags::ACK,
            window: 64_240,
            ..s
        };
        let t = rebuild(&g, now, a(), b(), &ack, &set, 1500).expect("valid cookie");
        let i = t.info();
        assert_eq!(
            (i.snd_wscale, i.rcv_wscale, i.sack, i.timestamps),
            (0, 0, false, false)
        );
        // With timestamps both are offered and kept.
        let s = syn(true, Some(8), true, Some(1460));
        let r = syn_ack(&g, now, a(), b(), &s, &set, 1500, None).unwrap();
        assert!(r.options.window_scale.is_some() && r.options.sack_permitted);
        // A peer MSS below every table entry but the floor: the floor, raised to
        // tcp_mss_min by the connection.
        assert_eq!(MSS_TABLE[mss_index(150) as usize], 48);
    }

    #[test]
    fn forged_expired_or_misdirected_cookies_fail() {
        let g = IsnGenerator::new([7; 16]);
        let now = Instant::from_millis(10 * TICK_MS);
        let s = syn(true, Some(7), true, Some(1460));
        let c = encode(&g, now, a(), b(), &s, 0, 1460, (true, true));
        let ack = ack_for(&s, c, now);
        assert!(decode(&g, now, a(), b(), &ack).is_some());
        // Too old.
        let late = now + core::time::Duration::from_millis((MAX_AGE as u64 + 1) * TICK_MS);
        assert!(decode(&g, late, a(), b(), &ack).is_none());
        // Another secret, another tuple, another client ISN.
        assert!(decode(&IsnGenerator::new([8; 16]), now, a(), b(), &ack).is_none());
        let other = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 3), 40_000);
        assert!(decode(&g, now, a(), other, &ack).is_none());
        let mut x = ack;
        x.seq = x.seq.wrapping_add(1);
        assert!(decode(&g, now, a(), b(), &x).is_none());
        // A flipped option bit in the echo (asking for SACK the SYN did not offer).
        let s2 = syn(true, Some(7), false, Some(1460));
        let c2 = encode(&g, now, a(), b(), &s2, 0, 1460, (true, true));
        let mut y = ack_for(&s2, c2, now);
        let (v, e) = y.options.timestamps.unwrap();
        y.options.timestamps = Some((v, e | (1 << 4)));
        assert!(decode(&g, now, a(), b(), &y).is_none());
        // Timestamps stripped from the ACK.
        let mut z = ack_for(&s, c, now);
        z.options.timestamps = None;
        assert!(decode(&g, now, a(), b(), &z).is_none());
    }

    #[test]
    fn blind_guesses_rarely_pass() {
        // 200,000 random ACKs at one tuple: the expected number that pass is
        // 200,000 * 3 ages / 2^21 ~ 0.3.
        let g = IsnGenerator::new([9; 16]);
        let now = Instant::from_millis(3 * TICK_MS);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut passed = 0;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let seg = TcpRepr {
                src_port: 40_000,
                dst_port: 80,
                seq: x as u32,
                ack: (x >> 32) as u32,
                flags: TcpFlags::ACK,
                ..TcpRepr::default()
            };
            passed += usize::from(decode(&g, now, a(), b(), &seg).is_some());
        }
        assert!(passed <= 3, "{passed} blind guesses passed");
    }
}
