//! `squeue`: the cost of entering a vertical perimeter, on a standalone squeue around a
//! perimeter that is only a counter (no worker thread: nothing else runs).
//!
//! Inline path (the squeue is idle and its queue empty, so the caller runs the item):
//!
//! * `squeue/try_process_inline`: `Squeue::try_process`, what a socket read or write
//!   does first;
//! * `squeue/enter_process_inline`: `Squeue::enter` in process mode (a `'static` item,
//!   never boxed on this path);
//! * `squeue/call_inline`: `Squeue::call`, returning a value.
//!
//! Queued paths:
//!
//! * `squeue/call_queued`: an item appended in fill mode, then a `call` that finds the
//!   queue non-empty, so it appends its own item (boxed, with a one-shot result slot),
//!   takes the idle squeue and drains both. Two queued items per iteration.
//! * `squeue/queued_drained_by_owner/64`: a thread inside the squeue enters it 64 times
//!   (each entry finds it busy and is appended), and drains the 64 items before
//!   releasing it. Throughput is items per second.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ember_microbench::{Counter, MEASUREMENT_TIME, SAMPLE_SIZE, WARM_UP_TIME};
use ember_runtime::squeue::{Mode, Squeue};
use std::hint::black_box;
use std::time::Duration;

const BATCH: u64 = 64;

fn config() -> Criterion {
    Criterion::default()
        .sample_size(SAMPLE_SIZE)
        .measurement_time(MEASUREMENT_TIME)
        .warm_up_time(WARM_UP_TIME)
}

fn squeue(c: &mut Criterion) {
    // A drain limit far above any drain here, no spin: a caller never hands off.
    let sq = Squeue::new(
        0,
        Counter::default(),
        Duration::from_secs(1),
        Duration::ZERO,
    );
    let mut g = c.benchmark_group("squeue");

    g.throughput(Throughput::Elements(1));
    g.bench_function("try_process_inline", |b| {
        b.iter(|| {
            sq.try_process(|p: &mut Counter| {
                p.n += 1;
                p.n
            })
            .ok()
        })
    });
    g.bench_function("enter_process_inline", |b| {
        b.iter(|| sq.enter(Mode::Process, black_box(1), |p: &mut Counter| p.n += 1))
    });
    g.bench_function("call_inline", |b| {
        b.iter(|| {
            sq.call(black_box(1), |p: &mut Counter| {
                p.n += 1;
                p.n
            })
        })
    });
    let before = sq.stats().snapshot();
    assert_eq!(before.queued, 0, "the inline benchmarks never queued");

    g.throughput(Throughput::Elements(2));
    g.bench_function("call_queued", |b| {
        b.iter(|| {
            sq.enter(Mode::Fill, black_box(1), |p: &mut Counter| p.n += 1);
            sq.call(black_box(2), |p: &mut Counter| {
                p.n += 1;
                p.n
            })
        })
    });

    g.throughput(Throughput::Elements(BATCH));
    g.bench_with_input(
        BenchmarkId::new("queued_drained_by_owner", BATCH),
        &BATCH,
        |b, &n| {
            b.iter(|| {
                sq.try_process(|_: &mut Counter| {
                    for tag in 0..n {
                        sq.enter(Mode::Process, black_box(tag), |p: &mut Counter| p.n += 1);
                    }
                })
                .ok()
            })
        },
    );
    g.finish();

    let after = sq.stats().snapshot();
    assert!(after.queued > before.queued, "the queued benchmarks queued");
    assert_eq!(
        after.queued, after.drained_by_caller,
        "every queued item was drained by the caller (there is no worker)"
    );
    assert_eq!(after.drain_handoffs, 0);
}

criterion_group! {
    name = benches;
    config = config();
    targets = squeue
}
criterion_main!(benches);
