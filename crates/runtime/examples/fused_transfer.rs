//! A fused loopback transfer that runs for a while, to try the probes on (docs/PROBES.md):
//! it sets up one connection (whose handshake is the only traffic through IP), says so
//! with its PID, then moves data one way in 64 KiB writes for SECONDS and prints totals.
//!
//! Run: `cargo run --release -p ember-runtime --example fused_transfer -- [SECONDS]`, and
//! as root, while it runs:
//! `bpftrace -p PID -e 'usdt:EXE:tcp:send { @send = count(); }
//!  usdt:EXE:ip:send { @ipsend = count(); } interval:s:5 { exit(); }'` with EXE the
//! binary's real path (`readlink -f /proc/PID/exe`; see docs/PROBES.md).

use ember_runtime::{Stack, TcpListener, TcpStream};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn main() {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(30);
    let st = Stack::builder().squeues(2).build().expect("stack");
    let l = TcpListener::bind(&st, "127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("address");
    let c = TcpStream::connect(&st, addr).expect("connect");
    let (s, _) = l.accept().expect("accept");
    let fused = c.is_fused().expect("info");
    println!(
        "pid {} fused {fused}: {} -> {addr} for {secs} s",
        std::process::id(),
        c.local_addr().expect("address")
    );
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 256 << 10];
        let mut n = 0u64;
        loop {
            match (&s).read(&mut buf) {
                Ok(0) | Err(_) => return n,
                Ok(k) => n += k as u64,
            }
        }
    });
    let chunk = vec![7u8; 64 << 10];
    let (t0, mut writes) = (Instant::now(), 0u64);
    while t0.elapsed() < Duration::from_secs(secs) {
        (&c).write_all(&chunk).expect("write");
        writes += 1;
    }
    drop(c);
    let got = reader.join().expect("reader");
    println!("{writes} writes, {got} bytes received");
    st.shutdown();
}
