//! RFC 4987: a flood of spoofed SYNs at a listener while real clients connect (the
//! simulator flood of docs/HARDENING.md). With SYN cookies (`tcp_syncookies=1`, the
//! default) the SYN queue fills with the flood's half-open connections and every later
//! SYN, the flood's and the clients', is answered with a cookie: the clients complete and
//! the server's memory stays within its bounds. Without cookies, the control run shows
//! the flood working: the clients' SYNs are dropped while the queue is full.
//!
//! `EMBER_SYNFLOOD_SYNS` sets the flood's size (default 1,000,000, at 100,000/s).

use ember_netem::ImpairConfig;
use ember_sim::{run, RunReport, SimConfig, SynFlood};
use std::time::Duration;

const CLIENTS: u32 = 1000;

fn flood_run(syns: u64, cookies: bool) -> RunReport {
    let cfg = SimConfig {
        seed: 9,
        conns: CLIENTS,
        bytes: 2000,
        impair: ImpairConfig {
            delay: Duration::from_millis(1),
            rate_bps: Some(1_000_000_000),
            ..ImpairConfig::default()
        },
        params: vec![(
            "tcp_syncookies".to_string(),
            if cookies { "1" } else { "0" }.to_string(),
        )],
        // The clients connect halfway through the flood (at least 0.5 s in, once it has
        // filled the SYN queue and churned the ARP table). Host 0 pings the
        // server from the start, so it knows the server's MAC address by then (else its
        // ARP queue, 64 packets, would hold back most of the 1,000 SYNs sent at once).
        conn_start: Duration::from_millis((syns / 200).max(500)),
        ping_every: Some(Duration::from_millis(100)),
        syn_flood: Some(SynFlood {
            count: syns,
            per_sec: 100_000,
            start: Duration::ZERO,
        }),
        time_limit: Duration::from_secs(600),
        ..SimConfig::default()
    };
    run(&cfg)
}

fn within(r: &RunReport, ms: f64) -> usize {
    r.connect_ms
        .iter()
        .filter(|c| c.is_some_and(|t| t <= ms))
        .count()
}

fn syns() -> u64 {
    std::env::var("EMBER_SYNFLOOD_SYNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

#[test]
fn syn_flood_with_cookies_real_clients_complete() {
    let n = syns();
    let wall = std::time::Instant::now();
    let r = flood_run(n, true);
    let f = r.flood.clone().unwrap();
    let fast = within(&r, 1000.0);
    eprintln!(
        "flood {} SYNs: {}/{} clients connected within 1 s, all finished: {}; server: \
         cookies sent {} recv {} failed {}, q0 drops {}; peak: {:?}; virtual {:.1} s, wall {:.1} s",
        f.sent,
        fast,
        CLIENTS,
        r.ok,
        f.server.syncookies_sent,
        f.server.syncookies_recv,
        f.server.syncookies_failed,
        f.server.listen_drop_q0,
        f.peak,
        r.virtual_s,
        wall.elapsed().as_secs_f64()
    );
    assert!(r.ok, "{:?}", r.error);
    assert_eq!(f.sent, n);
    // ≥ 99 % of the real clients connect within a second, in the middle of the flood.
    assert!(fast * 100 >= CLIENTS as usize * 99, "{fast} of {CLIENTS}");
    // Every SYN past the full queue got a cookie, and each client's came back.
    assert!(f.server.syncookies_sent + 1024 >= n, "{:?}", f.server);
    assert!(f.server.syncookies_recv >= u64::from(CLIENTS) * 99 / 100);
    // Memory stays within its bounds: the SYN queue (tcp_conn_req_max_q0 = 1024), the
    // clients' connections, the ARP table (1,024 entries, most holding one SYN,ACK for
    // a spoofed address) and the transmit queue.
    assert!(f.peak.half_open <= 1024, "{:?}", f.peak);
    assert!(f.peak.conns <= 1024 + CLIENTS as usize, "{:?}", f.peak);
    assert!(f.peak.arp_entries <= 1024, "{:?}", f.peak);
    assert!(f.peak.arp_pending <= 1024 * 64, "{:?}", f.peak);
    assert!(
        f.peak.tx_frames <= ember_core::host::MAX_TX_QUEUE,
        "{:?}",
        f.peak
    );
}

#[test]
fn syn_flood_without_cookies_stalls_clients() {
    // The control: the same flood, cookies off (smaller: the point is the contrast).
    let r = flood_run(200_000, false);
    let f = r.flood.clone().unwrap();
    let fast = within(&r, 1000.0);
    eprintln!(
        "no cookies, flood {} SYNs: {}/{} clients connected within 1 s; q0 drops {}; peak {:?}",
        f.sent, fast, CLIENTS, f.server.listen_drop_q0, f.peak
    );
    assert_eq!(f.server.syncookies_sent, 0);
    assert!(f.server.listen_drop_q0 > 100_000, "{:?}", f.server);
    assert!(
        fast * 2 < CLIENTS as usize,
        "{fast} of {CLIENTS} connected regardless"
    );
    assert!(f.peak.half_open <= 1024);
}
