//! ember on a TAP interface against the Linux kernel, inside a network namespace the test
//! creates (198.18.0.0/15 addresses only; the namespace is deleted at the end, also on
//! failure). Needs root; without it each test says why it skipped and passes. The ICMP echo
//! check needs the `ping` tool (iputils-ping); without it that check says it skipped.

mod common;

use common::kernel_peer::{echo_round_trip, ember_sends, kernel_pings, skip, T};
use ember_runtime::dev::netns::NetNs;
use ember_runtime::dev::{Tap, TapConfig};
use ember_runtime::{IfaceConfig, Stack};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

const KERNEL: Ipv4Addr = Ipv4Addr::new(198, 18, 5, 1);
const EMBER: Ipv4Addr = Ipv4Addr::new(198, 18, 5, 2);

/// A namespace with a TAP interface in it (kernel side 198.18.5.1/24) and an ember stack
/// on the TAP (198.18.5.2/24). The calling thread is moved into the namespace.
fn setup(tag: &str, queues: usize, offload: bool) -> (NetNs, Tap, Stack) {
    let ns = NetNs::create(&format!("ember-tap-{tag}-{}", std::process::id())).unwrap();
    ns.enter().unwrap();
    let mut cfg = TapConfig::new("etap0");
    cfg.queues = queues;
    cfg.offload = offload;
    let tap = Tap::open(&cfg).unwrap();
    ns.ip(&["addr", "add", "198.18.5.1/24", "dev", "etap0"])
        .unwrap();
    ns.ip(&["link", "set", "etap0", "up"]).unwrap();
    let stack = Stack::builder()
        .squeues(queues.max(2))
        .interface_queues(
            IfaceConfig {
                addr: EMBER,
                prefix_len: 24,
                mac: None,
                mtu: None,
            },
            tap.devices(),
        )
        .build()
        .unwrap();
    (ns, tap, stack)
}

#[test]
fn kernel_and_ember_talk_over_tap() {
    if skip() {
        return;
    }
    let (ns, tap, stack) = setup("basic", 1, false);
    // ICMP echo from the kernel side (with the ping tool, when it is installed).
    kernel_pings(&ns, "198.18.5.2");
    // Kernel -> ember, 2 MB both ways.
    echo_round_trip(&stack, EMBER, 7001, 2_000_000);
    // ember -> kernel.
    ember_sends(&stack, KERNEL, 7002, 1_000_000);
    // A closed port is refused at once (RST).
    let e = std::net::TcpStream::connect_timeout(&SocketAddrV4::new(EMBER, 7999).into(), T)
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
    let c = tap.counters();
    assert!(c.rx_frames > 100 && c.tx_frames > 100, "{c:?}");
    assert_eq!(c.rx_errors + c.tx_errors, 0, "{c:?}");
    stack.shutdown();
}

#[test]
fn multi_queue_tap_with_offload() {
    if skip() {
        return;
    }
    let (_ns, tap, stack) = setup("mq", 2, true);
    let stack = Arc::new(stack);
    let hs: Vec<_> = (0..4)
        .map(|i| {
            let st = stack.clone();
            std::thread::spawn(move || echo_round_trip(&st, EMBER, 7100 + i, 3_000_000))
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let c = tap.counters();
    eprintln!("offload counters: {c:?}");
    // The kernel used offload toward us: partial checksums completed here.
    assert!(c.rx_csum_filled > 0, "{c:?}");
    assert_eq!(c.rx_errors + c.tx_errors, 0, "{c:?}");
    // Both queues carried traffic.
    for q in tap.queues() {
        let n = q.stats.rx_frames.load(std::sync::atomic::Ordering::Relaxed);
        eprintln!("queue rx frames {n}");
    }
    stack.shutdown();
}
