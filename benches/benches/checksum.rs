//! `checksum`: the Internet checksum's partial sum (`ember_core::wire::checksum::sum`)
//! over 20 bytes (a header), 1500 (an Ethernet MTU), 9000 (a jumbo frame) and 65536
//! bytes. Throughput is bytes summed per second.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ember_core::wire::checksum;
use ember_microbench::{MEASUREMENT_TIME, SAMPLE_SIZE, WARM_UP_TIME};
use std::hint::black_box;

const SIZES: [usize; 4] = [20, 1500, 9000, 65_536];

fn config() -> Criterion {
    Criterion::default()
        .sample_size(SAMPLE_SIZE)
        .measurement_time(MEASUREMENT_TIME)
        .warm_up_time(WARM_UP_TIME)
}

fn sum(c: &mut Criterion) {
    let data: Vec<u8> = (0..65_536u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut g = c.benchmark_group("checksum");
    for n in SIZES {
        g.throughput(Throughput::Bytes(n as u64));
        g.bench_with_input(BenchmarkId::new("sum", n), &data[..n], |b, d| {
            b.iter(|| checksum::sum(black_box(d)))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = sum
}
criterion_main!(benches);
