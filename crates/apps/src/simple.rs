//! The small TCP services of inetd: echo (RFC 862), discard (RFC 863) and character
//! generator (RFC 864), as connection handlers for [`crate::server::spawn_service`].
//!
//! Each is plain blocking code over [`Conn`] with one [`BUF`]-sized buffer per connection,
//! so memory per connection is fixed whatever the peer does. None sets timeouts of its
//! own: a connection lasts until the peer ends it, or until the service's
//! [`Stop`](crate::server::Stop) shuts it down (which fails the blocked read or write);
//! the accept loop's connection bound keeps idle ones from piling up.
//!
//! Invariants:
//! * echo returns every byte in order and honours half-close: when the peer shuts its
//!   write side, echo has already written everything back, and then shuts its own, so
//!   `socat`/`nc -N` round trips end;
//! * discard reads to end of stream and sends nothing;
//! * chargen's stream is the RFC 864 pattern: lines of 72 printable characters plus CR LF,
//!   line k starting at the (k mod 95)th of the 95 printable ASCII characters, repeating
//!   every 95 lines; it writes until a write fails (peer gone, or the stop), and ignores
//!   what the peer sends.

use crate::net::Conn;
use std::io;
use std::net::Shutdown;
use std::sync::Arc;

/// Buffer size of each service's reads and writes.
pub const BUF: usize = 64 * 1024;

/// Printable characters per chargen line (RFC 864).
pub const CHARGEN_LINE: usize = 72;

/// The printable ASCII characters (32 to 126) chargen rotates through.
const PRINTABLE: usize = 95;

/// Bytes in one period of the chargen stream: 95 lines of 72 characters and CR LF.
pub const CHARGEN_PERIOD: usize = PRINTABLE * (CHARGEN_LINE + 2);

/// Echo (RFC 862): sends back everything received; at the peer's end of stream, shuts
/// its own write side.
pub fn echo<C: Conn>(c: Arc<C>) -> io::Result<()> {
    idle_limits(&*c)?;
    let mut buf = vec![0u8; BUF];
    loop {
        match c.read(&mut buf) {
            Ok(0) => {
                // Half-close: everything read has been written back already.
                return c.shutdown(Shutdown::Write);
            }
            Ok(n) => c.write_all(&buf[..n])?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Discard (RFC 863): reads and drops everything until the peer's end of stream.
pub fn discard<C: Conn>(c: Arc<C>) -> io::Result<()> {
    idle_limits(&*c)?;
    let mut buf = vec![0u8; BUF];
    loop {
        match c.read(&mut buf) {
            Ok(0) => return c.shutdown(Shutdown::Write),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// One period of the chargen stream ([`CHARGEN_PERIOD`] bytes).
/// A connection that moves nothing for this long ends (a peer that sends to echo and
/// never reads, or never reads chargen, cannot hold a connection slot forever).
pub const IDLE: std::time::Duration = std::time::Duration::from_secs(300);

fn idle_limits<C: Conn>(c: &C) -> io::Result<()> {
    c.set_read_timeout(Some(IDLE))?;
    c.set_write_timeout(Some(IDLE))
}

pub fn chargen_period() -> Vec<u8> {
    let mut v = Vec::with_capacity(CHARGEN_PERIOD);
    for line in 0..PRINTABLE {
        for i in 0..CHARGEN_LINE {
            v.push(b' ' + ((line + i) % PRINTABLE) as u8);
        }
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// Character generator (RFC 864): writes the rotating pattern until a write fails. A peer
/// that closes (or a stop) ends it; that end is not an error.
pub fn chargen<C: Conn>(c: Arc<C>) -> io::Result<()> {
    idle_limits(&*c)?;
    let period = chargen_period();
    // Enough whole periods that a BUF-long slice can start anywhere in the first one.
    let reps = BUF.div_ceil(CHARGEN_PERIOD) + 1;
    let ring = period.repeat(reps);
    let mut off = 0usize;
    loop {
        match c.write(&ring[off..off + BUF]) {
            Ok(0) => return Ok(()),
            Ok(n) => off = (off + n) % CHARGEN_PERIOD,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::debug!(error = %e, "chargen: write ended");
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{self, BulkOptions};
    use crate::net::{EmberNet, Listen, Net, StdNet};
    use crate::server::{spawn_service, ServiceStats, Stop};
    use std::net::{SocketAddr, TcpStream};
    use std::time::{Duration, Instant};

    const T: Duration = Duration::from_secs(10);

    fn start<N: Net, F>(net: &N, h: F) -> (SocketAddr, Arc<Stop>, std::thread::JoinHandle<()>)
    where
        F: Fn(Arc<N::Conn>) -> io::Result<()> + Send + Sync + 'static,
    {
        let l = net.listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Stop::new();
        let j = spawn_service(
            "t",
            l,
            stop.clone(),
            16,
            Arc::new(ServiceStats::default()),
            h,
        )
        .unwrap();
        (addr, stop, j)
    }

    fn opts() -> BulkOptions {
        BulkOptions {
            timeout: T,
            ..BulkOptions::default()
        }
    }

    #[test]
    fn echo_round_trip_with_send() {
        let (addr, stop, j) = start(&StdNet, echo);
        let r = client::send(&StdNet, addr, 4_000_003, &opts()).unwrap();
        assert_eq!(r.sent, 4_000_003);
        assert!(r.eof);
        assert_eq!(r.received, r.sent);
        assert_eq!(r.received_sha256, r.sent_sha256);
        stop.stop();
        j.join().unwrap();
    }

    #[test]
    fn echo_through_ember() {
        let stack = Arc::new(ember_runtime::Stack::loopback(2).unwrap());
        let net = EmberNet(stack.clone());
        let (addr, stop, j) = start(&net, echo);
        let r = client::send(&net, addr, 1_000_000, &opts()).unwrap();
        assert!(r.eof);
        assert_eq!(r.received, 1_000_000);
        assert_eq!(r.received_sha256, r.sent_sha256);
        stop.stop();
        j.join().unwrap();
        stack.shutdown();
    }

    #[test]
    fn echo_half_close_with_socat() {
        if std::process::Command::new("socat")
            .arg("-V")
            .output()
            .is_err()
        {
            println!("skipped: socat is not installed");
            return;
        }
        let (addr, stop, j) = start(&StdNet, echo);
        let mut data = vec![0u8; 1 << 20];
        crate::http::PseudoRandom::new(7).fill(&mut data);
        let dir = std::env::temp_dir().join(format!("ember-echo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let input = dir.join("in");
        std::fs::write(&input, &data).unwrap();
        // socat shuts its write side at the end of stdin and ends when echo's FIN comes;
        // `timeout` bounds it if echo never closes.
        let t0 = Instant::now();
        let out = std::process::Command::new("timeout")
            .args(["20", "socat", "-t", "10", "-T", "10", "-"])
            .arg(format!("TCP:{addr}"))
            .stdin(std::fs::File::open(&input).unwrap())
            .output()
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(out.status.success(), "socat failed: {:?}", out.status);
        // socat waits up to -t 10 s for echo's FIN after its own; it must come at once.
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "echo did not half-close"
        );
        assert_eq!(out.stdout.len(), data.len());
        use sha2::{Digest, Sha256};
        assert_eq!(Sha256::digest(&out.stdout), Sha256::digest(&data));
        stop.stop();
        j.join().unwrap();
    }

    #[test]
    fn discard_sends_nothing() {
        let (addr, stop, j) = start(&StdNet, discard);
        let r = client::send(&StdNet, addr, 2_000_000, &opts()).unwrap();
        assert_eq!(r.sent, 2_000_000);
        assert_eq!(r.received, 0);
        assert!(r.eof);
        stop.stop();
        j.join().unwrap();
    }

    #[test]
    fn chargen_lines() {
        let (addr, stop, j) = start(&StdNet, chargen);
        let s = TcpStream::connect_timeout(&addr, T).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        let mut got = vec![0u8; 2 * CHARGEN_PERIOD + 1000];
        Conn::read_exact(&s, &mut got).unwrap();
        let lines: Vec<&[u8]> = got.split(|&b| b == b'\n').collect();
        // All but the cut last line are 72 printable characters and CR.
        for (k, l) in lines[..lines.len() - 1].iter().enumerate() {
            assert_eq!(l.len(), CHARGEN_LINE + 1, "line {k}");
            assert_eq!(l[CHARGEN_LINE], b'\r');
            for (i, &ch) in l[..CHARGEN_LINE].iter().enumerate() {
                assert_eq!(ch, b' ' + ((k + i) % 95) as u8, "line {k} char {i}");
            }
        }
        assert_eq!(&lines[0][..10], b" !\"#$%&'()");
        assert_eq!(lines[1][0], b'!');
        assert_eq!(lines[95], lines[0]);
        // The peer closing ends the service's connection.
        drop(s);
        let deadline = Instant::now() + T;
        while stop.live() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(stop.live(), 0, "chargen did not end when the peer closed");
        stop.stop();
        j.join().unwrap();
    }

    #[test]
    fn chargen_ends_on_stop() {
        let (addr, stop, j) = start(&StdNet, chargen);
        let r = client::recv(
            &StdNet,
            addr,
            &BulkOptions {
                timeout: T,
                max_receive: Some(300_000),
                ..BulkOptions::default()
            },
        )
        .unwrap();
        assert!(!r.eof);
        assert!(r.received >= 300_000);
        let s = TcpStream::connect_timeout(&addr, T).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        let mut b = [0u8; 100];
        Conn::read_exact(&s, &mut b).unwrap();
        stop.stop();
        // After the stop the stream ends (EOF or reset) within the timeout.
        let mut sink = vec![0u8; BUF];
        let t0 = Instant::now();
        loop {
            match Conn::read(&s, &mut sink) {
                Ok(0) | Err(_) => break,
                Ok(_) => assert!(t0.elapsed() < T, "chargen went on after the stop"),
            }
        }
        j.join().unwrap();
    }
}
