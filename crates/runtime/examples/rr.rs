//! 1-byte request/response round trips over four paths in one run: a fused ember pair,
//! an unfused ember loopback pair (`do_tcp_fusion=0`), two ember stacks on a real-time
//! in-memory link, and the Linux kernel's loopback TCP. Prints the median and p99 of each.
//! (The full benchmark suite is `ember bench`; this is the runtime's quick check.)
//!
//! Run: `cargo run --release -p ember-runtime --example rr -- [ROUND_TRIPS] [SPIN_US]`
//!
//! `SPIN_US` (default: the stack's `squeue_spin_us`, 20) sets `squeue_spin_us` and each
//! socket's busy-poll time: a waiting reader spins that long before parking. On a virtual machine whose idle CPUs take tens
//! of microseconds to wake, this is the difference between a context switch and a wake-up.

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

fn squeue_line(st: &Stack) {
    let k = st.kstat();
    let g = |n: &str| k.iter().find(|(x, _)| x == n).map_or(0, |(_, v)| *v);
    println!(
        "{:<22} squeue: {} inline, {} queued, {} worker wake-ups",
        "",
        g("squeue:inline"),
        g("squeue:queued"),
        g("squeue:wakeups")
    );
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
    spin: Duration,
) -> (Vec<Duration>, bool) {
    let l = TcpListener::bind(server, addr).expect("bind");
    let h = std::thread::spawn(move || {
        let (s, _) = l.accept().expect("accept");
        s.set_nodelay(true).expect("nodelay");
        s.set_busy_poll(spin).expect("busy poll");
        serve(s, n);
    });
    let c = TcpStream::connect(client, addr).expect("connect");
    c.set_nodelay(true).expect("nodelay");
    c.set_busy_poll(spin).expect("busy poll");
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
    let spin_us: u64 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(u64::from(
            ember_core::params::Params::default().squeue_spin_us,
        ));
    let spin = Duration::from_micros(spin_us);
    let spin_s = spin_us.to_string();
    let stack = |fusion: &str| {
        Stack::builder()
            .squeues(1)
            .param("do_tcp_fusion", fusion)
            .and_then(|b| b.param("squeue_spin_us", &spin_s))
            .expect("param")
    };
    let lo = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9000);

    let fused = stack("1").build().expect("stack");
    let (v, f) = ember_pair(&fused, &fused, lo, n, spin);
    assert!(f, "expected a fused pair");
    summary("ember-fused", v);
    squeue_line(&fused);
    fused.shutdown();

    let unfused = stack("0").build().expect("stack");
    let (v, f) = ember_pair(&unfused, &unfused, lo, n, spin);
    assert!(!f);
    summary("ember-loopback", v);
    squeue_line(&unfused);
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
    let a = stack("1").interface(iface(a_addr), ea).build().expect("a");
    let b = stack("1").interface(iface(b_addr), eb).build().expect("b");
    let (v, f) = ember_pair(&b, &a, SocketAddrV4::new(b_addr, 9000), n, spin);
    assert!(!f);
    summary("ember-wire (2 stacks)", v);
    squeue_line(&a);
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
