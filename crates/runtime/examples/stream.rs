//! Bulk transfer, one connection, one direction, over the same four paths as `rr`: a
//! fused ember pair, unfused ember loopback, two ember stacks on a real-time in-memory
//! link, and the kernel's loopback TCP. Prints goodput of each (the full benchmark suite
//! is `ember bench`).
//!
//! Run: `cargo run --release -p ember-runtime --example stream -- [MEGABYTES]`

use ember_runtime::dev::{mem_link, ImpairConfig};
use ember_runtime::{IfaceConfig, Stack, TcpListener, TcpStream};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant;

const CHUNK: usize = 64 * 1024;

fn sink<S: Read>(mut s: S) -> u64 {
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return n,
            Ok(k) => n += k as u64,
        }
    }
}

fn source<S: Write>(mut s: S, bytes: u64) -> f64 {
    let buf: Vec<u8> = (0..CHUNK).map(|i| (i * 7) as u8).collect();
    let t = Instant::now();
    let mut left = bytes;
    while left > 0 {
        let k = (left as usize).min(CHUNK);
        s.write_all(&buf[..k]).expect("write");
        left -= k as u64;
    }
    t.elapsed().as_secs_f64()
}

fn report(name: &str, bytes: u64, secs: f64, got: u64) {
    assert_eq!(got, bytes, "{name}: bytes lost");
    println!(
        "{name:<22} {:>8.2} Gbit/s   ({} MB in {:.3} s)",
        bytes as f64 * 8.0 / secs / 1e9,
        bytes / 1_000_000,
        secs
    );
}

fn ember(server: &Stack, client: &Stack, addr: SocketAddrV4, bytes: u64) -> (f64, u64, bool) {
    let l = TcpListener::bind(server, addr).expect("bind");
    let h = std::thread::spawn(move || {
        let (s, _) = l.accept().expect("accept");
        sink(&s)
    });
    let c = TcpStream::connect(client, addr).expect("connect");
    let fused = c.is_fused().expect("info");
    let t0 = Instant::now();
    source(&c, bytes);
    drop(c);
    let got = h.join().expect("sink");
    (t0.elapsed().as_secs_f64(), got, fused)
}

fn main() {
    let mb: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let bytes = mb * 1_000_000;
    let lo = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9001);
    let stack = |fusion: &str| {
        Stack::builder()
            .squeues(2)
            .param("do_tcp_fusion", fusion)
            .expect("param")
    };

    let s = stack("1").build().expect("stack");
    let (t, got, fused) = ember(&s, &s, lo, bytes);
    assert!(fused);
    report("ember-fused", bytes, t, got);
    s.shutdown();

    let s = stack("0").build().expect("stack");
    let (t, got, fused) = ember(&s, &s, lo, bytes);
    assert!(!fused);
    report("ember-loopback", bytes, t, got);
    s.shutdown();

    let (ea, eb) = mem_link(ImpairConfig::default(), ImpairConfig::default(), 1);
    let iface = |addr| IfaceConfig {
        addr,
        prefix_len: 24,
        mac: None,
        mtu: None,
    };
    let (a_addr, b_addr) = (Ipv4Addr::new(198, 18, 0, 1), Ipv4Addr::new(198, 18, 0, 2));
    let a = stack("1").interface(iface(a_addr), ea).build().expect("a");
    let b = stack("1").interface(iface(b_addr), eb).build().expect("b");
    let wire_bytes = bytes / 4;
    let (t, got, _) = ember(&b, &a, SocketAddrV4::new(b_addr, 9001), wire_bytes);
    report("ember-wire (2 stacks)", wire_bytes, t, got);
    a.shutdown();
    b.shutdown();

    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    let h = std::thread::spawn(move || sink(l.accept().expect("accept").0));
    let c = std::net::TcpStream::connect(addr).expect("connect");
    let t0 = Instant::now();
    source(&c, bytes);
    drop(c);
    let got = h.join().expect("sink");
    report(
        "kernel-tcp (loopback)",
        bytes,
        t0.elapsed().as_secs_f64(),
        got,
    );
}
