//! `fused` and `loopback`: a write on one end of a connected pair of ember sockets, then
//! reading all of it on the other end, both on the benchmark's thread.
//!
//! * `fused/write_read/{1,1024,65536}`: a pair on one stack with TCP Fusion (the
//!   default): the write copies straight into the peer's receive queue, no segment is
//!   built.
//! * `loopback/write_read/{...}`: the same over a stack with `do_tcp_fusion=0`, so every
//!   byte goes through TCP output, IP loopback and TCP input (and ACKs come back).
//!
//! Each stack has one squeue. The default receive buffer (1 MiB) and send buffer
//! (128,000 bytes) hold a whole 64 KiB write, so the write never waits for the reader;
//! the reads return whatever is queued until all of it has been read. `TCP_NODELAY` is
//! set on both ends so Nagle never holds back a small write on the unfused path.
//! Throughput is the bytes written (and read) per iteration.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ember_microbench::{MEASUREMENT_TIME, SAMPLE_SIZE, WARM_UP_TIME};
use ember_runtime::{Stack, TcpListener, TcpStream};
use std::hint::black_box;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

const SIZES: [usize; 3] = [1, 1024, 64 * 1024];
const PORT: u16 = 9100;
/// A bound on every blocking call, so a bug fails the bench instead of hanging it.
const TIMEOUT: Duration = Duration::from_secs(10);

fn config() -> Criterion {
    Criterion::default()
        .sample_size(SAMPLE_SIZE)
        .measurement_time(MEASUREMENT_TIME)
        .warm_up_time(WARM_UP_TIME)
}

/// A connected (client, server) pair on 127.0.0.1:[`PORT`] of `stack`, both ends with
/// `TCP_NODELAY` and read/write timeouts.
fn pair(stack: &Stack) -> (TcpStream, TcpStream) {
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, PORT);
    let l = TcpListener::bind(stack, addr).expect("bind");
    l.set_accept_timeout(Some(TIMEOUT)).expect("accept timeout");
    let c = TcpStream::connect(stack, addr).expect("connect");
    let (s, _) = l.accept().expect("accept");
    for x in [&c, &s] {
        x.set_nodelay(true).expect("nodelay");
        x.set_read_timeout(Some(TIMEOUT)).expect("read timeout");
        x.set_write_timeout(Some(TIMEOUT)).expect("write timeout");
    }
    (c, s)
}

/// Writes `data` on `w`, then reads exactly `data.len()` bytes from `r` into `buf`.
fn write_read(mut w: &TcpStream, mut r: &TcpStream, data: &[u8], buf: &mut [u8]) -> usize {
    w.write_all(data).expect("write");
    let n = data.len();
    let mut got = 0;
    while got < n {
        match r.read(&mut buf[got..n]).expect("read") {
            0 => panic!("unexpected end of stream after {got} of {n} bytes"),
            k => got += k,
        }
    }
    got
}

fn bench_pair(c: &mut Criterion, group: &str, fusion: bool) {
    let stack = Stack::builder()
        .squeues(1)
        .param("do_tcp_fusion", if fusion { "1" } else { "0" })
        .expect("do_tcp_fusion")
        .build()
        .expect("stack");
    let (client, server) = pair(&stack);
    assert_eq!(client.is_fused().expect("tcp info"), fusion);
    assert_eq!(server.is_fused().expect("tcp info"), fusion);

    let data: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    let mut buf = vec![0u8; 64 * 1024];
    let mut g = c.benchmark_group(group);
    for n in SIZES {
        g.throughput(Throughput::Bytes(n as u64));
        g.bench_with_input(BenchmarkId::new("write_read", n), &data[..n], |b, d| {
            b.iter(|| write_read(&client, &server, black_box(d), &mut buf))
        });
        assert_eq!(
            &buf[..n],
            &data[..n],
            "the bytes read are the bytes written"
        );
    }
    g.finish();
    // Still fused (or not) after all that traffic: nothing fell back on the way.
    assert_eq!(client.is_fused().expect("tcp info"), fusion);
    drop(client);
    drop(server);
    stack.shutdown();
}

fn fused(c: &mut Criterion) {
    bench_pair(c, "fused", true);
}

fn loopback(c: &mut Criterion) {
    bench_pair(c, "loopback", false);
}

criterion_group! {
    name = benches;
    config = config();
    targets = fused, loopback
}
criterion_main!(benches);
