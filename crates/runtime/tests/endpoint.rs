//! What happens to segments that reach no connection, or a listener, is decided once, in
//! the core's `tcp::endpoint`, for the core `Host` and for the runtime's squeues alike.
//! These tests check the runtime's side of the decisions the two used to take apart
//! (their `Host` twins are in `crates/core/tests/host.rs`).
//!
//! Every blocking call has a timeout so a bug fails instead of hanging.

use ember_runtime::{TcpListener, TcpStream};
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

mod common;
use common::two_stacks;

/// RFC 9293 §3.10.7.1 with `tcp_rst_sent_rate`: RSTs to the network for segments to no
/// connection are limited, and the ones not sent are counted (tcpRstDropped), as the
/// core `Host` counts them (`closed_port_rsts_are_rate_limited`).
#[test]
fn remote_rsts_are_rate_limited_and_counted() {
    let (a, b) = two_stacks(&[("tcp_rst_sent_rate", "2")]);
    let closed = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 81);
    let mut refused = 0;
    for _ in 0..6 {
        match TcpStream::connect_timeout(&a, closed, Duration::from_millis(150)) {
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => refused += 1,
            Err(e) => assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}"),
            Ok(_) => panic!("connected to a closed port"),
        }
    }
    let t = b.stats().host.tcp;
    assert!((2..=3).contains(&refused), "{refused} refused, {t:?}");
    assert_eq!(t.out_rsts, refused, "{t:?}");
    assert_eq!(t.rst_rate_limited, t.in_closed - refused, "{t:?}");
    assert!(t.rst_rate_limited >= 3, "{t:?}");
    a.shutdown();
    b.shutdown();
}

/// TCP_MAXSEG on a listener shapes every SYN,ACK it sends, a cookie SYN,ACK as much as an
/// ordinary one (Linux clamps both with `tcp_mss_clamp`), and the connections it opens
/// send no larger segments; as the core `Host`'s listener
/// (`listener_max_segment_shapes_cookie_synacks` there). Out of range is EINVAL.
#[test]
fn listener_max_segment_shapes_plain_and_cookie_synacks() {
    for cookies in ["0", "2"] {
        let (a, b) = two_stacks(&[("tcp_syncookies", cookies), ("do_tcp_fusion", "0")]);
        let addr = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 8080);
        let l = TcpListener::bind(&b, addr).unwrap();
        l.set_accept_timeout(Some(Duration::from_secs(20))).unwrap();
        assert_eq!(l.max_segment(), None);
        assert_eq!(
            l.set_max_segment(87).unwrap_err().kind(),
            ErrorKind::InvalidInput
        );
        l.set_max_segment(536).unwrap();
        assert_eq!(l.max_segment(), Some(536));
        let c = TcpStream::connect_timeout(&a, addr, Duration::from_secs(20)).unwrap();
        let (s, _) = l.accept().unwrap();
        // The client learned 536 from the SYN,ACK's MSS option (its route allows 1460),
        // less 12 octets for timestamps.
        let mss = c.tcp_info().unwrap().snd_mss;
        assert!(
            (524..=536).contains(&mss),
            "{mss}, tcp_syncookies={cookies}"
        );
        assert!(
            s.tcp_info().unwrap().snd_mss <= 536,
            "tcp_syncookies={cookies}"
        );
        if cookies == "2" {
            assert_eq!(b.stats().host.tcp.syncookies_recv, 1);
        }
        drop((c, s));
        a.shutdown();
        b.shutdown();
    }
}
