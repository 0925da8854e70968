//! The ring's tests: unit tests of each rule, a model-based proptest, hostile-peer
//! proptests in guard-paged mappings, a writer killed mid-copy (a real process), and
//! two-thread stress runs through the wake-up protocol with a parking transport.

#![allow(unsafe_code)]

use super::*;
use crate::mem::{AlignedBuf, Guarded};
use crate::wake::{self, Spin};
use proptest::prelude::*;
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::num::NonZeroU64;
use std::sync::OnceLock;
use std::thread::{self, Thread};

const CAP: usize = 4096;

fn fresh(cap: usize) -> (AlignedBuf, RingRef) {
    let buf = AlignedBuf::zeroed(region_size(cap));
    // SAFETY: the block is buf.len() bytes, aligned, and outlives the ring (callers keep
    // `buf` alive as long as the handles); one producer and one consumer per test.
    let ring = unsafe { RingRef::init(buf.ptr(), buf.len(), cap) }.unwrap();
    (buf, ring)
}

/// A fresh ring, switched at 0.
fn pair(cap: usize) -> (AlignedBuf, Producer, Consumer) {
    let (buf, ring) = fresh(cap);
    let mut p = ring.producer();
    assert!(p.set_switch(0));
    (buf, p, ring.consumer())
}

fn pattern(from: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| byte_at(from + i)).collect()
}

/// The byte at ring index `i` in pattern tests: never zero, period 251.
fn byte_at(i: u64) -> u8 {
    (i % 251) as u8 + 1
}

fn tok(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}

#[test]
fn layout_is_the_documented_one() {
    assert_eq!(HEADER_SIZE, 192);
    assert_eq!(layout::DATA, 192);
    assert_eq!(
        layout::WORDS,
        [0, 8, 64, 72, 80, 88, 96, 128, 136, 144, 152]
    );
    assert_eq!(region_size(4096), 4288);
    // The writer's and the reader's words are on different cache lines.
    for w in [
        layout::TAIL,
        layout::SWITCH,
        layout::SEAL,
        layout::FIN,
        layout::WRITER_WAITER,
    ] {
        assert_eq!(w / 64, 1);
    }
    for r in [
        layout::HEAD,
        layout::READS,
        layout::RCV_CAP,
        layout::READER_WAITER,
    ] {
        assert_eq!(r / 64, 2);
    }
}

#[test]
fn init_checks_its_arguments() {
    let buf = AlignedBuf::zeroed(region_size(8192) + 64);
    let p = buf.ptr();
    // SAFETY: for all calls below, the block is buf.len() bytes, aligned, alive here.
    unsafe {
        assert_eq!(
            RingRef::init(p, buf.len(), 3000).unwrap_err(),
            LayoutError::BadCapacity
        );
        assert_eq!(
            RingRef::init(p, buf.len(), 2048).unwrap_err(),
            LayoutError::BadCapacity
        );
        assert_eq!(
            RingRef::init(p, buf.len(), 128 << 20).unwrap_err(),
            LayoutError::BadCapacity
        );
        assert_eq!(
            RingRef::init(p, region_size(8192) - 1, 8192).unwrap_err(),
            LayoutError::TooSmall
        );
        assert_eq!(
            RingRef::init(p, 100, 4096).unwrap_err(),
            LayoutError::TooSmall
        );
        let odd = NonNull::new(p.as_ptr().add(8)).unwrap();
        assert_eq!(
            RingRef::init(odd, 8192, 4096).unwrap_err(),
            LayoutError::Misaligned
        );
        let r = RingRef::init(p, buf.len(), 8192).unwrap();
        assert_eq!(r.capacity(), 8192);
        assert_eq!(r.switch_k(), None);
    }
}

#[test]
fn attach_validates_magic_capacity_and_length() {
    let buf = AlignedBuf::zeroed(region_size(8192));
    let p = buf.ptr();
    // SAFETY: for all calls below, the block is buf.len() bytes, aligned, alive here.
    unsafe {
        assert_eq!(
            RingRef::attach(p, buf.len()).unwrap_err(),
            LayoutError::BadMagic
        );
        RingRef::init(p, buf.len(), 8192).unwrap();
        assert_eq!(RingRef::attach(p, buf.len()).unwrap().capacity(), 8192);
        // This process mapped less than the capacity needs.
        assert_eq!(
            RingRef::attach(p, region_size(4096)).unwrap_err(),
            LayoutError::TooSmall
        );
        assert_eq!(RingRef::attach(p, 64).unwrap_err(), LayoutError::TooSmall);
        for lie in [0, 1, 4095, 4097, 1 << 40, u64::MAX, 16384] {
            buf.scribble(layout::CAPACITY, lie);
            let r = RingRef::attach(p, buf.len());
            assert!(r.is_err(), "capacity {lie} accepted");
        }
        buf.scribble(layout::CAPACITY, 4096);
        assert_eq!(RingRef::attach(p, buf.len()).unwrap().capacity(), 4096);
        buf.scribble(layout::MAGIC, MAGIC ^ 1);
        assert_eq!(
            RingRef::attach(p, buf.len()).unwrap_err(),
            LayoutError::BadMagic
        );
    }
}

#[test]
fn bytes_go_through_in_order_across_the_wrap() {
    let (_b, mut p, mut c) = pair(CAP);
    let mut at = 0u64;
    let mut got = Vec::new();
    // 3000-byte writes cross the 4096 boundary at a different place each time.
    for _ in 0..10 {
        let src = pattern(at, 3000);
        assert_eq!(p.write(&src), Ok(3000));
        p.wake_reader(&|_: NonZeroU64| panic!("nobody is armed"));
        let mut buf = vec![0u8; 3000];
        assert_eq!(c.available(), Ok(3000));
        assert_eq!(c.read(&mut buf), Ok(3000));
        got.extend_from_slice(&buf);
        at += 3000;
    }
    assert_eq!(got, pattern(0, 30_000));
    assert_eq!((p.tail(), c.head(), c.reads()), (30_000, 30_000, 10));
}

#[test]
fn a_full_ring_takes_nothing_until_read() {
    let (_b, mut p, mut c) = pair(CAP);
    let src = pattern(0, 5000);
    assert_eq!(p.write(&src), Ok(CAP));
    assert_eq!(p.room(), Ok(0));
    assert_eq!(p.unread(), Ok(CAP));
    assert_eq!(p.write(&src[CAP..]), Ok(0));
    let mut buf = [0u8; 100];
    assert_eq!(c.read(&mut buf), Ok(100));
    assert_eq!(buf[..], src[..100]);
    assert_eq!(p.room(), Ok(100));
    assert_eq!(p.write(&src[CAP..]), Ok(100));
    let mut rest = vec![0u8; 8192];
    assert_eq!(c.read(&mut rest), Ok(CAP));
    assert_eq!(rest[..CAP], src[100..CAP + 100]);
    assert_eq!(c.read(&mut rest), Ok(0));
    assert_eq!(c.status(), Ok(ReadState::Empty));
}

#[test]
fn rcv_cap_limits_what_the_writer_leaves_unread() {
    let (_b, mut p, mut c) = pair(CAP);
    assert_eq!(p.rcv_cap(), CAP);
    assert_eq!(c.set_rcv_cap(1000), 1000);
    assert_eq!(p.rcv_cap(), 1000);
    assert_eq!(p.write(&pattern(0, 3000)), Ok(1000));
    assert_eq!(p.room(), Ok(0));
    // Shrinking below what is unread is allowed (SO_RCVBUF while fused): no room, and
    // the reader still gets everything.
    assert_eq!(c.set_rcv_cap(10), 10);
    assert_eq!(p.room(), Ok(0));
    let mut buf = vec![0u8; 4096];
    assert_eq!(c.read(&mut buf[..500]), Ok(500));
    assert_eq!(p.room(), Ok(0));
    assert_eq!(c.read(&mut buf), Ok(500));
    assert_eq!(buf[..500], pattern(500, 500)[..]);
    assert_eq!(p.room(), Ok(10));
    // Clamped to 1..=capacity.
    assert_eq!(c.set_rcv_cap(0), 1);
    assert_eq!(c.set_rcv_cap(1 << 30), CAP);
    assert_eq!(p.room(), Ok(CAP));
}

#[test]
fn writes_wait_for_the_switch_offset() {
    let (_b, ring) = fresh(CAP);
    let mut p = ring.producer();
    let c = ring.consumer();
    assert_eq!(p.write(b"x"), Err(WriteError::NotSwitched));
    assert_eq!(p.seal(), Err(WriteError::NotSwitched));
    assert_eq!(c.switch_k(), None);
    assert!(
        !p.set_switch(u64::MAX),
        "the unset value cannot be published"
    );
    assert!(p.set_switch(12345));
    assert!(!p.set_switch(7), "published once");
    assert_eq!(c.switch_k(), Some(12345));
    assert_eq!(p.switch_k(), Some(12345));
    assert_eq!(p.write(b"xy"), Ok(2));
    // A producer made later (exec, a new owner) finds the switch and the tail.
    let p2 = ring.producer();
    assert_eq!((p2.switch_k(), p2.tail()), (Some(12345), 2));
}

#[test]
fn a_seal_is_drained_then_the_kernel_is_read() {
    let (_b, mut p, mut c) = pair(CAP);
    assert_eq!(p.write(&pattern(0, 3000)), Ok(3000));
    let mut buf = vec![0u8; 2000];
    assert_eq!(c.read(&mut buf), Ok(2000));
    assert_eq!(p.write(&pattern(3000, 2000)), Ok(2000));
    assert_eq!(p.seal(), Ok(5000));
    assert_eq!(p.closed_at(), Some(5000));
    assert_eq!(p.write(b"late"), Err(WriteError::Closed));
    assert_eq!(p.seal(), Err(WriteError::Closed));
    assert_eq!(p.shutdown(), Err(WriteError::Closed));
    assert_eq!(c.sealed_at(), Ok(Some(5000)));
    assert_eq!(c.is_shutdown(), Ok(false));
    assert_eq!(c.status(), Ok(ReadState::Data(3000)));
    let mut rest = vec![0u8; 4096];
    assert_eq!(c.read(&mut rest), Ok(3000));
    assert_eq!(rest[..3000], pattern(2000, 3000)[..]);
    assert_eq!(c.status(), Ok(ReadState::Sealed(5000)));
    assert_eq!(c.read(&mut rest), Ok(0));
    assert_eq!(c.head(), 5000);
    // A producer re-attached to a sealed ring writes nothing either.
    let mut again = c.ring.producer();
    assert_eq!(again.write(b"x"), Err(WriteError::Closed));
}

#[test]
fn shutdown_is_end_of_file_after_the_bytes() {
    let (_b, mut p, mut c) = pair(CAP);
    assert_eq!(p.write(b"last words"), Ok(10));
    assert_eq!(p.shutdown(), Ok(10));
    assert_eq!(p.write(b"!"), Err(WriteError::Closed));
    assert_eq!(c.is_shutdown(), Ok(true));
    assert_eq!(c.sealed_at(), Ok(None));
    assert_eq!(c.status(), Ok(ReadState::Data(10)));
    let mut buf = [0u8; 4];
    assert_eq!(c.read(&mut buf), Ok(4));
    assert_eq!(c.status(), Ok(ReadState::Data(6)));
    let mut rest = [0u8; 16];
    assert_eq!(c.read(&mut rest), Ok(6));
    assert_eq!(&rest[..6], b" words");
    assert_eq!(c.status(), Ok(ReadState::Eof));
    // Shutdown of an empty ring: end of file at once.
    let (_b2, mut p2, c2) = pair(CAP);
    assert_eq!(p2.shutdown(), Ok(0));
    assert_eq!(c2.status(), Ok(ReadState::Eof));
}

#[test]
fn peek_does_not_consume_and_vectored_calls_wrap() {
    let (_b, mut p, mut c) = pair(CAP);
    // Move the indices near the end of the area first.
    assert_eq!(p.write(&pattern(0, 4000)), Ok(4000));
    assert_eq!(c.read(&mut vec![0u8; 4000]), Ok(4000));
    let (a, b) = (pattern(4000, 70), pattern(4070, 100));
    assert_eq!(
        p.write_vectored(&[IoSlice::new(&a), IoSlice::new(&[]), IoSlice::new(&b)]),
        Ok(170)
    );
    let mut peeked = [0u8; 50];
    assert_eq!(c.peek(&mut peeked), Ok(50));
    assert_eq!(peeked[..], pattern(4000, 50)[..]);
    assert_eq!(c.available(), Ok(170));
    assert_eq!(c.reads(), 1, "a peek is not a read");
    let (mut x, mut y) = ([0u8; 90], [0u8; 200]);
    assert_eq!(
        c.read_vectored(&mut [IoSliceMut::new(&mut x), IoSliceMut::new(&mut y)]),
        Ok(170)
    );
    assert_eq!(x[..], pattern(4000, 90)[..]);
    assert_eq!(y[..80], pattern(4090, 80)[..]);
    assert_eq!(c.reads(), 2);
    // A vectored write stops at the room, part-way through a buffer.
    c.set_rcv_cap(100);
    assert_eq!(
        p.write_vectored(&[IoSlice::new(&[1; 60]), IoSlice::new(&[2; 60])]),
        Ok(100)
    );
    let mut z = [0u8; 120];
    assert_eq!(c.read(&mut z), Ok(100));
    assert_eq!(z[..60], [1; 60]);
    assert_eq!(z[60..100], [2; 40]);
}

#[test]
fn reads_are_counted_for_the_unread_writes_rule() {
    let (_b, mut p, mut c) = pair(CAP);
    assert!(!p.take_reader_read());
    p.write(b"abc").unwrap();
    assert_eq!(c.read(&mut [0u8; 0]), Ok(0), "an empty read is no read");
    assert!(!p.take_reader_read());
    assert_eq!(c.read(&mut [0u8; 2]), Ok(2));
    assert_eq!(p.reader_reads(), 1);
    assert!(p.take_reader_read());
    assert!(!p.take_reader_read());
    assert_eq!(c.read(&mut [0u8; 2]), Ok(1));
    assert_eq!(c.read(&mut [0u8; 2]), Ok(0), "nothing left: no read");
    assert!(p.take_reader_read());
    assert_eq!(p.reader_reads(), 2);
}

/// The core's Solaris flow control, run by a writer from nothing but the ring header: the
/// unread-writes limit lifted by the reader's `reads`, and the low-water mark computed
/// from `room` and the reader's `rcv_cap`.
#[test]
fn the_header_carries_what_fused_flow_needs() {
    use ember_core::tcp::FusedFlow;
    const LIMIT: u32 = 2;
    const LOWAT: usize = 4096;
    let (_b, mut p, mut c) = pair(CAP);
    let mut flow = FusedFlow::default();
    for _ in 0..2 {
        assert!(flow.admit(LIMIT).is_ok());
        let n = p.write(&[1; 10]).unwrap();
        assert_eq!(flow.wrote(10, n), None);
    }
    assert!(
        flow.admit(LIMIT).is_err(),
        "two unread writes stop the writer"
    );
    assert!(!p.take_reader_read());
    c.read(&mut [0u8; 5]).unwrap();
    assert!(p.take_reader_read());
    flow.reader_read();
    assert!(flow.admit(LIMIT).is_ok(), "the reader's read resumes it");

    // SO_RCVBUF 2048: the writer fills it and stops until the low-water mark,
    // min(LOWAT, 2048 / 2) = 1024 bytes free.
    c.set_rcv_cap(2048);
    let unread = p.unread().unwrap();
    assert_eq!(unread, 15);
    let n = p.write(&[2; 4000]).unwrap();
    assert_eq!(n, 2048 - 15);
    assert!(flow.wrote(4000, n).is_some());
    let space = |p: &Producer| p.room().unwrap();
    assert!(!flow.reader_space(space(&p), p.rcv_cap(), LOWAT, true));
    c.read(&mut [0u8; 1000]).unwrap();
    assert!(!flow.reader_space(space(&p), p.rcv_cap(), LOWAT, true));
    c.read(&mut [0u8; 24]).unwrap();
    assert_eq!(space(&p), 1024);
    assert!(flow.reader_space(space(&p), p.rcv_cap(), LOWAT, true));
    assert!(flow.writable(space(&p)));
}

#[test]
fn producer_and_consumer_resume_from_the_shared_indices() {
    let (_b, ring) = fresh(CAP);
    let mut p = ring.producer();
    p.set_switch(3);
    p.write(&pattern(0, 1000)).unwrap();
    let mut c = ring.consumer();
    c.read(&mut [0u8; 400]).unwrap();
    // New handles (exec, a new owner) pick up where these left.
    let mut p = ring.producer();
    let mut c = ring.consumer();
    assert_eq!((p.tail(), c.head(), c.reads()), (1000, 400, 1));
    assert_eq!(p.write(&pattern(1000, 100)), Ok(100));
    let mut buf = [0u8; 700];
    assert_eq!(c.read(&mut buf), Ok(700));
    assert_eq!(buf[..], pattern(400, 700)[..]);
}

#[test]
fn a_hostile_header_is_corrupt_not_a_crash() {
    let (b, mut p, mut c) = pair(CAP);
    p.write(&pattern(0, 100)).unwrap();
    c.read(&mut [0u8; 40]).unwrap();
    let mut buf = vec![0u8; 8192];
    // The tail behind the reader's head, or more than a capacity ahead.
    for bad in [39, 0, 40 + CAP as u64 + 1, u64::MAX] {
        b.scribble(layout::TAIL, bad);
        assert_eq!(c.read(&mut buf), Err(Corrupt), "tail {bad}");
        assert_eq!(c.peek(&mut buf), Err(Corrupt));
        assert_eq!(c.available(), Err(Corrupt));
        assert_eq!(c.status(), Err(Corrupt));
    }
    // Exactly a capacity ahead is possible (a full ring), and reads stay in the area.
    b.scribble(layout::TAIL, 40 + CAP as u64);
    assert_eq!(c.read(&mut buf), Ok(CAP));
    b.scribble(layout::TAIL, 100);
    b.scribble(layout::HEAD, 40);
    // The head ahead of the writer's tail, or more than a capacity behind.
    for bad in [101, u64::MAX, 0] {
        b.scribble(layout::HEAD, bad);
        if bad == 0 {
            // 100 bytes behind: possible.
            assert_eq!(p.unread(), Ok(100));
        } else {
            assert_eq!(p.unread(), Err(Corrupt), "head {bad}");
            assert_eq!(p.room(), Err(Corrupt));
            assert_eq!(p.write(b"x"), Err(WriteError::Corrupt));
        }
    }
    // A seal or shutdown offset that contradicts the tail; both at once.
    let (b, mut p, c) = pair(CAP);
    p.write(b"0123456789").unwrap();
    b.scribble(layout::SEAL, 5);
    assert_eq!(c.status(), Err(Corrupt));
    assert_eq!(c.sealed_at(), Err(Corrupt));
    b.scribble(layout::SEAL, 10);
    assert_eq!(c.status(), Ok(ReadState::Data(10)));
    b.scribble(layout::FIN, 10);
    assert_eq!(c.status(), Err(Corrupt), "sealed and shut down");
    b.scribble(layout::SEAL, u64::MAX);
    assert_eq!(c.status(), Ok(ReadState::Data(10)));
    b.scribble(layout::FIN, 11);
    assert_eq!(c.is_shutdown(), Err(Corrupt));
    b.scribble(layout::FIN, u64::MAX);
    // Ring bytes without a switch offset.
    b.scribble(layout::SWITCH, u64::MAX);
    assert_eq!(c.available(), Err(Corrupt));
    // A tail so large that a write would overflow it.
    let (b, ring) = fresh(CAP);
    b.scribble(layout::TAIL, u64::MAX - 5);
    b.scribble(layout::HEAD, u64::MAX - 5);
    let mut p = ring.producer();
    p.set_switch(0);
    assert_eq!(p.room(), Ok(CAP));
    assert_eq!(p.write(&[0; 100]), Err(WriteError::Corrupt));
    assert_eq!(p.write(&[0; 5]), Ok(5));
    // rcv_cap beyond the capacity is clamped; 0 stalls the writer, nothing more.
    b.scribble(layout::RCV_CAP, u64::MAX);
    assert_eq!(p.rcv_cap(), CAP);
    b.scribble(layout::RCV_CAP, 0);
    assert_eq!(p.room(), Ok(0));
}

#[test]
fn bytes_of_an_unpublished_copy_are_invisible() {
    // A writer that dies after copying but before its tail store: the bytes are in the
    // data area and the reader sees none of them.
    let (b, mut p, c) = pair(CAP);
    p.write(b"seen").unwrap();
    for i in 0..64 {
        // SAFETY: inside the data area of the block, which is alive.
        unsafe { b.ptr().as_ptr().add(HEADER_SIZE + 4 + i).write(0xAA) };
    }
    assert_eq!(c.available(), Ok(4));
    let mut buf = [0u8; 100];
    assert_eq!(c.peek(&mut buf), Ok(4));
    assert_eq!(&buf[..4], b"seen");
}

/// A real writer process, SIGKILLed while it copies: whatever it left, the reader sees
/// exactly the bytes before the tail, all correct, and nothing of the interrupted copy.
#[test]
fn a_writer_killed_mid_copy_leaves_nothing_visible() {
    const RING: usize = 16 << 20;
    const CHUNK: usize = (1 << 20) + 13;
    let src: Vec<u8> = pattern(0, CHUNK + 251);
    let len = region_size(RING);
    let mut mid_copy = 0;
    for round in 0..40u64 {
        // SAFETY: a fresh shared anonymous mapping, unmapped at the end of the round.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        let mem = NonNull::new(map.cast::<u8>()).unwrap();
        // SAFETY: `len` bytes, page-aligned, mapped until the munmap below, which comes
        // after the child is dead and the handles are dropped.
        let ring = unsafe { RingRef::init(mem, len, RING) }.unwrap();
        // SAFETY: the child does only copies and atomic stores (no allocation, no lock)
        // and never returns: it is killed, or _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let mut p = ring.producer();
            p.set_switch(0);
            loop {
                let at = (p.tail() % 251) as usize;
                if p.write(&src[at..at + CHUNK]) == Ok(0) {
                    // Full: nothing more to do.
                    // SAFETY: _exit ends the child without running the parent's code.
                    unsafe { libc::_exit(0) };
                }
            }
        }
        // Kill it once it is past a few chunks, most likely in the middle of the next.
        let w = &ring.hdr().w.tail;
        let goal = CHUNK as u64 * (1 + round % 8);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while w.load(Acquire) < goal {
            assert!(
                std::time::Instant::now() < deadline,
                "the child does not write"
            );
            std::hint::spin_loop();
        }
        // SAFETY: our own child.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        }
        let mut c = ring.consumer();
        let tail = c.available().unwrap();
        assert!(
            tail % CHUNK == 0 || tail == RING,
            "only whole writes are visible"
        );
        let mut got = vec![0u8; tail];
        assert_eq!(c.read(&mut got), Ok(tail));
        assert!(
            got == pattern(0, tail),
            "the visible bytes are the written ones"
        );
        // Were we in the middle of a copy? Some of its bytes are past the tail (not
        // necessarily the first ones: memcpy may store the ends of a large copy last).
        // SAFETY: the child is dead; the data area is ours alone, inside the mapping.
        let data = unsafe { std::slice::from_raw_parts(mem.as_ptr().add(HEADER_SIZE), RING) };
        if data[tail..(tail + CHUNK).min(RING)].iter().any(|&b| b != 0) {
            mid_copy += 1;
        }
        // SAFETY: the mapping made above; no handle to it is used after this.
        unsafe { libc::munmap(map, len) };
        if mid_copy >= 3 {
            break;
        }
    }
    assert!(mid_copy > 0, "no kill landed in the middle of a copy");
}

/// The guard pages the hostile tests rely on: a byte just past the region (or just
/// before it) faults. Checked in a child process, which dies of SIGSEGV.
#[test]
fn guard_pages_fault_just_outside_the_region() {
    for at_end in [true, false] {
        let region = Guarded::new(region_size(CAP), at_end);
        let inside = region.ptr().as_ptr();
        // SAFETY: the last and first bytes of the region are mapped and readable.
        unsafe {
            std::ptr::read_volatile(inside.add(region.len() - 1));
            std::ptr::read_volatile(inside);
        }
        // SAFETY: the child only reads one byte (and faults) or _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let outside = if at_end {
                inside.wrapping_add(region.len())
            } else {
                inside.wrapping_sub(1)
            };
            // SAFETY: the address is in a PROT_NONE page, part of no Rust object: the read
            // faults by design and kills only this child, which exists for it.
            unsafe {
                std::ptr::read_volatile(outside);
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV,
            "status {status:#x}"
        );
    }
}

// ---- Proptests ----

#[derive(Debug, Clone)]
enum Op {
    Write(usize),
    WriteV(usize, usize),
    Read(usize),
    ReadV(usize, usize),
    Peek(usize),
    RcvCap(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let len = prop_oneof![0..64usize, 0..3 * CAP];
    prop_oneof![
        4 => len.clone().prop_map(Op::Write),
        1 => (len.clone(), len.clone()).prop_map(|(a, b)| Op::WriteV(a, b)),
        4 => len.clone().prop_map(Op::Read),
        1 => (len.clone(), len.clone()).prop_map(|(a, b)| Op::ReadV(a, b)),
        1 => len.clone().prop_map(Op::Peek),
        1 => (0..2 * CAP).prop_map(Op::RcvCap),
    ]
}

proptest! {
    /// Random chunk sizes on both sides, against a `VecDeque`: the same bytes, the same
    /// counts, the same room.
    #[test]
    fn the_ring_is_a_bounded_queue(ops in prop::collection::vec(op(), 1..200)) {
        let (_b, mut p, mut c) = pair(CAP);
        let mut model = VecDeque::<u8>::new();
        let mut rcv_cap = CAP;
        let mut next = 0u64;
        for op in ops {
            match op {
                Op::Write(n) | Op::WriteV(n, 0) => {
                    let src = pattern(next, n);
                    let want = rcv_cap.saturating_sub(model.len()).min(n);
                    prop_assert_eq!(p.write(&src), Ok(want));
                    model.extend(&src[..want]);
                    next += want as u64;
                }
                Op::WriteV(a, b) => {
                    let src = pattern(next, a + b);
                    let want = rcv_cap.saturating_sub(model.len()).min(a + b);
                    let got = p.write_vectored(&[IoSlice::new(&src[..a]), IoSlice::new(&src[a..])]);
                    prop_assert_eq!(got, Ok(want));
                    model.extend(&src[..want]);
                    next += want as u64;
                }
                Op::Read(n) | Op::Peek(n) => {
                    let mut buf = vec![0u8; n];
                    let want = model.len().min(n);
                    if let Op::Read(_) = op {
                        prop_assert_eq!(c.read(&mut buf), Ok(want));
                        prop_assert!(model.drain(..want).eq(buf[..want].iter().copied()));
                    } else {
                        prop_assert_eq!(c.peek(&mut buf), Ok(want));
                        prop_assert!(model.iter().take(want).eq(buf[..want].iter()));
                    }
                }
                Op::ReadV(a, b) => {
                    let (mut x, mut y) = (vec![0u8; a], vec![0u8; b]);
                    let want = model.len().min(a + b);
                    let got = c.read_vectored(&mut [IoSliceMut::new(&mut x), IoSliceMut::new(&mut y)]);
                    prop_assert_eq!(got, Ok(want));
                    let mut both = x;
                    both.extend_from_slice(&y);
                    prop_assert!(model.drain(..want).eq(both[..want].iter().copied()));
                }
                Op::RcvCap(n) => rcv_cap = c.set_rcv_cap(n),
            }
            prop_assert_eq!(c.available(), Ok(model.len()));
            prop_assert_eq!(p.unread(), Ok(model.len()));
            prop_assert_eq!(p.room(), Ok(rcv_cap.saturating_sub(model.len())));
        }
    }
}

#[derive(Debug, Clone)]
enum Hostile {
    /// Store a value into header word `WORDS[i % 11]`.
    Scribble(usize, u64),
    Op(Op),
    Status,
    Switch(u64),
    Seal,
    Shutdown,
    Reattach,
}

fn value() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0..20_000u64,
        (u64::MAX - 20_000)..=u64::MAX,
        Just(CAP as u64),
        Just(u64::MAX),
        // Capacities that would pass every check but the mapping's length.
        (12u32..=26).prop_map(|s| 1u64 << s),
    ]
}

fn hostile() -> impl Strategy<Value = Hostile> {
    prop_oneof![
        3 => (0..layout::WORDS.len(), value()).prop_map(|(i, v)| Hostile::Scribble(i, v)),
        6 => op().prop_map(Hostile::Op),
        1 => Just(Hostile::Status),
        1 => value().prop_map(Hostile::Switch),
        1 => prop_oneof![Just(Hostile::Seal), Just(Hostile::Shutdown)],
        1 => Just(Hostile::Reattach),
    ]
}

/// Runs `ops` on both ends of a ring in `region` while "the peer" scribbles on the
/// header: every call either works within bounds or returns `Corrupt`; the guard pages
/// around the region make any access outside it a crash.
fn run_hostile(region: &Guarded, ops: &[Hostile]) -> Result<(), TestCaseError> {
    // SAFETY: the region is region.len() bytes in a live mapping, aligned (it starts or
    // ends at a page boundary and its length is a multiple of 64); it outlives the
    // handles, which live in this function.
    let ring = unsafe { RingRef::init(region.ptr(), region.len(), CAP) }.unwrap();
    let mut p = ring.producer();
    p.set_switch(0);
    let mut c = ring.consumer();
    let mut buf = vec![0u8; 3 * CAP];
    let mut buf2 = vec![0u8; 3 * CAP];
    let src = pattern(0, 3 * CAP);
    for h in ops {
        match *h {
            Hostile::Scribble(i, v) => region.scribble(layout::WORDS[i], v),
            Hostile::Op(Op::Write(n)) => {
                if let Ok(m) = p.write(&src[..n]) {
                    prop_assert!(m <= n && m <= CAP);
                }
            }
            Hostile::Op(Op::WriteV(a, b)) => {
                if let Ok(m) = p.write_vectored(&[IoSlice::new(&src[..a]), IoSlice::new(&src[..b])])
                {
                    prop_assert!(m <= a + b && m <= CAP);
                }
            }
            Hostile::Op(Op::Read(n)) => {
                if let Ok(m) = c.read(&mut buf[..n]) {
                    prop_assert!(m <= n && m <= CAP);
                }
            }
            Hostile::Op(Op::Peek(n)) => {
                if let Ok(m) = c.peek(&mut buf[..n]) {
                    prop_assert!(m <= n && m <= CAP);
                }
            }
            Hostile::Op(Op::ReadV(a, b)) => {
                if let Ok(m) = c.read_vectored(&mut [
                    IoSliceMut::new(&mut buf[..a]),
                    IoSliceMut::new(&mut buf2[..b]),
                ]) {
                    prop_assert!(m <= a + b && m <= CAP);
                }
            }
            Hostile::Op(Op::RcvCap(n)) => {
                let v = c.set_rcv_cap(n);
                prop_assert!((1..=CAP).contains(&v));
            }
            Hostile::Status => {
                if let Ok(n) = c.available() {
                    prop_assert!(n <= CAP);
                }
                if let Ok(ReadState::Data(n)) = c.status() {
                    prop_assert!(n > 0 && n <= CAP);
                }
                if let Ok(n) = p.room() {
                    prop_assert!(n <= CAP);
                }
                if let Ok(n) = p.unread() {
                    prop_assert!(n <= CAP);
                }
                prop_assert!(p.rcv_cap() <= CAP);
                let _ = (
                    c.sealed_at(),
                    c.is_shutdown(),
                    c.switch_k(),
                    p.take_reader_read(),
                );
                let w = |_: NonZeroU64| {};
                let _ = (p.wake_reader(&w), c.wake_writer(&w));
            }
            Hostile::Switch(k) => {
                let _ = p.set_switch(k);
            }
            Hostile::Seal => {
                let _ = p.seal();
            }
            Hostile::Shutdown => {
                let _ = p.shutdown();
            }
            Hostile::Reattach => {
                // SAFETY: as above; the old handles are replaced.
                match unsafe { RingRef::attach(region.ptr(), region.len()) } {
                    Ok(r) => {
                        prop_assert_eq!(r.capacity(), CAP, "only the true capacity fits");
                        p = r.producer();
                        c = r.consumer();
                    }
                    Err(e) => prop_assert!(matches!(
                        e,
                        LayoutError::BadMagic | LayoutError::BadCapacity | LayoutError::TooSmall
                    )),
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A peer scribbling arbitrary values into every header word, between the calls.
    #[test]
    fn a_scribbling_peer_never_makes_the_ring_step_outside(
        ops in prop::collection::vec(hostile(), 1..120),
        at_end: bool,
    ) {
        let region = Guarded::new(region_size(CAP), at_end);
        run_hostile(&region, &ops)?;
    }

    /// The fuzz entry point with random inputs (a formatted ring, or a hostile header
    /// that starts with the right magic and capacity and then anything).
    #[test]
    fn fuzz_consume_holds_its_properties(
        ops in prop::collection::vec(any::<u8>(), 0..600),
        header in prop::collection::vec(value(), 24),
        hostile: bool,
    ) {
        let mut input = Vec::new();
        if hostile {
            input.push(1);
            for (i, v) in header.iter().enumerate() {
                let v = match i * 8 {
                    layout::MAGIC => MAGIC,
                    layout::CAPACITY => CAP as u64,
                    _ => *v,
                };
                input.extend_from_slice(&v.to_le_bytes());
            }
        } else {
            input.push(0);
        }
        input.extend_from_slice(&ops);
        crate::fuzz::fuzz_consume(&input);
    }
}

#[test]
fn fuzz_consume_takes_any_bytes() {
    crate::fuzz::fuzz_consume(&[]);
    crate::fuzz::fuzz_consume(&[1]);
    crate::fuzz::fuzz_consume(&[0xff; 1000]);
    // Honest: switch, write, read, status, seal, read, status.
    let mut honest = vec![0u8];
    honest.extend_from_slice(&[7, 0, 9, 0, 0, 0, 0, 0, 0, 0]); // switch at 9
    honest.extend_from_slice(&[6, 0x00, 0x10]); // write 4096
    honest.extend_from_slice(&[1, 0x00, 0x08]); // read 2048
    honest.extend_from_slice(&[4, 7, 1, 4, 1, 0xff, 0x1f, 4]); // seal, drain
    crate::fuzz::fuzz_consume(&honest);
}

/// The peer scribbles from another thread, concurrently with every call, while both
/// ends run in this one: bounds hold and nothing outside the region is touched. Now and
/// then this thread puts a sane header back (atomically, as the scribbler writes), so
/// that calls also get through and copy bytes while the scribbles race them.
#[test]
fn a_concurrent_scribbler_cannot_break_the_bounds() {
    let region = Guarded::new(region_size(CAP), true);
    // SAFETY: as in run_hostile.
    let ring = unsafe { RingRef::init(region.ptr(), region.len(), CAP) }.unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let sane = [
        (layout::MAGIC, MAGIC),
        (layout::CAPACITY, CAP as u64),
        (layout::TAIL, 0),
        (layout::HEAD, 0),
        (layout::SWITCH, 0),
        (layout::SEAL, UNSET),
        (layout::FIN, UNSET),
        (layout::RCV_CAP, CAP as u64),
    ];
    thread::scope(|s| {
        s.spawn(|| {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let x = rng.next();
                let word = layout::WORDS[(x % 11) as usize];
                // Small values often, near-sane ones sometimes.
                let v = match x >> 61 {
                    0 | 1 => x,
                    2 | 3 => (x >> 8) % (2 * CAP as u64),
                    4 => u64::MAX - (x >> 8) % 8,
                    5 => 1 << (12 + (x >> 8) % 15),
                    _ => CAP as u64,
                };
                region.scribble(word, v);
                for _ in 0..(x >> 32) % 2000 {
                    std::hint::spin_loop();
                }
            }
        });
        let mut p = ring.producer();
        let mut c = ring.consumer();
        let src = pattern(0, CAP);
        let mut buf = vec![0u8; CAP];
        let (mut wrote, mut read) = (0usize, 0usize);
        for i in 0..300_000usize {
            let n = (i * 7919) % (CAP + 1);
            if let Ok(m) = p.write(&src[..n]) {
                assert!(m <= n);
                wrote += m;
            }
            if let Ok(m) = c.read(&mut buf[..n]) {
                assert!(m <= n);
                read += m;
            }
            if let Ok(m) = c.peek(&mut buf[..n / 2]) {
                assert!(m <= n / 2);
            }
            if i % 64 == 0 {
                for (w, v) in sane {
                    region.scribble(w, v);
                }
                // SAFETY: as in run_hostile; the old handles are replaced.
                if let Ok(r) = unsafe { RingRef::attach(region.ptr(), region.len()) } {
                    assert_eq!(r.capacity(), CAP);
                    p = r.producer();
                    c = r.consumer();
                }
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(
            wrote > 0 && read > 0,
            "bytes moved ({wrote} in, {read} out)"
        );
    });
}

// ---- Stress: two threads, the wake-up protocol, a parking transport ----

/// Wakes the thread registered for a token (1 or 2) with `unpark`, and counts.
#[derive(Default)]
struct Parkers([OnceLock<Thread>; 3], std::sync::atomic::AtomicU64);

impl Parkers {
    fn register(&self, token: u64) {
        self.0[token as usize].set(thread::current()).unwrap();
    }
}

impl wake::Wake for Parkers {
    fn wake(&self, token: NonZeroU64) {
        // A made-up token wakes nobody.
        if let Some(t) = self.0.get(token.get() as usize).and_then(|c| c.get()) {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            t.unpark();
        }
    }
}

/// A small xorshift generator: chunk sizes and payload bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn fill(&mut self, b: &mut [u8]) {
        for chunk in b.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

fn park() -> bool {
    thread::park();
    true
}

/// A blocking writer: 64 MiB in random chunks through a 64 KiB ring, parking on flow
/// control; a blocking reader with random buffers, parking when empty. Checksums agree.
#[test]
fn stress_one_direction_64_mib_with_parking() {
    const TOTAL: usize = 64 << 20;
    let (_b, mut p, mut c) = pair(64 << 10);
    let parkers = Parkers::default();
    let spin = Spin::Rounds(16);
    let (sent, got) = thread::scope(|s| {
        let writer = s.spawn(|| {
            parkers.register(1);
            let mut rng = Rng(0x1234_5678_9abc_def1);
            let mut h = Sha256::new();
            let mut chunk = vec![0u8; 200_000];
            let mut sent = 0;
            while sent < TOTAL {
                let len = (rng.below(200_000) + 1).min(TOTAL - sent);
                rng.fill(&mut chunk[..len]);
                h.update(&chunk[..len]);
                let mut off = 0;
                while off < len {
                    let n = p.write(&chunk[off..len]).unwrap();
                    if n > 0 {
                        off += n;
                        p.wake_reader(&parkers);
                        continue;
                    }
                    let room = || (p.room().unwrap() > 0).then_some(());
                    wake::wait(p.waiter(), tok(1), spin, room, park).unwrap();
                }
                sent += len;
            }
            p.shutdown().unwrap();
            p.wake_reader(&parkers);
            h.finalize()
        });
        let reader = s.spawn(|| {
            parkers.register(2);
            let mut rng = Rng(0xfeed_face_dead_beef);
            let mut h = Sha256::new();
            let mut buf = vec![0u8; 150_000];
            let mut total = 0;
            loop {
                let len = rng.below(150_000) + 1;
                let n = c.read(&mut buf[..len]).unwrap();
                if n > 0 {
                    h.update(&buf[..n]);
                    total += n;
                    c.wake_writer(&parkers);
                    continue;
                }
                let ready = || match c.status().unwrap() {
                    ReadState::Empty => None,
                    st => Some(st),
                };
                if wake::wait(c.waiter(), tok(2), spin, ready, park) == Some(ReadState::Eof) {
                    break;
                }
            }
            assert_eq!(total, TOTAL);
            h.finalize()
        });
        (writer.join().unwrap(), reader.join().unwrap())
    });
    assert_eq!(sent, got);
    let wakes = parkers.1.into_inner();
    eprintln!("one direction: {wakes} wake-ups");
    assert!(wakes > 0, "the sleeping path was taken");
}

/// One endpoint of a bidirectional exchange: sends `total` bytes on `out` and receives
/// until end of file on `inp`, never blocking on one direction while the other could
/// move; when neither can, it arms both words and parks.
fn endpoint(
    mut out: Producer,
    mut inp: Consumer,
    token: u64,
    seed: u64,
    total: usize,
    parkers: &Parkers,
) -> (Vec<u8>, Vec<u8>) {
    parkers.register(token);
    let mut rng = Rng(seed);
    let (mut hs, mut hr) = (Sha256::new(), Sha256::new());
    let mut chunk = vec![0u8; 100_000];
    let (mut pending, mut off) = (0, 0);
    let mut sent = 0;
    let mut shut = false;
    let mut eof = false;
    let mut buf = vec![0u8; 100_000];
    while !(shut && eof) {
        let mut moved = false;
        if !shut {
            if off == pending {
                if sent == total {
                    out.shutdown().unwrap();
                    out.wake_reader(parkers);
                    shut = true;
                    moved = true;
                } else {
                    pending = (rng.below(100_000) + 1).min(total - sent);
                    rng.fill(&mut chunk[..pending]);
                    hs.update(&chunk[..pending]);
                    off = 0;
                    sent += pending;
                }
            }
            if !shut && off < pending {
                let n = out.write(&chunk[off..pending]).unwrap();
                if n > 0 {
                    off += n;
                    out.wake_reader(parkers);
                    moved = true;
                }
            }
        }
        if !eof {
            let len = rng.below(100_000) + 1;
            let n = inp.read(&mut buf[..len]).unwrap();
            if n > 0 {
                hr.update(&buf[..n]);
                inp.wake_writer(parkers);
                moved = true;
            } else if inp.status().unwrap() == ReadState::Eof {
                eof = true;
                moved = true;
            }
        }
        if moved {
            continue;
        }
        let ready = || {
            let data = !eof && inp.status().unwrap() != ReadState::Empty;
            let room = !shut && off < pending && out.room().unwrap() > 0;
            (data || room).then_some(())
        };
        if wake::spin_then(Spin::Rounds(16), ready).is_some() {
            continue;
        }
        let t = tok(token);
        wake::arm(inp.waiter(), t);
        wake::arm(out.waiter(), t);
        if ready().is_none() {
            thread::park();
        }
        wake::disarm(inp.waiter(), t);
        wake::disarm(out.waiter(), t);
    }
    (hs.finalize().to_vec(), hr.finalize().to_vec())
}

/// Both directions at once, 32 MiB each way through 64 KiB rings, each thread a writer
/// on one ring and a reader on the other: both armed words in play.
#[test]
fn stress_both_directions_with_parking() {
    const TOTAL: usize = 32 << 20;
    let (_b1, p1, c1) = pair(64 << 10);
    let (_b2, p2, c2) = pair(64 << 10);
    let parkers = Parkers::default();
    let ((a_sent, a_got), (b_sent, b_got)) = thread::scope(|s| {
        let a = s.spawn(|| endpoint(p1, c2, 1, 0x0123_4567_89ab_cdef, TOTAL, &parkers));
        let b = s.spawn(|| endpoint(p2, c1, 2, 0x0fed_cba9_8765_4321, TOTAL, &parkers));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_eq!(a_sent, b_got);
    assert_eq!(b_sent, a_got);
    assert_ne!(a_sent, b_sent);
    let wakes = parkers.1.into_inner();
    eprintln!("both directions: {wakes} wake-ups");
    assert!(wakes > 0, "the sleeping path was taken");
}
