//! Loom models of TCP Fusion's concurrency: a writer thread and a reader thread on the
//! two ends of a fused pair, racing writes, reads, flow control (the unread-writes
//! limit), shutdown and close, through a real squeue and the real readiness/wake-up
//! protocol ([`Waitable`]), with the real core `Tcb`s inside the perimeter.
//!
//! What is checked, for every interleaving loom explores (bounded preemption):
//! * no deadlock and no lost wake-up (a parked thread is always woken: loom reports a
//!   deadlock otherwise);
//! * the reader gets exactly the bytes written, in order, then end of file — also when the
//!   writer's close unfuses the pair while the reader is reading (the Solaris 10
//!   `tcp_fuse_rcv_drain` race);
//! * a close racing the reader never panics and never loses data already accepted;
//! * an abortive close (SO_LINGER 0) racing the reader leaves it with a prefix of the
//!   bytes written, then the reset, and always woken.
//!
//! The perimeter here mirrors the runtime's (`stack::perimeter`): the same core calls
//! (`fused_send`, `recv`, `fused_sync_window`, `unfuse_pair`, `close`), the same
//! readiness rules, with loopback segments shuttled inside the perimeter as `run_lo` does.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p ember-runtime --release --lib fusion_loom`

use crate::socket::shared::{ready, Waitable};
use crate::squeue::{Perimeter, Squeue};
use crate::sync::Arc;
use ember_core::params::Params;
use ember_core::tcp::tcb::ConnSpec;
use ember_core::tcp::{SeqNum, Tcb, TcpError, TcpSettings};
use ember_core::time::Instant;
use ember_core::wire::TcpRepr;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

const T: Instant = Instant::from_secs(1);

struct Pair {
    a: Tcb,
    b: Tcb,
    fused: bool,
    /// `tcp_fusion_rcv_unread_min` (the core's `FusedFlow` in A decides with it).
    limit: u32,
    a_w: Arc<Waitable>,
    b_w: Arc<Waitable>,
}

impl Perimeter for Pair {
    fn service(&mut self, _now: std::time::Instant) -> bool {
        false
    }
    fn next_deadline(&self) -> Option<std::time::Instant> {
        None
    }
}

fn take(t: &mut Tcb) -> Option<(TcpRepr, Vec<u8>)> {
    let o = t.poll_transmit(T)?;
    let mut p = vec![0u8; o.payload_len()];
    o.copy_payload(&mut p);
    Some((o.repr, p))
}

/// Loopback: segments go from one end to the other until both are quiet.
fn shuttle(a: &mut Tcb, b: &mut Tcb) {
    for _ in 0..64 {
        let mut moved = false;
        while let Some((r, p)) = take(a) {
            b.handle_segment(T, &r, &p);
            moved = true;
        }
        while let Some((r, p)) = take(b) {
            a.handle_segment(T, &r, &p);
            moved = true;
        }
        if !moved {
            return;
        }
    }
}

impl Pair {
    fn new(limit: u32) -> Pair {
        let set = TcpSettings::from_params(&Params::default());
        let la = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40_000);
        let lb = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 80);
        let spec = |l, r, iss| ConnSpec {
            local: l,
            remote: r,
            iss: SeqNum(iss),
            ts_offset: 0,
            mtu: 65_535,
        };
        let mut a = Tcb::connect(T, spec(la, lb, 100), set.clone());
        let (syn, _) = take(&mut a).expect("SYN");
        let mut b = Tcb::accept(T, spec(lb, la, 900), set, &syn);
        shuttle(&mut a, &mut b);
        Tcb::fuse_pair(T, &mut a, &mut b).expect("fusable");
        a.poll_events();
        b.poll_events();
        let mut p = Pair {
            a,
            b,
            fused: true,
            limit,
            a_w: Arc::new(Waitable::default()),
            b_w: Arc::new(Waitable::default()),
        };
        p.publish();
        p
    }

    /// Readiness as the runtime publishes it.
    fn publish(&mut self) {
        let b = &self.b;
        let mut rb = 0;
        if b.recv_available() > 0 || b.at_eof() || b.error().is_some() {
            rb |= ready::READ;
        }
        self.b_w.set(rb);
        let writable = if self.fused {
            self.a.fused_flow().writable(self.b.fused_recv_space())
        } else {
            self.a.send_space() > 0
        };
        let mut ra = 0;
        if writable || self.a.error().is_some() {
            ra |= ready::WRITE;
        }
        self.a_w.set(ra);
    }

    fn write(&mut self, data: &[u8]) -> Result<usize, TcpError> {
        let r = if self.fused {
            if self.a.fused_flow_mut().admit(self.limit).is_err() {
                Err(TcpError::WouldBlock)
            } else {
                self.a.fused_send(T, &mut self.b, data)
            }
        } else {
            let r = self.a.send(T, data);
            shuttle(&mut self.a, &mut self.b);
            r
        };
        self.publish();
        r
    }

    fn read(&mut self, buf: &mut [u8]) -> Result<usize, TcpError> {
        let r = self.b.recv(T, buf);
        if self.fused {
            if matches!(r, Ok(n) if n > 0) {
                self.a.fused_flow_mut().reader_read();
                self.b.fused_sync_window(&mut self.a);
            }
        } else {
            shuttle(&mut self.a, &mut self.b);
        }
        self.publish();
        r
    }

    /// One end closes: unfuse (a FIN or RST is a real segment), close, loopback.
    fn close(&mut self, writer_end: bool) {
        if self.fused {
            Tcb::unfuse_pair(T, &mut self.a, &mut self.b);
            self.fused = false;
        }
        if writer_end {
            self.a.close(T);
        } else {
            self.b.close(T);
        }
        shuttle(&mut self.a, &mut self.b);
        self.publish();
    }
}

impl Pair {
    /// One end closes with SO_LINGER 0: unfuse, abort (RST), loopback.
    fn abort(&mut self, writer_end: bool) {
        if self.fused {
            Tcb::unfuse_pair(T, &mut self.a, &mut self.b);
            self.fused = false;
        }
        if writer_end {
            self.a.abort(T);
        } else {
            self.b.abort(T);
        }
        shuttle(&mut self.a, &mut self.b);
        self.publish();
    }
}

/// The pair's squeue and its worker thread.
fn start(pair: Pair) -> (Arc<Squeue<Pair>>, loom::thread::JoinHandle<()>) {
    let sq = Squeue::new(0, pair, Duration::from_secs(60), Duration::ZERO);
    let s = sq.clone();
    (sq, loom::thread::spawn(move || s.run_worker()))
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(f);
}

/// Writer: two 1-byte writes (unread limit 1, so the second must wait for the reader),
/// then close. Reader: reads until EOF. The worker runs alongside.
#[test]
fn fused_write_read_close_race() {
    model(|| {
        let pair = Pair::new(1);
        let (a_w, b_w) = (pair.a_w.clone(), pair.b_w.clone());
        let (sq, worker) = start(pair);
        let writer = {
            let sq = sq.clone();
            loom::thread::spawn(move || {
                for byte in [1u8, 2] {
                    loop {
                        match sq.call(1, move |p: &mut Pair| p.write(&[byte])) {
                            Ok(1) => break,
                            Ok(_) => unreachable!("one byte"),
                            Err(TcpError::WouldBlock) => {
                                a_w.wait(ready::WRITE, None, Duration::ZERO);
                            }
                            Err(e) => panic!("write: {e:?}"),
                        }
                    }
                }
                sq.call(1, |p: &mut Pair| p.close(true));
            })
        };
        let mut got = Vec::new();
        loop {
            match sq.call(2, |p: &mut Pair| {
                let mut b = [0u8; 4];
                p.read(&mut b).map(|n| b[..n].to_vec())
            }) {
                Ok(v) if v.is_empty() => break,
                Ok(v) => got.extend(v),
                Err(TcpError::WouldBlock) => {
                    b_w.wait(ready::READ, None, Duration::ZERO);
                }
                Err(e) => panic!("read: {e:?}"),
            }
        }
        assert_eq!(got, vec![1, 2]);
        writer.join().unwrap();
        sq.shutdown();
        worker.join().unwrap();
    });
}

/// The reader closes (with unread data: RST) while the writer writes: the writer sees
/// BrokenPipe/Reset or success, never a panic or a hang; state stays consistent.
#[test]
fn fused_close_vs_write_race() {
    model(|| {
        let (sq, worker) = start(Pair::new(8));
        let writer = {
            let sq = sq.clone();
            loom::thread::spawn(move || {
                for _ in 0..2 {
                    match sq.call(1, |p: &mut Pair| p.write(&[9])) {
                        Ok(_) | Err(TcpError::WouldBlock) => {}
                        Err(_) => break,
                    }
                }
            })
        };
        // The reader closes its end: unfuse, then close (RST if data is unread).
        sq.call(2, |p: &mut Pair| p.close(false));
        writer.join().unwrap();
        let (fused, b_closed) = sq.call(0, |p: &mut Pair| (p.fused, p.b.state()));
        assert!(!fused);
        let _ = b_closed;
        sq.shutdown();
        worker.join().unwrap();
    });
}

/// The writer writes two bytes then closes with SO_LINGER 0 (RST) while the reader
/// reads: the reader is always woken, gets a prefix of what was written, in order, then
/// the reset or end of file; never a panic or a hang.
#[test]
fn fused_write_then_linger0_race() {
    model(|| {
        let pair = Pair::new(1);
        let (a_w, b_w) = (pair.a_w.clone(), pair.b_w.clone());
        let (sq, worker) = start(pair);
        let writer = {
            let sq = sq.clone();
            loom::thread::spawn(move || {
                for byte in [1u8, 2] {
                    loop {
                        match sq.call(1, move |p: &mut Pair| p.write(&[byte])) {
                            Ok(1) => break,
                            Ok(_) => unreachable!("one byte"),
                            Err(TcpError::WouldBlock) => {
                                a_w.wait(ready::WRITE, None, Duration::ZERO);
                            }
                            Err(e) => panic!("write: {e:?}"),
                        }
                    }
                }
                sq.call(1, |p: &mut Pair| p.abort(true));
            })
        };
        let mut got = Vec::new();
        loop {
            match sq.call(2, |p: &mut Pair| {
                let mut b = [0u8; 4];
                p.read(&mut b).map(|n| b[..n].to_vec())
            }) {
                Ok(v) if v.is_empty() => break,
                Ok(v) => got.extend(v),
                Err(TcpError::WouldBlock) => {
                    b_w.wait(ready::READ, None, Duration::ZERO);
                }
                Err(TcpError::Reset) => break,
                Err(e) => panic!("read: {e:?}"),
            }
        }
        assert!([1u8, 2].starts_with(&got), "{got:?}");
        writer.join().unwrap();
        let fused = sq.call(0, |p: &mut Pair| p.fused);
        assert!(!fused);
        sq.shutdown();
        worker.join().unwrap();
    });
}
