//! The Linux backend against small inline scripts (root only: it makes a network
//! namespace and a TUN device; without root each test prints why and passes). These run
//! on the wall clock, so every script here has a generous `--tolerance_usecs` and lasts
//! well under a second. What is checked: a passive open, data both ways and a close pass;
//! a script that is wrong about what the kernel sends fails at that line with what the
//! kernel did; a blocking call completes at its scripted time; tcp_info assertions are
//! read from the kernel; set-up sysctls apply inside the namespace only.

use std::path::Path;

use ember_conformance::linux::{available, run_script_linux, LinuxOptions};
use ember_conformance::run::RunResult;
use ember_conformance::script::parse;

fn run(text: &str) -> Option<RunResult> {
    if let Err(e) = available() {
        eprintln!("skipped: {e}");
        return None;
    }
    let text = format!("--tolerance_usecs=50000\n{text}");
    let s = parse(&text).expect("test script parses");
    let out = run_script_linux(&s, Path::new("/tmp"), &LinuxOptions { max_seconds: 20 });
    eprintln!("{}", out.detail);
    Some(out.result)
}

const HANDSHAKE: &str = "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+.05 < S 0:0(0) win 32792 <mss 1000,sackOK,nop,nop,nop,wscale 7>
+0 > S. 0:0(0) ack 1 <...>
+.05 < . 1:1(0) ack 1 win 257
+0 accept(3, ..., ...) = 4
";

#[test]
fn passive_open_data_and_close_pass() {
    let script = format!(
        "{HANDSHAKE}+0 write(4, ..., 1000) = 1000
+0 > P. 1:1001(1000) ack 1
+.05 < . 1:1(0) ack 1001 win 257
+0 < P. 1:501(500) ack 1001 win 257
+0 > . 1001:1001(0) ack 501
+0 read(4, ..., 1000) = 500
+0 %{{ assert tcpi_snd_mss == 1000, tcpi_snd_mss }}%
+0 close(4) = 0
+0 > F. 1001:1001(0) ack 501
"
    );
    let Some(r) = run(&format!(
        "`sysctl -q net.ipv4.tcp_timestamps=0`\n{}",
        script
    )) else {
        return;
    };
    assert_eq!(r, RunResult::Pass);
}

#[test]
fn a_wrong_expectation_fails_at_its_line() {
    // The kernel acknowledges 500 bytes, not 400.
    let script = format!(
        "`sysctl -q net.ipv4.tcp_timestamps=0`\n{HANDSHAKE}+0 < P. 1:501(500) ack 1 win 257
+0 > . 1:1(0) ack 401
"
    );
    let Some(r) = run(&script) else { return };
    match r {
        RunResult::Fail { line, got, .. } => {
            assert_eq!(line, 12, "{got}");
            assert!(got.contains("ack 501"), "{got}");
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn a_blocking_read_returns_when_data_arrives() {
    let script = format!(
        "`sysctl -q net.ipv4.tcp_timestamps=0`\n{HANDSHAKE}+0...0.1 read(4, ..., 1000) = 100
+.1 < P. 1:101(100) ack 1 win 257
"
    );
    let Some(r) = run(&script) else { return };
    assert_eq!(r, RunResult::Pass);
    // Scripted too early: the read cannot return at 0.05 s.
    let early = format!(
        "`sysctl -q net.ipv4.tcp_timestamps=0`\n{HANDSHAKE}+0...0.02 read(4, ..., 1000) = 100
+.2 < P. 1:101(100) ack 1 win 257
"
    );
    let Some(r) = run(&early) else { return };
    assert!(matches!(r, RunResult::Fail { .. }), "{r:?}");
}

#[test]
fn namespace_sysctls_do_not_touch_the_host() {
    let before = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_timestamps").ok();
    let script = format!(
        "`sysctl -q net.ipv4.tcp_timestamps=0`\n{HANDSHAKE}+0 %{{ assert tcpi_options & 1 == 0 }}%\n"
    );
    let Some(r) = run(&script) else { return };
    assert_eq!(r, RunResult::Pass, "timestamps off in the namespace");
    let after = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_timestamps").ok();
    assert_eq!(before, after, "the host's sysctl is unchanged");
    // A sysctl outside net.* is refused, not run.
    let global = format!("`sysctl -q kernel.printk=7`\n{HANDSHAKE}");
    let Some(r) = run(&global) else { return };
    assert!(
        matches!(r, RunResult::Unsupported(ref w) if w.contains("outside net.")),
        "{r:?}"
    );
}

/// The scripts of `tests/scripts/` (behaviours where ember differed from Linux), which
/// the ember backend passes in `tests/run.rs`, pass on Linux too: they say what Linux
/// does.
#[test]
fn issue_19_scripts_pass_on_linux() {
    for (name, text) in [
        (
            "ewouldblock-is-eagain",
            include_str!("scripts/ewouldblock-is-eagain.pkt"),
        ),
        ("recv-msg-peek", include_str!("scripts/recv-msg-peek.pkt")),
        (
            "tcp-info-no-connection",
            include_str!("scripts/tcp-info-no-connection.pkt"),
        ),
        (
            "keepalive-options",
            include_str!("scripts/keepalive-options.pkt"),
        ),
        (
            "window-scaling-off",
            include_str!("scripts/window-scaling-off.pkt"),
        ),
        ("timestamps-off", include_str!("scripts/timestamps-off.pkt")),
        (
            "options-off-client",
            include_str!("scripts/options-off-client.pkt"),
        ),
    ] {
        // Each script sets its own tolerance; `run` adds one before it, which the
        // script's own line overrides.
        let Some(r) = run(text) else { return };
        assert_eq!(r, RunResult::Pass, "{name}");
    }
}
