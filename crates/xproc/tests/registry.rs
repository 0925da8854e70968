//! The registry through its public API: the file and its checks, the tables, threads
//! racing on one record, and several real processes (children that re-run this test
//! binary in a role, and a raw `fork`).

use ember_xproc::registry::{
    probe_pid, CandidateState, Liveness, Owner, Region, Registry, RegistryError,
    CANDIDATE_CAPACITY, NAME_LEN, PAYLOAD_LEN, PROBE_WINDOW, REGISTRY_SIZE,
};
use std::io::{BufRead, BufReader, ErrorKind};
use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

const ROLE: &str = "EMBER_REGISTRY_ROLE";
const PATH: &str = "EMBER_REGISTRY_PATH";
const READY: &str = "@@ready@@";

fn a(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn me() -> Owner {
    Owner::current().unwrap()
}

fn fresh() -> Registry {
    Registry::from_region(Region::anonymous().unwrap()).unwrap()
}

fn temp() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry");
    (dir, path)
}

/// Re-runs this binary's test `test` in a child process with `role` and `envs`.
fn spawn_role(test: &str, role: &str, envs: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .stdout(Stdio::piped());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// The words after the child's `READY` marker (wherever it is in its line: libtest
/// prints the test's name before it).
fn wait_ready(child: &mut Child) -> Vec<String> {
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while out.read_line(&mut line).unwrap() > 0 {
        if let Some(at) = line.find(READY) {
            let words = line[at + READY.len()..]
                .split_whitespace()
                .map(str::to_owned)
                .collect();
            // Keep draining: a child whose stdout is closed fails its next print.
            std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
            return words;
        }
        line.clear();
    }
    panic!("child ended without getting ready: {:?}", child.wait());
}

fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

fn env_path() -> PathBuf {
    PathBuf::from(std::env::var(PATH).unwrap())
}

/// Sleeps until killed (bounded, in case the parent is gone).
fn hold() {
    std::thread::sleep(Duration::from_secs(60));
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

// ---- the file ----

#[test]
fn open_creates_a_0600_file_and_a_second_open_maps_the_same_registry() {
    let (_dir, path) = temp();
    let first = Registry::open(&path).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), REGISTRY_SIZE as u64);
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let second = Registry::open(&path).unwrap();
    let id = first
        .add_listener(a("127.0.0.1:8080"), false, me())
        .unwrap();
    assert!(second.has_listener(a("127.0.0.1:8080")));
    assert!(second.remove_listener(id));
    assert!(!first.has_listener(a("127.0.0.1:8080")));
    drop(first);
    // The second mapping outlives the first.
    second
        .add_listener(a("127.0.0.1:8081"), false, me())
        .unwrap();
    drop(second);
    assert!(Registry::open(&path)
        .unwrap()
        .has_listener(a("127.0.0.1:8081")));
}

#[test]
fn open_in_names_the_file_by_user_and_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::open_in(dir.path()).unwrap();
    reg.add_listener(a("[::1]:9"), true, me()).unwrap();
    let netns = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
    let pidns = std::fs::metadata("/proc/self/ns/pid").unwrap().ino();
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let path = dir.path().join(format!("ember-{uid}-{netns}-{pidns}"));
    assert!(Registry::open(&path).unwrap().has_listener(a("[::1]:9")));
}

#[test]
fn group_or_other_permission_bits_are_refused() {
    let (_dir, path) = temp();
    drop(Registry::open(&path).unwrap());
    for mode in [0o644, 0o640, 0o602, 0o610] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        let e = Registry::open(&path)
            .err()
            .expect("opened a file with group/other bits");
        assert_eq!(e.kind(), ErrorKind::PermissionDenied, "mode {mode:o}: {e}");
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    Registry::open(&path).unwrap();
}

#[test]
fn a_file_of_another_user_is_refused() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: making a file owned by another user needs root (chown)");
        return;
    }
    let (_dir, path) = temp();
    drop(Registry::open(&path).unwrap());
    std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
    let e = Registry::open(&path)
        .err()
        .expect("opened another user's registry");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
}

#[test]
fn truncated_or_garbage_files_are_invalid_data() {
    let (_dir, path) = temp();
    let write = |bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    let expect_invalid = |what: &str| {
        let e = Registry::open(&path)
            .err()
            .unwrap_or_else(|| panic!("opened a {what} file"));
        assert_eq!(e.kind(), ErrorKind::InvalidData, "{what}: {e}");
    };
    write(&[0; 100]);
    expect_invalid("truncated");
    write(&vec![0; REGISTRY_SIZE + 4096]);
    expect_invalid("oversized");
    write(&vec![0xa5; REGISTRY_SIZE]);
    expect_invalid("garbage");
    // A formatted registry whose version word is changed.
    std::fs::remove_file(&path).unwrap();
    drop(Registry::open(&path).unwrap());
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8] ^= 0x80;
    write(&bytes);
    expect_invalid("other-version");
}

#[test]
fn an_unformatted_file_of_the_right_size_or_empty_is_formatted() {
    let (_dir, path) = temp();
    for len in [0, REGISTRY_SIZE] {
        std::fs::write(&path, vec![0; len]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let reg = Registry::open(&path).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            REGISTRY_SIZE as u64
        );
        reg.register_process(me(), 0, b"ctl").unwrap();
        assert_eq!(&std::fs::read(&path).unwrap()[..8], b"EMBERREG");
    }
}

#[test]
fn symlinks_and_special_files_are_refused() {
    let (dir, path) = temp();
    drop(Registry::open(&path).unwrap());
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let e = Registry::open(&link).err().expect("followed a symlink");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    // A dangling link is not followed to create its target.
    let target = dir.path().join("target");
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(&target, &dangling).unwrap();
    assert_eq!(
        Registry::open(&dangling).err().unwrap().kind(),
        ErrorKind::PermissionDenied
    );
    assert!(!target.exists());
    // A FIFO is not a regular file.
    let fifo = dir.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: `c` is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert_eq!(
        Registry::open(&fifo).err().unwrap().kind(),
        ErrorKind::PermissionDenied
    );
    assert!(Registry::open(dir.path()).is_err());
}

// ---- listeners ----

#[test]
fn listeners_match_exact_wildcard_and_v4_mapped_addresses() {
    let reg = fresh();
    let me = me();
    reg.add_listener(a("0.0.0.0:80"), false, me).unwrap();
    reg.add_listener(a("127.0.0.1:81"), false, me).unwrap();
    reg.add_listener(a("[::ffff:127.0.0.2]:82"), false, me)
        .unwrap();
    reg.add_listener(a("[::]:83"), false, me).unwrap();
    reg.add_listener(a("[::1]:84"), false, me).unwrap();
    reg.add_listener(a("[fe80::1%2]:85"), false, me).unwrap();

    // 0.0.0.0 takes every IPv4 address, in either form, and no IPv6 one.
    assert!(reg.has_listener(a("127.0.0.1:80")));
    assert!(reg.has_listener(a("10.1.2.3:80")));
    assert!(reg.has_listener(a("[::ffff:10.1.2.3]:80")));
    assert!(!reg.has_listener(a("[::1]:80")));
    assert!(!reg.has_listener(a("127.0.0.1:79")));
    // An exact IPv4 bind, found by its v4-mapped form, and vice versa.
    assert!(reg.has_listener(a("127.0.0.1:81")));
    assert!(reg.has_listener(a("[::ffff:127.0.0.1]:81")));
    assert!(!reg.has_listener(a("127.0.0.2:81")));
    assert!(reg.has_listener(a("127.0.0.2:82")));
    assert!(reg.has_listener(a("[::ffff:127.0.0.2]:82")));
    assert!(!reg.has_listener(a("127.0.0.1:82")));
    // A dual-stack [::] takes IPv6 and IPv4.
    assert!(reg.has_listener(a("[::1]:83")));
    assert!(reg.has_listener(a("[2001:db8::5]:83")));
    assert!(reg.has_listener(a("127.0.0.1:83")));
    assert!(reg.has_listener(a("[::ffff:127.0.0.1]:83")));
    // An exact IPv6 bind.
    assert!(reg.has_listener(a("[::1]:84")));
    assert!(!reg.has_listener(a("[::2]:84")));
    assert!(!reg.has_listener(a("127.0.0.1:84")));
    // Scope ids: equal, or unspecified on either side.
    assert!(reg.has_listener(a("[fe80::1%2]:85")));
    assert!(reg.has_listener(a("[fe80::1]:85")));
    assert!(!reg.has_listener(a("[fe80::1%3]:85")));
    // Port 0 is never a listener.
    assert!(!reg.has_listener(a("0.0.0.0:0")));
    assert_eq!(
        reg.add_listener(a("127.0.0.1:0"), false, me),
        Err(RegistryError::InvalidInput)
    );

    let mut listed: Vec<_> = reg.listeners().map(|l| l.addr).collect();
    listed.sort();
    let mut want = vec![
        a("0.0.0.0:80"),
        a("127.0.0.1:81"),
        a("127.0.0.2:82"),
        a("[::]:83"),
        a("[::1]:84"),
        a("[fe80::1%2]:85"),
    ];
    want.sort();
    assert_eq!(listed, want);
    assert!(reg.listeners().all(|l| l.owner == me && !l.v6only));
}

#[test]
fn v6only_listeners_do_not_take_ipv4() {
    let reg = fresh();
    let me = me();
    let id = reg.add_listener(a("[::]:443"), true, me).unwrap();
    assert!(reg.has_listener(a("[::1]:443")));
    assert!(!reg.has_listener(a("127.0.0.1:443")));
    assert!(!reg.has_listener(a("[::ffff:127.0.0.1]:443")));
    assert!(reg.listeners().any(|l| l.v6only && l.addr == a("[::]:443")));
    // The flag means nothing for an IPv4 bind, and is not kept.
    reg.add_listener(a("0.0.0.0:444"), true, me).unwrap();
    assert!(reg.has_listener(a("127.0.0.1:444")));
    assert!(reg
        .listeners()
        .any(|l| !l.v6only && l.addr == a("0.0.0.0:444")));
    assert!(reg.remove_listener(id));
    assert!(!reg.has_listener(a("[::1]:443")));
}

#[test]
fn removing_a_listener_removes_that_one_only() {
    let reg = fresh();
    let me = me();
    // Two sockets on one address (SO_REUSEPORT), removed one by one.
    let first = reg.add_listener(a("127.0.0.1:7000"), false, me).unwrap();
    let second = reg.add_listener(a("127.0.0.1:7000"), false, me).unwrap();
    assert_ne!(first, second);
    assert!(reg.remove_listener(first));
    assert!(!reg.remove_listener(first), "removed twice");
    assert!(reg.has_listener(a("127.0.0.1:7000")));
    assert!(reg.remove_listener(second));
    assert!(!reg.has_listener(a("127.0.0.1:7000")));
    assert_eq!(reg.listeners().count(), 0);
}

#[test]
fn a_full_window_is_an_error_and_removal_makes_room() {
    let reg = fresh();
    let me = me();
    // Listeners of one port share one window.
    let ids: Vec<_> = (0..PROBE_WINDOW)
        .map(|_| reg.add_listener(a("127.0.0.1:5000"), false, me).unwrap())
        .collect();
    assert_eq!(
        reg.add_listener(a("127.0.0.1:5000"), false, me),
        Err(RegistryError::Full)
    );
    assert_eq!(
        reg.add_listener(a("[::]:5000"), false, me),
        Err(RegistryError::Full)
    );
    assert_eq!(reg.collect_dead(), 0, "collected live listeners");
    assert!(reg.remove_listener(ids[17]));
    reg.add_listener(a("[::]:5000"), false, me).unwrap();
    // Another port has its own window.
    reg.add_listener(a("127.0.0.1:5001"), false, me).unwrap();
}

// ---- candidates ----

#[test]
fn a_candidate_is_claimed_once_then_released() {
    let reg = fresh();
    let me = me();
    let (client, server) = (a("127.0.0.1:40000"), a("127.0.0.1:80"));
    let id = reg
        .publish_candidate(client, server, me, 0x1234_5678_9abc_def0, b"control socket")
        .unwrap();
    assert_eq!(reg.candidate_state(id), CandidateState::Pending);
    // The acceptor sees the tuple in v4-mapped form on a dual-stack socket.
    let claimed = reg
        .claim_candidate(
            a("[::ffff:127.0.0.1]:40000"),
            a("[::ffff:127.0.0.1]:80"),
            4242,
        )
        .unwrap();
    assert_eq!(claimed.client, me);
    assert_eq!(claimed.nonce, 0x1234_5678_9abc_def0);
    assert_eq!(claimed.payload(), b"control socket");
    assert_eq!(
        reg.candidate_state(id),
        CandidateState::Claimed { by: 4242 }
    );
    assert_eq!(
        reg.claim_candidate(client, server, 4243),
        None,
        "claimed twice"
    );
    assert_eq!(
        reg.withdraw_candidate(id),
        Err(CandidateState::Claimed { by: 4242 })
    );
    assert!(reg.release_candidate(id));
    assert_eq!(reg.candidate_state(id), CandidateState::Gone);
    assert!(!reg.release_candidate(id));
    assert_eq!(reg.withdraw_candidate(id), Err(CandidateState::Gone));
    assert_eq!(reg.claim_candidate(client, server, 4242), None);
}

#[test]
fn a_withdrawn_candidate_cannot_be_claimed() {
    let reg = fresh();
    let (client, server) = (a("[::1]:40001"), a("[::1]:8080"));
    let id = reg.publish_candidate(client, server, me(), 7, &[]).unwrap();
    assert!(!reg.release_candidate(id), "released before any claim");
    assert_eq!(reg.withdraw_candidate(id), Ok(()));
    assert_eq!(reg.candidate_state(id), CandidateState::Gone);
    assert_eq!(reg.claim_candidate(client, server, 9), None);
}

#[test]
fn a_claim_needs_the_exact_tuple() {
    let reg = fresh();
    let me = me();
    let (client, server) = (a("127.0.0.1:40002"), a("127.0.0.1:80"));
    let id = reg.publish_candidate(client, server, me, 1, b"x").unwrap();
    for (c, s) in [
        (server, client),                               // reversed
        (a("127.0.0.1:40003"), server),                 // other client port
        (client, a("127.0.0.1:81")),                    // other server port
        (a("127.0.0.2:40002"), server),                 // other client address
        (client, a("0.0.0.0:80")),                      // a wildcard is not an address
        (a("[::1]:40002"), a("[::1]:80")),              // other family
        (a("[::ffff:127.0.0.1]:40002"), a("[::1]:80")), // half mapped
    ] {
        assert_eq!(reg.claim_candidate(c, s, 77), None, "{c} -> {s}");
    }
    assert_eq!(
        reg.claim_candidate(client, server, 0),
        None,
        "pid 0 claimed"
    );
    assert_eq!(reg.candidate_state(id), CandidateState::Pending);
    assert!(reg.claim_candidate(client, server, 77).is_some());
}

#[test]
fn republishing_a_tuple_replaces_the_stale_candidate() {
    let reg = fresh();
    let me = me();
    let (client, server) = (a("127.0.0.1:40004"), a("127.0.0.1:80"));
    let old = reg
        .publish_candidate(client, server, me, 1, b"old")
        .unwrap();
    let new = reg
        .publish_candidate(client, server, me, 2, b"new")
        .unwrap();
    assert_eq!(reg.candidate_state(old), CandidateState::Gone);
    let c = reg.claim_candidate(client, server, 5).unwrap();
    assert_eq!((c.nonce, c.payload()), (2, &b"new"[..]));
    assert_eq!(reg.candidate_state(new), CandidateState::Claimed { by: 5 });
}

#[test]
fn oversized_payloads_names_and_bad_owners_are_invalid_input() {
    let reg = fresh();
    let me = me();
    let (client, server) = (a("127.0.0.1:40005"), a("127.0.0.1:80"));
    let big = [7u8; PAYLOAD_LEN + 1];
    assert_eq!(
        reg.publish_candidate(client, server, me, 1, &big).err(),
        Some(RegistryError::InvalidInput)
    );
    let id = reg
        .publish_candidate(client, server, me, 1, &big[..PAYLOAD_LEN])
        .unwrap();
    assert_eq!(
        reg.claim_candidate(client, server, 3).unwrap().payload(),
        &big[..PAYLOAD_LEN]
    );
    assert!(reg.release_candidate(id));
    assert_eq!(
        reg.publish_candidate(a("127.0.0.1:0"), server, me, 1, &[])
            .err(),
        Some(RegistryError::InvalidInput)
    );
    let nobody = Owner {
        pid: 0,
        start_time: 1,
    };
    assert_eq!(
        reg.publish_candidate(client, server, nobody, 1, &[]).err(),
        Some(RegistryError::InvalidInput)
    );
    assert_eq!(
        reg.add_listener(server, false, nobody).err(),
        Some(RegistryError::InvalidInput)
    );
    let long = [b'n'; NAME_LEN + 1];
    assert_eq!(
        reg.register_process(me, 0, &long).err(),
        Some(RegistryError::InvalidInput)
    );
    reg.register_process(me, 0, &long[..NAME_LEN]).unwrap();
    assert_eq!(
        reg.lookup_process(me.pid).unwrap().name(),
        &long[..NAME_LEN]
    );
}

#[test]
fn exactly_one_of_many_concurrent_claimers_wins() {
    const THREADS: u32 = 3;
    const ROUNDS: u16 = 300;
    let reg = fresh();
    let me = me();
    let barrier = Barrier::new(THREADS as usize + 1);
    let settled = std::sync::atomic::AtomicU16::new(u16::MAX);
    let client = |round: u16| SocketAddr::from(([127, 0, 0, 1], 20_000 + round));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (reg, barrier, settled) = (&reg, &barrier, &settled);
                s.spawn(move || {
                    let mut wins = Vec::new();
                    for round in 0..ROUNDS {
                        barrier.wait();
                        // Every claimer spins on the tuple before it is published, so
                        // they all see the record appear at once.
                        while settled.load(std::sync::atomic::Ordering::Acquire) != round {
                            if let Some(c) =
                                reg.claim_candidate(client(round), a("127.0.0.1:80"), 100 + t)
                            {
                                assert_eq!(c.nonce, u64::from(round));
                                wins.push(round);
                            }
                        }
                    }
                    wins
                })
            })
            .collect();
        let mut ids = Vec::new();
        for round in 0..ROUNDS {
            barrier.wait();
            let id = reg
                .publish_candidate(client(round), a("127.0.0.1:80"), me, u64::from(round), &[])
                .unwrap();
            wait_until("a claim", || {
                reg.candidate_state(id) != CandidateState::Pending
            });
            // Let the losers finish the claim they may be in the middle of.
            std::thread::sleep(Duration::from_micros(200));
            settled.store(round, std::sync::atomic::Ordering::Release);
            ids.push(id);
        }
        let mut winners = vec![None; usize::from(ROUNDS)];
        for (t, h) in handles.into_iter().enumerate() {
            for round in h.join().unwrap() {
                assert_eq!(winners[usize::from(round)], None, "round {round} won twice");
                winners[usize::from(round)] = Some(100 + t as u32);
            }
        }
        for (round, (id, winner)) in ids.iter().zip(winners).enumerate() {
            let by = winner.unwrap_or_else(|| panic!("round {round} had no winner"));
            assert_eq!(reg.candidate_state(*id), CandidateState::Claimed { by });
        }
    });
}

#[test]
fn a_withdrawal_racing_a_claim_lets_exactly_one_through() {
    let reg = fresh();
    let me = me();
    let barrier = Barrier::new(2);
    let (client, server) = (a("127.0.0.1:40006"), a("127.0.0.1:80"));
    std::thread::scope(|s| {
        let claimer = s.spawn(|| {
            let mut claims = 0;
            for _ in 0..300 {
                barrier.wait();
                claims += usize::from(reg.claim_candidate(client, server, 99).is_some());
                barrier.wait();
            }
            claims
        });
        let mut withdrawals = 0;
        for _ in 0..300 {
            let id = reg.publish_candidate(client, server, me, 0, &[]).unwrap();
            barrier.wait();
            match reg.withdraw_candidate(id) {
                Ok(()) => withdrawals += 1,
                Err(CandidateState::Claimed { by: 99 }) => assert!(reg.release_candidate(id)),
                Err(other) => panic!("withdraw: {other:?}"),
            }
            barrier.wait();
            assert_eq!(reg.candidate_state(id), CandidateState::Gone);
        }
        assert_eq!(withdrawals + claimer.join().unwrap(), 300);
    });
}

#[test]
fn concurrent_inserts_and_a_collector_lose_nothing() {
    let reg = fresh();
    let me = me();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let collector = s.spawn(|| {
            let mut freed = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                freed += reg.collect_dead();
            }
            freed
        });
        let writers: Vec<_> = (0..3u16)
            .map(|t| {
                let reg = &reg;
                s.spawn(move || {
                    for k in 0..150u16 {
                        let port = 10_000 + t * 1000 + k;
                        reg.add_listener(SocketAddr::from(([127, 0, 0, 1], port)), false, me)
                            .unwrap();
                        let client = SocketAddr::from(([127, 0, 0, 1], port));
                        reg.publish_candidate(client, a("127.0.0.1:80"), me, u64::from(port), &[])
                            .unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(collector.join().unwrap(), 0, "collected a live record");
    });
    assert_eq!(reg.listeners().count(), 450);
    for t in 0..3u16 {
        for k in 0..150u16 {
            let port = 10_000 + t * 1000 + k;
            assert!(reg.has_listener(SocketAddr::from(([127, 0, 0, 1], port))));
            let c = reg
                .claim_candidate(
                    SocketAddr::from(([127, 0, 0, 1], port)),
                    a("127.0.0.1:80"),
                    1,
                )
                .unwrap();
            assert_eq!(c.nonce, u64::from(port));
        }
    }
}

// ---- processes ----

#[test]
fn processes_register_look_up_replace_and_list() {
    let reg = fresh();
    let me = me();
    let other = Owner {
        pid: me.pid.wrapping_add(1).max(2),
        start_time: 5,
    };
    let id = reg.register_process(me, 1000, b"ember-ctl-1").unwrap();
    reg.register_process(other, 1000, b"\0abstract\0name")
        .unwrap();
    let p = reg.lookup_process(me.pid).unwrap();
    assert_eq!((p.owner, p.uid, p.name()), (me, 1000, &b"ember-ctl-1"[..]));
    assert_eq!(
        reg.lookup_process(other.pid).unwrap().name(),
        b"\0abstract\0name"
    );
    assert_eq!(reg.lookup_process(0), None);
    // Registering again replaces the record: one per pid.
    let again = reg.register_process(me, 1000, b"ember-ctl-2").unwrap();
    assert!(
        !reg.unregister_process(id),
        "the replaced record was still there"
    );
    assert_eq!(reg.lookup_process(me.pid).unwrap().name(), b"ember-ctl-2");
    let mut pids: Vec<_> = reg.processes().map(|p| p.owner.pid).collect();
    pids.sort();
    let mut want = vec![me.pid, other.pid];
    want.sort();
    assert_eq!(pids, want);
    assert!(reg.unregister_process(again));
    assert_eq!(reg.lookup_process(me.pid), None);
    assert_eq!(reg.processes().count(), 1);
}

#[test]
fn remove_owner_clears_every_table_of_that_process_only() {
    let reg = fresh();
    let me = me();
    let other = Owner {
        pid: me.pid,
        start_time: me.start_time + 1,
    };
    reg.register_process(me, 0, b"a").unwrap();
    reg.add_listener(a("127.0.0.1:1"), false, me).unwrap();
    reg.add_listener(a("127.0.0.1:2"), false, other).unwrap();
    reg.publish_candidate(a("127.0.0.1:3"), a("127.0.0.1:1"), me, 0, &[])
        .unwrap();
    let claimed = reg
        .publish_candidate(a("127.0.0.1:4"), a("127.0.0.1:1"), me, 0, &[])
        .unwrap();
    reg.claim_candidate(a("127.0.0.1:4"), a("127.0.0.1:1"), 9)
        .unwrap();
    assert_eq!(reg.remove_owner(me), 4);
    assert_eq!(reg.candidate_state(claimed), CandidateState::Gone);
    assert!(!reg.has_listener(a("127.0.0.1:1")));
    assert!(reg.has_listener(a("127.0.0.1:2")));
    assert_eq!(reg.lookup_process(me.pid), None);
    assert_eq!(reg.remove_owner(me), 0);
}

// ---- several processes ----

const RACERS: usize = 4;

#[test]
fn processes_racing_to_create_the_file_share_one_registry() {
    if role().as_deref() == Some("racer") {
        let go = PathBuf::from(std::env::var("EMBER_REGISTRY_GO").unwrap());
        let index: u16 = std::env::var("EMBER_REGISTRY_INDEX")
            .unwrap()
            .parse()
            .unwrap();
        println!("{READY}");
        wait_until("the start", || go.exists());
        let reg = Registry::open(&env_path()).unwrap();
        let me = me();
        reg.register_process(me, 0, format!("racer-{index}").as_bytes())
            .unwrap();
        reg.add_listener(
            SocketAddr::from(([127, 0, 0, 1], 30_000 + index)),
            false,
            me,
        )
        .unwrap();
        wait_until("every racer", || {
            (0..RACERS as u16)
                .all(|i| reg.has_listener(SocketAddr::from(([127, 0, 0, 1], 30_000 + i))))
                && reg.processes().count() == RACERS
        });
        return;
    }
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("registry");
        let go = dir.path().join("go");
        let mut children: Vec<_> = (0..RACERS)
            .map(|i| {
                spawn_role(
                    "processes_racing_to_create_the_file_share_one_registry",
                    "racer",
                    &[
                        (PATH, path.display().to_string()),
                        ("EMBER_REGISTRY_GO", go.display().to_string()),
                        ("EMBER_REGISTRY_INDEX", i.to_string()),
                    ],
                )
            })
            .collect();
        for c in &mut children {
            wait_ready(c);
        }
        assert!(!path.exists(), "a racer created the file before the start");
        std::fs::write(&go, b"").unwrap();
        let pids: Vec<u32> = children.iter().map(Child::id).collect();
        for mut c in children {
            let status = c.wait().unwrap();
            assert!(status.success(), "round {round}: a racer failed: {status}");
        }
        let reg = Registry::open(&path).unwrap();
        for (i, pid) in pids.iter().enumerate() {
            let p = reg
                .lookup_process(*pid)
                .unwrap_or_else(|| panic!("racer {i} not registered"));
            assert_eq!(p.name(), format!("racer-{i}").as_bytes());
        }
        // They have exited: their records are collected.
        assert_eq!(reg.collect_dead(), 2 * RACERS);
        assert_eq!(reg.processes().count(), 0);
    }
}

#[test]
fn a_forked_child_publishes_through_the_inherited_mapping_and_sees_its_claim() {
    let (_dir, path) = temp();
    let reg = Registry::open(&path).unwrap();
    let (client, server) = (a("127.0.0.1:41000"), a("127.0.0.1:80"));
    // SAFETY: getpid cannot fail.
    let parent = unsafe { libc::getpid() } as u32;
    // SAFETY: the child runs only code that neither allocates nor takes locks (raw
    // system calls and atomics on the inherited shared mapping) and ends with _exit.
    let child = unsafe { libc::fork() };
    assert!(child >= 0);
    if child == 0 {
        let code = (|| {
            let me = Owner::current().ok()?;
            let id = reg
                .publish_candidate(client, server, me, 0xc0ffee, b"offer")
                .ok()?;
            for _ in 0..10_000 {
                match reg.candidate_state(id) {
                    CandidateState::Pending => std::thread::sleep(Duration::from_millis(1)),
                    CandidateState::Claimed { by } if by == parent => {
                        return Some(if reg.release_candidate(id) { 0 } else { 4 });
                    }
                    _ => return Some(5),
                }
            }
            Some(6)
        })()
        .unwrap_or(3);
        // SAFETY: ends the forked child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut claimed = None;
    wait_until("the child's candidate", || {
        claimed = reg.claim_candidate(client, server, parent);
        claimed.is_some()
    });
    let c = claimed.unwrap();
    assert_eq!(c.client.pid, child as u32);
    assert_eq!((c.nonce, c.payload()), (0xc0ffee, &b"offer"[..]));
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a live int.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status:#x}"
    );
    assert_eq!(reg.claim_candidate(client, server, parent), None);
}

#[test]
fn the_records_of_a_killed_process_are_collected() {
    if role().as_deref() == Some("victim") {
        let reg = Registry::open(&env_path()).unwrap();
        let me = me();
        reg.register_process(me, 0, b"victim").unwrap();
        reg.add_listener(a("127.0.0.1:31000"), false, me).unwrap();
        reg.publish_candidate(a("127.0.0.1:41001"), a("127.0.0.1:31000"), me, 1, &[])
            .unwrap();
        println!("{READY} {}", me.start_time);
        hold();
        return;
    }
    let (_dir, path) = temp();
    let reg = Registry::open(&path).unwrap();
    let mut child = spawn_role(
        "the_records_of_a_killed_process_are_collected",
        "victim",
        &[(PATH, path.display().to_string())],
    );
    let start: u64 = wait_ready(&mut child)[0].parse().unwrap();
    let pid = child.id();
    let victim = Owner {
        pid,
        start_time: start,
    };
    assert_eq!(reg.lookup_process(pid).map(|p| p.owner), Some(victim));
    assert!(reg.has_listener(a("127.0.0.1:31000")));
    assert_eq!(reg.collect_dead(), 0, "collected a live process");
    child.kill().unwrap(); // SIGKILL
                           // Collected while still a zombie (not reaped): its pid cannot be reused yet.
    wait_until("the victim's death", || probe_pid(pid) == Liveness::Gone);
    assert_eq!(reg.collect_dead(), 3);
    assert_eq!(reg.lookup_process(pid), None);
    assert!(!reg.has_listener(a("127.0.0.1:31000")));
    assert_eq!(
        reg.claim_candidate(a("127.0.0.1:41001"), a("127.0.0.1:31000"), 1),
        None
    );
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

#[test]
fn a_reused_pid_is_not_taken_for_the_dead_process() {
    let reg = fresh();
    let me = me();
    // Records of a dead process that had our pid: same pid, another start time.
    let dead = Owner {
        pid: me.pid,
        start_time: me.start_time.wrapping_sub(1),
    };
    reg.register_process(dead, 0, b"dead").unwrap();
    reg.add_listener(a("127.0.0.1:6000"), false, dead).unwrap();
    reg.publish_candidate(a("127.0.0.1:6001"), a("127.0.0.1:6000"), dead, 0, &[])
        .unwrap();
    reg.add_listener(a("127.0.0.1:6002"), false, me).unwrap();
    reg.publish_candidate(a("127.0.0.1:6003"), a("127.0.0.1:6002"), me, 0, &[])
        .unwrap();
    assert_eq!(reg.lookup_process(me.pid).unwrap().owner, dead);
    assert_eq!(reg.collect_dead(), 3);
    assert_eq!(reg.lookup_process(me.pid), None);
    assert!(!reg.has_listener(a("127.0.0.1:6000")));
    assert!(reg.has_listener(a("127.0.0.1:6002")));
    assert!(reg
        .claim_candidate(a("127.0.0.1:6003"), a("127.0.0.1:6002"), 1)
        .is_some());
    // And a pid that no process has (a reaped child's).
    let mut child = Command::new("true").spawn().unwrap();
    let gone = child.id();
    child.wait().unwrap();
    if probe_pid(gone) == Liveness::Gone {
        reg.add_listener(
            a("127.0.0.1:6004"),
            false,
            Owner {
                pid: gone,
                start_time: 0,
            },
        )
        .unwrap();
        assert_eq!(reg.collect_dead(), 1);
        assert!(!reg.has_listener(a("127.0.0.1:6004")));
    } else {
        eprintln!("pid {gone} was reused at once; skipped the vanished-pid case");
    }
}

fn fill_client(k: usize) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 1024 + k as u16))
}

#[test]
fn a_full_table_is_an_error_until_its_owner_dies() {
    if role().as_deref() == Some("filler") {
        let reg = Registry::open(&env_path()).unwrap();
        let me = me();
        reg.register_process(me, 0, b"filler").unwrap();
        let mut k = 0;
        let failed = loop {
            match reg.publish_candidate(fill_client(k), a("127.0.0.1:80"), me, 0, &[]) {
                Ok(_) => k += 1,
                Err(RegistryError::Full) => break k,
                Err(e) => panic!("publish: {e}"),
            }
            assert!(k <= CANDIDATE_CAPACITY, "more candidates than records");
        };
        assert!(failed >= PROBE_WINDOW, "full after {failed}");
        for _ in 0..PROBE_WINDOW {
            reg.add_listener(a("127.0.0.1:9000"), false, me).unwrap();
        }
        println!("{READY} {failed}");
        hold();
        return;
    }
    let (_dir, path) = temp();
    let reg = Registry::open(&path).unwrap();
    let mut child = spawn_role(
        "a_full_table_is_an_error_until_its_owner_dies",
        "filler",
        &[(PATH, path.display().to_string())],
    );
    let failed: usize = wait_ready(&mut child)[0].parse().unwrap();
    let me = me();
    let publish = || reg.publish_candidate(fill_client(failed), a("127.0.0.1:80"), me, 0, &[]);
    assert_eq!(publish().err(), Some(RegistryError::Full));
    assert_eq!(
        reg.add_listener(a("127.0.0.1:9000"), false, me).err(),
        Some(RegistryError::Full)
    );
    assert_eq!(reg.collect_dead(), 0);
    child.kill().unwrap();
    child.wait().unwrap();
    // The failed inserts now collect the dead filler's records and succeed.
    let id = publish().unwrap();
    reg.add_listener(a("127.0.0.1:9000"), false, me).unwrap();
    assert_eq!(reg.listeners().count(), 1);
    assert_eq!(reg.candidate_state(id), CandidateState::Pending);
    // The process table was not full: its record waits for a full collection.
    assert_eq!(reg.collect_dead(), 1);
}
