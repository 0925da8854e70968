//! The fuzz entry point: a registry over an in-memory region filled with arbitrary bytes,
//! driven by operations decoded from the same input, with arbitrary writes to the region
//! between them (another process scribbling). Nothing may panic, hang or reach outside
//! the region (the region has guard pages: an access outside it faults).

use super::layout::{State, BUSY, CLAIMED, PID_MAX, VALID};
use super::liveness::{Liveness, Probe};
use super::region::{attach, Identity};
use super::{
    live, mix, CandidateId, CandidateState, ListenerId, Owner, ProcessId, Region, Registry,
    RegistryError, SlotId, CANDIDATES_OFFSET, CANDIDATE_CAPACITY, CANDIDATE_RECORD, HEADER_LEN,
    LISTENERS_OFFSET, LISTENER_CAPACITY, LISTENER_RECORD, NAME_LEN, PAYLOAD_LEN, PROCESSES_OFFSET,
    PROCESS_CAPACITY, PROCESS_RECORD, REGISTRY_SIZE,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

/// Bytes of input, read front to back; zeros once exhausted.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn bytes(&mut self, n: usize) -> &[u8] {
        let start = self.pos.min(self.data.len());
        let end = start.saturating_add(n).min(self.data.len());
        self.pos = start.saturating_add(n);
        &self.data[start..end]
    }

    fn u8(&mut self) -> u8 {
        self.bytes(1).first().copied().unwrap_or(0)
    }

    fn u16(&mut self) -> u16 {
        u16::from(self.u8()) | u16::from(self.u8()) << 8
    }

    fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | u32::from(self.u16()) << 16
    }

    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    /// An address from a small set, so that keys collide often: the wildcards, loopback,
    /// v4-mapped forms, a link-local address with a scope, or any IPv6 address.
    fn addr(&mut self) -> SocketAddr {
        let port = u16::from(self.u8() % 5);
        let ip: IpAddr = match self.u8() % 9 {
            0 => Ipv4Addr::UNSPECIFIED.into(),
            1 => Ipv4Addr::LOCALHOST.into(),
            2 => Ipv4Addr::new(10, 0, 0, self.u8() % 3).into(),
            3 => Ipv6Addr::UNSPECIFIED.into(),
            4 => Ipv6Addr::LOCALHOST.into(),
            5 => Ipv4Addr::LOCALHOST.to_ipv6_mapped().into(),
            6 => Ipv4Addr::UNSPECIFIED.to_ipv6_mapped().into(),
            7 => {
                let scope = u32::from(self.u8() % 3);
                let link_local = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
                return SocketAddr::V6(SocketAddrV6::new(link_local, port, 0, scope));
            }
            _ => {
                let mut b = [0u8; 16];
                let got = self.bytes(16);
                b[..got.len()].copy_from_slice(got);
                Ipv6Addr::from(b).into()
            }
        };
        SocketAddr::new(ip, port)
    }

    /// An owner from a small set of pids and start times (pid 0 and out-of-range pids
    /// included), so that the synthetic probe finds them alive, dead or reused.
    fn owner(&mut self) -> Owner {
        let pid = match self.u8() % 8 {
            0 => 0,
            1 => PID_MAX + 1,
            p => u32::from(p),
        };
        Owner {
            pid,
            start_time: u64::from(self.u8() % 3),
        }
    }
}

/// Liveness as a function of the pid and a seed from the input: deterministic, and
/// independent of this machine's processes.
struct SyntheticProbe(u64);

impl Probe for SyntheticProbe {
    fn liveness(&mut self, pid: u32) -> Liveness {
        let h = mix(self.0 ^ u64::from(pid));
        match h % 4 {
            0 => Liveness::Gone,
            1 => Liveness::Unknown,
            _ => Liveness::Alive {
                start_time: (h >> 8) % 3,
            },
        }
    }
}

/// Ids the operations have been handed, and some they forged.
struct Ids<T> {
    ids: [Option<T>; 8],
    next: usize,
}

impl<T: Copy> Ids<T> {
    fn new() -> Self {
        Ids {
            ids: [None; 8],
            next: 0,
        }
    }

    fn push(&mut self, id: T) {
        self.ids[self.next % 8] = Some(id);
        self.next += 1;
    }

    fn last(&self) -> Option<T> {
        self.ids[self.next.wrapping_sub(1) % 8]
    }

    fn pick(&self, input: &mut Input<'_>, forge: impl Fn(SlotId) -> T) -> T {
        let k = input.u8();
        match self.ids[usize::from(k % 8)] {
            Some(id) if k < 0xf0 => id,
            _ => forge(SlotId {
                index: input.u32() % 2048,
                state: input.u64(),
            }),
        }
    }
}

/// Offset of a field of a record: `table` picks listeners, candidates or processes.
fn record_offset(input: &mut Input<'_>) -> usize {
    let (offset, capacity, size) = match input.u8() % 3 {
        0 => (LISTENERS_OFFSET, LISTENER_CAPACITY, LISTENER_RECORD),
        1 => (CANDIDATES_OFFSET, CANDIDATE_CAPACITY, CANDIDATE_RECORD),
        _ => (PROCESSES_OFFSET, PROCESS_CAPACITY, PROCESS_RECORD),
    };
    let slot = usize::from(input.u16()) % capacity;
    let field = (usize::from(input.u8()) % size) & !3;
    offset + slot * size + field
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from(le32(b, at)) | u64::from(le32(b, at + 4)) << 32
}

/// The oracle's reading of an address (24 bytes), straight from the layout in the module
/// comment: family 4 (v4-mapped bytes, scope 0) or 6 (not v4-mapped), a non-zero port.
fn oracle_address(b: &[u8]) -> bool {
    let fam_port = le32(b, 0);
    let ip = &b[8..24];
    let mapped = ip[..10] == [0; 10] && ip[10] == 0xff && ip[11] == 0xff;
    fam_port & 0xffff != 0
        && match fam_port >> 16 {
            4 => mapped && le32(b, 4) == 0,
            6 => !mapped,
            _ => false,
        }
}

/// The oracle's count of the live (`VALID`, validating) records of each table, from the
/// raw bytes: an independent reading of the documented layout and validation rules.
fn oracle_counts(region: &mut Region) -> [usize; 3] {
    let pid_ok = |pid: u32| (1..=PID_MAX).contains(&pid);
    let mut counts = [0; 3];
    let tables = [
        (LISTENERS_OFFSET, LISTENER_CAPACITY, LISTENER_RECORD),
        (CANDIDATES_OFFSET, CANDIDATE_CAPACITY, CANDIDATE_RECORD),
        (PROCESSES_OFFSET, PROCESS_CAPACITY, PROCESS_RECORD),
    ];
    let mut rec = [0u8; 128];
    for (t, (offset, capacity, size)) in tables.into_iter().enumerate() {
        for i in 0..capacity {
            let r = &mut rec[..size];
            region.read(offset + i * size, r);
            let head = (le64(r, 0) >> 32) & 0xf == 2 && pid_ok(le32(r, 12));
            let fields = match t {
                0 => oracle_address(&r[32..56]) && le32(r, 56) & !1 == 0,
                1 => {
                    oracle_address(&r[40..64])
                        && oracle_address(&r[64..88])
                        && le32(r, 88) as usize <= PAYLOAD_LEN
                }
                _ => le32(r, 36) as usize <= NAME_LEN,
            };
            counts[t] += usize::from(head && fields);
        }
    }
    counts
}

/// The registry's count of the same.
fn registry_counts(reg: &Registry) -> [usize; 3] {
    let candidates = reg
        .candidate_table()
        .iter()
        .filter(|slot| live(*slot).is_some())
        .count();
    [reg.listeners().count(), candidates, reg.processes().count()]
}

/// Runs the registry over arbitrary bytes. The input is: a fill (a pattern repeated over
/// the tables, so every record can start out plausible or garbage), then operations until
/// the input ends (at most 1000). Asserts the properties that hold whatever the region
/// holds:
///
/// * nothing panics, every loop ends, nothing reaches outside the region;
/// * results are well-formed (ports non-zero, lengths within bounds, pids in range,
///   iterations no longer than the capacity);
/// * the registry counts as live exactly the records that an independent byte-level
///   reading of the documented layout and rules counts (after the fill, and after every
///   replication of a record with a changed field);
/// * right after a successful insert (no scribble in between), the entry is found:
///   `has_listener` of an added listener's address, a claim of a just-published
///   candidate returns its nonce and payload (and then the client sees it claimed by the
///   claimer), `lookup_process` of a just-registered process returns its record.
pub fn fuzz_registry(data: &[u8]) {
    let mut input = Input { data, pos: 0 };
    let Ok(mut region) = Region::anonymous() else {
        return;
    };
    // The fill: header bytes, then a pattern over the tables.
    let header_len = usize::from(input.u8() % 96);
    let header = input.bytes(header_len).to_vec();
    region.write(0, &header);
    let pattern_len = usize::from(input.u8());
    let pattern = input.bytes(pattern_len).to_vec();
    if !pattern.is_empty() {
        let mut at = HEADER_LEN;
        while at < REGISTRY_SIZE {
            at += region.write(at, &pattern);
        }
    }
    let mut probe = SyntheticProbe(input.u64());
    let me = Identity {
        pid: 1 + u32::from(input.u8() % 7),
        uid: 1000,
        pidns: 4_026_531_836,
    };
    // The header protocol over whatever the header holds; when it refuses, format it so
    // the operations still run over the garbage tables.
    if attach(&region, &me, &mut probe, 0).is_err() {
        region.write(0, &[0; 8]);
        let formatted = attach(&region, &me, &mut probe, 0);
        assert!(
            formatted.is_ok(),
            "a zero magic word is formatted: {formatted:?}"
        );
    }
    let mut reg = Registry { region };
    assert_eq!(
        registry_counts(&reg),
        oracle_counts(&mut reg.region),
        "after the fill"
    );
    let mut listeners: Ids<ListenerId> = Ids::new();
    let mut candidates: Ids<CandidateId> = Ids::new();
    let mut processes: Ids<ProcessId> = Ids::new();

    for _ in 0..1000 {
        if input.done() {
            break;
        }
        match input.u8() % 17 {
            16 => {
                // A record the registry wrote, copied over its whole table with one field
                // changed: plausible records, each a little wrong, in every window.
                let t = input.u8() % 3;
                let source = match t {
                    0 => listeners.last().map(|id| id.0),
                    1 => candidates.last().map(|id| id.0),
                    _ => processes.last().map(|id| id.0),
                };
                let (offset, capacity, size) = match t {
                    0 => (LISTENERS_OFFSET, LISTENER_CAPACITY, LISTENER_RECORD),
                    1 => (CANDIDATES_OFFSET, CANDIDATE_CAPACITY, CANDIDATE_RECORD),
                    _ => (PROCESSES_OFFSET, PROCESS_CAPACITY, PROCESS_RECORD),
                };
                let Some(source) = source else { continue };
                let mut rec = [0u8; 128];
                let rec = &mut rec[..size];
                reg.region
                    .read(offset + source.index as usize % capacity * size, rec);
                let at = (usize::from(input.u8()) % size) & !3;
                let width = if input.u8() & 1 == 0 { 4 } else { 8 }.min(size - at);
                let value = input.u64().to_le_bytes();
                rec[at..at + width].copy_from_slice(&value[..width]);
                for i in 0..capacity {
                    reg.region.write(offset + i * size, rec);
                }
                assert_eq!(
                    registry_counts(&reg),
                    oracle_counts(&mut reg.region),
                    "after replicating"
                );
            }
            0 => {
                let at = input.u32() as usize % REGISTRY_SIZE;
                let n = usize::from(input.u8() % 64);
                let bytes = input.bytes(n).to_vec();
                reg.region.write(at, &bytes);
            }
            1 => {
                // A targeted write: a field of a record, a plausible state word or value.
                let at = record_offset(&mut input);
                let value = match input.u8() % 4 {
                    0 => State::new(input.u64(), VALID, 0).0,
                    1 => State::new(input.u64(), BUSY, input.u32() % 8).0,
                    2 => State::new(input.u64(), CLAIMED, input.u32() % 8).0,
                    _ => input.u64(),
                };
                reg.region.write(
                    at,
                    &value.to_le_bytes()[..4 + usize::from(input.u8() % 2) * 4],
                );
            }
            2 => {
                let (addr, v6only, owner) = (input.addr(), input.u8() & 1 == 1, input.owner());
                match reg.add_listener_with(addr, v6only, owner, &mut probe) {
                    Ok(id) => {
                        assert!(reg.has_listener(addr), "added listener {addr} not found");
                        listeners.push(id);
                    }
                    Err(e) => assert!(
                        e != RegistryError::InvalidInput
                            || addr.port() == 0
                            || !(1..=PID_MAX).contains(&owner.pid),
                        "{addr} {owner:?} refused"
                    ),
                }
            }
            3 => {
                let id = listeners.pick(&mut input, ListenerId);
                reg.remove_listener(id);
            }
            4 => {
                let dst = input.addr();
                let found = reg.has_listener(dst);
                assert!(!found || dst.port() != 0);
            }
            5 | 6 => {
                let (client, server, owner, nonce) =
                    (input.addr(), input.addr(), input.owner(), input.u64());
                let n = usize::from(input.u8() % 40);
                let payload = input.bytes(n).to_vec();
                let claimer = u32::from(input.u8() % 9);
                match reg.publish_candidate_with(client, server, owner, nonce, &payload, &mut probe)
                {
                    Ok(id) => {
                        candidates.push(id);
                        assert_eq!(reg.candidate_state(id), CandidateState::Pending);
                        let claimed = reg.claim_candidate(client, server, claimer);
                        if claimer == 0 {
                            assert_eq!(claimed, None);
                            continue;
                        }
                        let Some(c) = claimed else {
                            panic!("published candidate not claimed")
                        };
                        assert_eq!(
                            (c.nonce, c.payload(), c.client),
                            (nonce, &payload[..], owner)
                        );
                        assert_eq!(
                            reg.candidate_state(id),
                            CandidateState::Claimed { by: claimer }
                        );
                        assert_eq!(
                            reg.withdraw_candidate(id),
                            Err(CandidateState::Claimed { by: claimer })
                        );
                    }
                    Err(RegistryError::InvalidInput) => assert!(
                        client.port() == 0
                            || server.port() == 0
                            || payload.len() > PAYLOAD_LEN
                            || !(1..=PID_MAX).contains(&owner.pid)
                    ),
                    Err(_) => {}
                }
            }
            7 => {
                let (client, server, claimer) = (input.addr(), input.addr(), input.u32() % 9);
                if let Some(c) = reg.claim_candidate(client, server, claimer) {
                    assert!(
                        c.payload().len() <= PAYLOAD_LEN && (1..=PID_MAX).contains(&c.client.pid)
                    );
                    assert!((1..=PID_MAX).contains(&claimer));
                }
            }
            8 => {
                let id = candidates.pick(&mut input, CandidateId);
                match input.u8() % 3 {
                    0 => {
                        if let CandidateState::Claimed { by } = reg.candidate_state(id) {
                            assert!((1..=PID_MAX).contains(&by));
                        }
                    }
                    1 => {
                        let _ = reg.withdraw_candidate(id);
                    }
                    _ => {
                        reg.release_candidate(id);
                    }
                }
            }
            9 => {
                let (owner, uid) = (input.owner(), input.u32());
                let n = usize::from(input.u8() % 56);
                let name = input.bytes(n).to_vec();
                match reg.register_process_with(owner, uid, &name, &mut probe) {
                    Ok(id) => {
                        processes.push(id);
                        let p = reg.lookup_process(owner.pid);
                        let Some(p) = p else {
                            panic!("registered process {owner:?} not found")
                        };
                        assert_eq!((p.owner, p.uid, p.name()), (owner, uid, &name[..]));
                    }
                    Err(RegistryError::InvalidInput) => {
                        assert!(name.len() > NAME_LEN || !(1..=PID_MAX).contains(&owner.pid))
                    }
                    Err(_) => {}
                }
            }
            10 => {
                let id = processes.pick(&mut input, ProcessId);
                reg.unregister_process(id);
            }
            11 => {
                let pid = input.u32() % 10;
                if let Some(p) = reg.lookup_process(pid) {
                    assert_eq!(p.owner.pid, pid);
                    assert!(p.name().len() <= NAME_LEN);
                }
            }
            12 => {
                let mut n = 0;
                for l in reg.listeners() {
                    assert!(l.addr.port() != 0 && (1..=PID_MAX).contains(&l.owner.pid));
                    assert!(!l.v6only || l.addr.is_ipv6());
                    n += 1;
                }
                assert!(n <= LISTENER_CAPACITY);
                assert!(reg.processes().count() <= PROCESS_CAPACITY);
            }
            13 => {
                let total = LISTENER_CAPACITY + CANDIDATE_CAPACITY + PROCESS_CAPACITY;
                assert!(reg.collect_with(&mut probe) <= total);
            }
            14 => {
                let owner = input.owner();
                reg.remove_owner(owner);
            }
            _ => {
                // Another process opening the region now: the header check over whatever
                // the header holds by now, without waiting.
                let _ = attach(&reg.region, &me, &mut probe, 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_inputs_run() {
        fuzz_registry(&[]);
        fuzz_registry(&[0xff; 4096]);
        fuzz_registry(&[0; 4096]);
        let ramp: Vec<u8> = (0..=255u8).cycle().take(8192).collect();
        fuzz_registry(&ramp);
    }
}
