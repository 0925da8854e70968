//! The ember backend on small scripts written here: passes what ember does, fails with
//! the right line what it does not.

use ember_conformance::run::{run_script, RunOptions, RunResult};
use ember_conformance::script::parse;

fn run(text: &str) -> ember_conformance::run::Outcome {
    let s = parse(text).unwrap_or_else(|e| panic!("{e}"));
    run_script(&s, &RunOptions::default())
}

const PASSIVE_OPEN: &str = "
0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+0 < S 0:0(0) win 32792 <mss 1000,nop,wscale 7>
+0 > S. 0:0(0) ack 1 <...>
+.1 < . 1:1(0) ack 1 win 257
+0 accept(3, ..., ...) = 4
";

#[test]
fn passive_open_passes() {
    let o = run(PASSIVE_OPEN);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
}

#[test]
fn blocking_accept_completes_later() {
    let o = run("
0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+0...0.200 accept(3, ..., ...) = 4
+.1 < S 0:0(0) win 32792 <mss 1000,nop,wscale 7>
+0 > S. 0:0(0) ack 1 <...>
+.1 < . 1:1(0) ack 1 win 257
");
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
}

#[test]
fn data_exchange_and_close_pass() {
    let text = format!(
        "{PASSIVE_OPEN}
+0 write(4, ..., 1000) = 1000
+0 > P. 1:1001(1000) ack 1
+.1 < . 1:1(0) ack 1001 win 257
+0 < P. 1:501(500) ack 1001 win 257
+0 read(4, ..., 2000) = 500
+0 > . 1001:1001(0) ack 501
+.5 close(4) = 0
+0 > F. 1001:1001(0) ack 501
+.1 < F. 501:501(0) ack 1002 win 257
+0 > . 1002:1002(0) ack 502
"
    );
    let o = run(&text);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
}

#[test]
fn wrong_ack_is_a_failure_on_its_line() {
    let text = format!(
        "{PASSIVE_OPEN}
+0 write(4, ..., 1000) = 1000
+0 > P. 1:1001(1000) ack 7
"
    );
    let o = run(&text);
    match &o.result {
        RunResult::Fail {
            line,
            expected,
            got,
        } => {
            assert_eq!(*line, 12, "{o:?}");
            assert!(expected.contains("ack"), "{expected}");
            assert!(got.contains("ack 1"), "{got}");
        }
        r => panic!("{r:?}\n{}", o.detail),
    }
}

#[test]
fn errno_mismatch_is_a_failure() {
    let o = run("
0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+0 fcntl(3, F_SETFL, O_RDWR|O_NONBLOCK) = 0
+0 accept(3, ..., ...) = -1 ECONNRESET (whatever)
");
    match &o.result {
        RunResult::Fail {
            line,
            expected,
            got,
        } => {
            assert_eq!(*line, 6);
            assert!(expected.contains("ECONNRESET"), "{expected}");
            assert!(got.contains("EAGAIN"), "{got}");
        }
        r => panic!("{r:?}"),
    }
    // The right errno passes.
    let o = run("
0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+0 fcntl(3, F_SETFL, O_RDWR|O_NONBLOCK) = 0
+0 fcntl(3, F_GETFL) = O_RDWR|O_NONBLOCK
+0 accept(3, ..., ...) = -1 EAGAIN (Resource temporarily unavailable)
");
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
}

#[test]
fn a_missing_packet_fails_after_the_tolerance() {
    let text = format!("{PASSIVE_OPEN}\n+0 > P. 1:1001(1000) ack 1\n");
    match run(&text).result {
        RunResult::Fail { line, got, .. } => {
            assert_eq!(line, 11);
            assert!(got.contains("nothing"), "{got}");
        }
        r => panic!("{r:?}"),
    }
}

#[test]
fn active_open_and_retransmitted_syn() {
    let o = run("
0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 fcntl(3, F_SETFL, O_RDWR|O_NONBLOCK) = 0
+0 connect(3, ..., ...) = -1 EINPROGRESS (Operation now in progress)
+0 > S 0:0(0) <...>
+1 > S 0:0(0) <...>
+0 < S. 0:0(0) ack 1 win 5792 <mss 1460,nop,wscale 2>
+0 > . 1:1(0) ack 1
");
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
}

#[test]
fn code_blocks_and_unknown_calls_are_unsupported() {
    let o = run("0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0 %{ assert tcpi_rto == 1 }%\n");
    assert!(matches!(o.result, RunResult::Unsupported(_)), "{o:?}");
    let o = run("0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0 pipe([4, 5]) = 0\n");
    assert!(matches!(o.result, RunResult::Unsupported(_)), "{o:?}");
}

#[test]
fn tcp_info_assertions_are_evaluated() {
    let ok = format!("{PASSIVE_OPEN}+0 %{{ assert tcpi_snd_cwnd == 10, tcpi_snd_cwnd }}%\n");
    let o = run(&ok);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
    let bad = format!("{PASSIVE_OPEN}+0 %{{ assert tcpi_snd_cwnd == 11 }}%\n");
    match run(&bad).result {
        RunResult::Fail { line, got, .. } => {
            assert_eq!(line, 10);
            assert!(got.contains("tcpi_snd_cwnd = 10"), "{got}");
        }
        r => panic!("{r:?}"),
    }
    let unknown = format!("{PASSIVE_OPEN}+0 %{{ assert tcpi_busy_time == 0 }}%\n");
    assert!(matches!(
        run(&unknown).result,
        RunResult::Unsupported(r) if r.contains("tcpi_busy_time")
    ));
}
