//! SYN cookies (RFC 4987 §3.6) in the runtime's listeners: connections made from cookies
//! over loopback (fused and not) and over an impaired in-memory link, byte-exact, with
//! the `tcpSynCookies*` counters moving as they should.
//!
//! Every blocking call has a timeout so a bug fails instead of hanging.

use ember_runtime::dev::{mem_link, ImpairConfig};
use ember_runtime::{IfaceConfig, Stack, TcpListener, TcpStream};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// `conns` connections to `addr`, each sending `n` bytes that the server echoes back.
fn echo_many(client: &Stack, server: &Stack, addr: SocketAddrV4, conns: usize, n: usize) {
    let l = TcpListener::bind(server, addr).unwrap();
    l.set_accept_timeout(Some(T)).unwrap();
    let srv = std::thread::spawn(move || {
        let mut hs = Vec::new();
        for _ in 0..conns {
            let (s, _) = l.accept().expect("accept");
            s.set_read_timeout(Some(T)).unwrap();
            s.set_write_timeout(Some(T)).unwrap();
            hs.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    let k = (&s).read(&mut buf).expect("server read");
                    if k == 0 {
                        break;
                    }
                    (&s).write_all(&buf[..k]).expect("server write");
                }
            }));
        }
        for h in hs {
            h.join().unwrap();
        }
    });
    let mut cs = Vec::new();
    for i in 0..conns {
        let c = TcpStream::connect_timeout(client, addr, T).expect("connect");
        c.set_read_timeout(Some(T)).unwrap();
        c.set_write_timeout(Some(T)).unwrap();
        let data = pattern(n, i as u8);
        let c = std::sync::Arc::new(c);
        cs.push(std::thread::spawn(move || {
            let w = c.clone();
            let d2 = data.clone();
            let wr = std::thread::spawn(move || {
                (&*w).write_all(&d2).unwrap();
                w.shutdown(std::net::Shutdown::Write).unwrap();
            });
            let mut got = Vec::new();
            (&*c).read_to_end(&mut got).expect("client read");
            wr.join().unwrap();
            assert!(got == data, "connection {i}: echo not byte-exact");
        }));
    }
    for c in cs {
        c.join().unwrap();
    }
    srv.join().unwrap();
}

/// `tcp_syncookies=2` on loopback: every connection is made from a cookie, fused or not,
/// and carries data.
#[test]
fn every_syn_gets_a_cookie_on_loopback() {
    for fusion in ["1", "0"] {
        let st = Stack::builder()
            .squeues(2)
            .param("tcp_syncookies", "2")
            .unwrap()
            .param("do_tcp_fusion", fusion)
            .unwrap()
            .build()
            .unwrap();
        let port = if fusion == "1" { 7301 } else { 7302 };
        echo_many(
            &st,
            &st,
            SocketAddrV4::new(Ipv4Addr::LOCALHOST, port),
            16,
            100_000,
        );
        let t = st.stats().host.tcp;
        assert_eq!(t.syncookies_sent, 16, "fusion {fusion}");
        assert_eq!(t.syncookies_recv, 16, "fusion {fusion}");
        assert_eq!(t.syncookies_failed, 0, "fusion {fusion}");
        if fusion == "1" {
            assert!(
                st.stats().tcp.fusion_fused_total >= 16,
                "cookie connections fuse"
            );
        }
        st.shutdown();
    }
}

fn iface(addr: Ipv4Addr) -> IfaceConfig {
    IfaceConfig {
        addr,
        prefix_len: 24,
        mac: None,
        mtu: None,
    }
}

/// Cookies over a link whose server-to-client direction loses, reorders and duplicates
/// (and whose other direction duplicates): a lost cookie SYN,ACK is answered again when
/// the SYN comes back, and duplicated ACKs find the connection already made. All 24
/// connections complete byte-exact.
///
/// The client-to-server direction loses nothing: if a client's final ACK and its first
/// data segment were both lost, its next segment (no longer at ISN + 1) would fail the
/// cookie check and draw a RST, as on Linux: the RFC 4987 §3.6 trade-off, not a fault.
#[test]
fn cookies_over_an_impaired_link() {
    let back = ImpairConfig {
        loss: 0.05,
        reorder: 0.02,
        dup: 0.02,
        delay: Duration::from_millis(1),
        ..Default::default()
    };
    let forth = ImpairConfig {
        dup: 0.02,
        delay: Duration::from_millis(1),
        ..Default::default()
    };
    back.validate().unwrap();
    forth.validate().unwrap();
    let (ea, eb) = mem_link(forth, back, 42);
    let a = Stack::builder()
        .squeues(1)
        .interface(iface(Ipv4Addr::new(198, 18, 0, 1)), ea)
        .param("tcp_rexmit_interval_initial", "100")
        .unwrap()
        .param("tcp_rexmit_interval_min", "20")
        .unwrap()
        .build()
        .unwrap();
    let b = Stack::builder()
        .squeues(2)
        .interface(iface(Ipv4Addr::new(198, 18, 0, 2)), eb)
        .param("tcp_syncookies", "2")
        .unwrap()
        .param("tcp_rexmit_interval_min", "20")
        .unwrap()
        .build()
        .unwrap();
    echo_many(
        &a,
        &b,
        SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 8080),
        24,
        50_000,
    );
    let t = b.stats().host.tcp;
    assert!(t.syncookies_sent >= 24, "{t:?}");
    assert_eq!(t.syncookies_recv, 24, "{t:?}");
    a.shutdown();
    b.shutdown();
}
