//! A host receiving arbitrary frames, with a persistent connection.
//!
//! Two hosts A and B share a virtual Ethernet; A has an established connection to B's
//! listener and has sent B 8 KiB that B acknowledged but has not read. The listener also
//! holds a second connection from A, established but not yet accepted, and a half-open
//! one (a SYN from C, an address nobody answers for). The fuzz input is
//! then a list of events: raw frames, IPv4 datagrams with valid headers and arbitrary
//! content, TCP segments in the live connection's 4-tuple (sequence numbers relative to
//! the real ones, arbitrary option bytes), and the passage of time. Afterwards:
//!
//! * nothing panicked, no host livelocked;
//! * B's queues are bounded;
//! * unless the input spoke for A (ARP or IP from A's address), a new connection from A
//!   completes its handshake and carries 4 KiB byte-exact.
#![no_main]

use arbitrary::Arbitrary;
use ember_core::ip::IfaceId;
use ember_core::params::Params;
use ember_core::wire::{ethertype, MacAddr};
use ember_fuzz::*;
use libfuzzer_sys::fuzz_target;
use std::net::Ipv4Addr;
use std::time::Duration;

#[derive(Arbitrary, Debug)]
enum Event {
    /// Raw bytes as a frame to B (or to A).
    Raw { to_a: bool, frame: Vec<u8> },
    /// An Ethernet frame to B (broadcast or unicast) with this EtherType and payload.
    Eth {
        bcast: bool,
        ty: u16,
        payload: Vec<u8>,
        fix: bool,
    },
    /// A valid IPv4 header to B from a chosen source, arbitrary transport bytes, and
    /// (optionally) a correct transport checksum.
    Ip {
        src: u8,
        proto: u8,
        ident: u16,
        flags_frag: u16,
        payload: Vec<u8>,
        fix: bool,
    },
    /// A TCP segment in the live connection's 4-tuple, A -> B (or B -> A).
    Conn {
        to_a: bool,
        seq_off: i32,
        ack_off: i32,
        flags: u8,
        window: u16,
        urgent: u16,
        options: Vec<u8>,
        len: u16,
    },
    /// Let time pass.
    Wait(u16),
}

fn source(sel: u8) -> Ipv4Addr {
    match sel % 8 {
        0..=2 => C_IP,
        3 => B_IP,
        4 => Ipv4Addr::new(198, 18, 0, 255),
        5 => Ipv4Addr::new(10, 1, 2, 3),
        6 => Ipv4Addr::LOCALHOST,
        _ => Ipv4Addr::new(224, 0, 0, 1),
    }
}

fuzz_target!(|events: Vec<Event>| {
    let mut net = Net::new(Params::default());
    let (aid, bid) = net.connect();
    let a_addr = net.a.tcb(aid).expect("a").local();
    net.send_all(aid, &pattern(0, 8192));
    assert_eq!(net.a.tcp_info(aid).expect("a").unacked, 0);
    // A connection in the listener's accept queue, and one in its SYN queue.
    net.a
        .tcp_connect(net.now, SERVER, None)
        .expect("second connect");
    let syn = tcp_raw(
        (C_IP, 5555),
        (B_IP, PORT),
        0x1234_5678,
        0,
        0x02,
        8192,
        0,
        &[2, 4, 0x05, 0xb4],
        &[],
    );
    let syn = ipv4_raw(C_IP, B_IP, 6, 7, 0x4000, &syn);
    net.b.receive(
        net.now,
        IfaceId(0),
        &eth(B_MAC, C_MAC, ethertype::IPV4, &syn),
    );
    net.run_for(Duration::from_millis(20));
    assert!(
        net.b.conn_count() >= 3,
        "{} connections",
        net.b.conn_count()
    );

    let mut spoofed_a = false;
    for ev in events.iter().take(256) {
        let now = net.now;
        match ev {
            Event::Raw { to_a, frame } => {
                spoofed_a |= impersonates_a(frame);
                if *to_a {
                    net.a.receive(now, IfaceId(0), frame);
                } else {
                    net.b.receive(now, IfaceId(0), frame);
                }
            }
            Event::Eth {
                bcast,
                ty,
                payload,
                fix,
            } => {
                let dst = if *bcast { MacAddr::BROADCAST } else { B_MAC };
                let mut f = eth(dst, C_MAC, *ty, payload);
                if *fix {
                    fix_checksums(&mut f);
                }
                spoofed_a |= impersonates_a(&f);
                net.b.receive(now, IfaceId(0), &f);
            }
            Event::Ip {
                src,
                proto,
                ident,
                flags_frag,
                payload,
                fix,
            } => {
                let ip = ipv4_raw(source(*src), B_IP, *proto, *ident, *flags_frag, payload);
                let mut f = eth(B_MAC, C_MAC, ethertype::IPV4, &ip);
                if *fix {
                    fix_checksums(&mut f);
                }
                net.b.receive(now, IfaceId(0), &f);
            }
            Event::Conn {
                to_a,
                seq_off,
                ack_off,
                flags,
                window,
                urgent,
                options,
                len,
            } => {
                let (rx, tx) = if *to_a { (aid, bid) } else { (bid, aid) };
                let (rxh, txh) = if *to_a {
                    (&net.a, &net.b)
                } else {
                    (&net.b, &net.a)
                };
                let (Some(r), Some(t)) = (rxh.tcb(rx), txh.tcb(tx)) else {
                    continue;
                };
                let seq = r.rcv_nxt().raw().wrapping_add(*seq_off as u32);
                let ack = r.snd_nxt().raw().wrapping_add(*ack_off as u32);
                let (src, dst) = (t.local(), t.remote());
                let payload = vec![0x5au8; usize::from(*len % 3000)];
                let seg = tcp_raw(
                    (*src.ip(), src.port()),
                    (*dst.ip(), dst.port()),
                    seq,
                    ack,
                    *flags,
                    *window,
                    *urgent,
                    options,
                    &payload,
                );
                let ip = ipv4_raw(*src.ip(), *dst.ip(), 6, 1, 0x4000, &seg);
                if *to_a {
                    net.a
                        .receive(now, IfaceId(0), &eth(A_MAC, B_MAC, ethertype::IPV4, &ip));
                } else {
                    net.b
                        .receive(now, IfaceId(0), &eth(B_MAC, A_MAC, ethertype::IPV4, &ip));
                }
            }
            Event::Wait(ms) => net.run_for(Duration::from_millis(u64::from(*ms % 5000))),
        }
        net.pump();
        assert!(net.b.tx_queue_len() <= ember_core::host::MAX_TX_QUEUE);
        assert!(
            net.b.conn_count() < 2048,
            "B holds {} connections",
            net.b.conn_count()
        );
    }
    net.run_for(Duration::from_secs(2));
    let _ = (net.a.stats(), net.b.stats(), net.b.netstat());
    let _ = a_addr;

    if !spoofed_a {
        // B keeps working for new connections (first taking what its accept queue holds).
        while net.b.tcp_accept(net.listener).is_ok() {}
        let (aid2, bid2) = net.connect();
        let data = pattern(3, 4096);
        let got = net.transfer(aid2, bid2, &data, Duration::from_secs(120));
        assert!(
            got == data,
            "new connection after the input: {} bytes",
            got.len()
        );
    }
});
