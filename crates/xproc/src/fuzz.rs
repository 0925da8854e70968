//! A fuzzing entry point for the ring: arbitrary bytes become a region (formatted by us
//! or by a "hostile formatter" whose header is the input's bytes) and a sequence of
//! operations on both ends, interleaved with a hostile peer's stores into the header.
//! A cargo-fuzz target is one line: `fuzz_target!(|d: &[u8]| fuzz_consume(d));`.
//!
//! What it checks, for any input:
//! * no panic, and no access outside the region: the region is a heap block of exactly
//!   [`region_size`] bytes, so an address sanitizer (cargo-fuzz's default) reports any
//!   access beyond it;
//! * every call's result is within bounds (a read or peek returns at most the buffer,
//!   a write at most what was offered, room and availability at most the capacity);
//! * while nobody scribbled (an honest peer), the ring behaves exactly like a model
//!   queue: same bytes, same counts, same states, never [`Corrupt`].
//!
//! It asserts those properties, so it panics only if the ring breaks its contract.

// Attaching a ring to the heap block is the one unsafe call (its contract: the block
// outlives the handles, which this function keeps local).
#![allow(unsafe_code)]

use crate::mem::AlignedBuf;
use crate::ring::{
    layout, region_size, Corrupt, Producer, ReadState, RingRef, WriteError, HEADER_SIZE,
    MIN_CAPACITY,
};
use std::collections::VecDeque;
use std::io::IoSliceMut;
use std::num::NonZeroU64;

/// The input, consumed from the front; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn u16(&mut self) -> usize {
        usize::from(self.byte().unwrap_or(0)) | usize::from(self.byte().unwrap_or(0)) << 8
    }

    fn u64(&mut self) -> u64 {
        let mut v = 0u64;
        for i in 0..8 {
            v |= u64::from(self.byte().unwrap_or(0)) << (8 * i);
        }
        v
    }
}

/// What an honest ring must hold, as long as nobody scribbled.
struct Model {
    bytes: VecDeque<u8>,
    rcv_cap: usize,
    switched: bool,
    sealed: Option<u64>,
    fin: Option<u64>,
    tail: u64,
}

/// Runs the operations `input` describes against a ring of [`MIN_CAPACITY`] bytes.
///
/// The first byte chooses the region: odd, its header is the next [`HEADER_SIZE`]
/// input bytes verbatim (a hostile formatter; the attach usually refuses it); even, it
/// is formatted properly. Then each byte is an operation, with its arguments after it:
/// a hostile store into a header word, read, peek, vectored read, status queries,
/// `set_rcv_cap`, write, switch/seal/shutdown, arming and waking, re-attaching.
pub fn fuzz_consume(input: &[u8]) {
    let mut inp = Input(input);
    let cap = MIN_CAPACITY;
    let region = AlignedBuf::zeroed(region_size(cap));
    let hostile_format = inp.byte().unwrap_or(0) & 1 == 1;
    let ring = if hostile_format {
        for off in (0..HEADER_SIZE).step_by(8) {
            region.scribble(off, inp.u64());
        }
        // SAFETY: the block is region.len() bytes, aligned, alive until the end of this
        // function, after every handle made from it; one producer and one consumer.
        match unsafe { RingRef::attach(region.ptr(), region.len()) } {
            Ok(r) => r,
            Err(_) => return,
        }
    } else {
        // SAFETY: as above.
        unsafe { RingRef::init(region.ptr(), region.len(), cap) }.expect("valid ring")
    };
    let mut prod = ring.producer();
    let mut cons = ring.consumer();
    let mut model = (!hostile_format).then(|| Model {
        bytes: VecDeque::new(),
        rcv_cap: cap,
        switched: false,
        sealed: None,
        fin: None,
        tail: 0,
    });
    let mut buf = vec![0u8; 2 * cap];
    let mut buf2 = vec![0u8; 2 * cap];
    let mut next = 0u8;
    let mut src = Vec::with_capacity(2 * cap);
    let woken = std::cell::Cell::new(0u64);
    let count = |_: NonZeroU64| woken.set(woken.get() + 1);

    while let Some(op) = inp.byte() {
        match op % 10 {
            // A hostile peer stores anything into any header word.
            0 => {
                let word =
                    layout::WORDS[usize::from(inp.byte().unwrap_or(0)) % layout::WORDS.len()];
                region.scribble(word, inp.u64());
                model = None;
            }
            1 => {
                let len = inp.u16() % (2 * cap);
                let r = cons.read(&mut buf[..len]);
                check_read(&mut model, r, &buf[..len], true);
            }
            2 => {
                let len = inp.u16() % (2 * cap);
                let r = cons.peek(&mut buf[..len]);
                check_read(&mut model, r, &buf[..len], false);
            }
            3 => {
                let (a, b) = (inp.u16() % cap, inp.u16() % cap);
                let r = cons.read_vectored(&mut [
                    IoSliceMut::new(&mut buf[..a]),
                    IoSliceMut::new(&mut buf2[..b]),
                ]);
                if let Ok(n) = r {
                    assert!(n <= a + b);
                    let mut got = buf[..n.min(a)].to_vec();
                    got.extend_from_slice(&buf2[..n.saturating_sub(a)]);
                    check_read(&mut model, Ok(n), &got, true);
                } else {
                    check_read(&mut model, r, &[], true);
                }
            }
            4 => check_state(&model, &cons, &prod),
            5 => {
                let v = cons.set_rcv_cap(inp.u16());
                assert!((1..=cap).contains(&v));
                if let Some(m) = &mut model {
                    m.rcv_cap = v;
                }
                let _ = cons.wake_writer(&count);
            }
            6 => {
                let len = inp.u16() % (2 * cap);
                src.clear();
                src.extend((0..len).map(|i| next.wrapping_add(i as u8)));
                let r = prod.write(&src);
                if let Ok(n) = r {
                    assert!(n <= len);
                    next = next.wrapping_add(n as u8);
                }
                check_write(&mut model, r, &src);
                let _ = prod.wake_reader(&count);
            }
            7 => {
                let what = inp.byte().unwrap_or(0);
                match what % 3 {
                    0 => {
                        let k = inp.u64() >> 8;
                        let done = prod.set_switch(k);
                        if let Some(m) = &mut model {
                            assert_eq!(done, !m.switched);
                            m.switched = true;
                        }
                    }
                    1 => {
                        let r = prod.seal();
                        check_close(&mut model, r, true);
                    }
                    _ => {
                        let r = prod.shutdown();
                        check_close(&mut model, r, false);
                    }
                }
                let _ = prod.wake_reader(&count);
            }
            8 => {
                let token = NonZeroU64::new(inp.u64() | 1).expect("odd");
                if inp.byte().unwrap_or(0) & 1 == 0 {
                    crate::wake::arm(cons.waiter(), token);
                    let _ = prod.wake_reader(&count);
                    crate::wake::disarm(cons.waiter(), token);
                } else {
                    crate::wake::arm(prod.waiter(), token);
                    let _ = cons.wake_writer(&count);
                    crate::wake::disarm(prod.waiter(), token);
                }
            }
            // Re-attach both ends from the shared state (exec, a new owner).
            _ => {
                // SAFETY: as above.
                match unsafe { RingRef::attach(region.ptr(), region.len()) } {
                    Ok(r) => {
                        prod = r.producer();
                        cons = r.consumer();
                    }
                    Err(_) => assert!(model.is_none(), "an honest ring re-attaches"),
                }
            }
        }
    }
}

fn check_read(model: &mut Option<Model>, r: Result<usize, Corrupt>, got: &[u8], consume: bool) {
    let Ok(n) = r else {
        assert!(model.is_none(), "an honest ring is never corrupt");
        return;
    };
    assert!(n <= got.len());
    let Some(m) = model else { return };
    let want = m.bytes.len().min(got.len());
    assert_eq!(n, want, "read count");
    assert!(m.bytes.iter().take(n).eq(got[..n].iter()), "read bytes");
    if consume {
        m.bytes.drain(..n);
    }
}

fn check_write(model: &mut Option<Model>, r: Result<usize, WriteError>, src: &[u8]) {
    let Some(m) = model else { return };
    let want = if !m.switched {
        Err(WriteError::NotSwitched)
    } else if m.sealed.is_some() || m.fin.is_some() {
        Err(WriteError::Closed)
    } else {
        Ok(m.rcv_cap.saturating_sub(m.bytes.len()).min(src.len()))
    };
    assert_eq!(r, want, "write");
    if let Ok(n) = r {
        m.bytes.extend(&src[..n]);
        m.tail += n as u64;
    }
}

fn check_close(model: &mut Option<Model>, r: Result<u64, WriteError>, seal: bool) {
    let Some(m) = model else { return };
    if !m.switched {
        assert_eq!(r, Err(WriteError::NotSwitched));
    } else if m.sealed.is_some() || m.fin.is_some() {
        assert_eq!(r, Err(WriteError::Closed));
    } else {
        assert_eq!(r, Ok(m.tail));
        if seal {
            m.sealed = Some(m.tail);
        } else {
            m.fin = Some(m.tail);
        }
    }
}

fn check_state(model: &Option<Model>, cons: &crate::ring::Consumer, prod: &Producer) {
    let cap = cons.capacity();
    let avail = cons.available();
    let status = cons.status();
    let room = prod.room();
    let unread = prod.unread();
    if let Ok(n) = avail {
        assert!(n <= cap);
    }
    if let Ok(r) = room {
        assert!(r <= cap);
    }
    if let Ok(u) = unread {
        assert!(u <= cap);
    }
    assert!(prod.rcv_cap() <= cap);
    let _ = cons.switch_k();
    let Some(m) = model else {
        let _ = (cons.sealed_at(), cons.is_shutdown());
        return;
    };
    let n = m.bytes.len();
    assert_eq!(avail, Ok(n));
    assert_eq!(unread, Ok(n));
    assert_eq!(room, Ok(m.rcv_cap.saturating_sub(n)));
    assert_eq!(prod.rcv_cap(), m.rcv_cap);
    assert_eq!(cons.sealed_at(), Ok(m.sealed));
    assert_eq!(cons.is_shutdown(), Ok(m.fin.is_some()));
    let want = match (n, m.sealed, m.fin) {
        (0, Some(at), _) => ReadState::Sealed(at),
        (0, None, Some(_)) => ReadState::Eof,
        (0, None, None) => ReadState::Empty,
        (n, _, _) => ReadState::Data(n),
    };
    assert_eq!(status, Ok(want));
}
