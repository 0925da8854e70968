//! Property tests: arbitrary bytes written over the registry between operations (as a
//! buggy or hostile process of the same user could) never make an operation panic, loop
//! or reach outside the region. The region has a `PROT_NONE` guard page on each side, so
//! an out-of-bounds access would kill the test with SIGSEGV.

use ember_xproc::registry::{
    fuzz_registry, CandidateId, CandidateState, ListenerId, Owner, Region, Registry, RegistryError,
    CANDIDATES_OFFSET, CANDIDATE_CAPACITY, HEADER_LEN, LISTENERS_OFFSET, LISTENER_CAPACITY,
    NAME_LEN, PAYLOAD_LEN, PROCESSES_OFFSET, PROCESS_CAPACITY, REGISTRY_SIZE,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use std::net::SocketAddr;

/// A fixed-seed configuration (no regression files), as in `ember-core`'s robustness
/// tests: `ROBUST_SCALE=n` multiplies the cases, `ROBUST_SEED=s` changes the seed.
fn cfg(cases: u32, seed: u64) -> Config {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let scale = env("ROBUST_SCALE").unwrap_or(1).clamp(1, 100_000) as u32;
    Config {
        cases: cases.saturating_mul(scale),
        rng_seed: RngSeed::Fixed(seed ^ env("ROBUST_SEED").unwrap_or(0)),
        failure_persistence: None,
        ..Config::default()
    }
}

fn addr() -> impl Strategy<Value = SocketAddr> {
    let ip = prop_oneof![
        Just("0.0.0.0"),
        Just("127.0.0.1"),
        Just("10.0.0.1"),
        Just("::"),
        Just("::1"),
        Just("::ffff:127.0.0.1"),
        Just("fe80::1%2"),
    ];
    (ip, 0u16..4).prop_map(|(ip, port)| {
        let ip = if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip.to_owned()
        };
        format!("{ip}:{port}").parse().unwrap()
    })
}

/// A state word as the module comment lays it out: generation, kind, pid.
fn state_word(gen: u64, kind: u64, pid: u64) -> u64 {
    (gen & ((1 << 28) - 1)) << 36 | (kind & 0xf) << 32 | pid
}

/// The 24 bytes of an address in a record (module comment): `family<<16 | port`, scope,
/// the 16-byte address (v4-mapped for IPv4, which is normalised to family 4).
fn address_bytes(addr: SocketAddr) -> [u8; 24] {
    let (family, ip, scope) = match addr {
        SocketAddr::V4(a) => (4u32, a.ip().to_ipv6_mapped().octets(), 0),
        SocketAddr::V6(a) => match a.ip().to_ipv4_mapped() {
            Some(v4) => (4, v4.to_ipv6_mapped().octets(), 0),
            None => (6, a.ip().octets(), a.scope_id()),
        },
    };
    let mut out = [0; 24];
    out[..4].copy_from_slice(&(family << 16 | u32::from(addr.port())).to_le_bytes());
    out[4..8].copy_from_slice(&scope.to_le_bytes());
    out[8..].copy_from_slice(&ip);
    out
}

/// A record that validates, laid out as the module comment says: a `VALID` head owned
/// by `owner`, then the table's fields (listener on `a1`; candidate `a1 -> a2`; process).
fn plausible_record(table: u8, owner: Owner, a1: SocketAddr, a2: SocketAddr) -> Vec<u8> {
    let size = if table == 0 { 64 } else { 128 };
    let mut r = vec![0u8; size];
    r[..8].copy_from_slice(&state_word(3, 2, 0).to_le_bytes());
    r[12..16].copy_from_slice(&owner.pid.to_le_bytes());
    r[24..32].copy_from_slice(&owner.start_time.to_le_bytes());
    match table {
        0 => r[32..56].copy_from_slice(&address_bytes(a1)),
        1 => {
            r[32..40].copy_from_slice(&77u64.to_le_bytes());
            r[40..64].copy_from_slice(&address_bytes(a1));
            r[64..88].copy_from_slice(&address_bytes(a2));
            r[88..92].copy_from_slice(&5u32.to_le_bytes());
            r[96..101].copy_from_slice(b"hello");
        }
        _ => {
            r[36..40].copy_from_slice(&4u32.to_le_bytes());
            r[40..44].copy_from_slice(b"name");
        }
    }
    r
}

#[derive(Clone, Debug)]
enum Op {
    /// Every record of a table set to one plausible record, with one field changed.
    Plant {
        table: u8,
        a1: SocketAddr,
        a2: SocketAddr,
        dead: bool,
        field: u8,
        value: Option<u64>,
    },
    /// Any bytes anywhere (also past the end: cut).
    Scribble {
        offset: usize,
        bytes: Vec<u8>,
    },
    /// A plausible word into a record's field.
    Word {
        table: u8,
        slot: u16,
        field: u8,
        value: u64,
    },
    AddListener {
        addr: SocketAddr,
        v6only: bool,
        dead: bool,
    },
    RemoveListener(usize),
    HasListener(SocketAddr),
    Publish {
        client: SocketAddr,
        server: SocketAddr,
        nonce: u64,
        payload: Vec<u8>,
    },
    Claim {
        client: SocketAddr,
        server: SocketAddr,
        pid: u32,
    },
    Candidate {
        which: usize,
        action: u8,
    },
    Register {
        dead: bool,
        name: Vec<u8>,
    },
    Lookup(u32),
    Collect,
    List,
}

fn op() -> impl Strategy<Value = Op> {
    let word = prop_oneof![
        (any::<u64>(), 0u64..5, 0u64..8).prop_map(|(g, k, p)| state_word(g, k, p)),
        any::<u64>(),
        (0u64..8).prop_map(|f| f << 16 | 1),
    ];
    let plant = (
        0u8..3,
        addr(),
        addr(),
        any::<bool>(),
        any::<u8>(),
        prop::option::of(word.clone()),
    )
        .prop_map(|(table, a1, a2, dead, field, value)| Op::Plant {
            table,
            a1,
            a2,
            dead,
            field,
            value,
        });
    prop_oneof![
        plant,
        (
            0..REGISTRY_SIZE + 64,
            prop::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|(offset, bytes)| Op::Scribble { offset, bytes }),
        (0u8..3, any::<u16>(), any::<u8>(), word).prop_map(|(table, slot, field, value)| {
            Op::Word {
                table,
                slot,
                field,
                value,
            }
        }),
        (addr(), any::<bool>(), any::<bool>()).prop_map(|(addr, v6only, dead)| Op::AddListener {
            addr,
            v6only,
            dead
        }),
        (0usize..8).prop_map(Op::RemoveListener),
        addr().prop_map(Op::HasListener),
        (
            addr(),
            addr(),
            any::<u64>(),
            prop::collection::vec(any::<u8>(), 0..40)
        )
            .prop_map(|(client, server, nonce, payload)| Op::Publish {
                client,
                server,
                nonce,
                payload
            }),
        (addr(), addr(), 0u32..10).prop_map(|(client, server, pid)| Op::Claim {
            client,
            server,
            pid
        }),
        (0usize..8, 0u8..3).prop_map(|(which, action)| Op::Candidate { which, action }),
        (any::<bool>(), prop::collection::vec(any::<u8>(), 0..56))
            .prop_map(|(dead, name)| Op::Register { dead, name }),
        (0u32..10).prop_map(Op::Lookup),
        Just(Op::Collect),
        Just(Op::List),
    ]
}

fn field_offset(table: u8, slot: u16, field: u8) -> usize {
    let (base, capacity, size) = match table {
        0 => (LISTENERS_OFFSET, LISTENER_CAPACITY, 64),
        1 => (CANDIDATES_OFFSET, CANDIDATE_CAPACITY, 128),
        _ => (PROCESSES_OFFSET, PROCESS_CAPACITY, 128),
    };
    base + usize::from(slot) % capacity * size + (usize::from(field) * 8) % size
}

fn run(ops: Vec<Op>) {
    let mut reg = Registry::from_region(Region::anonymous().unwrap()).unwrap();
    let me = Owner::current().unwrap();
    // A process that had our pid and is gone: collectable.
    let dead = Owner {
        pid: me.pid,
        start_time: me.start_time.wrapping_add(1),
    };
    let mut listeners: Vec<ListenerId> = Vec::new();
    let mut candidates: Vec<CandidateId> = Vec::new();
    for op in ops {
        match op {
            Op::Scribble { offset, bytes } => {
                let n = reg.scribble(offset, &bytes);
                assert_eq!(n, bytes.len().min(REGISTRY_SIZE.saturating_sub(offset)));
            }
            Op::Plant {
                table,
                a1,
                a2,
                dead: d,
                field,
                value,
            } => {
                let mut rec = plausible_record(table, if d { dead } else { me }, a1, a2);
                if let Some(v) = value {
                    let at = usize::from(field) * 8 % rec.len();
                    rec[at..at + 8].copy_from_slice(&v.to_le_bytes());
                }
                let capacity =
                    [LISTENER_CAPACITY, CANDIDATE_CAPACITY, PROCESS_CAPACITY][usize::from(table)];
                for slot in 0..capacity {
                    reg.scribble(field_offset(table, slot as u16, 0), &rec);
                }
                if value.is_none() && !d {
                    // Unchanged, the planted records are found like real ones.
                    match table {
                        0 if a1.port() != 0 => assert!(reg.has_listener(a1)),
                        1 if a1.port() != 0 && a2.port() != 0 => {
                            let c = reg.claim_candidate(a1, a2, 3).unwrap();
                            assert_eq!((c.client, c.nonce, c.payload()), (me, 77, &b"hello"[..]));
                        }
                        2 => assert_eq!(reg.lookup_process(me.pid).unwrap().name(), b"name"),
                        _ => {}
                    }
                }
            }
            Op::Word {
                table,
                slot,
                field,
                value,
            } => {
                reg.scribble(field_offset(table, slot, field), &value.to_le_bytes());
            }
            Op::AddListener {
                addr,
                v6only,
                dead: d,
            } => match reg.add_listener(addr, v6only, if d { dead } else { me }) {
                Ok(id) => {
                    assert!(reg.has_listener(addr));
                    listeners.push(id);
                }
                Err(RegistryError::InvalidInput) => assert_eq!(addr.port(), 0),
                Err(_) => {}
            },
            Op::RemoveListener(k) => {
                if let Some(id) = listeners.get(k) {
                    reg.remove_listener(*id);
                }
            }
            Op::HasListener(dst) => {
                assert!(!reg.has_listener(dst) || dst.port() != 0);
            }
            Op::Publish {
                client,
                server,
                nonce,
                payload,
            } => match reg.publish_candidate(client, server, me, nonce, &payload) {
                Ok(id) => {
                    assert_eq!(reg.candidate_state(id), CandidateState::Pending);
                    candidates.push(id);
                }
                Err(RegistryError::InvalidInput) => {
                    assert!(client.port() == 0 || server.port() == 0 || payload.len() > PAYLOAD_LEN)
                }
                Err(_) => {}
            },
            Op::Claim {
                client,
                server,
                pid,
            } => {
                if let Some(c) = reg.claim_candidate(client, server, pid) {
                    assert!(pid != 0 && client.port() != 0 && server.port() != 0);
                    assert!(c.payload().len() <= PAYLOAD_LEN);
                    assert!(c.client.pid != 0);
                }
            }
            Op::Candidate { which, action } => {
                if let Some(id) = candidates.get(which) {
                    match action {
                        0 => {
                            if let CandidateState::Claimed { by } = reg.candidate_state(*id) {
                                assert!(by != 0);
                            }
                        }
                        1 => {
                            let _ = reg.withdraw_candidate(*id);
                        }
                        _ => {
                            reg.release_candidate(*id);
                        }
                    }
                }
            }
            Op::Register { dead: d, name } => {
                let owner = if d { dead } else { me };
                match reg.register_process(owner, 1000, &name) {
                    Ok(_) => {
                        let p = reg.lookup_process(owner.pid).unwrap();
                        assert_eq!((p.owner, p.name()), (owner, &name[..]));
                    }
                    Err(RegistryError::InvalidInput) => assert!(name.len() > NAME_LEN),
                    Err(_) => {}
                }
            }
            Op::Lookup(pid) => {
                if let Some(p) = reg.lookup_process(pid) {
                    assert_eq!(p.owner.pid, pid);
                    assert!(p.name().len() <= NAME_LEN);
                }
            }
            Op::Collect => {
                assert!(
                    reg.collect_dead() <= LISTENER_CAPACITY + CANDIDATE_CAPACITY + PROCESS_CAPACITY
                );
            }
            Op::List => {
                assert!(reg
                    .listeners()
                    .all(|l| l.addr.port() != 0 && l.owner.pid != 0));
                assert!(reg.listeners().count() <= LISTENER_CAPACITY);
                assert!(reg
                    .processes()
                    .all(|p| p.name().len() <= NAME_LEN && p.owner.pid != 0));
            }
        }
    }
    // Whatever was written, clearing the tables gives a working, empty registry.
    reg.scribble(HEADER_LEN, &vec![0; REGISTRY_SIZE - HEADER_LEN]);
    assert_eq!(reg.listeners().count(), 0);
    let server: SocketAddr = "127.0.0.1:80".parse().unwrap();
    let client: SocketAddr = "127.0.0.1:5555".parse().unwrap();
    reg.add_listener(server, false, me).unwrap();
    assert!(reg.has_listener(server));
    reg.publish_candidate(client, server, me, 42, b"p").unwrap();
    assert_eq!(reg.claim_candidate(client, server, 7).unwrap().nonce, 42);
    reg.register_process(me, 0, b"n").unwrap();
    assert_eq!(reg.lookup_process(me.pid).unwrap().owner, me);
    assert_eq!(reg.collect_dead(), 0);
}

proptest! {
    #![proptest_config(cfg(256, 0x7265_6769_0001))]
    #[test]
    fn scribbles_between_operations_never_break_the_registry(ops in prop::collection::vec(op(), 0..96)) {
        run(ops);
    }
}

proptest! {
    #![proptest_config(cfg(256, 0x7265_6769_0002))]
    #[test]
    fn the_fuzz_entry_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..3000)) {
        fuzz_registry(&bytes);
    }
}
