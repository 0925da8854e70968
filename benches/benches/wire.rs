//! `wire`: building and parsing the frames of a data transfer.
//!
//! * `wire/emit_frame/{0,1460,65483}`: Ethernet, IPv4 and TCP (timestamps option) headers
//!   written in front of a payload already in place, IPv4 header checksum and TCP
//!   checksum (pseudo-header + header + payload) included. 65483 bytes is the largest
//!   payload one IPv4 datagram carries with this header (a "64 KiB" segment).
//! * `wire/parse_frame/{...}`: the same frame parsed back, both checksums verified.
//! * `wire/tcp_emit_header` and `wire/tcp_parse_header`: the 32-byte TCP header alone,
//!   without checksum work (what every segment costs besides its bytes).
//!
//! Throughput is the frame's bytes.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ember_core::wire::TcpRepr;
use ember_microbench::{
    parse_frame, DataSegment, DST_IP, MAX_TCP_TS_PAYLOAD, MEASUREMENT_TIME, SAMPLE_SIZE, SRC_IP,
    WARM_UP_TIME,
};
use std::hint::black_box;

const PAYLOADS: [usize; 3] = [0, 1460, MAX_TCP_TS_PAYLOAD];

fn config() -> Criterion {
    Criterion::default()
        .sample_size(SAMPLE_SIZE)
        .measurement_time(MEASUREMENT_TIME)
        .warm_up_time(WARM_UP_TIME)
}

fn wire(c: &mut Criterion) {
    let mut g = c.benchmark_group("wire");
    for len in PAYLOADS {
        let seg = DataSegment::new(len).expect("payload fits a datagram");
        let mut frame = DataSegment::frame(len).expect("payload fits a datagram");
        g.throughput(Throughput::Bytes(frame.len() as u64));
        g.bench_with_input(BenchmarkId::new("emit_frame", len), &seg, |b, seg| {
            b.iter(|| {
                black_box(seg).emit(black_box(&mut frame));
            })
        });
        let frame = DataSegment::frame(len).expect("payload fits a datagram");
        g.bench_with_input(BenchmarkId::new("parse_frame", len), &frame, |b, frame| {
            b.iter(|| {
                let (_, tcp, payload) = parse_frame(black_box(frame)).expect("valid frame");
                black_box((tcp, payload.len()))
            })
        });
    }

    let seg = DataSegment::new(0).expect("empty payload fits");
    let mut hdr = [0u8; 60];
    g.throughput(Throughput::Bytes(seg.tcp.header_len() as u64));
    g.bench_function("tcp_emit_header", |b| {
        b.iter(|| black_box(&seg.tcp).emit_header(black_box(&mut hdr)))
    });
    let len = seg.tcp.header_len();
    let mut bytes = vec![0u8; len];
    seg.tcp.emit(&mut bytes, SRC_IP, DST_IP);
    g.bench_function("tcp_parse_header", |b| {
        b.iter(|| {
            let (tcp, payload) =
                TcpRepr::parse(black_box(&bytes), SRC_IP, DST_IP, false).expect("valid header");
            black_box((tcp, payload.len()))
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = wire
}
criterion_main!(benches);
