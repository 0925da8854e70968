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
    // With no socket at all, a tcp_info assertion has nothing to read.
    let o = run("0 %{ assert tcpi_rto == 1 }%\n");
    assert!(matches!(o.result, RunResult::Unsupported(_)), "{o:?}");
    // A socket with no connection answers as Linux's does (see `tcp_info_without_a_connection`).
    let o = run("0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0 %{ assert tcpi_rto == 1 }%\n");
    assert_eq!(fail_of(&o).2, "tcpi_rto = 1000000", "{o:?}");
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
    let unknown = format!("{PASSIVE_OPEN}+0 %{{ assert tcpi_reord_seen == 0 }}%\n");
    assert!(matches!(
        run(&unknown).result,
        RunResult::Unsupported(r) if r.contains("tcpi_reord_seen")
    ));
}

/// The first failure's line and texts, or a panic with the outcome.
fn fail_of(o: &ember_conformance::run::Outcome) -> (u32, String, String) {
    match &o.result {
        RunResult::Fail {
            line,
            expected,
            got,
        } => (*line, expected.clone(), got.clone()),
        r => panic!("{r:?}\n{}", o.detail),
    }
}

#[test]
fn code_block_variables_constants_and_states() {
    let ok = format!(
        "{PASSIVE_OPEN}+0 %{{ TCP_INFINITE_SSTHRESH = 0x7fffffff\nN = 2\nN += 3\nprint(N) }}%
+0 %{{ assert N == 5, N; assert tcpi_snd_ssthresh == TCP_INFINITE_SSTHRESH }}%
+0 %{{ assert tcpi_state == TCP_ESTABLISHED; assert tcpi_ca_state == TCP_CA_Open }}%
+0 %{{ assert tcpi_options & TCPI_OPT_WSCALE != 0; assert tcpi_options & TCPI_OPT_TIMESTAMPS == 0 }}%
+0 %{{ assert tcpi_advmss == 1460; assert tcpi_pmtu == 1500; assert tcpi_delivered_ce == 0 }}%
"
    );
    let o = run(&ok);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
    let bad =
        format!("{PASSIVE_OPEN}+0 %{{ assert tcpi_ca_state == TCP_CA_Loss, tcpi_ca_state }}%\n");
    let (line, expected, got) = fail_of(&run(&bad));
    assert_eq!(line, 10);
    assert!(expected.contains("TCP_CA_Loss"), "{expected}");
    assert!(got.contains("tcpi_ca_state = 0"), "{got}");
    // The second assert of a line is the one reported.
    let bad = format!(
        "{PASSIVE_OPEN}+0 %{{ assert tcpi_snd_mss == 1000; assert tcpi_rcv_wscale == 99 }}%\n"
    );
    let (_, expected, _) = fail_of(&run(&bad));
    assert!(expected.contains("tcpi_rcv_wscale == 99"), "{expected}");
}

#[test]
fn ca_state_follows_loss_recovery() {
    // Three duplicate ACKs with SACK put ember in fast recovery (RFC 6675): state 3.
    let o = run("
0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+0 < S 0:0(0) win 32792 <mss 1000,sackOK,nop,nop,nop,wscale 7>
+0 > S. 0:0(0) ack 1 <...>
+.1 < . 1:1(0) ack 1 win 257
+0 accept(3, ..., ...) = 4
+0 write(4, ..., 10000) = 10000
+0 > P. 1:10001(10000) ack 1
+.1 < . 1:1(0) ack 1 win 257 <sack 1001:2001,nop,nop>
+0 %{ assert tcpi_ca_state == TCP_CA_Disorder, tcpi_ca_state }%
+0 < . 1:1(0) ack 1 win 257 <sack 1001:3001,nop,nop>
+0 < . 1:1(0) ack 1 win 257 <sack 1001:4001,nop,nop>
+0 > . 1:1001(1000) ack 1
+0 %{ assert tcpi_ca_state == TCP_CA_Recovery, tcpi_ca_state }%
+0 %{ assert tcpi_total_retrans == 1, tcpi_total_retrans }%
");
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
}

#[test]
fn last_data_recv_is_in_milliseconds() {
    let text = format!(
        "{PASSIVE_OPEN}+0 < P. 1:101(100) ack 1 win 257
+0 > . 1:1(0) ack 101
+.5 %{{ assert 495 <= tcpi_last_data_recv <= 505, tcpi_last_data_recv }}%
+0 %{{ assert tcpi_bytes_received == 100, tcpi_bytes_received }}%
"
    );
    let o = run(&text);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
}

#[test]
fn tcp_maxseg_shapes_the_syn_and_is_reported() {
    let o = run("
0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 getsockopt(3, SOL_TCP, TCP_MAXSEG, [536], [4]) = 0
+0 setsockopt(3, SOL_TCP, TCP_MAXSEG, [50], 4) = -1 EINVAL (Invalid argument)
+0 setsockopt(3, SOL_TCP, TCP_MAXSEG, [1100], 4) = 0
+0 getsockopt(3, SOL_TCP, TCP_MAXSEG, [1100], [4]) = 0
+0 fcntl(3, F_SETFL, O_RDWR|O_NONBLOCK) = 0
+0 connect(3, ..., ...) = -1 EINPROGRESS (Operation now in progress)
+0 > S 0:0(0) <mss 1100,sackOK,TS val 100 ecr 0,nop,wscale 8>
+.1 < S. 0:0(0) ack 1 win 32792 <mss 1460,nop,wscale 7>
+0 > . 1:1(0) ack 1
+0 getsockopt(3, SOL_TCP, TCP_MAXSEG, [1100], [4]) = 0
+0 %{ assert tcpi_advmss == 1100; assert tcpi_snd_mss == 1100 }%
");
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
    // On a listener it shapes the SYN-ACK and the accepted connection.
    let o = run("
0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+0 setsockopt(3, SOL_TCP, TCP_MAXSEG, [1100], 4) = 0
+0 getsockopt(3, SOL_TCP, TCP_MAXSEG, [1100], [4]) = 0
+0 < S 0:0(0) win 32792 <mss 1300,nop,wscale 7>
+0 > S. 0:0(0) ack 1 <mss 1100,nop,wscale 8>
+.1 < . 1:1(0) ack 1 win 257
+0 accept(3, ..., ...) = 4
+0 getsockopt(4, SOL_TCP, TCP_MAXSEG, [1100], [4]) = 0
+0 %{ assert tcpi_advmss == 1100; assert tcpi_snd_mss == 1100 }%
");
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
}

#[test]
fn getsockopt_reports_what_was_set() {
    let text = format!(
        "{PASSIVE_OPEN}+0 setsockopt(4, SOL_SOCKET, SO_SNDBUF, [21000], 4) = 0
+0 getsockopt(4, SOL_SOCKET, SO_SNDBUF, [42000], [4]) = 0
+0 getsockopt(4, SOL_TCP, TCP_NODELAY, [0], [4]) = 0
+0 setsockopt(4, SOL_TCP, TCP_NODELAY, [1], 4) = 0
+0 getsockopt(4, SOL_TCP, TCP_NODELAY, [1], [4]) = 0
+0 getsockopt(4, SOL_TCP, TCP_MAXSEG, [1000], [4]) = 0
"
    );
    let o = run(&text);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
    let bad = format!("{PASSIVE_OPEN}+0 getsockopt(4, SOL_TCP, TCP_MAXSEG, [1460], [4]) = 0\n");
    let (line, _, got) = fail_of(&run(&bad));
    assert_eq!(line, 10);
    assert!(got.contains("TCP_MAXSEG 1000"), "{got}");
}

#[test]
fn ioctl_queue_sizes() {
    let text = format!(
        "{PASSIVE_OPEN}+0 < P. 1:501(500) ack 1 win 257
+0 > . 1:1(0) ack 501
+0 ioctl(4, SIOCINQ, [500]) = 0
+0 ioctl(4, FIONREAD, [500]) = 0
+0 write(4, ..., 1000) = 1000
+0 > P. 1:1001(1000) ack 501
+0 ioctl(4, SIOCOUTQ, [1000]) = 0
+0 ioctl(4, SIOCOUTQNSD, [0]) = 0
+.1 < . 501:501(0) ack 1001 win 257
+0 ioctl(4, SIOCOUTQ, [0]) = 0
+0 ioctl(3, SIOCINQ, [0]) = -1 EINVAL (Invalid argument)
"
    );
    let o = run(&text);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
    let bad = format!("{PASSIVE_OPEN}+0 ioctl(4, SIOCINQ, [7]) = 0\n");
    let (line, _, got) = fail_of(&run(&bad));
    assert_eq!((line, got.as_str()), (10, "SIOCINQ 0"));
}

#[test]
fn msg_more_holds_data_until_a_send_without_it() {
    let text = format!(
        "{PASSIVE_OPEN}+0 setsockopt(4, SOL_TCP, TCP_NODELAY, [1], 4) = 0
+0 send(4, ..., 40, MSG_MORE) = 40
+.05 sendmsg(4, {{msg_name(...)=..., msg_iov(2)=[{{..., 10}}, {{..., 30}}], msg_flags=0}}, MSG_MORE) = 40
+.05 write(4, ..., 20) = 20
+0 > P. 1:101(100) ack 1
"
    );
    let o = run(&text);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
    // Without MSG_MORE (and with TCP_NODELAY) the first send leaves at once, which
    // the same script does not expect.
    let text = format!(
        "{PASSIVE_OPEN}+0 setsockopt(4, SOL_TCP, TCP_NODELAY, [1], 4) = 0
+0 send(4, ..., 40, 0) = 40
+.05 write(4, ..., 20) = 20
+0 > P. 1:61(60) ack 1
"
    );
    let (line, _, got) = fail_of(&run(&text));
    assert_eq!(line, 13);
    assert!(got.contains("1:41(40)"), "{got}");
}

#[test]
fn vectored_io_and_null_buffers() {
    let text = format!(
        "{PASSIVE_OPEN}+0 writev(4, [{{..., 100}}, {{..., 200}}], 2) = 300
+0 > P. 1:301(300) ack 1
+0 write(4, NULL, 1000) = -1 EFAULT (Bad address)
+0 send(4, NULL, 1000, 0) = -1 EFAULT (Bad address)
+.1 < P. 1:1001(1000) ack 301 win 257
+0 > . 301:301(0) ack 1001
+0 read(4, NULL, 1000) = -1 EFAULT (Bad address)
+0 recvmsg(4, {{msg_name(...)=..., msg_iov(1)=[{{..., 600}}], msg_flags=0}}, 0) = 600
+0 readv(4, [{{..., 300}}, {{..., 300}}], 2) = 400
"
    );
    let o = run(&text);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
}

#[test]
fn accept4_sets_the_new_socket_nonblocking() {
    let text = PASSIVE_OPEN.replace(
        "+0 accept(3, ..., ...) = 4",
        "+0 accept4(3, ..., ..., SOCK_NONBLOCK) = 4\n+0 read(4, ..., 100) = -1 EAGAIN (Resource temporarily unavailable)",
    );
    let o = run(&text);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
}

#[test]
fn epoll_level_and_edge_triggered() {
    let text = format!(
        "{PASSIVE_OPEN}+0 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0
+0 epoll_create(1) = 5
+0 epoll_ctl(5, EPOLL_CTL_ADD, 4, {{events=EPOLLIN|EPOLLOUT|EPOLLET, fd=4}}) = 0
+0 epoll_wait(5, {{events=EPOLLOUT, fd=4}}, 1, 0) = 1
+0 epoll_wait(5, {{events=0, ptr=0}}, 1, 0) = 0
+0 < P. 1:101(100) ack 1 win 257
+0 > . 1:1(0) ack 101
+0 epoll_wait(5, {{events=EPOLLIN|EPOLLOUT, fd=4}}, 1, 0) = 1
+0 epoll_wait(5, {{events=0, ptr=0}}, 1, 0) = 0
+0 epoll_ctl(5, EPOLL_CTL_MOD, 4, {{events=EPOLLIN, ptr=77}}) = 0
+0 epoll_wait(5, {{events=EPOLLIN, ptr=77}}, 1, 0) = 1
+0 epoll_wait(5, {{events=EPOLLIN, ptr=77}}, 1, 0) = 1
+0 read(4, ..., 1000) = 100
+0 epoll_wait(5, {{events=0, ptr=0}}, 1, 0) = 0
+0 epoll_ctl(5, EPOLL_CTL_ADD, 4, {{events=EPOLLIN, fd=4}}) = -1 EEXIST (File exists)
+0 epoll_ctl(5, EPOLL_CTL_DEL, 4, {{events=0, fd=4}}) = 0
+0 epoll_ctl(5, EPOLL_CTL_DEL, 4, {{events=0, fd=4}}) = -1 ENOENT (No such file)
+0 close(5) = 0
"
    );
    let o = run(&text);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
    let bad = format!(
        "{PASSIVE_OPEN}+0 epoll_create(1) = 5
+0 epoll_ctl(5, EPOLL_CTL_ADD, 4, {{events=EPOLLIN|EPOLLOUT, fd=4}}) = 0
+0 epoll_wait(5, {{events=EPOLLIN|EPOLLOUT, fd=4}}, 1, 0) = 1
"
    );
    let (line, expected, got) = fail_of(&run(&bad));
    assert_eq!(line, 12);
    assert_eq!(
        (expected.as_str(), got.as_str()),
        ("events IN|OUT", "events OUT")
    );
}

#[test]
fn poll_blocks_until_ready_or_its_timeout() {
    let text = format!(
        "{PASSIVE_OPEN}+0 poll([{{fd=4, events=POLLIN|POLLOUT, revents=POLLOUT}}], 1, 0) = 1
+0...0.050 poll([{{fd=4, events=POLLIN, revents=0}}], 1, 50) = 0
+.05...0.150 poll([{{fd=4, events=POLLIN, revents=POLLIN}}], 1, 1000) = 1
+.1 < P. 1:101(100) ack 1 win 257
+0 > . 1:1(0) ack 101
+.1 < F. 101:101(0) ack 1 win 257
+0 > . 1:1(0) ack 102
+0 poll([{{fd=4, events=POLLIN|POLLRDHUP, revents=POLLIN|POLLRDHUP}}], 1, 0) = 1
"
    );
    let o = run(&text);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
    // A poll that should wake but times out fails on its line.
    let bad = format!(
        "{PASSIVE_OPEN}+0...0.050 poll([{{fd=4, events=POLLIN, revents=POLLIN}}], 1, 50) = 1\n"
    );
    let (line, _, got) = fail_of(&run(&bad));
    assert_eq!(line, 10);
    assert!(got.contains("revents 0"), "{got}");
}

#[test]
fn mss_option_splits_inbound_data() {
    let text = format!(
        "--mss=1000\n{PASSIVE_OPEN}+0 < . 1:3001(3000) ack 1 win 257
+0 %{{ assert tcpi_rcv_mss == 1000, tcpi_rcv_mss }}%
+0 %{{ assert tcpi_bytes_received == 3000, tcpi_bytes_received }}%
"
    );
    let o = run(&text);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
    // Without the option the 3000 bytes arrive in one segment.
    let text = text.replace("--mss=1000\n", "");
    let (line, _, got) = fail_of(&run(&text));
    assert_eq!(line, 11);
    assert!(got.contains("tcpi_rcv_mss = 1460"), "{got}");
}

const PASSIVE_OPEN_TS: &str = "
0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+0 < S 0:0(0) win 20000 <mss 1000,sackOK,TS val 100 ecr 0>
+0 > S. 0:0(0) ack 1 <mss 1460,sackOK,TS val 100 ecr 100>
+.1 < . 1:1(0) ack 1 win 20000 <nop,nop,TS val 200 ecr 100>
+0 accept(3, ..., ...) = 4
+1 close(4) = 0
";

#[test]
fn ts_tick_option_checks_the_stacks_clock() {
    let ok = format!("--tcp_ts_tick_usecs=1000\n{PASSIVE_OPEN_TS}+0 > F. 1:1(0) ack 1 <nop,nop,TS val 1200 ecr 200>\n");
    let o = run(&ok);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
    let bad = ok.replace("TS val 1200", "TS val 1500");
    let (_, expected, got) = fail_of(&run(&bad));
    assert!(expected.contains("TS val"), "{expected}");
    assert!(got.contains("1200"), "{got}");
    // Without the option the value is not checked.
    let unchecked = bad.replace("--tcp_ts_tick_usecs=1000\n", "");
    assert_eq!(run(&unchecked).result, RunResult::Pass);
    // Another tick is not ember's.
    let other = ok.replace("=1000", "=10");
    assert!(matches!(run(&other).result, RunResult::Unsupported(_)));
}

#[test]
fn ip_tos_is_applied_and_reported() {
    let text = format!(
        "{PASSIVE_OPEN}+0 setsockopt(4, SOL_IP, IP_TOS, [0x2b], 1) = 0
+0 getsockopt(4, SOL_IP, IP_TOS, [0x28], [4]) = 0
+0 write(4, ..., 100) = 100
+0 > [tos 0x28] P. 1:101(100) ack 1
"
    );
    let o = run(&text);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
    // The byte is on the wire: another value fails on the packet line.
    let (line, _, _) = fail_of(&run(&text.replace("[tos 0x28]", "[tos 0x2c]")));
    assert_eq!(line, 13);
}

/// A listener that accepted a SACK connection (MSS 1000) and wrote 10 segments.
const SACK_TEN_OUT: &str = "
0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+0 < S 0:0(0) win 32792 <mss 1000,sackOK,nop,nop,nop,wscale 7>
+0 > S. 0:0(0) ack 1 <...>
+.1 < . 1:1(0) ack 1 win 257
+0 accept(3, ..., ...) = 4
+0 %{ assert tcpi_delivered == 1, tcpi_delivered }%
+0 %{ assert tcpi_reordering == 3, tcpi_reordering }%
+0 write(4, ..., 10000) = 10000
+0 > P. 1:10001(10000) ack 1
";

#[test]
fn lost_retrans_and_delivered_follow_recovery() {
    // Three SACKed segments above 1:1001 make RACK deem it lost (RFC 8985: the
    // reordering window is 0 with DupThresh segments SACKed); the retransmission is
    // in flight until the cumulative ACK, after which every counter is back to 0.
    let ok = format!(
        "{SACK_TEN_OUT}+.1 < . 1:1(0) ack 1 win 257 <sack 1001:4001,nop,nop>
+0 > . 1:1001(1000) ack 1
+0 %{{ assert tcpi_lost == 1, tcpi_lost }}%
+0 %{{ assert tcpi_retrans == 1, tcpi_retrans }}%
+0 %{{ assert tcpi_delivered == 4, tcpi_delivered }}%
+0 %{{ assert tcpi_reordering == 3, tcpi_reordering }}%
+.1 < . 1:1(0) ack 10001 win 257
+0 %{{ assert tcpi_lost == 0 and tcpi_retrans == 0, (tcpi_lost, tcpi_retrans) }}%
+0 %{{ assert tcpi_delivered == 11, tcpi_delivered }}%
+0 %{{ assert tcpi_total_retrans == 1, tcpi_total_retrans }}%
"
    );
    let o = run(&ok);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
    let bad = ok.replace("tcpi_lost == 1,", "tcpi_lost == 2,");
    let (_, _, got) = fail_of(&run(&bad));
    assert!(got.contains("tcpi_lost = 1"), "{got}");
    let bad = ok.replace("tcpi_delivered == 11", "tcpi_delivered == 10");
    let (_, _, got) = fail_of(&run(&bad));
    assert!(got.contains("tcpi_delivered = 11"), "{got}");
}

#[test]
fn reordering_is_the_distance_below_the_highest_sacked() {
    // 5001:6001 is SACKed first; 1:5001, never retransmitted, arrives afterwards:
    // reordering of (6001 - 1) / 1000 = 6 segments, no loss.
    let ok = format!(
        "{SACK_TEN_OUT}+.1 < . 1:1(0) ack 1 win 257 <sack 5001:6001,nop,nop>
+0 < . 1:1(0) ack 6001 win 257
+0 %{{ assert tcpi_reordering == 6, tcpi_reordering }}%
+0 %{{ assert tcpi_lost == 0, tcpi_lost }}%
"
    );
    let o = run(&ok);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
    let (_, _, got) = fail_of(&run(&ok.replace("== 6,", "== 5,")));
    assert!(got.contains("tcpi_reordering = 6"), "{got}");
}

#[test]
fn rwnd_limited_and_busy_time() {
    // A zero window holds 1000 bytes back for 100 ms; then 30 ms in flight; then idle.
    let ok = "
0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+0 < S 0:0(0) win 0 <mss 1000,nop,wscale 7>
+0 > S. 0:0(0) ack 1 <...>
+.1 < . 1:1(0) ack 1 win 0
+0 accept(3, ..., ...) = 4
+0 %{ assert tcpi_rwnd_limited == 0 and tcpi_busy_time == 0 }%
+0 write(4, ..., 1000) = 1000
+.1 < . 1:1(0) ack 1 win 257
+0 > P. 1:1001(1000) ack 1
+0 %{ assert 99000 <= tcpi_rwnd_limited <= 101000, tcpi_rwnd_limited }%
+.03 < . 1:1(0) ack 1001 win 257
+.05 %{ assert 99000 <= tcpi_rwnd_limited <= 101000, tcpi_rwnd_limited }%
+0 %{ assert 129000 <= tcpi_busy_time <= 131000, tcpi_busy_time }%
+0 %{ assert tcpi_sndbuf_limited == 0, tcpi_sndbuf_limited }%
";
    let o = run(ok);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
    let (_, _, got) = fail_of(&run(&ok.replace("129000 <=", "131000 <=")));
    assert!(got.contains("tcpi_busy_time = 130000"), "{got}");
}

#[test]
fn sndbuf_limited_while_the_writer_waits_with_everything_sent() {
    // A 2048-byte send buffer, a 10-segment congestion window: all 2048 bytes go out
    // at once and the blocked writer waits 50 ms for the ACK (send-buffer-limited).
    // They leave as one large segment (LSO) split before the device, so PSH is on its
    // last piece only, as on the end of a Linux GSO chunk.
    let ok = "
0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+0 < S 0:0(0) win 32792 <mss 1000,nop,wscale 7>
+0 > S. 0:0(0) ack 1 <...>
+.1 < . 1:1(0) ack 1 win 257
+0 accept(3, ..., ...) = 4
+0 setsockopt(4, SOL_SOCKET, SO_SNDBUF, [1024], 4) = 0
+0 setsockopt(4, IPPROTO_TCP, TCP_NODELAY, [1], 4) = 0
+0 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0
+0 write(4, ..., 4000) = 2048
+0 > . 1:1001(1000) ack 1
+0 > . 1001:2001(1000) ack 1
+0 > P. 2001:2049(48) ack 1
+.05 < . 1:1(0) ack 2049 win 257
+.05 %{ assert 49000 <= tcpi_sndbuf_limited <= 51000, tcpi_sndbuf_limited }%
+0 %{ assert 49000 <= tcpi_busy_time <= 51000, tcpi_busy_time }%
+0 %{ assert tcpi_rwnd_limited == 0, tcpi_rwnd_limited }%
";
    let o = run(ok);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
    let (_, _, got) = fail_of(&run(
        &ok.replace("49000 <= tcpi_sndbuf", "51000 <= tcpi_sndbuf")
    ));
    assert!(got.contains("tcpi_sndbuf_limited = 50000"), "{got}");
}

// Scripts of `tests/scripts/` (behaviours where ember differed from Linux): each passes
// on the ember backend here and on the Linux backend in `tests/linux.rs`.

fn script_passes(text: &str) {
    let o = run(text);
    assert_eq!(o.result, RunResult::Pass, "{}", o.detail);
}

/// `= -1 EWOULDBLOCK` matches EAGAIN (one errno, 11, on Linux).
#[test]
fn ewouldblock_is_eagain() {
    script_passes(include_str!("scripts/ewouldblock-is-eagain.pkt"));
    // A different errno still fails.
    let text = format!(
        "{PASSIVE_OPEN}+0 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0
+0 read(4, ..., 1000) = -1 EINVAL (Invalid argument)
"
    );
    assert!(
        matches!(run(&text).result, RunResult::Fail { line: 11, .. }),
        "EINVAL is not EAGAIN"
    );
}

/// recv(MSG_PEEK): data stays to be read; a blocking peek waits for data.
#[test]
fn recv_msg_peek() {
    script_passes(include_str!("scripts/recv-msg-peek.pkt"));
}

/// `%{ }%` on a socket with no connection (TCP_CLOSE) and on a listener (TCP_LISTEN).
#[test]
fn tcp_info_without_a_connection() {
    script_passes(include_str!("scripts/tcp-info-no-connection.pkt"));
}

/// TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT set and read one by one.
#[test]
fn keepalive_options() {
    script_passes(include_str!("scripts/keepalive-options.pkt"));
}

/// tcp_window_scaling=0 and tcp_timestamps=0: the options are neither accepted nor
/// offered.
#[test]
fn window_scaling_and_timestamps_off() {
    script_passes(include_str!("scripts/window-scaling-off.pkt"));
    script_passes(include_str!("scripts/timestamps-off.pkt"));
    script_passes(include_str!("scripts/options-off-client.pkt"));
}

/// The `tcpi_state` names are include/net/tcp_states.h's numbers.
#[test]
fn tcp_state_names() {
    let names = [
        ("TCP_ESTABLISHED", 1),
        ("TCP_SYN_SENT", 2),
        ("TCP_SYN_RECV", 3),
        ("TCP_FIN_WAIT1", 4),
        ("TCP_FIN_WAIT2", 5),
        ("TCP_TIME_WAIT", 6),
        ("TCP_CLOSE", 7),
        ("TCP_CLOSE_WAIT", 8),
        ("TCP_LAST_ACK", 9),
        ("TCP_LISTEN", 10),
        ("TCP_CLOSING", 11),
        ("TCP_NEW_SYN_RECV", 12),
        ("TCP_BOUND_INACTIVE", 13),
    ];
    let mut text = format!("{PASSIVE_OPEN}+0 %{{ assert tcpi_state == TCP_ESTABLISHED }}%\n");
    for (n, v) in names {
        text += &format!("+0 %{{ assert {n} == {v}, {n} }}%\n");
    }
    script_passes(&text);
}
