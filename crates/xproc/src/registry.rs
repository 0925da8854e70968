//! # The registry: how processes under `ember run` find each other
//!
//! (`shared/spec/crossproc.md`, "Recognition and set-up" and "Security".) One
//! shared-memory file per user and network namespace holds three fixed-capacity tables:
//!
//! * **listeners**: (local address, `IPV6_V6ONLY`, owner), added at `listen`, removed at
//!   close and exit. A client asks [`Registry::has_listener`] after its kernel `connect`
//!   to a local address;
//! * **candidates**: (client address, server address) — the client's 4-tuple — with the
//!   client (owner), a 64-bit nonce and a 32-byte opaque payload. The client publishes
//!   one; the ember process whose kernel `accept` returned the reversed tuple claims it;
//! * **processes**: (owner, uid, control-socket name), for finding a peer's control
//!   socket and for `ember ls`.
//!
//! An *owner* is a process named by (pid, start time): field 22 of `/proc/<pid>/stat`,
//! which a later process reusing the pid does not share ([`probe_pid`]).
//!
//! ## The file
//!
//! [`Registry::open`] opens it `O_RDWR|O_CREAT|O_NOFOLLOW|O_CLOEXEC` with mode 0600 and
//! refuses (`PermissionDenied`) a symbolic link, a file that is not regular, one owned by
//! another user, and one with any group or other permission bit; a size other than zero
//! or [`REGISTRY_SIZE`], or a header of another magic, version, layout, pid namespace or
//! uid, is `InvalidData`. A zero-length file (just created, by us or a racing process) is
//! extended to the size, which is idempotent when two processes race; the header is then
//! formatted once (below). The file is mapped `MAP_SHARED` between two `PROT_NONE` guard
//! pages and the descriptor closed: no descriptor is kept. Drop unmaps.
//!
//! The default name ([`file_name`]) is `ember-<euid>-<netns inode>-<pidns inode>`,
//! normally in `/dev/shm`. The spec says one file per (uid, network namespace); the pid
//! namespace is added because every table names processes by pid: two processes of one
//! network namespace in different pid namespaces (two containers of a pod) would read each
//! other's pids as other processes', and collect live entries as dead. Each pid namespace
//! therefore has its own registry, and the header records the pid namespace so a file
//! opened under another name is refused too. Such processes are not fused: the kernel
//! carries their connections.
//!
//! ## Layout (version [`VERSION`]; every number little-endian, every field an atomic)
//!
//! | offset  | bytes   | what                                                        |
//! | ------- | ------- | ----------------------------------------------------------- |
//! | 0       | 4096    | header (80 bytes used, the rest zero)                       |
//! | 4096    | 65536   | listeners: 1024 records of 64 bytes                         |
//! | 69632   | 131072  | candidates: 1024 records of 128 bytes                       |
//! | 200704  | 65536   | processes: 512 records of 128 bytes                         |
//! | 266240  |         | end: [`REGISTRY_SIZE`], 260 KiB                             |
//!
//! Header: `magic u64` (0, `"FMT!"<<32 | pid` while formatting, `"EMBERREG"` when
//! ready), `version u32`, `header_len u32`, `size u64`, then `u32` offset, capacity and
//! record size of each table and the probe window (40 bytes), `pidns u64`, `uid u32`,
//! `reserved u32`. The header is checked at open against this build's constants and never
//! read again: offsets, capacities and sizes used at run time are compile-time constants,
//! so no value in the mapping ever sizes or places an access.
//!
//! Every record starts with a 32-byte head: `state u64`, `busy_gen u32`, `owner_pid
//! u32`, `busy_start u64`, `owner_start u64`. Then:
//!
//! * listener (64): address (24: `family<<16 | port u32`, `scope_id u32`, then the
//!   16 address bytes in network order, as two `u64` words), `flags u32` (bit 0:
//!   v6only), `reserved u32`;
//! * candidate (128): `nonce u64`, client address (24), server address (24),
//!   `payload_len u32`, `reserved u32`, payload (32 bytes as four `u64`);
//! * process (128): `uid u32`, `name_len u32`, name (48 bytes as six `u64`), 40 reserved.
//!
//! Addresses are `std::net::SocketAddr`s in one canonical form: the 16-byte IPv6 form
//! (v4-mapped `::ffff:a.b.c.d` for IPv4), the port, the family, and for IPv6 the scope id
//! (the flow label is dropped). A v4-mapped IPv6 address is normalised to IPv4 (family 4),
//! because the kernel treats `[::ffff:a.b.c.d]:p` on a dual-stack socket and `a.b.c.d:p`
//! as one endpoint, and `getpeername` on the two ends of one connection may give either
//! form: both must find one key.
//!
//! ## Lock-free protocols
//!
//! A record's `state` word is `generation (28 bits) | kind (4) | pid (32)`; the kinds are
//! `FREE` (0; a zero-filled file is all free), `BUSY` (being written, pid = writer),
//! `VALID`, and `CLAIMED` (candidates only, pid = claimer). Every transition is a
//! compare-and-swap that increments the generation, so a word never repeats (no ABA) and
//! an id ([`ListenerId`], [`CandidateId`], [`ProcessId`]) is (index, the `VALID` word):
//! acting on an id is a CAS from exactly that word, which fails once the record moved on.
//!
//! * **Insert**: CAS `FREE → BUSY(me)`, store the start time in `busy_start` and the
//!   generation in `busy_gen` (Release), a Release fence, the fields (Relaxed), then CAS
//!   `BUSY → VALID` (Release).
//! * **Read** (seqlock): load the word (Acquire); if `VALID`/`CLAIMED`, load the fields
//!   (Relaxed), an Acquire fence, load the word again; equal words mean the fields are one
//!   record's. At most 8 tries, then the record counts as absent: a writer that never
//!   stops cannot hold a reader.
//! * **Claim**: read a `VALID` candidate consistently, compare its tuple, CAS
//!   `VALID → CLAIMED(claimer)`: the word the fields were read under is the word
//!   replaced, so the claimed record is the one compared, and exactly one claimer wins.
//!   The client sees `CLAIMED` with the generation after its id's ([`CandidateState`]),
//!   then releases the record; [`Registry::withdraw_candidate`] (`VALID → FREE`) fails
//!   once claimed.
//! * **Remove**: CAS `VALID → FREE` (or `CLAIMED → FREE`).
//! * **Collect**: a record is freed by whoever finds it dead: a `VALID`/`CLAIMED` record
//!   whose owner's pid is gone, a zombie, or now names a process with another start time;
//!   a `BUSY` record whose writer's pid is gone (or has another start time, when
//!   `busy_gen` matches the word's generation, proving `busy_start` is this writer's); a
//!   record of an unknown kind or whose fields do not validate. [`Registry::collect_dead`]
//!   scans everything; an insert that finds its window full collects that table and
//!   retries once. When `/proc` cannot answer, nothing is collected.
//! * **Format once**: the magic goes `0 → FORMATTING|pid → READY`; the CAS winner writes
//!   the header and publishes `READY` (Release); others wait up to 250 ms (then
//!   `TimedOut`), and take over from a formatter whose pid is gone.
//!
//! Keys are placed by a fixed hash (listeners by port, so wildcard and specific binds of a
//! port share a window; candidates by both addresses; processes by pid) into a **probe
//! window** of [`PROBE_WINDOW`] consecutive records (wrapping). Lookups scan the whole
//! window (no early stop, so no tombstones are needed); an insert takes the first free
//! record of its window. A full window is [`RegistryError::Full`]: "do not fuse", and the
//! caller leaves the connection on the kernel.
//!
//! Nothing here allocates after open: lookups, claims, inserts and collection use the
//! stack. `/proc/<pid>/stat` is read with raw system calls into a stack buffer.
//!
//! ## Everything read from the mapping is input
//!
//! Another process of the same user, buggy or hostile, may write anything at any time.
//! Hence: every shared word is an atomic (no `&`/`&mut` to plain shared bytes; byte
//! fields are packed into `u64` words); indices come from our own counters and ids, taken
//! modulo or checked against the compile-time capacity; every scan is bounded by the
//! window or the capacity, every retry loop by a constant; a record counts only when its
//! word is `VALID` (or `CLAIMED` for candidates, with a pid in `1..=PID_MAX`) and its
//! fields validate: family 4 or 6 with the canonical encoding, non-zero ports, pids in
//! `1..=4194304`, flags with only defined bits, payload and name lengths within their
//! arrays. A match compares every key field of a consistent snapshot, so a record cannot
//! match a key it does not hold. What a hostile writer of the same user *can* do is forge
//! records (so that a claim finds a candidate that no client published): the later steps
//! (the nonce, `SO_PEERCRED` on the control socket) are where a forged record fails, and
//! the worst outcome is no fusion. It can also truncate the file, which makes later
//! accesses fault (`SIGBUS`); a process of the same user can kill us anyway.
//!
//! ## Why the registry never decides who accepted
//!
//! The candidate is keyed by the 4-tuple, and only the process that holds the accepted
//! kernel socket knows it has that tuple (from `accept`'s address and `getsockname`):
//! listeners with `SO_REUSEPORT`, several processes sharing one listening socket after
//! `fork`, backlogs and SYN cookies all stay the kernel's choice. The listener table
//! only says "an ember process listens there, a candidate is worth publishing"; a claim
//! never comes if the acceptor is not under ember, and the client then stays on the
//! kernel after its deadline ([`Registry::withdraw_candidate`]).

mod fuzz;
mod layout;
mod liveness;
mod region;

pub use fuzz::fuzz_registry;
pub use liveness::{probe_pid, Liveness};
pub use region::Region;

use layout::{
    load_bytes, mix, snapshot, store_bytes, valid_pid, CandidateSlot, Head, Key, ListenerSlot,
    ProcessSlot, State, BUSY, CANDIDATE_RECORD, CLAIMED, FREE, GEN_MASK, LISTENER_RECORD,
    PROCESS_RECORD, VALID,
};
use liveness::{Probe, ProcProbe};
use region::Identity;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;

/// The layout version in the header; another version's registry is refused.
pub const VERSION: u32 = 1;
/// Bytes reserved for the header.
pub const HEADER_LEN: usize = 4096;
/// Records in the listener table.
pub const LISTENER_CAPACITY: usize = 1024;
/// Records in the candidate table.
pub const CANDIDATE_CAPACITY: usize = 1024;
/// Records in the process table.
pub const PROCESS_CAPACITY: usize = 512;
/// Records a key may occupy and a lookup scans, from the key's hash on.
pub const PROBE_WINDOW: usize = 64;
/// Bytes of opaque payload a candidate carries.
pub const PAYLOAD_LEN: usize = 32;
/// Bytes of control-socket name a process record carries.
pub const NAME_LEN: usize = 48;
/// Offset of the listener table.
pub const LISTENERS_OFFSET: usize = HEADER_LEN;
/// Offset of the candidate table.
pub const CANDIDATES_OFFSET: usize = LISTENERS_OFFSET + LISTENER_CAPACITY * LISTENER_RECORD;
/// Offset of the process table.
pub const PROCESSES_OFFSET: usize = CANDIDATES_OFFSET + CANDIDATE_CAPACITY * CANDIDATE_RECORD;
/// The size of the registry file and mapping.
pub const REGISTRY_SIZE: usize = PROCESSES_OFFSET + PROCESS_CAPACITY * PROCESS_RECORD;

/// How long (in 1 ms sleeps) an open waits for another process to format the header.
const OPEN_WAITS: u32 = 250;

const _: () = assert!(REGISTRY_SIZE == 266_240);
const _: () = assert!(
    LISTENERS_OFFSET % 64 == 0 && CANDIDATES_OFFSET % 64 == 0 && PROCESSES_OFFSET % 64 == 0
);
const _: () = assert!(PROBE_WINDOW <= LISTENER_CAPACITY && PROBE_WINDOW <= PROCESS_CAPACITY);
const _: () = assert!(PROBE_WINDOW <= CANDIDATE_CAPACITY);
const _: () = assert!(PAYLOAD_LEN == 4 * 8 && NAME_LEN == 6 * 8);

/// A process, named so that a reused pid is not taken for it: the pid and the start time
/// (field 22 of `/proc/<pid>/stat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    /// The process id, in `1..=4194304`.
    pub pid: u32,
    /// Clock ticks after boot at which the process started.
    pub start_time: u64,
}

impl Owner {
    /// The calling process. Reads `/proc` (no allocation); call it again after `fork`.
    pub fn current() -> io::Result<Owner> {
        // SAFETY: getpid cannot fail and touches no memory.
        let pid = unsafe { libc::getpid() } as u32;
        match probe_pid(pid) {
            Liveness::Alive { start_time } => Ok(Owner { pid, start_time }),
            _ => Err(io::Error::other(
                "cannot read this process's start time from /proc",
            )),
        }
    }
}

/// Why an insert did not happen. Each one means "do not fuse": the caller keeps the
/// connection on the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistryError {
    /// The key's probe window is full of live records.
    Full,
    /// Another process took the record while we wrote it (only a buggy or hostile one
    /// can).
    Contended,
    /// A port of zero, a payload or name too long, or an owner pid out of range.
    InvalidInput,
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RegistryError::Full => "registry table full",
            RegistryError::Contended => "registry record taken by another process",
            RegistryError::InvalidInput => "invalid registry entry",
        })
    }
}

impl std::error::Error for RegistryError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct SlotId {
    index: u32,
    state: u64,
}

/// A listener record of ours, for [`Registry::remove_listener`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ListenerId(SlotId);

/// A candidate record of ours, for [`Registry::candidate_state`],
/// [`Registry::withdraw_candidate`] and [`Registry::release_candidate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CandidateId(SlotId);

/// A process record of ours, for [`Registry::unregister_process`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProcessId(SlotId);

/// A listener, as [`Registry::listeners`] lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenerInfo {
    /// The bound address (v4-mapped IPv6 shown as IPv4).
    pub addr: SocketAddr,
    /// `IPV6_V6ONLY` (always false for IPv4).
    pub v6only: bool,
    /// The process that listens.
    pub owner: Owner,
}

/// What a claimer learns of the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The client process.
    pub client: Owner,
    /// The client's nonce.
    pub nonce: u64,
    payload: [u8; PAYLOAD_LEN],
    payload_len: u8,
}

impl Claimed {
    /// The client's payload.
    pub fn payload(&self) -> &[u8] {
        &self.payload[..usize::from(self.payload_len)]
    }
}

/// Where a published candidate stands, as its client sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CandidateState {
    /// Published, not claimed.
    Pending,
    /// Claimed by the process with this pid (look it up with
    /// [`Registry::lookup_process`]).
    Claimed {
        /// The claimer's pid.
        by: u32,
    },
    /// Withdrawn, released or collected: the record is not this candidate any more.
    Gone,
}

/// A live ember process, as [`Registry::lookup_process`] and [`Registry::processes`]
/// give it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    /// The process.
    pub owner: Owner,
    /// Its user id.
    pub uid: u32,
    name: [u8; NAME_LEN],
    name_len: u8,
}

impl ProcessInfo {
    /// Its control socket's abstract name (without the leading NUL).
    pub fn name(&self) -> &[u8] {
        &self.name[..usize::from(self.name_len)]
    }
}

/// A record type of one table.
trait Slot {
    /// The validated fields.
    type Fields: Copy;
    /// Whether `CLAIMED` is a kind of this table.
    const CLAIMABLE: bool;
    fn head(&self) -> &Head;
    /// Loads the fields (Relaxed, inside a seqlock read) and validates them.
    fn read(&self) -> Option<Self::Fields>;
    fn owner(f: &Self::Fields) -> Owner;
}

fn valid_owner(o: Owner) -> Option<Owner> {
    valid_pid(o.pid).then_some(o)
}

#[derive(Clone, Copy)]
struct ListenerFields {
    owner: Owner,
    key: Key,
    v6only: bool,
}

impl Slot for ListenerSlot {
    type Fields = ListenerFields;
    const CLAIMABLE: bool = false;
    fn head(&self) -> &Head {
        &self.head
    }
    fn read(&self) -> Option<ListenerFields> {
        let owner = valid_owner(self.head.owner())?;
        let key = self.addr.load().decode()?;
        let flags = self.flags.load(Ordering::Relaxed);
        if flags & !1 != 0 {
            return None;
        }
        Some(ListenerFields {
            owner,
            key,
            v6only: flags & 1 == 1 && !key.v4,
        })
    }
    fn owner(f: &ListenerFields) -> Owner {
        f.owner
    }
}

#[derive(Clone, Copy)]
struct CandidateFields {
    owner: Owner,
    nonce: u64,
    client: Key,
    server: Key,
    payload: [u8; PAYLOAD_LEN],
    payload_len: u8,
}

impl Slot for CandidateSlot {
    type Fields = CandidateFields;
    const CLAIMABLE: bool = true;
    fn head(&self) -> &Head {
        &self.head
    }
    fn read(&self) -> Option<CandidateFields> {
        let owner = valid_owner(self.head.owner())?;
        let client = self.client.load().decode()?;
        let server = self.server.load().decode()?;
        let len = self.payload_len.load(Ordering::Relaxed);
        if len as usize > PAYLOAD_LEN {
            return None;
        }
        let mut payload = [0; PAYLOAD_LEN];
        load_bytes(&self.payload, &mut payload);
        Some(CandidateFields {
            owner,
            nonce: self.nonce.load(Ordering::Relaxed),
            client,
            server,
            payload,
            payload_len: len as u8,
        })
    }
    fn owner(f: &CandidateFields) -> Owner {
        f.owner
    }
}

impl Slot for ProcessSlot {
    type Fields = ProcessInfo;
    const CLAIMABLE: bool = false;
    fn head(&self) -> &Head {
        &self.head
    }
    fn read(&self) -> Option<ProcessInfo> {
        let owner = valid_owner(self.head.owner())?;
        let len = self.name_len.load(Ordering::Relaxed);
        if len as usize > NAME_LEN {
            return None;
        }
        let mut name = [0; NAME_LEN];
        load_bytes(&self.name, &mut name);
        Some(ProcessInfo {
            owner,
            uid: self.uid.load(Ordering::Relaxed),
            name,
            name_len: len as u8,
        })
    }
    fn owner(f: &ProcessInfo) -> Owner {
        f.owner
    }
}

/// A consistent read of a `VALID` or `CLAIMED` record: `Some((word, Some(fields)))` for a
/// record that validates, `Some((word, None))` for garbage (fields or kind invalid),
/// `None` when the record is of another kind or would not hold still.
fn read_slot<S: Slot>(slot: &S) -> Option<(State, Option<S::Fields>)> {
    let (s, fields) = snapshot(slot.head(), || slot.read())?;
    let kind_ok = s.kind() == VALID || (S::CLAIMABLE && s.kind() == CLAIMED && valid_pid(s.pid()));
    Some((s, fields.filter(|_| kind_ok)))
}

/// A consistent read of a `VALID` record that validates.
fn live<S: Slot>(slot: &S) -> Option<(State, S::Fields)> {
    match read_slot(slot)? {
        (s, Some(f)) if s.kind() == VALID => Some((s, f)),
        _ => None,
    }
}

/// The records of the probe window that starts at `hash`.
fn window<S>(table: &[S], hash: u64) -> impl Iterator<Item = &S> {
    indexed_window(table, hash).map(|(_, slot)| slot)
}

/// The same, with each record's index.
fn indexed_window<S>(table: &[S], hash: u64) -> impl Iterator<Item = (usize, &S)> {
    let start = hash as usize;
    (0..PROBE_WINDOW).filter_map(move |k| {
        let i = start.wrapping_add(k) % table.len().max(1);
        table.get(i).map(|slot| (i, slot))
    })
}

fn is_dead(probe: &mut impl Probe, owner: Owner) -> bool {
    match probe.liveness(owner.pid) {
        Liveness::Gone => true,
        Liveness::Alive { start_time } => start_time != owner.start_time,
        Liveness::Unknown => false,
    }
}

/// Whether the writer of `BUSY` word `s` is dead (see [`Head`]).
fn busy_stale(head: &Head, s: State, probe: &mut impl Probe) -> bool {
    let pid = s.pid();
    if !valid_pid(pid) {
        return true;
    }
    match probe.liveness(pid) {
        Liveness::Gone => true,
        Liveness::Unknown => false,
        Liveness::Alive { start_time } => {
            head.busy_gen.load(Ordering::Acquire) == s.gen() as u32
                && head.busy_start.load(Ordering::Relaxed) != start_time
        }
    }
}

/// Frees `slot` if it is dead or garbage; true if this call freed it.
fn collect_slot<S: Slot>(slot: &S, probe: &mut impl Probe) -> bool {
    let head = slot.head();
    let s = head.load_state();
    match s.kind() {
        FREE => false,
        BUSY => busy_stale(head, s, probe) && head.free(s),
        VALID | CLAIMED => match read_slot(slot) {
            None => false,
            Some((s, None)) => head.free(s),
            Some((s, Some(f))) => is_dead(probe, S::owner(&f)) && head.free(s),
        },
        _ => head.free(s),
    }
}

fn collect_table<S: Slot>(table: &[S], probe: &mut impl Probe) -> usize {
    table
        .iter()
        .filter(|slot| collect_slot(*slot, probe))
        .count()
}

fn remove_owner_table<S: Slot>(table: &[S], owner: Owner) -> usize {
    table
        .iter()
        .filter(|slot| match read_slot(*slot) {
            Some((s, Some(f))) => S::owner(&f) == owner && slot.head().free(s),
            _ => false,
        })
        .count()
}

fn try_insert<S: Slot>(
    table: &[S],
    hash: u64,
    me: Owner,
    fill: &impl Fn(&S),
) -> Result<SlotId, RegistryError> {
    for (index, slot) in indexed_window(table, hash) {
        let head = slot.head();
        let s = head.load_state();
        if s.kind() != FREE {
            continue;
        }
        let Some(busy) = head.begin(s, me) else {
            continue;
        };
        fill(slot);
        return match head.publish(busy) {
            Some(valid) => Ok(SlotId {
                index: index as u32,
                state: valid.0,
            }),
            None => Err(RegistryError::Contended),
        };
    }
    Err(RegistryError::Full)
}

/// Inserts; on a full window, collects the table and tries once more.
fn insert<S: Slot>(
    table: &[S],
    hash: u64,
    me: Owner,
    probe: &mut impl Probe,
    fill: impl Fn(&S),
) -> Result<SlotId, RegistryError> {
    if !valid_pid(me.pid) {
        return Err(RegistryError::InvalidInput);
    }
    match try_insert(table, hash, me, &fill) {
        Err(RegistryError::Full) => {
            collect_table(table, probe);
            try_insert(table, hash, me, &fill)
        }
        r => r,
    }
}

fn remove_id<S: Slot>(table: &[S], id: SlotId) -> bool {
    table
        .get(id.index as usize)
        .is_some_and(|slot| slot.head().free(State(id.state)))
}

fn listener_hash(port: u16) -> u64 {
    mix(u64::from(port) | 1 << 40)
}

fn candidate_hash(client: &Key, server: &Key) -> u64 {
    server.hash(client.hash(3 << 40))
}

fn process_hash(pid: u32) -> u64 {
    mix(u64::from(pid) | 2 << 40)
}

/// Whether a listener bound as `l` accepts a connection to `dst` (both canonical).
fn listener_matches(l: &ListenerFields, dst: &Key) -> bool {
    if l.key.port != dst.port {
        return false;
    }
    match (l.key.v4, dst.v4) {
        (true, true) => l.key.is_unspecified() || l.key.ip == dst.ip,
        (false, false) => {
            l.key.is_unspecified()
                || (l.key.ip == dst.ip
                    && (l.key.scope == 0 || dst.scope == 0 || l.key.scope == dst.scope))
        }
        // A dual-stack `[::]` listener takes IPv4 (v4-mapped) connections.
        (false, true) => l.key.is_unspecified() && !l.v6only,
        (true, false) => false,
    }
}

/// How a candidate record's word `s` stands for the client holding `id`.
fn classify(id: SlotId, s: State) -> CandidateState {
    let published = State(id.state);
    if s == published {
        CandidateState::Pending
    } else if s.kind() == CLAIMED
        && s.gen() == (published.gen() + 1) & GEN_MASK
        && valid_pid(s.pid())
    {
        CandidateState::Claimed { by: s.pid() }
    } else {
        CandidateState::Gone
    }
}

/// The default file name: `ember-<euid>-<netns inode>-<pidns inode>` (see the module
/// comment for why the pid namespace is in it).
pub fn file_name() -> io::Result<String> {
    // SAFETY: geteuid cannot fail and touches no memory.
    let uid = unsafe { libc::geteuid() };
    let netns = region::namespace_inode("/proc/self/ns/net")?;
    let pidns = region::namespace_inode("/proc/self/ns/pid")?;
    Ok(format!("ember-{uid}-{netns}-{pidns}"))
}

/// A mapped registry. Shareable between threads; every operation is lock-free and
/// bounded, and none allocates.
pub struct Registry {
    region: Region,
}

impl Registry {
    /// Opens or creates the registry file at `path` (see the module comment for what is
    /// refused and why).
    pub fn open(path: &Path) -> io::Result<Registry> {
        Registry::attach(region::map_file(path)?)
    }

    /// Opens or creates the registry of this user and namespaces in `dir` (normally
    /// `/dev/shm`), named by [`file_name`].
    pub fn open_in(dir: &Path) -> io::Result<Registry> {
        Registry::open(&dir.join(file_name()?))
    }

    /// A registry over `region`, without a file: formats a zeroed region, checks a
    /// formatted one as [`open`](Registry::open) does.
    pub fn from_region(region: Region) -> io::Result<Registry> {
        Registry::attach(region)
    }

    fn attach(region: Region) -> io::Result<Registry> {
        let me = Identity::current()?;
        region::attach(&region, &me, &mut ProcProbe::new(), OPEN_WAITS)?;
        Ok(Registry { region })
    }

    /// Writes raw bytes into the shared region at `offset` (cut at its end), as a buggy
    /// or hostile process of the same user could; returns how many were written. For
    /// tests and fuzzing.
    pub fn scribble(&mut self, offset: usize, bytes: &[u8]) -> usize {
        self.region.write(offset, bytes)
    }

    /// The table of `capacity` records of type `S` at `offset`.
    ///
    /// # Safety
    ///
    /// `offset`, `capacity` and `S` must be one table's constants (its offset, capacity
    /// and record type), so that the table lies within the region and is aligned.
    unsafe fn table<S>(&self, offset: usize, capacity: usize) -> &[S] {
        // SAFETY: by the caller's contract `[offset, offset + capacity * size_of::<S>())`
        // lies within REGISTRY_SIZE and is aligned for `S` (the region is page-aligned,
        // tables start at multiples of 64 and records are 64 or 128 bytes); the region
        // stays mapped read-write for as long as `self` lives. Records hold only atomics,
        // which other processes may change under a shared reference.
        unsafe { std::slice::from_raw_parts(self.region.base().add(offset).cast::<S>(), capacity) }
    }

    fn listener_table(&self) -> &[ListenerSlot] {
        // SAFETY: the listener table's constants.
        unsafe { self.table(LISTENERS_OFFSET, LISTENER_CAPACITY) }
    }

    fn candidate_table(&self) -> &[CandidateSlot] {
        // SAFETY: the candidate table's constants.
        unsafe { self.table(CANDIDATES_OFFSET, CANDIDATE_CAPACITY) }
    }

    fn process_table(&self) -> &[ProcessSlot] {
        // SAFETY: the process table's constants.
        unsafe { self.table(PROCESSES_OFFSET, PROCESS_CAPACITY) }
    }

    // ---- listeners ----

    /// Records that `owner` listens on `addr` (as `getsockname` gives it, never port 0).
    /// `v6only` is the socket's `IPV6_V6ONLY`; it matters only for `[::]`.
    pub fn add_listener(
        &self,
        addr: SocketAddr,
        v6only: bool,
        owner: Owner,
    ) -> Result<ListenerId, RegistryError> {
        self.add_listener_with(addr, v6only, owner, &mut ProcProbe::new())
    }

    fn add_listener_with(
        &self,
        addr: SocketAddr,
        v6only: bool,
        owner: Owner,
        probe: &mut impl Probe,
    ) -> Result<ListenerId, RegistryError> {
        let key = Key::new(addr);
        if key.port == 0 {
            return Err(RegistryError::InvalidInput);
        }
        let flags = u32::from(v6only && !key.v4);
        insert(
            self.listener_table(),
            listener_hash(key.port),
            owner,
            probe,
            |slot: &ListenerSlot| {
                slot.addr.store(&key);
                slot.flags.store(flags, Ordering::Relaxed);
                slot.reserved.store(0, Ordering::Relaxed);
            },
        )
        .map(ListenerId)
    }

    /// Removes a listener of ours; false if it was already gone (collected).
    pub fn remove_listener(&self, id: ListenerId) -> bool {
        remove_id(self.listener_table(), id.0)
    }

    /// Whether an ember process listens where a connection to `dst` would arrive: an
    /// exact bind, `0.0.0.0` for IPv4, `[::]` for IPv6 and (unless v6only) IPv4. IPv4 and
    /// v4-mapped IPv6 are one address.
    pub fn has_listener(&self, dst: SocketAddr) -> bool {
        let dst = Key::new(dst);
        dst.port != 0
            && window(self.listener_table(), listener_hash(dst.port))
                .any(|slot| live(slot).is_some_and(|(_, l)| listener_matches(&l, &dst)))
    }

    /// Every listener that validates, in table order.
    pub fn listeners(&self) -> impl Iterator<Item = ListenerInfo> + '_ {
        self.listener_table().iter().filter_map(|slot| {
            let (_, l) = live(slot)?;
            Some(ListenerInfo {
                addr: l.key.socket_addr(),
                v6only: l.v6only,
                owner: l.owner,
            })
        })
    }

    // ---- candidates ----

    /// Publishes a candidate for the connection from `client` to `server` (the client's
    /// `getsockname` and `getpeername`), owned by `owner` (the client process). Any
    /// earlier record of the same tuple is stale (the kernel has given the tuple to this
    /// connection) and is freed. `payload` is at most [`PAYLOAD_LEN`] bytes.
    pub fn publish_candidate(
        &self,
        client: SocketAddr,
        server: SocketAddr,
        owner: Owner,
        nonce: u64,
        payload: &[u8],
    ) -> Result<CandidateId, RegistryError> {
        self.publish_candidate_with(client, server, owner, nonce, payload, &mut ProcProbe::new())
    }

    fn publish_candidate_with(
        &self,
        client: SocketAddr,
        server: SocketAddr,
        owner: Owner,
        nonce: u64,
        payload: &[u8],
        probe: &mut impl Probe,
    ) -> Result<CandidateId, RegistryError> {
        let (c, s) = (Key::new(client), Key::new(server));
        if c.port == 0 || s.port == 0 || payload.len() > PAYLOAD_LEN || !valid_pid(owner.pid) {
            return Err(RegistryError::InvalidInput);
        }
        let table = self.candidate_table();
        let hash = candidate_hash(&c, &s);
        for slot in window(table, hash) {
            if let Some((st, Some(f))) = read_slot(slot) {
                if f.client == c && f.server == s {
                    slot.head.free(st);
                }
            }
        }
        insert(table, hash, owner, probe, |slot: &CandidateSlot| {
            slot.nonce.store(nonce, Ordering::Relaxed);
            slot.client.store(&c);
            slot.server.store(&s);
            slot.payload_len
                .store(payload.len() as u32, Ordering::Relaxed);
            slot.reserved.store(0, Ordering::Relaxed);
            store_bytes(&slot.payload, payload);
        })
        .map(CandidateId)
    }

    /// Claims the candidate of the connection from `client` to `server` (the acceptor's
    /// `accept` address and `getsockname`) for `claimer_pid`: exactly one claimer of a
    /// published candidate gets `Some`. `None` when no pending candidate has this tuple.
    pub fn claim_candidate(
        &self,
        client: SocketAddr,
        server: SocketAddr,
        claimer_pid: u32,
    ) -> Option<Claimed> {
        let (c, s) = (Key::new(client), Key::new(server));
        if c.port == 0 || s.port == 0 || !valid_pid(claimer_pid) {
            return None;
        }
        for slot in window(self.candidate_table(), candidate_hash(&c, &s)) {
            let Some((st, f)) = live(slot) else { continue };
            if f.client != c || f.server != s {
                continue;
            }
            let claimed = st.next(CLAIMED, claimer_pid);
            if slot
                .head
                .state
                .compare_exchange(st.0, claimed.0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Some(Claimed {
                    client: f.owner,
                    nonce: f.nonce,
                    payload: f.payload,
                    payload_len: f.payload_len,
                });
            }
        }
        None
    }

    /// Where our candidate `id` stands.
    pub fn candidate_state(&self, id: CandidateId) -> CandidateState {
        match self.candidate_table().get(id.0.index as usize) {
            Some(slot) => classify(id.0, slot.head.load_state()),
            None => CandidateState::Gone,
        }
    }

    /// Withdraws our pending candidate `id` (nobody claimed it in time). Fails with the
    /// candidate's state when it is no longer pending: claimed (then the client must
    /// follow through, or release it and tell the claimer) or gone.
    pub fn withdraw_candidate(&self, id: CandidateId) -> Result<(), CandidateState> {
        let Some(slot) = self.candidate_table().get(id.0.index as usize) else {
            return Err(CandidateState::Gone);
        };
        let published = State(id.0.state);
        match slot.head.state.compare_exchange(
            published.0,
            published.next(FREE, 0).0,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Ok(()),
            Err(now) => Err(classify(id.0, State(now))),
        }
    }

    /// Frees our candidate `id` once we have seen it claimed; false if it is not
    /// (pending, or gone).
    pub fn release_candidate(&self, id: CandidateId) -> bool {
        let Some(slot) = self.candidate_table().get(id.0.index as usize) else {
            return false;
        };
        let s = slot.head.load_state();
        matches!(classify(id.0, s), CandidateState::Claimed { .. }) && slot.head.free(s)
    }

    // ---- processes ----

    /// Records the live ember process `owner` of user `uid`, whose control socket has
    /// the abstract name `name` (at most [`NAME_LEN`] bytes). An earlier record of the
    /// same pid (a dead process, or this one registering again) is replaced.
    pub fn register_process(
        &self,
        owner: Owner,
        uid: u32,
        name: &[u8],
    ) -> Result<ProcessId, RegistryError> {
        self.register_process_with(owner, uid, name, &mut ProcProbe::new())
    }

    fn register_process_with(
        &self,
        owner: Owner,
        uid: u32,
        name: &[u8],
        probe: &mut impl Probe,
    ) -> Result<ProcessId, RegistryError> {
        if name.len() > NAME_LEN || !valid_pid(owner.pid) {
            return Err(RegistryError::InvalidInput);
        }
        let table = self.process_table();
        let hash = process_hash(owner.pid);
        for slot in window(table, hash) {
            if let Some((st, p)) = live(slot) {
                if p.owner.pid == owner.pid {
                    slot.head.free(st);
                }
            }
        }
        insert(table, hash, owner, probe, |slot: &ProcessSlot| {
            slot.uid.store(uid, Ordering::Relaxed);
            slot.name_len.store(name.len() as u32, Ordering::Relaxed);
            store_bytes(&slot.name, name);
            for w in &slot.reserved {
                w.store(0, Ordering::Relaxed);
            }
        })
        .map(ProcessId)
    }

    /// Removes our process record; false if it was already gone.
    pub fn unregister_process(&self, id: ProcessId) -> bool {
        remove_id(self.process_table(), id.0)
    }

    /// The record of process `pid`, if one validates. The caller compares the start
    /// time with what it knows of the peer (for example through `SO_PEERCRED` and
    /// [`probe_pid`]) before trusting it.
    pub fn lookup_process(&self, pid: u32) -> Option<ProcessInfo> {
        if !valid_pid(pid) {
            return None;
        }
        window(self.process_table(), process_hash(pid))
            .filter_map(|slot| live(slot).map(|(_, p)| p))
            .find(|p| p.owner.pid == pid)
    }

    /// Every process record that validates, in table order (for `ember ls`).
    pub fn processes(&self) -> impl Iterator<Item = ProcessInfo> + '_ {
        self.process_table()
            .iter()
            .filter_map(|slot| live(slot).map(|(_, p)| p))
    }

    // ---- all tables ----

    /// Removes every record (listeners, candidates, the process record) owned by
    /// `owner`, as a process does at exit; returns how many.
    pub fn remove_owner(&self, owner: Owner) -> usize {
        remove_owner_table(self.listener_table(), owner)
            + remove_owner_table(self.candidate_table(), owner)
            + remove_owner_table(self.process_table(), owner)
    }

    /// Frees every dead or garbage record of every table (see the module comment);
    /// returns how many. Reads `/proc/<pid>/stat` once per distinct pid (nearly).
    pub fn collect_dead(&self) -> usize {
        self.collect_with(&mut ProcProbe::new())
    }

    fn collect_with(&self, probe: &mut impl Probe) -> usize {
        collect_table(self.listener_table(), probe)
            + collect_table(self.candidate_table(), probe)
            + collect_table(self.process_table(), probe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Owner {
        Owner::current().unwrap()
    }

    fn registry() -> Registry {
        Registry::from_region(Region::anonymous().unwrap()).unwrap()
    }

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// Byte offset of record `i` of the table at `offset` with records of `size` bytes.
    fn record(offset: usize, size: usize, i: usize) -> usize {
        offset + i * size
    }

    #[test]
    fn stuck_busy_records_are_collected_only_when_their_writer_is_dead() {
        let mut r = registry();
        let me = me();
        let wrong_start = me.start_time + 1;
        // Three BUSY records with our pid: gen 5 each.
        let busy = State::new(5, BUSY, me.pid).0;
        let cases = [
            (0, me.start_time, 5u32, false), // live writer, stamp matches: kept
            (1, wrong_start, 5, true),       // our pid reused from a dead writer: freed
            (2, wrong_start, 4, false),      // stamp from an older epoch: cannot judge, kept
        ];
        for (i, start, gen, _) in cases {
            let at = record(PROCESSES_OFFSET, PROCESS_RECORD, i);
            r.scribble(at, &busy.to_le_bytes());
            r.scribble(at + 8, &gen.to_le_bytes());
            r.scribble(at + 16, &start.to_le_bytes());
        }
        // BUSY by a pid that cannot exist.
        let at = record(PROCESSES_OFFSET, PROCESS_RECORD, 3);
        r.scribble(
            at,
            &State::new(5, BUSY, layout::PID_MAX + 1).0.to_le_bytes(),
        );
        // An unknown kind.
        let at = record(PROCESSES_OFFSET, PROCESS_RECORD, 4);
        r.scribble(at, &State::new(5, 9, 0).0.to_le_bytes());
        assert_eq!(r.collect_dead(), 3);
        for (i, _, _, freed) in cases {
            let s = r.process_table()[i].head.load_state();
            assert_eq!(s.kind() == FREE, freed, "record {i}");
        }
        for i in [3, 4] {
            assert_eq!(
                r.process_table()[i].head.load_state(),
                State::new(6, FREE, 0)
            );
        }
    }

    #[test]
    fn seqlock_reads_give_up_on_a_record_that_never_settles() {
        let r = registry();
        let id = r.add_listener(a("127.0.0.1:80"), false, me()).unwrap();
        let slot = &r.listener_table()[id.0.index as usize];
        // A reader whose record is rewritten between its two loads, every time.
        let got = snapshot(&slot.head, || {
            let s = slot.head.state.load(Ordering::Relaxed);
            slot.head
                .state
                .store(State(s).next(VALID, 0).0, Ordering::Relaxed);
        });
        assert!(got.is_none());
        let s = slot.head.load_state();
        assert_eq!(s.gen(), State(id.0.state).gen() + layout::SEQ_TRIES as u64);
    }

    /// Answers one liveness for every pid.
    struct Always(Liveness);

    impl Probe for Always {
        fn liveness(&mut self, _: u32) -> Liveness {
            self.0
        }
    }

    #[test]
    fn nothing_is_collected_when_proc_cannot_tell() {
        let r = registry();
        let owner = Owner {
            pid: 77,
            start_time: 5,
        };
        r.add_listener(a("127.0.0.1:80"), false, owner).unwrap();
        r.publish_candidate(a("127.0.0.1:5000"), a("127.0.0.1:80"), owner, 0, &[])
            .unwrap();
        r.register_process(owner, 0, b"x").unwrap();
        assert_eq!(r.collect_with(&mut Always(Liveness::Unknown)), 0);
        assert_eq!(
            r.collect_with(&mut Always(Liveness::Alive { start_time: 5 })),
            0
        );
        assert_eq!(
            r.collect_with(&mut Always(Liveness::Alive { start_time: 6 })),
            3
        );
        r.add_listener(a("127.0.0.1:80"), false, owner).unwrap();
        assert_eq!(r.collect_with(&mut Always(Liveness::Gone)), 1);
        // A full window with owners /proc cannot judge stays full.
        for _ in 0..PROBE_WINDOW {
            r.add_listener_with(
                a("127.0.0.1:81"),
                false,
                owner,
                &mut Always(Liveness::Unknown),
            )
            .unwrap();
        }
        let full = r.add_listener_with(
            a("127.0.0.1:81"),
            false,
            owner,
            &mut Always(Liveness::Unknown),
        );
        assert_eq!(full, Err(RegistryError::Full));
        let room =
            r.add_listener_with(a("127.0.0.1:81"), false, owner, &mut Always(Liveness::Gone));
        assert!(room.is_ok());
        assert_eq!(r.listeners().count(), 1);
    }

    #[test]
    fn ids_of_other_tables_or_out_of_range_do_nothing() {
        let r = registry();
        let bogus = SlotId {
            index: u32::MAX,
            state: 0,
        };
        assert!(!r.remove_listener(ListenerId(bogus)));
        assert!(!r.unregister_process(ProcessId(bogus)));
        assert_eq!(r.candidate_state(CandidateId(bogus)), CandidateState::Gone);
        assert_eq!(
            r.withdraw_candidate(CandidateId(bogus)),
            Err(CandidateState::Gone)
        );
        assert!(!r.release_candidate(CandidateId(bogus)));
    }

    #[test]
    fn garbage_valid_records_are_skipped_then_collected() {
        let mut r = registry();
        let me = me();
        let id = r.add_listener(a("127.0.0.1:8080"), false, me).unwrap();
        let at = record(LISTENERS_OFFSET, LISTENER_RECORD, id.0.index as usize);
        // Family 5: the record is VALID but does not validate.
        r.scribble(at + 32, &((5u32 << 16) | 8080).to_le_bytes());
        assert!(!r.has_listener(a("127.0.0.1:8080")));
        assert_eq!(r.listeners().count(), 0);
        assert_eq!(r.collect_dead(), 1);
        assert!(!r.remove_listener(id));
        // An undefined flag bit.
        let id = r.add_listener(a("127.0.0.1:8080"), false, me).unwrap();
        let at = record(LISTENERS_OFFSET, LISTENER_RECORD, id.0.index as usize);
        r.scribble(at + 56, &2u32.to_le_bytes());
        assert!(!r.has_listener(a("127.0.0.1:8080")));
        // A CLAIMED listener is not a kind of that table.
        let id = r.add_listener(a("127.0.0.1:8081"), false, me).unwrap();
        let at = record(LISTENERS_OFFSET, LISTENER_RECORD, id.0.index as usize);
        r.scribble(at, &State(id.0.state).next(CLAIMED, me.pid).0.to_le_bytes());
        assert!(!r.has_listener(a("127.0.0.1:8081")));
        assert_eq!(r.collect_dead(), 2);
    }

    #[test]
    fn garbage_lengths_are_refused() {
        let mut r = registry();
        let me = me();
        let c = r
            .publish_candidate(a("127.0.0.1:5000"), a("127.0.0.1:80"), me, 1, b"x")
            .unwrap();
        let at = record(CANDIDATES_OFFSET, CANDIDATE_RECORD, c.0.index as usize);
        r.scribble(at + 88, &33u32.to_le_bytes());
        assert_eq!(
            r.claim_candidate(a("127.0.0.1:5000"), a("127.0.0.1:80"), me.pid),
            None
        );
        let p = r.register_process(me, 0, b"ctl").unwrap();
        let at = record(PROCESSES_OFFSET, PROCESS_RECORD, p.0.index as usize);
        r.scribble(at + 36, &49u32.to_le_bytes());
        assert_eq!(r.lookup_process(me.pid), None);
        // An owner pid out of range.
        r.scribble(at + 36, &3u32.to_le_bytes());
        assert!(r.lookup_process(me.pid).is_some());
        r.scribble(at + 12, &0u32.to_le_bytes());
        assert_eq!(r.lookup_process(me.pid), None);
        assert_eq!(r.processes().count(), 0);
    }
}
