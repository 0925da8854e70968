//! 1-byte request/response round trips over four paths in one run: a fused ember pair,
//! an unfused ember loopback pair (`do_tcp_fusion=0`), two ember stacks on a real-time
//! in-memory link, and the Linux kernel's loopback TCP. Prints the median and p99 of each.
//! (The full benchmark suite is `ember bench`; this is the runtime's quick check.)
//!
//! Run: `cargo run --release -p ember-runtime --example rr -- [ROUND_TRIPS]`

use ember_runtime::dev::{mem_link, ImpairConfig};
use ember_runtime::{IfaceConfig, Stack, TcpListener, TcpStream};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

fn serve<S: Read + Write>(mut s: S, n: usize) {
    let mut b = [0u8; 1];
    for _ in 0..n {
        if s.read_exact(&mut b).is_err() {
            return;
        }
        if s.write_all(&b).is_err() {
            return;
        }
    }
}

fn rounds<S: Read + Write>(mut c: S, n: usize) -> Vec<Duration> {
    let mut v = Vec::with_capacity(n);
    let mut b = [7u8; 1];
    for _ in 0..n {
        let t = Instant::now();
        c.write_all(&b).expect("write");
        c.read_exact(&mut b).expect("read");
        v.push(t.elapsed());
    }
    v
}

fn summary(name: &str, mut v: Vec<Duration>) -> Duration {
    v.sort();
    let p = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    println!(
        "{name:<22} median {:>8.2} us   p99 {:>8.2} us   ({} round trips)",
        p(0.5).as_secs_f64() * 1e6,
        p(0.99).as_secs_f64() * 1e6,
        v.len()
    );
    p(0.5)
}

fn ember_pair(
    server: &Stack,
    client: &Stack,
    addr: SocketAddrV4,
    n: usize,
) -> (Vec<Duration>, bool) {
    let l = TcpListener::bind(server, addr).expect("bind");
    let h = std::thread::spawn(move || {
        let (s, _) = l.accept().expect("accept");
        s.set_nodelay(true).expect("nodelay");
        serve(s, n);
    });
    let c = TcpStream::connect(client, addr).expect("connect");
    c.set_nodelay(true).expect("nodelay");
    let fused = c.is_fused().expect("info");
    let v = rounds(&c, n);
    drop(c);
    h.join().expect("server");
    (v, fused)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let lo = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9000);

    let fused = Stack::loopback(1).expect("stack");
    let (v, f) = ember_pair(&fused, &fused, lo, n);
    assert!(f, "expected a fused pair");
    summary("ember-fused", v);
    fused.shutdown();

    let unfused = Stack::builder()
        .squeues(1)
        .param("do_tcp_fusion", "0")
        .expect("param")
        .build()
        .expect("stack");
    let (v, f) = ember_pair(&unfused, &unfused, lo, n);
    assert!(!f);
    summary("ember-loopback", v);
    unfused.shutdown();

    let (ea, eb) = mem_link(ImpairConfig::default(), ImpairConfig::default(), 1);
    let a_addr = Ipv4Addr::new(198, 18, 0, 1);
    let b_addr = Ipv4Addr::new(198, 18, 0, 2);
    let iface = |addr| IfaceConfig {
        addr,
        prefix_len: 24,
        mac: None,
        mtu: None,
    };
    let a = Stack::builder()
        .squeues(1)
        .interface(iface(a_addr), ea)
        .build()
        .expect("a");
    let b = Stack::builder()
        .squeues(1)
        .interface(iface(b_addr), eb)
        .build()
        .expect("b");
    let (v, f) = ember_pair(&b, &a, SocketAddrV4::new(b_addr, 9000), n);
    assert!(!f);
    summary("ember-wire (2 stacks)", v);
    a.shutdown();
    b.shutdown();

    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("kernel bind");
    let addr = l.local_addr().expect("addr");
    let h = std::thread::spawn(move || {
        let (s, _) = l.accept().expect("accept");
        s.set_nodelay(true).expect("nodelay");
        serve(s, n);
    });
    let c = std::net::TcpStream::connect(addr).expect("kernel connect");
    c.set_nodelay(true).expect("nodelay");
    let v = rounds(&c, n);
    drop(c);
    h.join().expect("server");
    summary("kernel-tcp (loopback)", v);
}
