//! Behaviours where ember differed from Linux, each as a small script run
//! against both backends: ember (in-process, virtual time; always) and, as root, the
//! Linux kernel through a TUN in a namespace (the check that Linux does what the script
//! says; without root it prints why it skipped that half). Each script failed on the
//! ember backend before its fix.

use std::path::Path;

use ember_conformance::linux::{available, run_script_linux, LinuxOptions};
use ember_conformance::run::{run_script, RunOptions, RunResult};
use ember_conformance::script::parse;

/// Runs `body` (after a passive open that leaves fd 4 connected) on both backends and
/// asserts that each passes.
fn both(name: &str, body: &str) {
    let text = format!(
        "--tolerance_usecs=50000
`sysctl -q net.ipv4.tcp_timestamps=0`
0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+.05 < S 0:0(0) win 32792 <mss 1000,sackOK,nop,nop,nop,wscale 7>
+0 > S. 0:0(0) ack 1 <...>
+.05 < . 1:1(0) ack 1 win 257
+0 accept(3, ..., ...) = 4
{body}"
    );
    run_both(name, &text);
}

/// Runs the whole script `text` on both backends and asserts that each passes.
fn run_both(name: &str, text: &str) {
    let s = parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let o = run_script(&s, &RunOptions::default());
    assert_eq!(o.result, RunResult::Pass, "{name}, ember: {}", o.detail);
    if let Err(e) = available() {
        eprintln!("{name}: Linux backend skipped: {e}");
        return;
    }
    let o = run_script_linux(&s, Path::new("/tmp"), &LinuxOptions { max_seconds: 20 });
    assert_eq!(o.result, RunResult::Pass, "{name}, Linux: {}", o.detail);
}

/// TIME-WAIT answers a segment beside RCV.NXT with an ACK of RCV.NXT (item 6). Before,
/// ember sent nothing.
#[test]
fn time_wait_acks_a_segment_beside_rcv_nxt() {
    both(
        "time-wait",
        "+0 close(4) = 0
+0 > F. 1:1(0) ack 1
+.05 < F. 1:1(0) ack 2 win 257
+0 > . 2:2(0) ack 2
+.05 < . 3:3(0) ack 2 win 257
+0 > . 2:2(0) ack 2
",
    );
}

/// A RST in CLOSE-WAIT leaves EPIPE for the application; reads still see end of file
/// (item 5). Before, ember said ECONNRESET.
#[test]
fn rst_in_close_wait_is_epipe() {
    both(
        "close-wait",
        "+0 < F. 1:1(0) ack 1 win 257
+0 > . 1:1(0) ack 2
+.05 < R. 2:2(0) ack 1 win 0
+0 read(4, ..., 100) = 0
+0 getsockopt(4, SOL_SOCKET, SO_ERROR, [EPIPE], [4]) = 0
",
    );
}

/// A RST in LAST-ACK (after the peer's FIN and shutdown(SHUT_WR)) leaves ECONNRESET
/// (item 5). Before, SO_ERROR stayed 0.
#[test]
fn rst_in_last_ack_is_econnreset() {
    both(
        "last-ack",
        "+0 < F. 1:1(0) ack 1 win 257
+0 > . 1:1(0) ack 2
+.05 shutdown(4, SHUT_WR) = 0
+0 > F. 1:1(0) ack 2
+.05 < R. 2:2(0) ack 1 win 0
+0 getsockopt(4, SOL_SOCKET, SO_ERROR, [ECONNRESET], [4]) = 0
",
    );
}

/// A RST in CLOSING (both FINs crossed, ours not yet acknowledged) leaves ECONNRESET
/// (item 5). Before, SO_ERROR stayed 0.
#[test]
fn rst_in_closing_is_econnreset() {
    both(
        "closing",
        "+.05 shutdown(4, SHUT_WR) = 0
+0 > F. 1:1(0) ack 1
+.01 < F. 1:1(0) ack 1 win 257
+0 > . 2:2(0) ack 2
+.05 < R. 2:2(0) ack 1 win 0
+0 getsockopt(4, SOL_SOCKET, SO_ERROR, [ECONNRESET], [4]) = 0
",
    );
}

/// A peer without window scaling: reading does not draw a window update that repeats
/// the 65,535 bytes the peer already sees (item 3). Before, ember sent one after the
/// read, which this script sees where it expects the ACK of the next segment.
#[test]
fn no_redundant_window_update_without_window_scaling() {
    let text = "--tolerance_usecs=50000
`sysctl -q net.ipv4.tcp_timestamps=0`
0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0
+0 setsockopt(3, SOL_SOCKET, SO_RCVBUF, [1048576], 4) = 0
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+.05 < S 0:0(0) win 65535 <mss 1000>
+0 > S. 0:0(0) ack 1 <...>
+.05 < . 1:1(0) ack 1 win 65535
+0 accept(3, ..., ...) = 4
+0 < P. 1:1001(1000) ack 1 win 65535
+0 > . 1:1(0) ack 1001
+.05 read(4, ..., 2000) = 1000
+.05 < P. 1001:2001(1000) ack 1 win 65535
+0 > . 1:1(0) ack 2001
";
    run_both("window update", text);
}
