//! `classifier`: the connected-table lookup every arriving segment makes.
//!
//! * `classifier/lookup_hit/{1,1000,100000}`: exact 4-tuple lookups that find their
//!   connection, in a table holding that many connections. Each iteration probes the
//!   next of up to 1,024 tuples spread over the table, so the same hash-table slot is not
//!   looked up again and again.
//! * `classifier/lookup_miss/{...}`: lookups of tuples the table does not hold (a
//!   segment for a listener or for no one).
//! * `classifier/flow_hash`: the tuple hash that picks the shard (and the receive queue).
//!
//! Throughput is lookups (elements) per second.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ember_microbench::{
    absent_tuple, conn_locs, tuple, MEASUREMENT_TIME, SAMPLE_SIZE, WARM_UP_TIME,
};
use ember_runtime::classifier::{flow_hash, Classifier, Tuple};
use std::hint::black_box;

const CONNS: [usize; 3] = [1, 1_000, 100_000];
const PROBES: usize = 1_024;

fn config() -> Criterion {
    Criterion::default()
        .sample_size(SAMPLE_SIZE)
        .measurement_time(MEASUREMENT_TIME)
        .warm_up_time(WARM_UP_TIME)
}

/// Looks up `probes` in turn, one per iteration; `hit` says whether each must be found.
fn probe_loop<'a>(c: &'a Classifier, probes: &'a [Tuple], hit: bool) -> impl FnMut() -> bool + 'a {
    let mut i = 0;
    move || {
        let found = c.lookup(black_box(&probes[i])).is_some();
        i = if i + 1 == probes.len() { 0 } else { i + 1 };
        assert_eq!(found, hit);
        found
    }
}

fn classifier(c: &mut Criterion) {
    let mut g = c.benchmark_group("classifier");
    g.throughput(Throughput::Elements(1));
    for n in CONNS {
        let table = Classifier::default();
        for (i, loc) in conn_locs(n, 4).into_iter().enumerate() {
            assert!(table.insert(tuple(i as u32), loc), "tuples are distinct");
        }
        assert_eq!(table.len(), n);
        let stride = (n / PROBES).max(1);
        let hits: Vec<Tuple> = (0..n.min(PROBES))
            .map(|k| tuple((k * stride) as u32))
            .collect();
        let misses: Vec<Tuple> = (0..PROBES as u32).map(absent_tuple).collect();
        g.bench_with_input(BenchmarkId::new("lookup_hit", n), &hits, |b, probes| {
            b.iter(probe_loop(&table, probes, true))
        });
        g.bench_with_input(BenchmarkId::new("lookup_miss", n), &misses, |b, probes| {
            b.iter(probe_loop(&table, probes, false))
        });
    }
    let t = tuple(12_345);
    g.bench_function("flow_hash", |b| b.iter(|| flow_hash(black_box(&t))));
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = classifier
}
criterion_main!(benches);
