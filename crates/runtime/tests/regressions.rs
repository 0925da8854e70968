//! Regression tests for bugs a review found (each names the behaviour it pins down).

use ember_runtime::dev::{mem_link, ImpairConfig};
use ember_runtime::socket::ready;
use ember_runtime::{IfaceConfig, Poller, Stack, TcpListener, TcpStream, UdpSocket};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

fn lo(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)
}

fn pair(st: &Stack, port: u16) -> (TcpStream, TcpStream) {
    let l = TcpListener::bind(st, lo(port)).unwrap();
    l.set_accept_timeout(Some(T)).unwrap();
    let c = TcpStream::connect(st, lo(port)).unwrap();
    let (s, _) = l.accept().unwrap();
    for x in [&c, &s] {
        x.set_read_timeout(Some(T)).unwrap();
        x.set_write_timeout(Some(T)).unwrap();
    }
    (c, s)
}

fn stack(fusion: bool) -> Stack {
    Stack::builder()
        .squeues(1)
        .param("do_tcp_fusion", if fusion { "1" } else { "0" })
        .unwrap()
        .param("tcp_recv_hiwat", "65536")
        .unwrap()
        .build()
        .unwrap()
}

/// Linux: shutdown(SHUT_WR) from another thread wakes a writer blocked on a full peer
/// and its write fails with EPIPE (poll reports POLLOUT once sending is shut).
#[test]
fn shutdown_write_wakes_a_blocked_writer() {
    for fusion in [true, false] {
        let st = stack(fusion);
        let (c, _s) = pair(&st, 7100);
        let c = Arc::new(c);
        let c2 = c.clone();
        let w = std::thread::spawn(move || {
            let buf = vec![7u8; 64 * 1024];
            loop {
                if let Err(e) = (&*c2).write(&buf) {
                    return (e.kind(), Instant::now());
                }
            }
        });
        std::thread::sleep(Duration::from_millis(100));
        let t0 = Instant::now();
        c.shutdown(Shutdown::Write).unwrap();
        let (kind, at) = w.join().unwrap();
        assert_eq!(kind, ErrorKind::BrokenPipe, "fusion={fusion}");
        assert!(
            at.duration_since(t0) < Duration::from_secs(5),
            "woken, not timed out"
        );
        st.shutdown();
    }
}

/// Linux: ECONNRESET is reported once; later reads see end of file, writes EPIPE.
#[test]
fn reset_is_reported_once() {
    for fusion in [true, false] {
        let st = stack(fusion);
        let (c, s) = pair(&st, 7101);
        s.set_linger(Some(Duration::ZERO)).unwrap();
        drop(s);
        let mut b = [0u8; 8];
        assert_eq!(
            (&c).read(&mut b).unwrap_err().kind(),
            ErrorKind::ConnectionReset
        );
        assert_eq!((&c).read(&mut b).unwrap(), 0);
        assert_eq!((&c).read(&mut b).unwrap(), 0);
        assert_eq!((&c).write(b"x").unwrap_err().kind(), ErrorKind::BrokenPipe);
        st.shutdown();
    }
}

/// `tcp_rst_sent_rate` limits RSTs to the network, not to our own addresses: every
/// local connect to a closed port is refused at once (Linux does not limit RSTs).
#[test]
fn loopback_refusals_are_not_rate_limited() {
    let st = stack(true);
    for _ in 0..100 {
        let e = TcpStream::connect_timeout(&st, lo(7102), Duration::from_secs(5)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused);
    }
    st.shutdown();
}

/// Stack::shutdown wakes threads blocked in accept, UDP recv_from and Poller::wait
/// (their sockets report HUP; the next call fails).
#[test]
fn shutdown_wakes_accept_udp_and_poller() {
    let st = stack(true);
    let l = Arc::new(TcpListener::bind(&st, lo(7103)).unwrap());
    let u = Arc::new(UdpSocket::bind(&st, lo(7104)).unwrap());
    let poller = Arc::new(Poller::new());
    poller
        .add_listener(&l, 1, ready::ACCEPT | ready::HUP)
        .unwrap();
    let (l2, u2, p2) = (l.clone(), u.clone(), poller.clone());
    let a = std::thread::spawn(move || l2.accept().map(|_| ()).unwrap_err().kind());
    let r = std::thread::spawn(move || {
        let mut b = [0u8; 16];
        u2.recv_from(&mut b).map(|_| ()).unwrap_err().kind()
    });
    let p = std::thread::spawn(move || {
        let mut ev = Vec::new();
        p2.wait(&mut ev, None).unwrap()
    });
    std::thread::sleep(Duration::from_millis(100));
    st.shutdown();
    assert_eq!(a.join().unwrap(), ErrorKind::NotConnected);
    assert_eq!(r.join().unwrap(), ErrorKind::NotConnected);
    assert_eq!(p.join().unwrap(), 1);
}

/// Timeouts too long to represent block (or succeed) instead of panicking.
#[test]
fn huge_timeouts_do_not_panic() {
    let st = stack(true);
    let l = TcpListener::bind(&st, lo(7105)).unwrap();
    l.set_accept_timeout(Some(Duration::MAX)).unwrap();
    let c = TcpStream::connect_timeout(&st, lo(7105), Duration::MAX).unwrap();
    let (s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::MAX)).unwrap();
    (&c).write_all(b"abc").unwrap();
    let mut b = [0u8; 3];
    (&s).read_exact(&mut b).unwrap();
    let poller = Poller::new();
    poller.add_stream(&s, 1, ready::WRITE).unwrap();
    let mut ev = Vec::new();
    assert_eq!(poller.wait(&mut ev, Some(Duration::MAX)).unwrap(), 1);
    st.shutdown();
}

/// A connection reset while its socket is still held (CLOSED, not released) gives up its
/// 4-tuple: a new connection reusing the port reaches the listener (Linux unhashes it).
#[test]
fn a_dead_held_connection_does_not_capture_a_new_syn() {
    let st = Stack::builder()
        .squeues(1)
        .param("tcp_smallest_anon_port", "40000")
        .unwrap()
        .param("tcp_largest_anon_port", "40000")
        .unwrap()
        .build()
        .unwrap();
    let l = TcpListener::bind(&st, lo(7106)).unwrap();
    l.set_accept_timeout(Some(T)).unwrap();
    let c1 = TcpStream::connect(&st, lo(7106)).unwrap();
    let (s1, _) = l.accept().unwrap();
    c1.set_linger(Some(Duration::ZERO)).unwrap();
    drop(c1);
    let deadline = Instant::now() + T;
    while s1.state().unwrap() != ember_core::tcp::State::Closed {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    let c2 = TcpStream::connect_timeout(&st, lo(7106), Duration::from_secs(5)).unwrap();
    assert_eq!(c2.local_addr().unwrap().port(), 40000);
    let (s2, _) = l.accept().unwrap();
    (&c2).write_all(b"hi").unwrap();
    let mut b = [0u8; 2];
    s2.set_read_timeout(Some(T)).unwrap();
    (&s2).read_exact(&mut b).unwrap();
    drop(s1);
    st.shutdown();
}

/// Dropping every handle of a stack without `shutdown` frees it and its devices (no
/// squeue ↔ device reference cycle).
#[test]
fn dropping_a_stack_frees_its_devices() {
    let (a, b) = mem_link(ImpairConfig::default(), ImpairConfig::default(), 1);
    let st = Stack::builder()
        .squeues(1)
        .interface(
            IfaceConfig {
                addr: Ipv4Addr::new(198, 18, 0, 1),
                prefix_len: 24,
                mac: None,
                mtu: None,
            },
            a.clone(),
        )
        .build()
        .unwrap();
    drop(st);
    let deadline = Instant::now() + T;
    while Arc::strong_count(&a) > 1 {
        assert!(Instant::now() < deadline, "device still referenced");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(b);
}

/// A fused writer stopped by its reader's full buffer goes on when the reader enlarges
/// SO_RCVBUF (the writer's window follows the reader's space), without a read.
#[test]
fn fused_writer_resumes_when_the_reader_grows_its_buffer() {
    let st = Stack::builder()
        .squeues(1)
        .param("tcp_fusion_rcv_unread_min", "0")
        .unwrap()
        .param("tcp_recv_hiwat", "20000")
        .unwrap()
        .build()
        .unwrap();
    let (c, s) = pair(&st, 7107);
    assert!(c.is_fused().unwrap());
    c.set_nonblocking(true).unwrap();
    let chunk = [5u8; 1000];
    let mut sent = 0;
    loop {
        match (&c).write(&chunk) {
            Ok(n) => sent += n,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::WouldBlock);
                break;
            }
        }
        assert!(sent < 1_000_000, "never stopped");
    }
    assert_eq!(c.readiness() & ready::WRITE, 0);
    s.set_recv_buffer_size(200_000).unwrap();
    assert_ne!(c.readiness() & ready::WRITE, 0, "writable again");
    let more = (&c).write(&chunk).unwrap();
    assert!(more > 0);
    assert!(c.is_fused().unwrap() && s.is_fused().unwrap());
    st.shutdown();
}

/// TCP_KEEPIDLE, TCP_KEEPINTVL and TCP_KEEPCNT, each on its own, with Linux's ranges
/// (calibrated on the kernel's own socket on 127.0.0.1: the same values are refused with
/// EINVAL), and, until set, the stack's tunables (`tcp_keepalive_interval`,
/// `tcp_keepalive_intvl`, `tcp_keepalive_probes`).
#[test]
fn keepalive_options_one_by_one_with_linux_ranges() {
    use std::os::fd::AsRawFd;
    let kl = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let k = std::net::TcpStream::connect(kl.local_addr().unwrap()).unwrap();
    let kset = |opt: i32, v: i32| -> Result<(), ErrorKind> {
        // SAFETY: `v` is an int alive across the call; the fd is the open socket `k`.
        let r = unsafe {
            libc::setsockopt(
                k.as_raw_fd(),
                libc::IPPROTO_TCP,
                opt,
                std::ptr::addr_of!(v).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error().kind())
        }
    };
    for fusion in [true, false] {
        let st = Stack::builder()
            .squeues(1)
            .param("do_tcp_fusion", if fusion { "1" } else { "0" })
            .unwrap()
            .param("tcp_keepalive_interval", "600000")
            .unwrap()
            .param("tcp_keepalive_intvl", "30000")
            .unwrap()
            .param("tcp_keepalive_probes", "4")
            .unwrap()
            .build()
            .unwrap();
        let (c, s) = pair(&st, 7108);
        for x in [&c, &s] {
            assert_eq!(x.keepalive_idle().unwrap(), Duration::from_secs(600));
            assert_eq!(x.keepalive_interval().unwrap(), Duration::from_secs(30));
            assert_eq!(x.keepalive_count().unwrap(), 4);
            assert!(!x.keepalive().unwrap());
        }
        for v in [0, 1, 2, 127, 128, 7200, 32_767, 32_768, 100_000] {
            let secs = Duration::from_secs(v as u64);
            let ours = |r: std::io::Result<()>| r.map_err(|e| e.kind());
            assert_eq!(
                ours(c.set_keepalive_idle(secs)),
                kset(libc::TCP_KEEPIDLE, v),
                "TCP_KEEPIDLE {v} fusion={fusion}"
            );
            assert_eq!(
                ours(c.set_keepalive_interval(secs)),
                kset(libc::TCP_KEEPINTVL, v),
                "TCP_KEEPINTVL {v} fusion={fusion}"
            );
            assert_eq!(
                ours(c.set_keepalive_count(v as u32)),
                kset(libc::TCP_KEEPCNT, v),
                "TCP_KEEPCNT {v} fusion={fusion}"
            );
        }
        // The last accepted values stay; each option is independent of the others.
        assert_eq!(c.keepalive_idle().unwrap(), Duration::from_secs(32_767));
        assert_eq!(c.keepalive_interval().unwrap(), Duration::from_secs(32_767));
        assert_eq!(c.keepalive_count().unwrap(), 127);
        s.set_keepalive_count(3).unwrap();
        assert_eq!(s.keepalive_count().unwrap(), 3);
        assert_eq!(s.keepalive_idle().unwrap(), Duration::from_secs(600));
        s.set_keepalive(true).unwrap();
        s.set_keepalive_idle(Duration::from_millis(1500)).unwrap();
        assert_eq!(
            s.keepalive_idle().unwrap(),
            Duration::from_secs(1),
            "whole seconds"
        );
        assert!(s.keepalive().unwrap());
        st.shutdown();
    }
}
