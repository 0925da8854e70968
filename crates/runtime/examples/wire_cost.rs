//! A fixed amount of work over ember's device path, for counting instructions under
//! callgrind (`scripts/wire-cost`): two ember stacks joined by the in-memory Ethernet link,
//! as `ember bench`'s `ember-wire` variant (198.18.0.1/24 and 198.18.0.2/24, IP MTU 1500,
//! ARP, the stacks' default offloads, one squeue per stack), not loopback and not fused.
//!
//! * `rr N`: N 1-byte request/response round trips on one connection (TCP_NODELAY).
//! * `crr N`: N cycles of connect, 1-byte request, 1-byte response, client close, server
//!   close (TIME_WAIT on the client, as `ember bench crr`).
//! * `stream MIB`: MIB mebibytes one way on one connection, in 64 KiB writes.
//!
//! By default a client thread and a server thread do the work, as in `ember bench`.
//! `--serial` does both ends' calls on one thread, in turn (stream: both sockets
//! non-blocking, writing what fits, then reading what is there): a transmitted frame is
//! then received inline by the transmitting thread (the stack's deferred device service)
//! and the reader finds its data already there, so no thread waits on another and the
//! instruction count no longer depends on how the threads interleaved (under callgrind,
//! the threaded rr and crr vary by about 2 % from run to run, with outliers of 5 %, from
//! reads that found nothing and had to wait; serial ones by under 1 %). The
//! per-segment path (device, IP, classifier, TCP, socket) is the same either way.
//!
//! Each mode first does a fixed warm-up (ARP, first connection, first allocations:
//! 100 round trips, 20 cycles, 1 MiB), then the N units, then shuts down. Nothing in the
//! workload depends on the clock (fixed counts), so the work is the same in every run;
//! running N and 2N and taking the difference cancels the set-up and the warm-up. For
//! repeatable counts the stacks run with `squeue_spin_us=0` (a waiting thread parks at
//! once instead of busy-polling for a time, a clock-dependent number of instructions) and
//! fixed secrets (ISNs, ephemeral ports). `--param NAME=VALUE` (repeatable) sets further
//! tunables on both stacks, after those; `--mtu M` changes the IP MTU of the link.
//!
//! Prints what it did: the units, frames and bytes each way on the link, and each stack's
//! squeue counters (entries inline and queued, worker drains and wake-ups), whose spread
//! between runs is where a spread of instruction counts comes from.
//!
//! Run: `cargo run --release -p ember-runtime --example wire_cost -- rr 10000 --serial`

use ember_runtime::dev::{mem_link, Device, ImpairConfig, MemLinkEnd};
use ember_runtime::{IfaceConfig, Stack, TcpListener, TcpStream};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4};
use std::sync::Arc;
use std::time::Instant;

const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const SERVER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const PORT: u16 = 5001;
const CHUNK: usize = 64 * 1024;
const MIB: u64 = 1 << 20;

const WARM_RR: u64 = 100;
const WARM_CRR: u64 = 20;
const WARM_STREAM_MIB: u64 = 1;

struct Wire {
    client: Stack,
    server: Stack,
    ends: (Arc<MemLinkEnd>, Arc<MemLinkEnd>),
    addr: SocketAddrV4,
}

fn wire(mtu: u32, params: &[(String, String)]) -> Wire {
    let link = ImpairConfig {
        mtu: mtu as usize,
        ..ImpairConfig::default()
    };
    let (ea, eb) = mem_link(link.clone(), link, 1);
    let stack = |addr: Ipv4Addr, secret: u8, dev: Arc<dyn Device>| {
        let mut b = Stack::builder()
            .squeues(1)
            .secret([secret; 16])
            .param("squeue_spin_us", "0")
            .expect("squeue_spin_us");
        for (k, v) in params {
            b = b
                .param(k, v)
                .unwrap_or_else(|e| panic!("--param {k}={v}: {e}"));
        }
        b.interface(
            IfaceConfig {
                addr,
                prefix_len: 24,
                mac: None,
                mtu: Some(mtu),
            },
            dev,
        )
        .build()
        .expect("stack")
    };
    Wire {
        client: stack(CLIENT, 1, ea.clone()),
        server: stack(SERVER, 2, eb.clone()),
        ends: (ea, eb),
        addr: SocketAddrV4::new(SERVER, PORT),
    }
}

/// `warm` then `n` round trips; the server thread echoes.
fn rr(w: &Wire, warm: u64, n: u64) {
    let l = TcpListener::bind(&w.server, w.addr).expect("bind");
    let echo = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        s.set_nodelay(true).expect("nodelay");
        let mut b = [0u8; 1];
        let mut k = 0u64;
        while s.read(&mut b).expect("read request") == 1 {
            s.write_all(&b).expect("response");
            k += 1;
        }
        k
    });
    let mut c = TcpStream::connect(&w.client, w.addr).expect("connect");
    assert!(
        !c.is_fused().expect("info"),
        "a wire connection is never fused"
    );
    c.set_nodelay(true).expect("nodelay");
    let mut b = [7u8; 1];
    for _ in 0..warm + n {
        c.write_all(&b).expect("request");
        c.read_exact(&mut b).expect("response");
    }
    drop(c);
    assert_eq!(echo.join().expect("echo"), warm + n);
}

/// `warm` then `n` cycles; the server thread accepts, echoes, waits for the client's
/// close and closes.
fn crr(w: &Wire, warm: u64, n: u64) {
    let l = TcpListener::bind(&w.server, w.addr).expect("bind");
    let total = warm + n;
    let server = std::thread::spawn(move || {
        for _ in 0..total {
            let (mut s, _) = l.accept().expect("accept");
            s.set_nodelay(true).expect("nodelay");
            let mut b = [0u8; 1];
            s.read_exact(&mut b).expect("read request");
            s.write_all(&b).expect("response");
            assert_eq!(s.read(&mut b).expect("client's close"), 0);
        }
    });
    for _ in 0..total {
        let mut c = TcpStream::connect(&w.client, w.addr).expect("connect");
        c.set_nodelay(true).expect("nodelay");
        let mut b = [1u8];
        c.write_all(&b).expect("request");
        c.read_exact(&mut b).expect("response");
    }
    server.join().expect("server");
}

/// [`rr`] on one thread: the client's write, the server's read and write, the client's
/// read, in turn.
fn rr_serial(w: &Wire, warm: u64, n: u64) {
    let l = TcpListener::bind(&w.server, w.addr).expect("bind");
    let mut c = TcpStream::connect(&w.client, w.addr).expect("connect");
    let (mut s, _) = l.accept().expect("accept");
    c.set_nodelay(true).expect("nodelay");
    s.set_nodelay(true).expect("nodelay");
    let mut b = [7u8; 1];
    for _ in 0..warm + n {
        c.write_all(&b).expect("request");
        s.read_exact(&mut b).expect("read request");
        s.write_all(&b).expect("response");
        c.read_exact(&mut b).expect("response");
    }
    drop(c);
    assert_eq!(s.read(&mut b).expect("eof"), 0);
}

/// [`crr`] on one thread.
fn crr_serial(w: &Wire, warm: u64, n: u64) {
    let l = TcpListener::bind(&w.server, w.addr).expect("bind");
    for _ in 0..warm + n {
        let mut c = TcpStream::connect(&w.client, w.addr).expect("connect");
        let (mut s, _) = l.accept().expect("accept");
        c.set_nodelay(true).expect("nodelay");
        s.set_nodelay(true).expect("nodelay");
        let mut b = [1u8];
        c.write_all(&b).expect("request");
        s.read_exact(&mut b).expect("read request");
        s.write_all(&b).expect("response");
        c.read_exact(&mut b).expect("response");
        drop(c);
        assert_eq!(s.read(&mut b).expect("client's close"), 0);
    }
}

/// [`stream`] on one thread: both sockets non-blocking, the writer writing what fits,
/// then the reader reading what is there, in turn; a blocking read when neither moved
/// (the data is then with a squeue worker).
fn stream_serial(w: &Wire, warm: u64, n: u64) {
    let bytes = (warm + n) * MIB;
    let l = TcpListener::bind(&w.server, w.addr).expect("bind");
    let mut c = TcpStream::connect(&w.client, w.addr).expect("connect");
    let (mut s, _) = l.accept().expect("accept");
    c.set_nonblocking(true).expect("nonblocking");
    s.set_nonblocking(true).expect("nonblocking");
    let buf: Vec<u8> = (0..CHUNK).map(|i| (i * 7 + 3) as u8).collect();
    let mut rb = vec![0u8; 256 * 1024];
    let (mut sent, mut got) = (0u64, 0u64);
    let mut closed = false;
    loop {
        let mut moved = false;
        while sent < bytes {
            let k = ((bytes - sent) as usize).min(CHUNK);
            match c.write(&buf[..k]) {
                Ok(m) => {
                    sent += m as u64;
                    moved = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("write: {e}"),
            }
        }
        if sent == bytes && !closed {
            c.shutdown(Shutdown::Write).expect("shutdown");
            closed = true;
        }
        loop {
            match s.read(&mut rb) {
                Ok(0) => {
                    assert_eq!(got, bytes, "bytes lost");
                    return;
                }
                Ok(k) => {
                    got += k as u64;
                    moved = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("read: {e}"),
            }
        }
        if !moved {
            s.set_nonblocking(false).expect("blocking");
            match s.read(&mut rb).expect("read") {
                0 => {
                    assert_eq!(got, bytes, "bytes lost");
                    return;
                }
                k => got += k as u64,
            }
            s.set_nonblocking(true).expect("nonblocking");
        }
    }
}

/// `warm` then `n` MiB on one connection; a reader thread drains.
fn stream(w: &Wire, warm: u64, n: u64) {
    let bytes = (warm + n) * MIB;
    let l = TcpListener::bind(&w.server, w.addr).expect("bind");
    let reader = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        let mut b = vec![0u8; 256 * 1024];
        let mut got = 0u64;
        loop {
            match s.read(&mut b).expect("read") {
                0 => return got,
                k => got += k as u64,
            }
        }
    });
    let mut c = TcpStream::connect(&w.client, w.addr).expect("connect");
    let buf: Vec<u8> = (0..CHUNK).map(|i| (i * 7 + 3) as u8).collect();
    let mut left = bytes;
    while left > 0 {
        let k = (left as usize).min(CHUNK);
        c.write_all(&buf[..k]).expect("write");
        left -= k as u64;
    }
    c.shutdown(Shutdown::Write).expect("shutdown");
    assert_eq!(reader.join().expect("reader"), bytes, "bytes lost");
}

fn squeue_line(name: &str, s: &Stack) -> String {
    let k = s.kstat();
    let get = |n: &str| k.iter().find(|(x, _)| x == n).map_or(0, |(_, v)| *v);
    format!(
        "{name}: squeue inline {} queued {} worker_drains {} wakeups {} poll_switches {}",
        get("squeue:inline"),
        get("squeue:queued"),
        get("squeue:worker_drains"),
        get("squeue:wakeups"),
        get("squeue:poll_switches"),
    )
}

fn usage() -> ! {
    eprintln!(
        "usage: wire_cost (rr N | crr N | stream MIB) [--serial] [--mtu M] [--param NAME=VALUE]..."
    );
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        usage();
    }
    let mode = args[0].as_str();
    let n: u64 = args[1].parse().unwrap_or_else(|_| usage());
    let mut mtu = 1500u32;
    let mut serial = false;
    let mut params = Vec::new();
    let mut rest = args[2..].iter();
    while let Some(a) = rest.next() {
        if a == "--serial" {
            serial = true;
            continue;
        }
        let v = rest.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--mtu" => mtu = v.parse().unwrap_or_else(|_| usage()),
            "--param" => {
                let (k, x) = v.split_once('=').unwrap_or_else(|| usage());
                params.push((k.to_string(), x.to_string()));
            }
            _ => usage(),
        }
    }
    let w = wire(mtu, &params);
    let t0 = Instant::now();
    let (warm, unit) = match mode {
        "rr" => {
            if serial {
                rr_serial(&w, WARM_RR, n)
            } else {
                rr(&w, WARM_RR, n)
            }
            (WARM_RR, "round trips")
        }
        "crr" => {
            if serial {
                crr_serial(&w, WARM_CRR, n)
            } else {
                crr(&w, WARM_CRR, n)
            }
            (WARM_CRR, "connect/request/response/close cycles")
        }
        "stream" => {
            if serial {
                stream_serial(&w, WARM_STREAM_MIB, n)
            } else {
                stream(&w, WARM_STREAM_MIB, n)
            }
            (WARM_STREAM_MIB, "MiB one way")
        }
        _ => usage(),
    };
    let secs = t0.elapsed().as_secs_f64();
    let (a, b) = (w.ends.0.tx_stats(), w.ends.1.tx_stats());
    println!(
        "wire_cost {mode}: {n} {unit} (after {warm} untimed) over ember-wire, MTU {mtu}, \
         1 squeue per stack, {}, in {secs:.3} s",
        if serial {
            "one application thread"
        } else {
            "client and server threads"
        }
    );
    println!(
        "link: client->server {} frames {} bytes; server->client {} frames {} bytes",
        a.frames_in, a.bytes_in, b.frames_in, b.bytes_in
    );
    println!("{}", squeue_line("client", &w.client));
    println!("{}", squeue_line("server", &w.server));
    w.client.shutdown();
    w.server.shutdown();
}
