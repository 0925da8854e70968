//! `ember xproc-peer server ADDR` and `ember xproc-peer client ADDR MODE SIZE COUNT`:
//! the two processes of `ember bench xproc` (crates/bench/src/benches/xproc.rs). They
//! use std's sockets, whose calls go through the C library, so the preload library in
//! their environment (or none) decides whether their connections are fused.
//!
//! The server listens on ADDR (`127.0.0.1:0` or `unix:PATH`), prints `listening ADDR`
//! and serves each connection on a thread: the first byte chooses `e` (echo what comes,
//! until end of file) or `s` (sink: read to end of file, then answer the byte count as 8
//! bytes). It runs until killed. The client runs MODE (`rr`: COUNT round trips of SIZE
//! bytes on one connection; `stream`: COUNT bytes in SIZE writes, then the count back;
//! `crr`: COUNT connections of one SIZE-byte round trip each) and prints its figures
//! as one JSON line.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::ExitCode;
use std::time::Instant;

trait Stream: Read + Write + Send {
    fn shutdown_write(&self) -> io::Result<()>;
}

impl Stream for TcpStream {
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

impl Stream for UnixStream {
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

fn serve(mut s: Box<dyn Stream>) {
    let mut mode = [0u8; 1];
    if s.read_exact(&mut mode).is_err() {
        return;
    }
    let mut buf = vec![0u8; 256 << 10];
    let mut total: u64 = 0;
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                total += n as u64;
                if mode[0] == b'e' && s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
    if mode[0] == b's' {
        let _ = s.write_all(&total.to_le_bytes());
    }
}

fn connect(addr: &str) -> io::Result<Box<dyn Stream>> {
    Ok(match addr.strip_prefix("unix:") {
        Some(p) => Box::new(UnixStream::connect(p)?),
        None => {
            let s = TcpStream::connect(addr)?;
            s.set_nodelay(true)?;
            Box::new(s)
        }
    })
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * q).round() as usize]
}

fn client(addr: &str, mode: &str, size: usize, count: usize) -> io::Result<String> {
    let msg = vec![7u8; size.max(1)];
    let mut back = vec![0u8; size.max(1)];
    match mode {
        "rr" => {
            let mut s = connect(addr)?;
            s.write_all(b"e")?;
            let mut lat = Vec::with_capacity(count);
            let t0 = Instant::now();
            for _ in 0..count {
                let t = Instant::now();
                s.write_all(&msg)?;
                s.read_exact(&mut back)?;
                lat.push(t.elapsed().as_secs_f64() * 1e6);
            }
            let secs = t0.elapsed().as_secs_f64();
            let p50 = pct(&mut lat, 0.5);
            let p99 = pct(&mut lat, 0.99);
            Ok(format!(
                "{{\"p50_us\":{p50:.3},\"p99_us\":{p99:.3},\"ops_per_s\":{:.1}}}",
                count as f64 / secs
            ))
        }
        "stream" => {
            let mut s = connect(addr)?;
            s.write_all(b"s")?;
            let t0 = Instant::now();
            let mut sent = 0usize;
            while sent < count {
                let n = msg.len().min(count - sent);
                s.write_all(&msg[..n])?;
                sent += n;
            }
            s.shutdown_write()?;
            let mut ack = [0u8; 8];
            s.read_exact(&mut ack)?;
            let secs = t0.elapsed().as_secs_f64();
            if u64::from_le_bytes(ack) != sent as u64 {
                return Err(io::Error::other("the server counted other bytes"));
            }
            Ok(format!(
                "{{\"gbit_per_s\":{:.3}}}",
                sent as f64 * 8.0 / secs / 1e9
            ))
        }
        "crr" => {
            let t0 = Instant::now();
            for _ in 0..count {
                let mut s = connect(addr)?;
                s.write_all(b"e")?;
                s.write_all(&msg)?;
                s.read_exact(&mut back)?;
            }
            let secs = t0.elapsed().as_secs_f64();
            Ok(format!("{{\"conns_per_s\":{:.1}}}", count as f64 / secs))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "mode: rr, stream or crr",
        )),
    }
}

pub fn main(args: Vec<String>) -> ExitCode {
    let r = match args.first().map(String::as_str) {
        Some("server") if args.len() == 2 => {
            let addr = &args[1];
            let res: io::Result<()> = (|| {
                if let Some(p) = addr.strip_prefix("unix:") {
                    let _ = std::fs::remove_file(p);
                    let l = UnixListener::bind(p)?;
                    println!("listening {addr}");
                    io::stdout().flush()?;
                    for s in l.incoming().flatten() {
                        std::thread::spawn(move || serve(Box::new(s)));
                    }
                } else {
                    let l = TcpListener::bind(addr.as_str())?;
                    println!("listening {}", l.local_addr()?);
                    io::stdout().flush()?;
                    for s in l.incoming().flatten() {
                        let _ = s.set_nodelay(true);
                        std::thread::spawn(move || serve(Box::new(s)));
                    }
                }
                Ok(())
            })();
            res.map(|()| String::new())
        }
        Some("client") if args.len() == 5 => match (args[3].parse(), args[4].parse()) {
            (Ok(size), Ok(count)) => client(&args[1], &args[2], size, count),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "SIZE and COUNT are numbers",
            )),
        },
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "usage: ember xproc-peer server ADDR | client ADDR MODE SIZE COUNT",
        )),
    };
    match r {
        Ok(s) => {
            if !s.is_empty() {
                println!("{s}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ember xproc-peer: {e}");
            ExitCode::from(1)
        }
    }
}
