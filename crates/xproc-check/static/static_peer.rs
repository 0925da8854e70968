//! A statically linked peer for the `exec-static` scenario (built by build.rs).
//!
//! Design: it is exec'd with a connected TCP socket as an inherited fd; being static it cannot
//! load a preload library, so every byte it sees must come from the kernel connection. It reads
//! exactly `n` bytes, echoes them back, shuts its sending side and reads to EOF. Its stdout lines
//! join the transcript of the process that exec'd it, so they hold no fd, pid or timing.
//! Usage: `ember-xproc-static-peer FD N`.

use std::io::{Read, Write};
use std::os::unix::io::FromRawFd;

fn fnv(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let fd: i32 = args[1].parse().expect("fd");
    let n: usize = args[2].parse().expect("n");
    // SAFETY: the fd was inherited on purpose and nothing else in this process owns it.
    let mut sock = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    let mut buf = vec![0u8; n];
    let mut got = 0;
    while got < n {
        match sock.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) => {
                println!("static: read error {e}");
                std::process::exit(2);
            }
        }
    }
    println!("static: read {got} of {n} bytes fnv64={:016x}", fnv(&buf[..got]));
    match sock.write_all(&buf[..got]) {
        Ok(()) => println!("static: echoed {got} bytes"),
        Err(e) => println!("static: write error {e}"),
    }
    let _ = sock.shutdown(std::net::Shutdown::Write);
    let mut rest = Vec::new();
    match sock.read_to_end(&mut rest) {
        Ok(k) => println!("static: then {k} bytes and EOF"),
        Err(e) => println!("static: read error {e}"),
    }
    let _ = std::io::stdout().flush();
}
