//! TCP Fusion through the socket API, as `fireengine.md` ("TCP Fusion") describes it:
//! admission, the fused data path and its counters, flow control (including the Solaris
//! 10 unread-writes limit), unfusing in the middle of a transfer, and probes.
//!
//! Every blocking call has a timeout (`T`), so a bug fails a test instead of hanging it.

use ember_core::tcp::State;
use ember_runtime::socket::ready;
use ember_runtime::{FilterRule, Probe, ProbeEvent, Stack, TcpListener, TcpStream};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, SocketAddrV4};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// Bound of every blocking call (generous: a hit means a bug, never slowness).
const T: Duration = Duration::from_secs(10);

// -------------------------------------------------------------------------------------
// Helpers.
// -------------------------------------------------------------------------------------

mod common;
use common::Rng;

fn v4(a: SocketAddr) -> SocketAddrV4 {
    match a {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(a) => panic!("IPv6 address {a}"),
    }
}

fn two_squeues() -> Stack {
    Stack::builder().squeues(2).build().expect("stack")
}

fn stack_with(params: &[(&str, &str)]) -> Stack {
    let mut b = Stack::builder().squeues(2);
    for (k, v) in params {
        b = b.param(k, v).expect("param");
    }
    b.build().expect("stack")
}

/// A listener on an ephemeral loopback port, with an accept timeout.
fn listener(st: &Stack) -> TcpListener {
    let l = TcpListener::bind(st, "127.0.0.1:0").expect("bind");
    l.set_accept_timeout(Some(T)).unwrap();
    l
}

fn port_of(l: &TcpListener) -> u16 {
    l.local_addr().unwrap().port()
}

/// Connects a client to `l` and accepts it: (client, accepted end), both with read and
/// write timeouts `T`.
fn connect_to(st: &Stack, l: &TcpListener) -> (TcpStream, TcpStream) {
    let addr = v4(l.local_addr().unwrap());
    let c = TcpStream::connect_timeout(st, addr, T).expect("connect");
    let (s, peer) = l.accept().expect("accept");
    assert_eq!(
        peer,
        c.local_addr().unwrap(),
        "accepted the wrong connection"
    );
    for x in [&c, &s] {
        x.set_read_timeout(Some(T)).unwrap();
        x.set_write_timeout(Some(T)).unwrap();
    }
    (c, s)
}

fn kstat(st: &Stack, name: &str) -> u64 {
    st.kstat()
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no kstat {name}"))
}

/// Polls `f` (1 ms apart) until it holds; fails after `T`.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let dl = Instant::now() + T;
    while !f() {
        assert!(Instant::now() < dl, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Writes all of `data` in chunks of random size (1..=`max_chunk`).
fn write_chunks(s: &TcpStream, data: &[u8], rng: &mut Rng, max_chunk: usize) {
    let mut off = 0;
    while off < data.len() {
        let k = rng.range(1, max_chunk).min(data.len() - off);
        match (&*s).write(&data[off..off + k]) {
            Ok(0) => panic!("write of {k} bytes returned 0 at offset {off}"),
            Ok(n) => off += n,
            Err(e) => panic!("write at offset {off} of {}: {e}", data.len()),
        }
    }
}

/// Reads exactly `n` bytes with reads of random size (1..=`max_chunk`).
fn read_chunks(s: &TcpStream, n: usize, rng: &mut Rng, max_chunk: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n);
    let mut buf = vec![0u8; max_chunk];
    while out.len() < n {
        let k = rng.range(1, max_chunk);
        match (&*s).read(&mut buf[..k]) {
            Ok(0) => panic!("EOF after {} of {n} bytes", out.len()),
            Ok(m) => out.extend_from_slice(&buf[..m]),
            Err(e) => panic!("read after {} of {n} bytes: {e}", out.len()),
        }
    }
    out
}

fn read_n(s: &TcpStream, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    (&*s).read_exact(&mut v).expect("read_exact");
    v
}

fn assert_eof(s: &TcpStream) {
    let mut b = [0u8; 16];
    match (&*s).read(&mut b) {
        Ok(0) => {}
        other => panic!("expected EOF, got {other:?}"),
    }
}

/// Compares two byte streams and names the first difference.
fn assert_same(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let first = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    panic!(
        "{what}: {} bytes received, {} sent; first difference at offset {first}",
        got.len(),
        want.len()
    );
}

type Events = Arc<Mutex<Vec<ProbeEvent>>>;

fn collect_probes(st: &Stack) -> Events {
    let v: Events = Arc::new(Mutex::new(Vec::new()));
    let v2 = v.clone();
    st.subscribe(move |e| v2.lock().unwrap().push(*e));
    v
}

/// Events of the connection between `a` and `b` (either direction), from index `from`.
fn conn_events(ev: &Events, from: usize, a: SocketAddrV4, b: SocketAddrV4) -> Vec<ProbeEvent> {
    ev.lock().unwrap()[from..]
        .iter()
        .filter(|e| (e.local, e.remote) == (a, b) || (e.local, e.remote) == (b, a))
        .copied()
        .collect()
}

fn addrs(c: &TcpStream) -> (SocketAddrV4, SocketAddrV4) {
    (v4(c.local_addr().unwrap()), v4(c.peer_addr().unwrap()))
}

// -------------------------------------------------------------------------------------
// 1. Admission.
// -------------------------------------------------------------------------------------

#[test]
fn loopback_connection_fuses() {
    let st = two_squeues();
    let l = listener(&st);
    let (c, s) = connect_to(&st, &l);
    assert!(c.is_fused().unwrap(), "client end fused");
    assert!(s.is_fused().unwrap(), "accepted end fused");
    assert_eq!(c.squeue(), s.squeue(), "both ends on one squeue");
    assert_eq!(kstat(&st, "fusion:tcp_fusion_fused_total"), 1);
    assert_eq!(kstat(&st, "fusion:tcp_fusion_fused"), 1);
    assert_eq!(st.stats().tcp.fusion_fused_now, 1);
    let ns = st.netstat();
    assert_eq!(ns.len(), 2, "{ns:?}");
    assert!(ns
        .iter()
        .all(|(i, _, f)| *f && i.fused && i.state == State::Established));

    // Data moves without a single loopback segment.
    let lo0 = kstat(&st, "classifier:loopback_segs");
    (&c).write_all(b"ping").unwrap();
    assert_eq!(read_n(&s, 4), b"ping");
    (&s).write_all(b"pong!").unwrap();
    assert_eq!(read_n(&c, 5), b"pong!");
    assert_eq!(kstat(&st, "classifier:loopback_segs"), lo0);
    assert_eq!(kstat(&st, "fusion:tcp_fusion_bytes"), 9);
    drop((c, s, l));
    st.shutdown();
}

#[test]
fn do_tcp_fusion_off_at_build_does_not_fuse() {
    let st = stack_with(&[("do_tcp_fusion", "0")]);
    let l = listener(&st);
    let (c, s) = connect_to(&st, &l);
    assert!(!c.is_fused().unwrap());
    assert!(!s.is_fused().unwrap());
    assert_eq!(kstat(&st, "fusion:tcp_fusion_fused_total"), 0);
    assert_eq!(kstat(&st, "fusion:tcp_fusion_fused"), 0);
    let lo0 = kstat(&st, "classifier:loopback_segs");
    (&c).write_all(b"ping").unwrap();
    assert_eq!(read_n(&s, 4), b"ping");
    assert!(
        kstat(&st, "classifier:loopback_segs") > lo0,
        "data went as segments"
    );
    assert_eq!(kstat(&st, "fusion:tcp_fusion_bytes"), 0);
    drop((c, s, l));
    st.shutdown();
}

#[test]
fn do_tcp_fusion_off_at_run_time_keeps_fused_pairs() {
    let st = two_squeues();
    let l = listener(&st);
    let (c1, s1) = connect_to(&st, &l);
    assert!(c1.is_fused().unwrap() && s1.is_fused().unwrap());
    st.set_param("do_tcp_fusion", "0").unwrap();
    assert!(!st.params().do_tcp_fusion);
    // The existing pair stays fused and keeps moving data fused.
    assert!(c1.is_fused().unwrap() && s1.is_fused().unwrap());
    let b0 = kstat(&st, "fusion:tcp_fusion_bytes");
    (&c1).write_all(b"still fused").unwrap();
    assert_eq!(read_n(&s1, 11), b"still fused");
    assert_eq!(kstat(&st, "fusion:tcp_fusion_bytes"), b0 + 11);
    // A new connection does not fuse.
    let (c2, s2) = connect_to(&st, &l);
    assert!(!c2.is_fused().unwrap() && !s2.is_fused().unwrap());
    (&c2).write_all(b"plain").unwrap();
    assert_eq!(read_n(&s2, 5), b"plain");
    assert_eq!(kstat(&st, "fusion:tcp_fusion_fused_total"), 1);
    assert_eq!(kstat(&st, "fusion:tcp_fusion_fused"), 1);
    // And back on: new connections fuse again.
    st.set_param("do_tcp_fusion", "1").unwrap();
    let (c3, s3) = connect_to(&st, &l);
    assert!(c3.is_fused().unwrap() && s3.is_fused().unwrap());
    assert_eq!(kstat(&st, "fusion:tcp_fusion_fused_total"), 2);
    drop((c1, s1, c2, s2, c3, s3, l));
    st.shutdown();
}

// -------------------------------------------------------------------------------------
// 2. Fused and unfused transfers.
// -------------------------------------------------------------------------------------

struct Transfer {
    ab: Vec<u8>,
    ba: Vec<u8>,
    client: SocketAddrV4,
    server: SocketAddrV4,
    c_bytes: (u64, u64),
    s_bytes: (u64, u64),
    fused: bool,
    /// Loopback segments from before connect() to the end of the transfer.
    lo_segs: u64,
    /// Probe events of the connection up to the end of the transfer (before close).
    events: Vec<ProbeEvent>,
}

/// Moves `ab` client→server and `ba` server→client at once (four threads, random chunk
/// sizes), returns what each side received.
fn transfer(st: &Stack, ev: &Events, ab: &[u8], ba: &[u8], seed: u64) -> Transfer {
    let lo0 = kstat(st, "classifier:loopback_segs");
    let l = listener(st);
    let (c, s) = connect_to(st, &l);
    let fused = c.is_fused().unwrap();
    let (got_ab, got_ba) = thread::scope(|sc| {
        let (c, s) = (&c, &s);
        let w1 = sc.spawn(move || write_chunks(c, ab, &mut Rng(seed ^ 1), 70_000));
        let w2 = sc.spawn(move || write_chunks(s, ba, &mut Rng(seed ^ 2), 70_000));
        let r1 = sc.spawn(move || read_chunks(s, ab.len(), &mut Rng(seed ^ 3), 70_000));
        let r2 = sc.spawn(move || read_chunks(c, ba.len(), &mut Rng(seed ^ 4), 70_000));
        w1.join().expect("client writer");
        w2.join().expect("server writer");
        (
            r1.join().expect("server reader"),
            r2.join().expect("client reader"),
        )
    });
    let ci = c.tcp_info().unwrap();
    let si = s.tcp_info().unwrap();
    let (client, server) = addrs(&c);
    Transfer {
        ab: got_ab,
        ba: got_ba,
        client,
        server,
        lo_segs: kstat(st, "classifier:loopback_segs") - lo0,
        events: conn_events(ev, 0, client, server),
        c_bytes: (ci.stats.bytes_out, ci.stats.bytes_in),
        s_bytes: (si.stats.bytes_out, si.stats.bytes_in),
        fused,
    }
}

fn sum_len(ev: &[ProbeEvent], p: Probe, local: SocketAddrV4) -> usize {
    ev.iter()
        .filter(|e| e.probe == p && e.local == local)
        .map(|e| e.len)
        .sum()
}

#[test]
fn fused_and_unfused_transfers_are_identical() {
    const N: usize = 3_000_000;
    let seed = 0x00f0_5e55;
    let mut g = Rng(seed);
    let ab = g.bytes(N);
    let ba = g.bytes(N + 12_345);

    // Fused.
    let st = two_squeues();
    let ev = collect_probes(&st);
    let out_segs0 = kstat(&st, "tcp:tcpOutSegs");
    let f = transfer(&st, &ev, &ab, &ba, seed);
    assert!(f.fused, "the loopback pair fused");
    assert_same(&f.ab, &ab, "fused client→server");
    assert_same(&f.ba, &ba, "fused server→client");
    assert_eq!(
        kstat(&st, "fusion:tcp_fusion_bytes"),
        (ab.len() + ba.len()) as u64,
        "tcp_fusion_bytes counts every byte moved"
    );
    assert_eq!(
        f.c_bytes,
        (ab.len() as u64, ba.len() as u64),
        "client bytes out/in"
    );
    assert_eq!(
        f.s_bytes,
        (ba.len() as u64, ab.len() as u64),
        "server bytes out/in"
    );
    assert!(kstat(&st, "fusion:tcp_fusion_putnext") > 0);
    assert!(
        kstat(&st, "tcp:tcpOutSegs") >= out_segs0 + (2 * N / 70_000) as u64,
        "fused writes count in the TCP counters"
    );
    // Only the handshake used loopback segments.
    assert!(
        f.lo_segs <= 3,
        "fused data went as segments ({})",
        f.lo_segs
    );
    let e = &f.events;
    assert!(!e.iter().any(|x| x.probe == Probe::Unfuse), "{e:?}");
    assert_eq!(sum_len(e, Probe::TcpSend, f.client), ab.len());
    assert_eq!(sum_len(e, Probe::TcpReceive, f.server), ab.len());
    assert_eq!(sum_len(e, Probe::TcpSend, f.server), ba.len());
    assert_eq!(sum_len(e, Probe::TcpReceive, f.client), ba.len());
    assert!(
        !e.iter()
            .skip_while(|x| x.probe != Probe::Fuse)
            .any(|x| matches!(x.probe, Probe::IpSend | Probe::IpReceive)),
        "no ip probe after fusion"
    );
    st.shutdown();

    // Unfused.
    let st = stack_with(&[("do_tcp_fusion", "0")]);
    let ev = collect_probes(&st);
    let u = transfer(&st, &ev, &ab, &ba, seed);
    assert!(!u.fused);
    assert_same(&u.ab, &ab, "unfused client→server");
    assert_same(&u.ba, &ba, "unfused server→client");
    assert_eq!(u.ab, f.ab, "fused and unfused give identical bytes");
    assert_eq!(u.ba, f.ba, "fused and unfused give identical bytes");
    assert_eq!(kstat(&st, "fusion:tcp_fusion_bytes"), 0);
    assert!(
        u.lo_segs >= (2 * N / 65_536) as u64,
        "unfused data flows as loopback segments ({})",
        u.lo_segs
    );
    assert_eq!(u.c_bytes.1, ba.len() as u64);
    assert_eq!(u.s_bytes.1, ab.len() as u64);
    let e = &u.events;
    assert!(sum_len(e, Probe::TcpSend, u.client) >= ab.len());
    assert!(sum_len(e, Probe::IpSend, u.client) > ab.len());
    assert!(sum_len(e, Probe::IpReceive, u.server) > ab.len());
    st.shutdown();
}

// -------------------------------------------------------------------------------------
// 3. Flow control and the unread-writes limit.
// -------------------------------------------------------------------------------------

/// Non-blocking 100-byte writes until `WouldBlock` (at most `max`): how many succeeded.
fn writes_until_blocked(c: &TcpStream, max: usize) -> usize {
    for i in 0..max {
        match (&*c).write(&[i as u8; 100]) {
            Ok(100) => {}
            Ok(n) => panic!("write {i} moved {n} of 100 bytes"),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return i,
            Err(e) => panic!("write {i}: {e}"),
        }
    }
    max
}

#[test]
fn slow_reader_default_limit_stops_ninth_write() {
    let st = two_squeues();
    let l = listener(&st);
    let (c, s) = connect_to(&st, &l);
    assert!(c.is_fused().unwrap());
    c.set_nonblocking(true).unwrap();
    assert_eq!(st.params().tcp_fusion_rcv_unread_min, 8);
    assert_eq!(writes_until_blocked(&c, 50), 8, "exactly 8 unread writes");
    assert!(kstat(&st, "fusion:tcp_fusion_flowctl") >= 1);
    assert_eq!(kstat(&st, "fusion:tcp_fusion_rrw_stops"), 1);
    assert_eq!(
        c.readiness() & ready::WRITE,
        0,
        "a stopped writer is not writable"
    );
    // Still stopped: nothing changed on the reader's side.
    assert_eq!(writes_until_blocked(&c, 50), 0);
    assert_eq!(s.recv_available(), 800);

    // One read (of a single write's worth) resets the count and resumes the writer.
    let back0 = kstat(&st, "fusion:tcp_fusion_backenabled");
    assert_eq!(read_n(&s, 100), vec![0u8; 100]);
    assert!(kstat(&st, "fusion:tcp_fusion_backenabled") > back0);
    assert_ne!(
        c.readiness() & ready::WRITE,
        0,
        "writable again after a read"
    );
    assert_eq!(writes_until_blocked(&c, 50), 8, "8 more after one read");
    assert!(kstat(&st, "fusion:tcp_fusion_rrw_stops") >= 2);
    assert!(c.is_fused().unwrap(), "flow control does not unfuse");

    // Everything arrives in order.
    let got = read_n(&s, 1500);
    let mut want = Vec::new();
    for i in 1..8u8 {
        want.extend_from_slice(&[i; 100]);
    }
    for i in 0..8u8 {
        want.extend_from_slice(&[i; 100]);
    }
    assert_same(&got, &want, "slow reader");
    drop((c, s, l));
    st.shutdown();
}

#[test]
fn unread_limit_zero_stops_only_on_a_full_buffer() {
    const RCVBUF: usize = 100_000;
    let st = stack_with(&[
        ("tcp_fusion_rcv_unread_min", "0"),
        ("tcp_recv_hiwat", &RCVBUF.to_string()),
    ]);
    let l = listener(&st);
    let (c, s) = connect_to(&st, &l);
    assert!(c.is_fused().unwrap());
    c.set_nonblocking(true).unwrap();
    let mut writes = 0;
    let mut total = 0;
    loop {
        match (&c).write(&[7u8; 1000]) {
            Ok(n) => {
                writes += 1;
                total += n;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("write {writes}: {e}"),
        }
        assert!(writes < 10_000, "the writer is never stopped");
    }
    eprintln!("unread_min=0: {writes} writes, {total} bytes accepted (rcvbuf {RCVBUF})");
    assert!(writes > 50, "far more than 8 writes ({writes})");
    assert!(
        total <= RCVBUF,
        "fused data never exceeds the receive buffer"
    );
    assert!(total >= RCVBUF * 9 / 10, "the buffer filled ({total})");
    assert_eq!(s.recv_available(), total);
    assert_eq!(kstat(&st, "fusion:tcp_fusion_rrw_stops"), 0);
    assert!(kstat(&st, "fusion:tcp_fusion_flowctl") >= 1);
    // Reading (more than the low-water mark) resumes the writer.
    let _ = read_n(&s, total / 2);
    assert!(kstat(&st, "fusion:tcp_fusion_backenabled") >= 1);
    assert!((&c).write(&[8u8; 1000]).is_ok());
    drop((c, s, l));
    st.shutdown();
}

#[test]
fn full_buffer_writer_resumes_at_the_low_water_mark() {
    // fireengine.md: the writer stops when the peer's receive buffer is full "and
    // resumes when the reader has drained below the low water mark" (the core's
    // fused_sync_window wakes it at min(tcp_xmit_lowat, rcvbuf / 2) free bytes).
    const RCVBUF: usize = 100_000;
    let st = stack_with(&[
        ("tcp_fusion_rcv_unread_min", "0"),
        ("tcp_recv_hiwat", &RCVBUF.to_string()),
    ]);
    let lowat = st.params().tcp_xmit_lowat as usize;
    let l = listener(&st);
    let (c, s) = connect_to(&st, &l);
    c.set_nonblocking(true).unwrap();
    let mut total = 0;
    loop {
        match (&c).write(&[7u8; 1000]) {
            Ok(n) => total += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("write: {e}"),
        }
        assert!(total < 10 * RCVBUF, "the writer is never stopped");
    }
    assert_eq!(c.readiness() & ready::WRITE, 0, "full: not writable");
    let back0 = kstat(&st, "fusion:tcp_fusion_backenabled");
    // A one-byte read leaves the buffer far above the low-water mark.
    let _ = read_n(&s, 1);
    assert_eq!(
        c.readiness() & ready::WRITE,
        0,
        "writable after a 1-byte read of a full buffer (free 1 < low water {lowat})"
    );
    assert_eq!(kstat(&st, "fusion:tcp_fusion_backenabled"), back0);
    // Draining the buffer resumes it.
    let _ = read_n(&s, total - 1);
    assert_ne!(c.readiness() & ready::WRITE, 0);
    assert!(kstat(&st, "fusion:tcp_fusion_backenabled") > back0);
    drop((c, s, l));
    st.shutdown();
}

#[test]
fn poller_sees_fused_readiness() {
    use ember_runtime::Poller;
    let st = two_squeues();
    let l = listener(&st);
    let (c, s) = connect_to(&st, &l);
    assert!(c.is_fused().unwrap());
    let p = Poller::new();
    p.add_stream(&s, 1, ready::READ).unwrap();
    p.add_stream(&c, 2, ready::WRITE).unwrap();
    let mut evs = Vec::new();
    // A fused write makes the reader readable.
    let n = thread::scope(|sc| {
        let c = &c;
        sc.spawn(move || (&*c).write_all(b"wake up").unwrap());
        let dl = Instant::now() + T;
        loop {
            p.wait(&mut evs, Some(T)).unwrap();
            if evs
                .iter()
                .any(|e| e.token == 1 && e.readiness & ready::READ != 0)
            {
                break evs.len();
            }
            assert!(Instant::now() < dl, "no READ event for the fused reader");
        }
    });
    assert!(n >= 1);
    assert_eq!(read_n(&s, 7), b"wake up");
    // A writer stopped by the unread limit is not writable; a read makes it so.
    c.set_nonblocking(true).unwrap();
    assert_eq!(writes_until_blocked(&c, 50), 8);
    p.delete(1).unwrap();
    p.wait(&mut evs, Some(Duration::from_millis(1))).unwrap();
    assert!(
        !evs.iter().any(|e| e.token == 2),
        "stopped writer reported writable: {evs:?}"
    );
    let _ = read_n(&s, 100);
    let dl = Instant::now() + T;
    loop {
        p.wait(&mut evs, Some(T)).unwrap();
        if evs
            .iter()
            .any(|e| e.token == 2 && e.readiness & ready::WRITE != 0)
        {
            break;
        }
        assert!(Instant::now() < dl, "no WRITE event after the read");
    }
    drop((c, s, l));
    st.shutdown();
}

#[test]
fn unread_limit_three_and_changed_at_run_time() {
    let st = stack_with(&[("tcp_fusion_rcv_unread_min", "3")]);
    let l = listener(&st);
    let (c, s) = connect_to(&st, &l);
    assert!(c.is_fused().unwrap());
    c.set_nonblocking(true).unwrap();
    assert_eq!(writes_until_blocked(&c, 50), 3);
    assert_eq!(kstat(&st, "fusion:tcp_fusion_rrw_stops"), 1);
    // The tunable applies at run time to the fused pair too.
    st.set_param("tcp_fusion_rcv_unread_min", "5").unwrap();
    let _ = read_n(&s, 300);
    assert_eq!(writes_until_blocked(&c, 50), 5);
    drop((c, s, l));
    st.shutdown();
}

#[test]
fn blocking_writer_parks_and_a_read_wakes_it() {
    let st = two_squeues();
    let l = listener(&st);
    let (c, s) = connect_to(&st, &l);
    assert!(c.is_fused().unwrap());
    let results = thread::scope(|sc| {
        let c = &c;
        let w = sc.spawn(move || {
            (0..9u8)
                .map(|i| (&*c).write(&[i; 100]).map_err(|e| e.kind()))
                .collect::<Vec<_>>()
        });
        // The 9th write has been stopped by the unread limit (the writer parks now).
        wait_until("the writer to be stopped", || {
            kstat(&st, "fusion:tcp_fusion_rrw_stops") >= 1
        });
        assert_eq!(s.recv_available(), 800);
        // One read wakes it.
        let mut buf = [0u8; 4096];
        let n = (&s).read(&mut buf).unwrap();
        assert_eq!(n, 800);
        w.join().expect("writer thread")
    });
    assert_eq!(results, vec![Ok(100); 9], "every blocking write completed");
    assert_eq!(read_n(&s, 100), vec![8u8; 100]);
    assert!(kstat(&st, "fusion:tcp_fusion_backenabled") >= 1);
    drop((c, s, l));
    st.shutdown();
}

// -------------------------------------------------------------------------------------
// 4. Unfusing in the middle of a transfer.
// -------------------------------------------------------------------------------------

#[test]
fn filter_rule_mid_transfer_unfuses_and_loses_nothing() {
    let st = two_squeues();
    let l = listener(&st);
    let port = port_of(&l);
    let (c, s) = connect_to(&st, &l);
    assert!(c.is_fused().unwrap() && s.is_fused().unwrap());
    let data = Rng(0xf117e5).bytes(2_000_000);
    let half = data.len() / 2;
    let (half_tx, half_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let got = thread::scope(|sc| {
        let (c, s, data) = (&c, &s, &data[..]);
        let w = sc.spawn(move || {
            let mut g = Rng(11);
            write_chunks(c, &data[..half], &mut g, 50_000);
            half_tx.send(()).unwrap();
            go_rx.recv_timeout(T).expect("go");
            write_chunks(c, &data[half..], &mut g, 50_000);
        });
        let r = sc.spawn(move || read_chunks(s, data.len(), &mut Rng(12), 50_000));
        half_rx
            .recv_timeout(T)
            .expect("the writer reached half way");
        assert!(c.is_fused().unwrap() && s.is_fused().unwrap());
        let aborted0 = kstat(&st, "fusion:tcp_fusion_aborted");
        st.add_filter_rule(FilterRule {
            protocol: Some(6),
            dst_port: Some(port),
            ..Default::default()
        });
        assert!(!c.is_fused().unwrap(), "client unfused by the filter rule");
        assert!(!s.is_fused().unwrap(), "server unfused by the filter rule");
        assert!(kstat(&st, "fusion:tcp_fusion_aborted") > aborted0);
        assert_eq!(st.stats().tcp.fusion_fused_now, 0);
        let filtered0 = kstat(&st, "classifier:filtered");
        go_tx.send(()).unwrap();
        wait_until("the filter to drop a segment", || {
            kstat(&st, "classifier:filtered") > filtered0
        });
        st.clear_filter();
        w.join().expect("writer");
        r.join().expect("reader")
    });
    assert_same(&got, &data, "transfer across a filter-rule unfuse");
    assert!(
        kstat(&st, "tcp:tcpRetransSegs") > 0,
        "TCP retransmitted what the filter dropped"
    );
    assert!(!c.is_fused().unwrap(), "unfusing is permanent");
    drop((c, s, l));
    st.shutdown();
}

#[test]
fn shutdown_write_with_unread_data_unfuses_and_delivers_all() {
    let st = two_squeues();
    let l = listener(&st);
    let (c, s) = connect_to(&st, &l);
    let data = Rng(0x5d).bytes(200_000);
    // Eight fused writes the reader has not read yet.
    for ch in data.chunks(25_000) {
        (&c).write_all(ch).unwrap();
    }
    assert!(c.is_fused().unwrap());
    assert_eq!(s.recv_available(), data.len());
    c.shutdown(Shutdown::Write).unwrap();
    assert!(!c.is_fused().unwrap() && !s.is_fused().unwrap());
    assert_eq!(st.stats().tcp.fusion_fused_now, 0);
    let got = read_n(&s, data.len());
    assert_same(&got, &data, "data queued before shutdown");
    assert_eof(&s);
    assert_eq!(s.state().unwrap(), State::CloseWait);
    // The other direction still works, as ordinary TCP.
    (&s).write_all(b"reply after half-close").unwrap();
    assert_eq!(read_n(&c, 22), b"reply after half-close");
    drop(s);
    assert_eof(&c);
    drop((c, l));
    st.shutdown();
}

#[test]
fn shutdown_write_mid_stream_concurrent_reader() {
    let st = two_squeues();
    let l = listener(&st);
    let (c, s) = connect_to(&st, &l);
    assert!(c.is_fused().unwrap());
    let data = Rng(0x5e).bytes(3_000_000);
    let got = thread::scope(|sc| {
        let (c, s, data) = (&c, &s, &data[..]);
        let w = sc.spawn(move || {
            write_chunks(c, data, &mut Rng(21), 90_000);
            c.shutdown(Shutdown::Write).unwrap();
            assert!(!c.is_fused().unwrap(), "shutdown unfuses");
        });
        let r = sc.spawn(move || {
            let mut out = Vec::new();
            let mut g = Rng(22);
            let mut buf = vec![0u8; 90_000];
            loop {
                let k = g.range(1, buf.len());
                match (&*s).read(&mut buf[..k]) {
                    Ok(0) => return out,
                    Ok(n) => out.extend_from_slice(&buf[..n]),
                    Err(e) => panic!("read after {}: {e}", out.len()),
                }
            }
        });
        w.join().expect("writer");
        r.join().expect("reader")
    });
    assert_same(&got, &data, "data then EOF");
    assert!(!s.is_fused().unwrap());
    drop((c, s, l));
    st.shutdown();
}

#[test]
fn urgent_data_unfuses_and_all_bytes_arrive() {
    let st = two_squeues();
    let l = listener(&st);
    let (c, s) = connect_to(&st, &l);
    assert!(c.is_fused().unwrap());
    let mut g = Rng(0x06);
    let a = g.bytes(1000);
    let b = g.bytes(1000);
    (&c).write_all(&a).unwrap();
    assert_eq!(c.send_urgent(b"U").unwrap(), 1);
    assert_eq!(kstat(&st, "fusion:tcp_fusion_urg"), 1);
    assert!(!c.is_fused().unwrap() && !s.is_fused().unwrap());
    (&c).write_all(&b).unwrap();
    let got = read_n(&s, 2001);
    let mut want = a.clone();
    want.push(b'U');
    want.extend_from_slice(&b);
    assert_same(&got, &want, "urgent data inline");
    drop((c, s, l));
    st.shutdown();
}

#[test]
fn linger_zero_close_resets_the_peer() {
    let st = two_squeues();
    let l = listener(&st);

    // The peer is parked in a read.
    let (c, s) = connect_to(&st, &l);
    assert!(c.is_fused().unwrap());
    let r = thread::scope(|sc| {
        let s = &s;
        let r = sc.spawn(move || {
            let mut b = [0u8; 64];
            (&*s).read(&mut b).map_err(|e| e.kind())
        });
        c.set_linger(Some(Duration::ZERO)).unwrap();
        drop(c);
        r.join().expect("reader")
    });
    assert_eq!(r, Err(ErrorKind::ConnectionReset));
    let w = (&s).write(b"x").map_err(|e| e.kind());
    assert!(
        matches!(
            w,
            Err(ErrorKind::ConnectionReset) | Err(ErrorKind::BrokenPipe)
        ),
        "write after reset: {w:?}"
    );
    drop(s);

    // The peer has unread fused data: it may read a prefix, then the reset.
    let (c, s) = connect_to(&st, &l);
    let data = Rng(0x1d).bytes(5000);
    (&c).write_all(&data).unwrap();
    c.set_linger(Some(Duration::ZERO)).unwrap();
    drop(c);
    let mut got = Vec::new();
    let mut buf = [0u8; 1000];
    let end = loop {
        match (&s).read(&mut buf) {
            Ok(0) => break Ok(0),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => break Err(e.kind()),
        }
    };
    assert_eq!(
        end,
        Err(ErrorKind::ConnectionReset),
        "after {} bytes",
        got.len()
    );
    assert_same(&got, &data[..got.len()], "prefix before the reset");
    drop(s);
    assert_eq!(st.stats().tcp.fusion_fused_now, 0);
    drop(l);
    st.shutdown();
}

#[test]
fn linger_zero_close_wakes_a_stopped_writer() {
    let st = two_squeues();
    let l = listener(&st);
    let (c, s) = connect_to(&st, &l);
    assert!(c.is_fused().unwrap());
    let res = thread::scope(|sc| {
        let c = &c;
        let w = sc.spawn(move || {
            let mut out = Vec::new();
            for i in 0..9u8 {
                let r = (&*c).write(&[i; 100]).map_err(|e| e.kind());
                let stop = r.is_err();
                out.push(r);
                if stop {
                    break;
                }
            }
            out
        });
        wait_until("the writer to be stopped", || {
            kstat(&st, "fusion:tcp_fusion_rrw_stops") >= 1
        });
        s.set_linger(Some(Duration::ZERO)).unwrap();
        drop(s);
        w.join().expect("writer")
    });
    assert_eq!(res.len(), 9);
    assert!(res[..8].iter().all(|r| *r == Ok(100)));
    assert!(
        matches!(
            res[8],
            Err(ErrorKind::ConnectionReset) | Err(ErrorKind::BrokenPipe)
        ),
        "the parked writer learns the reset: {:?}",
        res[8]
    );
    drop((c, l));
    st.shutdown();
}

// -------------------------------------------------------------------------------------
// 5. Probes.
// -------------------------------------------------------------------------------------

#[test]
fn probes_fused_connection_fires_tcp_not_ip() {
    let st = two_squeues();
    let ev = collect_probes(&st);
    let l = listener(&st);
    let (c, s) = connect_to(&st, &l);
    let (ca, sa) = addrs(&c);
    assert!(c.is_fused().unwrap());
    let e = conn_events(&ev, 0, ca, sa);
    assert_eq!(
        e.iter().filter(|e| e.probe == Probe::Fuse).count(),
        1,
        "fusion:fuse fired once: {e:?}"
    );
    let mark = ev.lock().unwrap().len();
    (&c).write_all(&[7u8; 1234]).unwrap();
    assert_eq!(read_n(&s, 1234), vec![7u8; 1234]);
    (&s).write_all(&[9u8; 321]).unwrap();
    assert_eq!(read_n(&c, 321), vec![9u8; 321]);
    let e = conn_events(&ev, mark, ca, sa);
    let has = |p: Probe, local: SocketAddrV4, len: usize| {
        e.iter()
            .any(|x| x.probe == p && x.local == local && x.len == len)
    };
    assert!(has(Probe::TcpSend, ca, 1234), "{e:?}");
    assert!(has(Probe::TcpReceive, sa, 1234), "{e:?}");
    assert!(has(Probe::TcpSend, sa, 321), "{e:?}");
    assert!(has(Probe::TcpReceive, ca, 321), "{e:?}");
    assert!(
        !e.iter()
            .any(|x| matches!(x.probe, Probe::IpSend | Probe::IpReceive)),
        "no ip probe for fused data: {e:?}"
    );

    // The unread-writes stop fires fusion:flowctl (len 1).
    c.set_nonblocking(true).unwrap();
    assert_eq!(writes_until_blocked(&c, 50), 8);
    let e = conn_events(&ev, mark, ca, sa);
    assert!(
        e.iter()
            .any(|x| x.probe == Probe::FlowCtl && x.local == ca && x.len == 1),
        "{e:?}"
    );

    // Unfusing fires fusion:unfuse, and from then on IP carries the connection.
    let mark = ev.lock().unwrap().len();
    c.shutdown(Shutdown::Write).unwrap();
    let e = conn_events(&ev, mark, ca, sa);
    assert!(e.iter().any(|x| x.probe == Probe::Unfuse), "{e:?}");
    assert!(
        e.iter().any(|x| x.probe == Probe::IpSend && x.local == ca),
        "{e:?}"
    );
    drop((c, s, l));
    st.shutdown();
}

/// The in-process twin of the bpftrace check (tests/usdt.rs, docs/PROBES.md): a fused
/// transfer fires `tcp:send` for every write and no `ip:send` or `ip:receive` at all in
/// the whole stack; the squeue probes fire too, with the connection's squeue index.
#[test]
fn probes_fused_transfer_tcp_send_no_ip_send_squeue_probes() {
    const N: usize = 4 << 20;
    const CHUNK: usize = 16 << 10;
    let st = two_squeues();
    let ev = collect_probes(&st);
    let l = listener(&st);
    let (c, s) = connect_to(&st, &l);
    let (ca, sa) = addrs(&c);
    assert!(c.is_fused().unwrap());
    let mark = ev.lock().unwrap().len();
    let data = Rng(0x5eed).bytes(N);
    let got = thread::scope(|sc| {
        let r = sc.spawn(|| {
            let mut out = Vec::with_capacity(N);
            let mut buf = vec![0u8; 64 << 10];
            while out.len() < N {
                let k = (&s).read(&mut buf).expect("read");
                assert!(k > 0, "EOF after {} bytes", out.len());
                out.extend_from_slice(&buf[..k]);
            }
            out
        });
        for chunk in data.chunks(CHUNK) {
            (&c).write_all(chunk).expect("write");
        }
        r.join().expect("reader")
    });
    assert_same(&got, &data, "fused transfer");
    let e: Vec<ProbeEvent> = ev.lock().unwrap()[mark..].to_vec();
    let count = |p: Probe| e.iter().filter(|x| x.probe == p).count();
    let sends: Vec<&ProbeEvent> = e
        .iter()
        .filter(|x| x.probe == Probe::TcpSend && x.local == ca)
        .collect();
    assert!(
        sends.len() >= N / CHUNK,
        "tcp:send per fused write: {} for {} writes",
        sends.len(),
        N / CHUNK
    );
    assert_eq!(sum_len(&e, Probe::TcpSend, ca), N);
    assert_eq!(sum_len(&e, Probe::TcpReceive, sa), N);
    assert_eq!(count(Probe::IpSend), 0, "no ip:send anywhere in the stack");
    assert_eq!(
        count(Probe::IpReceive),
        0,
        "no ip:receive anywhere in the stack"
    );
    // Both ends live on one squeue, named by every event of the connection.
    let sq = sends[0].squeue;
    assert!(sq < 2);
    assert!(conn_events(&ev, mark, ca, sa)
        .iter()
        .all(|x| x.squeue == sq));
    // Every socket call entered the squeue (inline when it found it idle).
    let enters: Vec<&ProbeEvent> = e
        .iter()
        .filter(|x| x.probe == Probe::SqueueEnter && x.squeue == sq)
        .collect();
    assert!(
        enters.len() >= N / CHUNK,
        "squeue:enter: {} for {} writes",
        enters.len(),
        N / CHUNK
    );
    assert!(enters.iter().all(|x| x.enter_how().is_some()));
    assert!(enters
        .iter()
        .any(|x| x.enter_how() == Some(ember_runtime::squeue::Enter::Inline)));
    assert!(e
        .iter()
        .filter(|x| matches!(x.probe, Probe::SqueueEnter | Probe::SqueueDrain))
        .all(|x| x.local.port() == 0 && x.remote.port() == 0));
    // Shutdown: each worker takes its squeue and drains what is left, so both squeue
    // probes fire for both squeues.
    drop((c, s, l));
    let mark = ev.lock().unwrap().len();
    st.shutdown();
    let e: Vec<ProbeEvent> = ev.lock().unwrap()[mark..].to_vec();
    for q in 0..2 {
        assert!(
            e.iter().any(|x| x.probe == Probe::SqueueEnter
                && x.squeue == q
                && x.enter_how() == Some(ember_runtime::squeue::Enter::Worker)),
            "squeue:enter by worker {q}: {e:?}"
        );
        assert!(
            e.iter()
                .any(|x| x.probe == Probe::SqueueDrain && x.squeue == q && x.arg > 0),
            "squeue:drain of worker {q}: {e:?}"
        );
    }
}

/// `tcp:state-change` fires on every transition (new state in `len`, old in `arg`, as
/// `State as usize`), and a connect to a closed port fires `tcp:accept-refused` (the SYN's
/// receiver) and `tcp:connect-refused` (the connecting end).
#[test]
fn probes_state_changes_and_refusals() {
    let st = two_squeues();
    let ev = collect_probes(&st);
    let closed: SocketAddrV4 = "127.0.0.1:1".parse().unwrap();
    let e = TcpStream::connect_timeout(&st, closed, T).expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
    let e = ev.lock().unwrap().clone();
    let refused = |p: Probe| {
        e.iter()
            .filter(|x| x.probe == p)
            .map(|x| (x.local, x.remote))
            .collect::<Vec<_>>()
    };
    let a = refused(Probe::AcceptRefused);
    assert!(a.len() == 1 && a[0].0 == closed, "{e:?}");
    let c = refused(Probe::ConnectRefused);
    assert_eq!(c, vec![(a[0].1, closed)], "{e:?}");
    let changes = |ev: &[ProbeEvent], local: SocketAddrV4| {
        ev.iter()
            .filter(|x| x.probe == Probe::StateChange && x.local == local)
            .map(|x| (x.arg as usize, x.len))
            .collect::<Vec<_>>()
    };
    let (s, ss, est) = (
        State::Closed as usize,
        State::SynSent as usize,
        State::Established as usize,
    );
    assert_eq!(changes(&e, a[0].1), vec![(s, ss), (ss, s)], "{e:?}");

    let mark = ev.lock().unwrap().len();
    let l = listener(&st);
    let (c, srv) = connect_to(&st, &l);
    let (ca, sa) = addrs(&c);
    c.shutdown(Shutdown::Write).unwrap();
    let mut b = [0u8; 1];
    assert_eq!((&srv).read(&mut b).unwrap(), 0, "EOF");
    let e = conn_events(&ev, mark, ca, sa);
    let sr = State::SynReceived as usize;
    let cl = changes(&e, ca);
    let sv = changes(&e, sa);
    assert_eq!(cl[..2], [(s, ss), (ss, est)], "{e:?}");
    assert_eq!(sv[..2], [(s, sr), (sr, est)], "{e:?}");
    assert!(cl.contains(&(est, State::FinWait1 as usize)), "{e:?}");
    assert!(sv.contains(&(est, State::CloseWait as usize)), "{e:?}");
    assert!(
        e.iter()
            .all(|x| x.probe != Probe::StateChange || x.arg != x.len as u64),
        "a state-change changes the state: {e:?}"
    );
    drop((c, srv, l));
    st.shutdown();
}

#[test]
fn probes_unfused_connection_fires_ip() {
    let st = stack_with(&[("do_tcp_fusion", "0")]);
    let ev = collect_probes(&st);
    let l = listener(&st);
    let (c, s) = connect_to(&st, &l);
    let (ca, sa) = addrs(&c);
    assert!(!c.is_fused().unwrap());
    let mark = ev.lock().unwrap().len();
    (&c).write_all(&[7u8; 1234]).unwrap();
    assert_eq!(read_n(&s, 1234), vec![7u8; 1234]);
    let e = conn_events(&ev, mark, ca, sa);
    assert!(
        e.iter()
            .any(|x| x.probe == Probe::IpSend && x.local == ca && x.len >= 1234),
        "ip:send for the data: {e:?}"
    );
    assert!(
        e.iter()
            .any(|x| x.probe == Probe::IpReceive && x.local == sa && x.len >= 1234),
        "ip:receive for the data: {e:?}"
    );
    assert_eq!(sum_len(&e, Probe::TcpSend, ca), 1234);
    assert_eq!(sum_len(&e, Probe::TcpReceive, sa), 1234);
    assert!(!e
        .iter()
        .any(|x| matches!(x.probe, Probe::Fuse | Probe::Unfuse)));
    drop((c, s, l));
    st.shutdown();
}

// -------------------------------------------------------------------------------------
// 6. Several connections to one listener.
// -------------------------------------------------------------------------------------

#[test]
fn two_clients_each_fuse_with_their_accepted_end() {
    let st = two_squeues();
    let l = listener(&st);
    let (c1, s1) = connect_to(&st, &l);
    let (c2, s2) = connect_to(&st, &l);
    for x in [&c1, &s1, &c2, &s2] {
        assert!(x.is_fused().unwrap(), "{x:?} fused");
    }
    assert_eq!(c1.squeue(), s1.squeue());
    assert_eq!(c2.squeue(), s2.squeue());
    assert_eq!(kstat(&st, "fusion:tcp_fusion_fused_total"), 2);
    assert_eq!(kstat(&st, "fusion:tcp_fusion_fused"), 2);
    assert_eq!(s1.peer_addr().unwrap(), c1.local_addr().unwrap());
    assert_eq!(s2.peer_addr().unwrap(), c2.local_addr().unwrap());

    (&c1).write_all(b"one").unwrap();
    (&c2).write_all(b"two-two").unwrap();
    assert_eq!(read_n(&s2, 7), b"two-two");
    assert_eq!(read_n(&s1, 3), b"one");
    assert_eq!(s1.recv_available(), 0);
    assert_eq!(s2.recv_available(), 0);
    (&s1).write_all(b"back1").unwrap();
    (&s2).write_all(b"back2").unwrap();
    assert_eq!(read_n(&c1, 5), b"back1");
    assert_eq!(read_n(&c2, 5), b"back2");

    // Unfusing one pair leaves the other fused.
    c1.shutdown(Shutdown::Write).unwrap();
    assert!(!c1.is_fused().unwrap() && !s1.is_fused().unwrap());
    assert!(c2.is_fused().unwrap() && s2.is_fused().unwrap());
    assert_eq!(kstat(&st, "fusion:tcp_fusion_fused"), 1);
    let b0 = kstat(&st, "fusion:tcp_fusion_bytes");
    (&c2).write_all(b"still").unwrap();
    assert_eq!(read_n(&s2, 5), b"still");
    assert_eq!(kstat(&st, "fusion:tcp_fusion_bytes"), b0 + 5);
    assert_eof(&s1);
    drop((c1, s1, c2, s2, l));
    st.shutdown();
}
