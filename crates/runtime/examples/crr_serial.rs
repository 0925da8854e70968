//! The work of one `crr` cycle without any thread hand-off: one thread connects, accepts,
//! sends a 1-byte request, reads it, answers, reads the answer, and closes both ends, on
//! a fused stack and on an unfused one. What remains of `ember bench crr`'s cycle time
//! beyond this is waiting for the other thread.
//!
//! Run: `cargo run --release -p ember-runtime --example crr_serial -- [CYCLES]`

use ember_runtime::{Stack, TcpListener, TcpStream};
use std::io::{Read, Write};
use std::time::Instant;

fn cycles(fusion: bool, n: usize) -> f64 {
    let st = Stack::builder()
        .squeues(1)
        .param("do_tcp_fusion", if fusion { "1" } else { "0" })
        .expect("param")
        .build()
        .expect("stack");
    let l = TcpListener::bind(&st, "127.0.0.1:7000").expect("bind");
    let mut b = [0u8; 1];
    let mut run = |k: usize| {
        let t = Instant::now();
        for _ in 0..k {
            let mut c = TcpStream::connect(&st, "127.0.0.1:7000").expect("connect");
            let (mut s, _) = l.accept().expect("accept");
            assert_eq!(c.is_fused().expect("info"), fusion);
            c.write_all(&[1]).expect("request");
            s.read_exact(&mut b).expect("read request");
            s.write_all(&b).expect("response");
            c.read_exact(&mut b).expect("read response");
            drop(c);
            assert_eq!(s.read(&mut b).expect("eof"), 0);
            drop(s);
        }
        t.elapsed().as_secs_f64() * 1e6 / k as f64
    };
    run(n / 10);
    let us = run(n);
    st.shutdown();
    us
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    println!("fused:   {:.2} us per cycle", cycles(true, n));
    println!("unfused: {:.2} us per cycle", cycles(false, n));
}
