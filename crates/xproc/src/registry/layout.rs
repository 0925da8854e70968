//! The registry's records, state words and address encoding (see the design comment in
//! `registry.rs`). Every word here is an atomic: the mapping is shared with processes we
//! do not control, and atomics are the only sound way to share words with them. Nothing
//! in this file trusts a value it loads.

use super::Owner;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// The largest pid Linux hands out (`PID_MAX_LIMIT` on 64-bit kernels, 2^22). A pid
/// outside `1..=PID_MAX` in a record makes the record garbage.
pub(super) const PID_MAX: u32 = 4_194_304;

/// Record kinds, bits 32..36 of a state word. Any other kind is garbage.
pub(super) const FREE: u32 = 0;
pub(super) const BUSY: u32 = 1;
pub(super) const VALID: u32 = 2;
pub(super) const CLAIMED: u32 = 3;

const KIND_SHIFT: u32 = 32;
const GEN_SHIFT: u32 = 36;
/// The generation is 28 bits: a slot's word repeats only after 2^28 transitions of that
/// one slot, far more than can happen between a reader's two loads.
pub(super) const GEN_MASK: u64 = (1 << 28) - 1;

/// How many times a seqlock reader retries a record that changes under it before it
/// takes the record as absent.
pub(super) const SEQ_TRIES: usize = 8;

/// A record's state word: `generation (28 bits) | kind (4 bits) | pid (32 bits)`. The pid
/// is the writer's for `BUSY`, the claimer's for `CLAIMED`, zero otherwise. Every
/// transition increments the generation, so a word is never seen twice by a reader
/// (no ABA) and a changed word tells a seqlock reader that the fields moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct State(pub(super) u64);

impl State {
    pub(super) fn new(gen: u64, kind: u32, pid: u32) -> State {
        State(
            ((gen & GEN_MASK) << GEN_SHIFT)
                | (u64::from(kind & 0xf) << KIND_SHIFT)
                | u64::from(pid),
        )
    }

    pub(super) fn gen(self) -> u64 {
        self.0 >> GEN_SHIFT
    }

    pub(super) fn kind(self) -> u32 {
        ((self.0 >> KIND_SHIFT) & 0xf) as u32
    }

    pub(super) fn pid(self) -> u32 {
        self.0 as u32
    }

    /// The word after this one: the next generation, with a new kind and pid.
    pub(super) fn next(self, kind: u32, pid: u32) -> State {
        State::new(self.gen().wrapping_add(1), kind, pid)
    }
}

pub(super) fn valid_pid(pid: u32) -> bool {
    (1..=PID_MAX).contains(&pid)
}

/// The first 32 bytes of every record.
///
/// `busy_gen`/`busy_start` tell a collector which process holds a `BUSY` record: the
/// writer stores its start time in `busy_start`, then the generation of its `BUSY` word in
/// `busy_gen` (Release). A collector that reads `busy_gen` equal to the generation of the
/// `BUSY` word it saw knows `busy_start` belongs to that writer; otherwise it cannot
/// judge by start time and judges by the pid alone.
#[repr(C)]
pub(super) struct Head {
    pub(super) state: AtomicU64,
    pub(super) busy_gen: AtomicU32,
    pub(super) owner_pid: AtomicU32,
    pub(super) busy_start: AtomicU64,
    pub(super) owner_start: AtomicU64,
}

impl Head {
    pub(super) fn load_state(&self) -> State {
        State(self.state.load(Ordering::Acquire))
    }

    /// Takes a record seen `FREE` in word `free` for `me`: `FREE → BUSY(me)`, then the
    /// owner fields. `None` when another process got there first.
    pub(super) fn begin(&self, free: State, me: Owner) -> Option<State> {
        let busy = free.next(BUSY, me.pid);
        self.state
            .compare_exchange(free.0, busy.0, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        self.busy_start.store(me.start_time, Ordering::Relaxed);
        self.busy_gen.store(busy.gen() as u32, Ordering::Release);
        // Orders the BUSY word before every field store below, for seqlock readers: one
        // that sees a new field value then sees a word other than the one it started with.
        fence(Ordering::Release);
        self.owner_pid.store(me.pid, Ordering::Relaxed);
        self.owner_start.store(me.start_time, Ordering::Relaxed);
        Some(busy)
    }

    /// `BUSY → VALID`, publishing the fields (Release). `None` when the record was taken
    /// from us (only a buggy or hostile process can do that to a live writer).
    pub(super) fn publish(&self, busy: State) -> Option<State> {
        let valid = busy.next(VALID, 0);
        self.state
            .compare_exchange(busy.0, valid.0, Ordering::Release, Ordering::Relaxed)
            .ok()
            .map(|_| valid)
    }

    /// Frees the record if its word is still `seen`.
    pub(super) fn free(&self, seen: State) -> bool {
        self.state
            .compare_exchange(
                seen.0,
                seen.next(FREE, 0).0,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// The owner fields, as stored (unvalidated). Call inside a seqlock read.
    pub(super) fn owner(&self) -> Owner {
        Owner {
            pid: self.owner_pid.load(Ordering::Relaxed),
            start_time: self.owner_start.load(Ordering::Relaxed),
        }
    }
}

/// One consistent read of a `VALID` or `CLAIMED` record (seqlock): the word, the fields
/// read between two equal loads of it. `None` when the record is of another kind, or
/// still changing after [`SEQ_TRIES`] tries (taken as absent).
pub(super) fn snapshot<T>(head: &Head, read: impl Fn() -> T) -> Option<(State, T)> {
    for _ in 0..SEQ_TRIES {
        let s = head.load_state();
        if s.kind() != VALID && s.kind() != CLAIMED {
            return None;
        }
        let fields = read();
        fence(Ordering::Acquire);
        if head.state.load(Ordering::Relaxed) == s.0 {
            return Some((s, fields));
        }
        std::hint::spin_loop();
    }
    None
}

/// A socket address in the registry's canonical form: the 16-byte IPv6 form of the
/// address (v4-mapped, `::ffff:a.b.c.d`, for IPv4), a port, the family and, for IPv6, the
/// scope id. IPv6's v4-mapped addresses are normalised to IPv4, so `127.0.0.1:80` and
/// `[::ffff:127.0.0.1]:80` are one key; the flow label is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Key {
    pub(super) v4: bool,
    pub(super) port: u16,
    pub(super) ip: [u8; 16],
    pub(super) scope: u32,
}

const FAMILY_V4: u32 = 4;
const FAMILY_V6: u32 = 6;

fn is_v4_mapped(ip: &[u8; 16]) -> bool {
    ip[..10] == [0; 10] && ip[10] == 0xff && ip[11] == 0xff
}

impl Key {
    pub(super) fn new(addr: SocketAddr) -> Key {
        match addr {
            SocketAddr::V4(a) => Key::v4(*a.ip(), a.port()),
            SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
                Some(ip) => Key::v4(ip, a.port()),
                None => Key {
                    v4: false,
                    port: a.port(),
                    ip: a.ip().octets(),
                    scope: a.scope_id(),
                },
            },
        }
    }

    fn v4(ip: Ipv4Addr, port: u16) -> Key {
        Key {
            v4: true,
            port,
            ip: ip.to_ipv6_mapped().octets(),
            scope: 0,
        }
    }

    pub(super) fn socket_addr(&self) -> SocketAddr {
        if self.v4 {
            let [.., a, b, c, d] = self.ip;
            SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(a, b, c, d), self.port))
        } else {
            SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(self.ip),
                self.port,
                0,
                self.scope,
            ))
        }
    }

    pub(super) fn is_unspecified(&self) -> bool {
        if self.v4 {
            self.ip[12..] == [0; 4]
        } else {
            self.ip == [0; 16]
        }
    }

    /// The words of this key as stored.
    pub(super) fn raw(&self) -> RawAddr {
        let family = if self.v4 { FAMILY_V4 } else { FAMILY_V6 };
        let mut hi = [0; 8];
        let mut lo = [0; 8];
        hi.copy_from_slice(&self.ip[..8]);
        lo.copy_from_slice(&self.ip[8..]);
        RawAddr {
            fam_port: (family << 16) | u32::from(self.port),
            scope: self.scope,
            hi: u64::from_le_bytes(hi),
            lo: u64::from_le_bytes(lo),
        }
    }

    /// A hash of the key's words, the same in every process.
    pub(super) fn hash(&self, seed: u64) -> u64 {
        let r = self.raw();
        let h = mix(seed ^ (u64::from(r.fam_port) << 32 | u64::from(r.scope)));
        mix(mix(h ^ r.hi) ^ r.lo)
    }
}

/// SplitMix64's finaliser: a fixed (unseeded) hash, so every process places a key in the
/// same slot. A same-user process that fills a window on purpose only stops fusion.
pub(super) fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// An address's words as loaded from shared memory, not yet validated.
#[derive(Clone, Copy, Debug)]
pub(super) struct RawAddr {
    fam_port: u32,
    scope: u32,
    hi: u64,
    lo: u64,
}

impl RawAddr {
    /// Validates the words: family 4 or 6 and nothing else in the top bits, a non-zero
    /// port, and the canonical encoding (IPv4 as v4-mapped with a zero scope; IPv6 never
    /// v4-mapped). `None` for anything else.
    pub(super) fn decode(self) -> Option<Key> {
        let family = self.fam_port >> 16;
        let port = self.fam_port as u16;
        if port == 0 {
            return None;
        }
        let mut ip = [0; 16];
        ip[..8].copy_from_slice(&self.hi.to_le_bytes());
        ip[8..].copy_from_slice(&self.lo.to_le_bytes());
        match family {
            FAMILY_V4 if is_v4_mapped(&ip) && self.scope == 0 => Some(Key {
                v4: true,
                port,
                ip,
                scope: 0,
            }),
            FAMILY_V6 if !is_v4_mapped(&ip) => Some(Key {
                v4: false,
                port,
                ip,
                scope: self.scope,
            }),
            _ => None,
        }
    }
}

/// An address in a record: 24 bytes. The address words hold its 16 bytes in network
/// order in memory (loaded little-endian, so the bytes in the file are the address).
#[repr(C)]
pub(super) struct AddrWords {
    fam_port: AtomicU32,
    scope: AtomicU32,
    hi: AtomicU64,
    lo: AtomicU64,
}

impl AddrWords {
    pub(super) fn store(&self, key: &Key) {
        let r = key.raw();
        self.fam_port.store(r.fam_port, Ordering::Relaxed);
        self.scope.store(r.scope, Ordering::Relaxed);
        self.hi.store(r.hi, Ordering::Relaxed);
        self.lo.store(r.lo, Ordering::Relaxed);
    }

    pub(super) fn load(&self) -> RawAddr {
        RawAddr {
            fam_port: self.fam_port.load(Ordering::Relaxed),
            scope: self.scope.load(Ordering::Relaxed),
            hi: self.hi.load(Ordering::Relaxed),
            lo: self.lo.load(Ordering::Relaxed),
        }
    }
}

/// Stores `bytes` into `words` (little-endian, zero-padded). `bytes` longer than the
/// words are cut; callers check lengths first.
pub(super) fn store_bytes(words: &[AtomicU64], bytes: &[u8]) {
    for (w, chunk) in words
        .iter()
        .zip(bytes.chunks(8).chain(std::iter::repeat(&[][..])))
    {
        let mut b = [0; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        w.store(u64::from_le_bytes(b), Ordering::Relaxed);
    }
}

/// Loads `words` into `out` (little-endian).
pub(super) fn load_bytes(words: &[AtomicU64], out: &mut [u8]) {
    for (w, chunk) in words.iter().zip(out.chunks_mut(8)) {
        let b = w.load(Ordering::Relaxed).to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// A listener: 64 bytes.
#[repr(C)]
pub(super) struct ListenerSlot {
    pub(super) head: Head,
    pub(super) addr: AddrWords,
    /// Bit 0: `IPV6_V6ONLY`. Other bits must be zero.
    pub(super) flags: AtomicU32,
    pub(super) reserved: AtomicU32,
}

/// A connection candidate: 128 bytes.
#[repr(C)]
pub(super) struct CandidateSlot {
    pub(super) head: Head,
    pub(super) nonce: AtomicU64,
    pub(super) client: AddrWords,
    pub(super) server: AddrWords,
    pub(super) payload_len: AtomicU32,
    pub(super) reserved: AtomicU32,
    pub(super) payload: [AtomicU64; 4],
}

/// A live ember process: 128 bytes.
#[repr(C)]
pub(super) struct ProcessSlot {
    pub(super) head: Head,
    pub(super) uid: AtomicU32,
    pub(super) name_len: AtomicU32,
    pub(super) name: [AtomicU64; 6],
    pub(super) reserved: [AtomicU64; 5],
}

pub(super) const LISTENER_RECORD: usize = 64;
pub(super) const CANDIDATE_RECORD: usize = 128;
pub(super) const PROCESS_RECORD: usize = 128;

const _: () = assert!(std::mem::size_of::<Head>() == 32);
const _: () = assert!(std::mem::size_of::<AddrWords>() == 24);
const _: () = assert!(std::mem::size_of::<ListenerSlot>() == LISTENER_RECORD);
const _: () = assert!(std::mem::size_of::<CandidateSlot>() == CANDIDATE_RECORD);
const _: () = assert!(std::mem::size_of::<ProcessSlot>() == PROCESS_RECORD);
const _: () = assert!(std::mem::align_of::<CandidateSlot>() == 8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_words_pack_and_wrap() {
        let s = State::new(GEN_MASK, CLAIMED, 1234);
        assert_eq!((s.gen(), s.kind(), s.pid()), (GEN_MASK, CLAIMED, 1234));
        let n = s.next(FREE, 0);
        assert_eq!((n.gen(), n.kind(), n.pid()), (0, FREE, 0));
        assert_eq!(State(0).kind(), FREE);
        assert_eq!(State(u64::MAX).kind(), 0xf);
    }

    #[test]
    fn keys_normalise_v4_mapped_and_round_trip() {
        let a: SocketAddr = "127.0.0.1:80".parse().unwrap();
        let b: SocketAddr = "[::ffff:127.0.0.1]:80".parse().unwrap();
        assert_eq!(Key::new(a), Key::new(b));
        assert_eq!(Key::new(b).socket_addr(), a);
        let c: SocketAddr = "[fe80::1%3]:443".parse().unwrap();
        assert_eq!(Key::new(c).socket_addr(), c);
        for k in [Key::new(a), Key::new(c)] {
            assert_eq!(k.raw().decode(), Some(k));
        }
    }

    #[test]
    fn non_canonical_addresses_are_refused() {
        let k = Key::new("10.1.2.3:9".parse().unwrap());
        let mut r = k.raw();
        r.fam_port = (6 << 16) | 9; // a v4-mapped address labelled IPv6
        assert_eq!(r.decode(), None);
        let mut r = k.raw();
        r.scope = 1; // IPv4 with a scope
        assert_eq!(r.decode(), None);
        let mut r = k.raw();
        r.fam_port = 4 << 16; // port zero
        assert_eq!(r.decode(), None);
        let mut r = k.raw();
        r.fam_port |= 1 << 24; // bits above the family
        assert_eq!(r.decode(), None);
        let mut r = Key::new("[2001:db8::1]:9".parse().unwrap()).raw();
        r.fam_port = (4 << 16) | 9; // an IPv6 address labelled IPv4
        assert_eq!(r.decode(), None);
    }

    #[test]
    fn bytes_round_trip_through_words() {
        let words: [AtomicU64; 3] = Default::default();
        store_bytes(&words, b"abcdefghijk");
        let mut out = [0u8; 24];
        load_bytes(&words, &mut out);
        assert_eq!(&out[..11], b"abcdefghijk");
        assert_eq!(out[11..], [0; 13]);
    }
}
