//! The stack-wide bounds: `tcp_max_conns` (connections in every state) and
//! `tcp_mem_max` (bytes in the connections' receive and out-of-order queues). When a bound
//! is hit new work is refused with the kernel's error or dropped and counted, established
//! connections keep working, and nothing already acknowledged is lost.
//!
//! Every blocking call has a timeout so a bug fails instead of hanging.

use ember_runtime::{Stack, TcpListener, TcpStream};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(20);

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

mod common;
use common::two_stacks;

/// `tcp_max_conns` on one stack: connect() past it fails with ENOBUFS (as Linux when a
/// socket cannot be allocated), the connections already made keep carrying data, and a
/// slot comes back when a connection goes.
#[test]
fn connection_limit_refuses_connect_with_enobufs() {
    let st = Stack::builder()
        .squeues(2)
        .param("tcp_max_conns", "6")
        .unwrap()
        .param("do_tcp_fusion", "0")
        .unwrap()
        .build()
        .unwrap();
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 7401);
    let l = TcpListener::bind(&st, addr).unwrap();
    l.set_accept_timeout(Some(T)).unwrap();
    // Three pairs: six connections (both ends are this stack's).
    let mut pairs = Vec::new();
    for _ in 0..3 {
        let c = TcpStream::connect_timeout(&st, addr, T).unwrap();
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        pairs.push((c, s));
    }
    assert_eq!(st.stats().host.tcp.conns_now, 6);
    let e = TcpStream::connect_timeout(&st, addr, T).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOBUFS), "{e}");
    assert!(st.stats().host.tcp.conn_limit_drops >= 1);
    // The connections that exist still work.
    for (i, (c, s)) in pairs.iter().enumerate() {
        let d = pattern(10_000, i as u8);
        (&*c).write_all(&d).unwrap();
        let mut got = vec![0u8; d.len()];
        (&*s).read_exact(&mut got).unwrap();
        assert_eq!(got, d);
    }
    // An aborted pair gives its two slots back (no TIME-WAIT).
    let (c, s) = pairs.pop().unwrap();
    c.set_linger(Some(Duration::ZERO)).unwrap();
    drop(c);
    drop(s);
    let deadline = Instant::now() + T;
    while st.stats().host.tcp.conns_now > 4 {
        assert!(Instant::now() < deadline, "slots never came back");
        std::thread::sleep(Duration::from_millis(5));
    }
    let c = TcpStream::connect_timeout(&st, addr, T).unwrap();
    let _ = l.accept().unwrap();
    drop(c);
    st.shutdown();
}

/// `tcp_max_conns` at a server: SYNs past it are dropped and counted, not answered; the
/// server's established connections are untouched, and a client gets in once a slot
/// frees (its SYN retransmission).
#[test]
fn connection_limit_drops_syns_at_the_server() {
    let (a, b) = two_stacks(&[("tcp_max_conns", "3")]);
    let addr = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 8080);
    let l = TcpListener::bind(&b, addr).unwrap();
    l.set_accept_timeout(Some(T)).unwrap();
    let mut held = Vec::new();
    for _ in 0..3 {
        let c = TcpStream::connect_timeout(&a, addr, T).unwrap();
        let (s, _) = l.accept().unwrap();
        held.push((c, s));
    }
    // A fourth: its SYNs are dropped; it times out.
    let e = TcpStream::connect_timeout(&a, addr, Duration::from_millis(1500)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
    assert!(b.stats().host.tcp.conn_limit_drops >= 1);
    assert_eq!(b.stats().host.tcp.conns_now, 3);
    // The held connections carry data.
    let (c, s) = &held[0];
    (&*c).write_all(b"still here").unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let mut got = [0u8; 10];
    (&*s).read_exact(&mut got).unwrap();
    assert_eq!(&got, b"still here");
    // Free one slot (abort: no TIME-WAIT); the next client gets in.
    let (c, s) = held.pop().unwrap();
    s.set_linger(Some(Duration::ZERO)).unwrap();
    drop(s);
    drop(c);
    let deadline = Instant::now() + T;
    while b.stats().host.tcp.conns_now > 2 {
        assert!(Instant::now() < deadline, "slot never came back");
        std::thread::sleep(Duration::from_millis(5));
    }
    let c = TcpStream::connect_timeout(&a, addr, T).unwrap();
    let _ = l.accept().unwrap();
    drop(c);
    a.shutdown();
    b.shutdown();
}

/// `tcp_mem_max` at a server whose applications stop reading: what its connections hold
/// stays near the bound (data past it is dropped unacknowledged and counted), the
/// senders are held back, and once the applications read, every byte arrives.
#[test]
fn memory_limit_holds_and_loses_nothing() {
    const CONNS: usize = 6;
    const BYTES: usize = 1_000_000;
    // 1 MiB for the whole stack; each connection's receive buffer alone is 1 MiB.
    let (a, b) = two_stacks(&[("tcp_mem_max", "1024")]);
    let addr = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 8081);
    let l = TcpListener::bind(&b, addr).unwrap();
    l.set_accept_timeout(Some(T)).unwrap();
    let mut servers = Vec::new();
    let mut writers = Vec::new();
    for i in 0..CONNS {
        let c = Arc::new(TcpStream::connect_timeout(&a, addr, T).unwrap());
        c.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        servers.push(s);
        writers.push(std::thread::spawn(move || {
            (&*c).write_all(&pattern(BYTES, i as u8)).unwrap();
            c
        }));
    }
    // Nobody reads for a while: the server's queues fill to the bound and stay there.
    let mut peak = 0;
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        peak = peak.max(b.stats().host.tcp.mem_bytes);
        std::thread::sleep(Duration::from_millis(2));
    }
    let t = b.stats().host.tcp;
    // The check is made before each data segment is taken and the charge right after:
    // the bound is overshot by at most one segment (64 KiB after GRO) per squeue; the
    // slack allowed here is one per connection.
    assert!(
        peak <= 1024 * 1024 + CONNS as u64 * 65_536,
        "peak {peak} bytes held, {t:?}"
    );
    assert!(t.mem_drops > 0, "{t:?}");
    // Now read: everything arrives, byte-exact.
    let readers: Vec<_> = servers
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            std::thread::spawn(move || {
                let mut got = vec![0u8; BYTES];
                (&s).read_exact(&mut got).unwrap();
                assert!(
                    got == pattern(BYTES, i as u8),
                    "connection {i} not byte-exact"
                );
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    for w in writers {
        w.join().unwrap();
    }
    eprintln!(
        "tcp_mem_max 1 MiB, {CONNS} x {BYTES} B unread: peak held {peak} B, {} data segments dropped",
        b.stats().host.tcp.mem_drops
    );
    a.shutdown();
    b.shutdown();
}
