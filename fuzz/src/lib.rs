//! Shared helpers for the ember-core fuzz targets.
//!
//! The driver code (two hosts on a virtual wire, frame helpers, and `Drv`, which plays
//! the peer of one `Tcb` and checks its invariants) is shared with the property tests:
//! it lives in `crates/core/tests/support/driver.rs` and is included here as the module
//! `driver`, whose items are re-exported. This file holds what is specific to fuzzing:
//! raw frame builders (`host_receive`) and the `arbitrary` input encoding of
//! `tcb_segments` (module `input`), which maps the fuzzer's values onto the driver's.
//!
//! Everything here is deterministic: time is virtual, secrets are fixed, and the only
//! input is the fuzzer's byte string.

#[path = "../../crates/core/tests/support/driver.rs"]
mod driver;
pub use driver::*;

use ember_core::wire::{checksum, TcpRepr, IPV4_HEADER_LEN};
use std::net::Ipv4Addr;

// ---------------------------------------------------------------------------------------
// Raw frames.
// ---------------------------------------------------------------------------------------

/// An IPv4 datagram with a correct header checksum whose flags / fragment-offset word
/// is `flags_frag` as given (the payload is cut to fit 65535 bytes).
pub fn ipv4_raw(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    ident: u16,
    flags_frag: u16,
    payload: &[u8],
) -> Vec<u8> {
    let payload = &payload[..payload.len().min(65535 - IPV4_HEADER_LEN)];
    let mut p = ipv4_frag(src, dst, proto, ident, 0, false, payload);
    p[6..8].copy_from_slice(&flags_frag.to_be_bytes());
    p[10] = 0;
    p[11] = 0;
    let c = checksum::checksum(&p[..IPV4_HEADER_LEN]);
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p
}

/// A TCP segment with a raw option area (padded to a multiple of 4, at most 40 bytes)
/// and a correct checksum.
#[allow(clippy::too_many_arguments)]
pub fn tcp_raw(
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    urgent: u16,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let opt_len = options.len().min(40).div_ceil(4) * 4;
    let hl = 20 + opt_len;
    let total = (hl + payload.len()).min(65535 - IPV4_HEADER_LEN);
    let mut t = vec![0u8; total];
    t[0..2].copy_from_slice(&src.1.to_be_bytes());
    t[2..4].copy_from_slice(&dst.1.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[12] = ((hl / 4) as u8) << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&window.to_be_bytes());
    t[18..20].copy_from_slice(&urgent.to_be_bytes());
    let n = options.len().min(40);
    t[20..20 + n].copy_from_slice(&options[..n]);
    let pl = total - hl;
    t[hl..].copy_from_slice(&payload[..pl]);
    TcpRepr::fill_checksum(&mut t, src.0, dst.0);
    t
}

// ---------------------------------------------------------------------------------------
// The input of `tcb_segments`.
// ---------------------------------------------------------------------------------------

/// The fuzzer's encoding of one `Tcb` run: `arbitrary`-derived mirrors of the driver's
/// `Knobs`, `Start` and `Op` (same variants, narrower integers, so that corpora stay
/// valid), and their mapping onto the driver's types. The mapping clamps every value
/// into the range the driver expects (documented tunable ranges, bounded lengths).
pub mod input {
    use crate::driver;
    use arbitrary::Arbitrary;

    /// The knobs of a fuzzed connection (interpreted into valid tunables), and the two
    /// initial sequence numbers.
    #[derive(Arbitrary, Debug, Clone)]
    pub struct Knobs {
        pub sack: u8,
        pub ts: bool,
        pub ws: bool,
        pub newreno: bool,
        pub init_cwnd: u8,
        pub sndbuf: u32,
        pub rcvbuf: u32,
        pub small_max_buf: bool,
        pub dupthresh: u8,
        pub reass_max_segs: u8,
        pub sack_max_ranges: u8,
        pub no_ratelimit: bool,
        pub mss_min: u16,
        pub rto_min: u16,
        pub naglim: u16,
        pub iss: u32,
        pub irs: u32,
    }

    impl Knobs {
        /// Every value clamped into its documented range (`Params::describe`).
        pub fn to_driver(&self) -> driver::Knobs {
            driver::Knobs {
                sack: u32::from(self.sack % 3),
                ts: self.ts,
                ws: self.ws,
                newreno: self.newreno,
                init_cwnd: u32::from(self.init_cwnd).clamp(1, 100),
                sndbuf: self.sndbuf,
                // `Knobs::settings` caps it at `tcp_max_buf` (at least 8192).
                rcvbuf: self.rcvbuf.max(2048),
                small_max_buf: self.small_max_buf,
                dupthresh: u32::from(self.dupthresh % 8).max(1),
                reass_max_segs: u32::from(self.reass_max_segs).max(1),
                sack_max_ranges: u32::from(self.sack_max_ranges).clamp(4, 4096),
                no_ratelimit: self.no_ratelimit,
                mss_min: u32::from(self.mss_min).clamp(48, 1460),
                rto_min: u32::from(self.rto_min).clamp(1, 20_000),
                naglim: u32::from(self.naglim).max(1),
            }
        }

        /// The driver for this connection, brought to `start` (without the property
        /// tests' `Strict` checks).
        pub fn drv(&self, start: &Start) -> driver::Drv {
            driver::Drv::new(
                &self.to_driver(),
                &start.to_driver(),
                self.iss,
                self.irs,
                None,
            )
        }
    }

    #[derive(Arbitrary, Debug, Clone)]
    pub enum Start {
        Client,
        Server {
            mss: Option<u16>,
            ws: Option<u8>,
            sack: bool,
            ts: bool,
        },
        Established {
            mss: Option<u16>,
            ws: Option<u8>,
            sack: bool,
            ts: bool,
            window: u16,
        },
    }

    impl Start {
        pub fn to_driver(&self) -> driver::Start {
            match *self {
                Start::Client => driver::Start::Client,
                Start::Server { mss, ws, sack, ts } => driver::Start::Server { mss, ws, sack, ts },
                Start::Established {
                    mss,
                    ws,
                    sack,
                    ts,
                    window,
                } => driver::Start::Established {
                    mss,
                    ws,
                    sack,
                    ts,
                    window,
                },
            }
        }
    }

    #[derive(Arbitrary, Debug, Clone, Copy)]
    pub enum SeqSel {
        RcvNxt(i32),
        Irs(i32),
        Abs(u32),
    }

    #[derive(Arbitrary, Debug, Clone, Copy)]
    pub enum AckSel {
        Valid(u8),
        Una(i32),
        Nxt(i16),
        Abs(u32),
    }

    #[derive(Arbitrary, Debug, Clone, Copy)]
    pub enum TsSel {
        None,
        Cur,
        Old(u32),
        Abs(u32, u32),
    }

    #[derive(Arbitrary, Debug, Clone)]
    pub struct SegSpec {
        pub seq: SeqSel,
        pub ack: AckSel,
        pub flags: u8,
        pub window: u16,
        pub urgent: u16,
        pub ts: TsSel,
        /// (relative to SND.UNA, left, length); at most 4 are used.
        pub sack: Vec<(bool, u32, u32)>,
        pub syn_opts: Option<(Option<u16>, Option<u8>, bool)>,
        pub len: u16,
    }

    impl SegSpec {
        pub fn to_driver(&self) -> driver::SegSpec {
            driver::SegSpec {
                seq: match self.seq {
                    SeqSel::RcvNxt(d) => driver::SeqSel::RcvNxt(d),
                    SeqSel::Irs(d) => driver::SeqSel::Irs(d),
                    SeqSel::Abs(v) => driver::SeqSel::Abs(v),
                },
                ack: match self.ack {
                    AckSel::Valid(f) => driver::AckSel::Valid(f),
                    AckSel::Una(d) => driver::AckSel::Una(d),
                    AckSel::Nxt(d) => driver::AckSel::Nxt(i32::from(d)),
                    AckSel::Abs(v) => driver::AckSel::Abs(v),
                },
                flags: self.flags,
                window: self.window,
                urgent: self.urgent,
                ts: match self.ts {
                    TsSel::None => driver::TsSel::None,
                    TsSel::Cur => driver::TsSel::Cur,
                    TsSel::Old(d) => driver::TsSel::Old(d),
                    TsSel::Abs(a, b) => driver::TsSel::Abs(a, b),
                },
                sack: self.sack.iter().take(4).copied().collect(),
                syn_opts: self.syn_opts,
                len: usize::from(self.len),
            }
        }
    }

    #[derive(Arbitrary, Debug, Clone)]
    pub enum Op {
        Seg(SegSpec),
        PeerAck(u8, u16),
        PeerData(u16, bool),
        PeerOoo(u32, u16),
        PeerSack(Vec<(u8, u8)>),
        Send(u32),
        SendUrgent(u16),
        Recv(u32),
        Peek(u16),
        Shutdown,
        Close,
        Abort,
        Nodelay(bool),
        Cork(bool),
        Keepalive(bool),
        KeepaliveParams(u32, u32, u32),
        UserTimeout(u32),
        SndBuf(u32),
        RcvBuf(u32),
        PathMtu(u32),
        Unreachable(u8),
        Tos(u8),
        Advance(u32),
        NextTimer,
    }

    impl Op {
        /// The driver's operation, with lengths, gaps and delays bounded.
        pub fn to_driver(&self) -> driver::Op {
            use driver::Op as D;
            match self {
                Op::Seg(s) => D::Seg(s.to_driver()),
                Op::PeerAck(frac, win) => D::PeerAck(*frac, *win),
                Op::PeerData(n, fin) => D::PeerData(*n % 9000, *fin),
                Op::PeerOoo(gap, n) => D::PeerOoo(gap % 400_000, n % 4000),
                Op::PeerSack(blocks) => D::PeerSack(
                    blocks
                        .iter()
                        .take(4)
                        .map(|&(at, len)| (at, len % 8 + 1))
                        .collect(),
                ),
                Op::Send(n) => D::Send((n % 300_000) as usize),
                Op::SendUrgent(n) => D::SendUrgent(usize::from(*n)),
                Op::Recv(n) => D::Recv((n % 70_000) as usize),
                Op::Peek(n) => D::Peek(usize::from(*n)),
                Op::Shutdown => D::Shutdown,
                Op::Close => D::Close,
                Op::Abort => D::Abort,
                Op::Nodelay(b) => D::Nodelay(*b),
                Op::Cork(b) => D::Cork(*b),
                Op::Keepalive(b) => D::Keepalive(*b),
                Op::KeepaliveParams(a, b, c) => D::KeepaliveParams(*a, *b, *c),
                Op::UserTimeout(ms) => D::UserTimeout(*ms),
                Op::SndBuf(n) => D::SndBuf(*n as usize),
                Op::RcvBuf(n) => D::RcvBuf(*n as usize),
                Op::PathMtu(m) => D::PathMtu(*m),
                Op::Unreachable(c) => D::Unreachable(*c),
                Op::Tos(t) => D::Tos(*t),
                Op::Advance(ms) => D::Advance(ms % 4_000_000),
                Op::NextTimer => D::NextTimer,
            }
        }
    }
}
