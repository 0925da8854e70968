//! The test harness itself works: a pair completes a transfer and both ends close.
mod common;
use common::*;
use ember_core::tcp::State;
use std::time::Duration;

#[test]
fn pair_transfers_and_closes() {
    let mut p = Pair::new(settings(|_| {}), settings(|_| {}), Duration::from_millis(5));
    p.run_for(Duration::from_millis(50));
    assert_eq!(p.a.state(), State::Established);
    assert_eq!(p.b().state(), State::Established);
    let data = pattern(100_000);
    let mut off = 0;
    let mut got = Vec::new();
    while got.len() < data.len() {
        let now = p.now;
        if off < data.len() {
            off += p.a.send(now, &data[off..]).unwrap_or(0);
        }
        p.run_for(Duration::from_millis(10));
        got.extend(p.read_b());
    }
    assert_eq!(got, data);
    let now = p.now;
    p.a.close(now);
    p.run_for(Duration::from_millis(50));
    let now = p.now;
    p.b().close(now);
    p.run_for(Duration::from_millis(50));
    assert_eq!(p.a.state(), State::TimeWait);
    assert!(p.b().is_closed());
}

#[test]
fn one_handshake() {
    let (o, _peer) = One::established(settings(|_| {}), Default::default(), 65535);
    assert_eq!(o.tcb.state(), State::Established);
}
