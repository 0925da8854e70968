//! Loom models of the ring and the wake-up protocol: a writer thread and a reader
//! thread on the two ends of a real `ring` (capacity 8 under loom, so that a few bytes
//! wrap around), blocking through the real `wake` functions.
//!
//! The data area is checked too: under loom its bytes are loom cells (`sync::Slot`),
//! so every copy-in and copy-out is a tracked access, and loom reports a byte read
//! before the tail that published it happened, or overwritten before the head that
//! released it. The header's words are loom atomics; the fences are loom fences.
//!
//! Bounds: the two ring models, with a dozen atomic operations per side, run with
//! preemption bound 2 (`loom_publish_consume_wraps_and_ends`, three writes and a
//! shutdown) and 3 (`loom_seal_is_drained`); the wake-up models are explored
//! exhaustively (no bound). About 20 s in all on two cores.
//!
//! Sleeping is a loom `Mutex<bool>` + `Condvar` per sleeper, standing for the
//! process's wake fd: a wake-up sent before the sleeper sleeps is kept, as an eventfd
//! keeps it. A lost wake-up leaves a sleeper blocked for ever, which loom reports as a
//! deadlock; `wake_without_fences_is_lost` shows that it would find one.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test --release -p ember-xproc --lib loom`

#![allow(unsafe_code)]

use crate::mem::AlignedBuf;
use crate::ring::{region_size, Consumer, Producer, ReadState, RingRef};
use crate::sync::{
    AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};
use crate::wake::{self, Spin, Wake};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use std::num::NonZeroU64;

const CAP: usize = 8;
const WRITER: u64 = 1;
const READER: u64 = 2;

fn tok(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

/// One sleeper's wake fd.
#[derive(Default)]
struct Flag {
    woken: Mutex<bool>,
    cv: Condvar,
}

impl Flag {
    /// Blocks until woken, consuming the wake-up.
    fn sleep(&self) -> bool {
        let mut g = self.woken.lock().unwrap();
        while !*g {
            g = self.cv.wait(g).unwrap();
        }
        *g = false;
        true
    }

    fn wake(&self) {
        *self.woken.lock().unwrap() = true;
        self.cv.notify_one();
    }
}

/// Token 1 wakes the writer, token 2 the reader.
#[derive(Default)]
struct Transport {
    writer: Flag,
    reader: Flag,
}

impl Wake for Transport {
    fn wake(&self, token: NonZeroU64) {
        match token.get() {
            WRITER => self.writer.wake(),
            READER => self.reader.wake(),
            _ => {}
        }
    }
}

/// A switched ring of capacity 8 and its transport.
fn setup() -> (AlignedBuf, Producer, Consumer, Arc<Transport>) {
    let buf = AlignedBuf::zeroed(region_size(CAP));
    // SAFETY: buf.len() bytes, aligned, kept alive by the model until both threads are
    // joined; one producer and one consumer.
    let ring = unsafe { RingRef::init(buf.ptr(), buf.len(), CAP) }.unwrap();
    let mut p = ring.producer();
    assert!(p.set_switch(0));
    (buf, p, ring.consumer(), Arc::new(Transport::default()))
}

/// The writer's whole loop: write all of `data`, sleeping on flow control.
fn write_all(p: &mut Producer, data: &[u8], t: &Transport) {
    let mut off = 0;
    while off < data.len() {
        let n = p.write(&data[off..]).unwrap();
        if n > 0 {
            off += n;
            p.wake_reader(t);
            continue;
        }
        let room = || (p.room().unwrap() > 0).then_some(());
        wake::wait(p.waiter(), tok(WRITER), Spin::Rounds(0), room, || {
            t.writer.sleep()
        })
        .unwrap();
    }
}

/// The reader's whole loop: read with `len`-byte buffers until the ring is no longer
/// readable (end of file or drained seal), sleeping when empty. Returns the bytes and
/// the final state.
fn read_all(c: &mut Consumer, len: usize, t: &Transport) -> (Vec<u8>, ReadState) {
    let mut got = Vec::new();
    let mut buf = vec![0u8; len];
    loop {
        let n = c.read(&mut buf).unwrap();
        if n > 0 {
            got.extend_from_slice(&buf[..n]);
            c.wake_writer(t);
            continue;
        }
        let ready = || match c.status().unwrap() {
            ReadState::Empty => None,
            s => Some(s),
        };
        match wake::wait(c.waiter(), tok(READER), Spin::Rounds(0), ready, || {
            t.reader.sleep()
        }) {
            Some(ReadState::Data(_)) => {}
            Some(end) => return (got, end),
            None => unreachable!("the flag sleep never gives up"),
        }
    }
}

fn model(bound: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = bound;
    b.check(f);
}

/// (a) 12 bytes in writes of 5, 4 and 3 through 8 bytes of ring, read with 5-byte
/// buffers, then shutdown: the reader gets them all, in order, then end of file; the
/// copies wrap around, and both sides block and wake.
#[test]
fn loom_publish_consume_wraps_and_ends() {
    model(Some(2), || {
        let (buf, mut p, mut c, t) = setup();
        let tw = t.clone();
        let writer = thread::spawn(move || {
            let data: Vec<u8> = (1..=12).collect();
            for chunk in [&data[..5], &data[5..9], &data[9..]] {
                write_all(&mut p, chunk, &tw);
            }
            assert_eq!(p.shutdown(), Ok(12));
            p.wake_reader(&*tw);
        });
        let (got, end) = read_all(&mut c, 5, &t);
        assert_eq!(got, (1..=12).collect::<Vec<u8>>());
        assert_eq!(end, ReadState::Eof);
        writer.join().unwrap();
        drop(buf);
    });
}

/// (a') The same with a seal: the reader drains to m and learns m.
#[test]
fn loom_seal_is_drained() {
    model(Some(3), || {
        let (buf, mut p, mut c, t) = setup();
        let tw = t.clone();
        let writer = thread::spawn(move || {
            write_all(&mut p, &[7, 8, 9, 10, 11, 12, 13, 14, 15, 16], &tw);
            assert_eq!(p.seal(), Ok(10));
            p.wake_reader(&*tw);
        });
        let (got, end) = read_all(&mut c, 3, &t);
        assert_eq!(got, (7..=16).collect::<Vec<u8>>());
        assert_eq!(end, ReadState::Sealed(10));
        writer.join().unwrap();
        drop(buf);
    });
}

/// (b) The reader sleeps for data on `reader_waiter`; the writer publishes one byte and
/// wakes it: the wake-up is never lost.
#[test]
fn loom_reader_wakeup_is_not_lost() {
    model(None, || {
        let (buf, mut p, mut c, t) = setup();
        let tw = t.clone();
        let writer = thread::spawn(move || {
            assert_eq!(p.write(&[42]), Ok(1));
            p.wake_reader(&*tw);
        });
        let ready = || (c.available().unwrap() > 0).then_some(());
        wake::wait(c.waiter(), tok(READER), Spin::Rounds(0), ready, || {
            t.reader.sleep()
        })
        .unwrap();
        let mut b = [0u8; 1];
        assert_eq!(c.read(&mut b), Ok(1));
        assert_eq!(b, [42]);
        writer.join().unwrap();
        drop(buf);
    });
}

/// (c) The writer, stopped by a full ring, sleeps on `writer_waiter`; the reader frees
/// room by reading and wakes it: never lost, and the writer's new byte lands in the slot
/// the reader just released (loom checks the copy-out happened before the overwrite).
#[test]
fn loom_writer_wakeup_after_a_read_is_not_lost() {
    model(None, || {
        let (buf, mut p, mut c, t) = setup();
        assert_eq!(p.write(&[1, 2, 3, 4, 5, 6, 7, 8]), Ok(CAP));
        let tr = t.clone();
        let reader = thread::spawn(move || {
            let mut b = [0u8; 1];
            assert_eq!(c.read(&mut b), Ok(1));
            assert_eq!(b, [1]);
            c.wake_writer(&*tr);
            c
        });
        let room = || (p.room().unwrap() > 0).then_some(());
        wake::wait(p.waiter(), tok(WRITER), Spin::Rounds(0), room, || {
            t.writer.sleep()
        })
        .unwrap();
        assert_eq!(p.write(&[9]), Ok(1));
        let mut c = reader.join().unwrap();
        let mut rest = [0u8; 8];
        assert_eq!(c.read(&mut rest), Ok(8));
        assert_eq!(rest, [2, 3, 4, 5, 6, 7, 8, 9]);
        drop(buf);
    });
}

/// (c') The writer, stopped by the reader's small receive buffer, sleeps; the reader
/// raises `rcv_cap` (SO_RCVBUF) and wakes it.
#[test]
fn loom_writer_wakeup_after_rcv_cap_grows_is_not_lost() {
    model(None, || {
        let (buf, mut p, mut c, t) = setup();
        c.set_rcv_cap(2);
        assert_eq!(p.write(&[1, 2, 3]), Ok(2));
        let tr = t.clone();
        let reader = thread::spawn(move || {
            c.set_rcv_cap(CAP);
            c.wake_writer(&*tr);
            c
        });
        let room = || (p.room().unwrap() > 0).then_some(());
        wake::wait(p.waiter(), tok(WRITER), Spin::Rounds(0), room, || {
            t.writer.sleep()
        })
        .unwrap();
        assert_eq!(p.write(&[3]), Ok(1));
        let mut c = reader.join().unwrap();
        let mut all = [0u8; 4];
        assert_eq!(c.read(&mut all), Ok(3));
        assert_eq!(all[..3], [1, 2, 3]);
        drop(buf);
    });
}

/// The armed-flag protocol with its fences removed (Release store, Acquire load, as an
/// x86-minded implementation might do): loom finds the interleaving where both sides
/// read the old value, the sleeper sleeps with data published, and nobody wakes it
/// (a deadlock). This is the model that proves the checks above can fail.
#[test]
#[should_panic(expected = "deadlock")]
fn loom_wake_without_fences_is_lost() {
    model(Some(3), || {
        let tail = Arc::new(AtomicU64::new(0));
        let armed = Arc::new(AtomicU64::new(0));
        let t = Arc::new(Transport::default());
        let (tail2, armed2, t2) = (tail.clone(), armed.clone(), t.clone());
        let waker = thread::spawn(move || {
            tail2.store(1, Release);
            let v = armed2.load(Acquire);
            if v != 0 && armed2.compare_exchange(v, 0, AcqRel, Relaxed).is_ok() {
                t2.wake(tok(READER));
            }
        });
        armed.store(READER, Release);
        if tail.load(Acquire) == 0 {
            t.reader.sleep();
        }
        waker.join().unwrap();
    });
}

/// The same two threads with the real `wake::arm` and `wake::notify`: never lost.
#[test]
fn loom_wake_with_fences_is_not_lost() {
    model(None, || {
        let tail = Arc::new(AtomicU64::new(0));
        let armed = Arc::new(AtomicU64::new(0));
        let t = Arc::new(Transport::default());
        let (tail2, armed2, t2) = (tail.clone(), armed.clone(), t.clone());
        let waker = thread::spawn(move || {
            tail2.store(1, Release);
            wake::notify(&armed2, &*t2);
        });
        wake::arm(&armed, tok(READER));
        if tail.load(Acquire) == 0 {
            t.reader.sleep();
        }
        wake::disarm(&armed, tok(READER));
        assert_eq!(tail.load(Acquire), 1);
        waker.join().unwrap();
    });
}
