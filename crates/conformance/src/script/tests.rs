//! Unit tests of the script parser, one construct at a time, on small scripts written
//! for these tests; then errors (with positions) and property tests that no input
//! panics.

use super::*;
use proptest::prelude::*;

fn ok(src: &str) -> Script {
    parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

/// The single event of a one-event script.
fn one(src: &str) -> Event {
    let s = ok(src);
    assert_eq!(s.events.len(), 1, "{src}");
    s.events.into_iter().next().unwrap()
}

fn tcp(src: &str) -> (Packet, TcpPacket) {
    match one(src).action {
        Action::Packet(p) => match p.body.clone() {
            PacketBody::Tcp(t) => (p, t),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

fn syscall(src: &str) -> Syscall {
    match one(src).action {
        Action::Syscall(s) => s,
        other => panic!("{other:?}"),
    }
}

fn us(micros: i64) -> Time {
    Time { micros }
}

fn err(src: &str) -> ParseError {
    match parse(src) {
        Ok(s) => panic!("parsed: {s:?}"),
        Err(e) => e,
    }
}

#[test]
fn event_times() {
    let cases = [
        ("0 close(3) = 0", EventTime::Absolute(us(0))),
        ("2.5 close(3) = 0", EventTime::Absolute(us(2_500_000))),
        ("+0 close(3) = 0", EventTime::Relative(us(0))),
        ("+.02 close(3) = 0", EventTime::Relative(us(20_000))),
        ("+3 close(3) = 0", EventTime::Relative(us(3_000_000))),
        ("* close(3) = 0", EventTime::Any),
        (
            "1~1.5 close(3) = 0",
            EventTime::AbsoluteRange(us(1_000_000), us(1_500_000)),
        ),
        (
            "+.2~+.25 close(3) = 0",
            EventTime::RelativeRange(us(200_000), us(250_000)),
        ),
    ];
    for (src, want) in cases {
        assert_eq!(one(src).time, want, "{src}");
    }
    assert!(parse("+.2~.25 close(3) = 0").is_err());
    assert!(parse("close(3) = 0").is_err());
}

#[test]
fn options_init_and_cleanup() {
    let s = ok("--tolerance_usecs=15000\n--bare_flag\n--peer=10.0.0.9\n`setup.sh\n more`\n0 close(3) = 0\n`teardown.sh`\n");
    assert_eq!(
        s.options,
        vec![
            ScriptOption {
                line: 1,
                name: "tolerance_usecs".into(),
                value: Some("15000".into())
            },
            ScriptOption {
                line: 2,
                name: "bare_flag".into(),
                value: None
            },
            ScriptOption {
                line: 3,
                name: "peer".into(),
                value: Some("10.0.0.9".into())
            },
        ]
    );
    assert_eq!(
        s.init_command,
        Some(Command {
            line: 4,
            text: "setup.sh\n more".into()
        })
    );
    assert_eq!(s.events[0].line, 6);
    assert_eq!(
        s.cleanup_command,
        Some(Command {
            line: 7,
            text: "teardown.sh".into()
        })
    );
    // Timed commands are events.
    let e = one("+1 `echo hi > /dev/null`");
    assert_eq!(
        e.action,
        Action::Command(Command {
            line: 1,
            text: "echo hi > /dev/null".into()
        })
    );
    // An untimed command in the middle, options after events, no events: errors.
    assert!(parse("0 close(3) = 0\n`x`\n+0 close(4) = 0").is_err());
    assert!(parse("0 close(3) = 0\n--late=1").is_err());
    assert!(parse("`only a command`").is_err());
    assert!(parse("").is_err());
}

#[test]
fn tcp_flags_and_fields() {
    let (p, t) = tcp("+0 < S 0:0(0) win 1000");
    assert_eq!(p.direction, Direction::Inbound);
    assert!(t.flags.syn && !t.flags.ack);
    assert_eq!(t.win, Some(1000));
    assert_eq!(t.ack, None);
    assert_eq!(t.options, None);

    let (p, t) = tcp("+0 > S. 0:0(0) ack 1");
    assert_eq!(p.direction, Direction::Outbound);
    assert!(t.flags.syn && t.flags.ack);
    assert_eq!(t.ack, Some(1));

    let (_, t) = tcp("0 < . 5:105(100) ack 9 win 2");
    assert_eq!(
        t.flags,
        TcpFlags {
            ack: true,
            ..TcpFlags::default()
        }
    );
    assert_eq!(
        t.seq,
        SeqRange {
            start: 5,
            end: 105,
            len: 100
        }
    );

    let (_, t) = tcp("0 < FPRUEW. 1:1(0) ack 1 win 1 urg 7");
    let f = t.flags;
    assert!(f.fin && f.psh && f.rst && f.urg && f.ece && f.cwr && f.ack && !f.syn);
    assert_eq!(t.urg, Some(7));

    let (_, t) = tcp("0 < - 1:1(0) win 0");
    assert_eq!(t.flags, TcpFlags::default());

    let (_, t) = tcp("0 < 4000>80 S 4294967295:4294967295(0) win 65535");
    assert_eq!(t.ports, Some(Ports { src: 4000, dst: 80 }));
    assert_eq!(t.seq.start, u32::MAX);

    assert!(parse("0 < Q 1:1(0)").is_err());
    assert!(parse("0 < SS 1:1(0)").is_err());
    assert!(
        parse("0 < S 1:1(0) win 1 ack 1").is_err(),
        "fields in grammar order"
    );
    assert!(parse("0 < S 4294967296:1(0)").is_err());
    assert!(parse("0 < S 1:2").is_err());
}

#[test]
fn tcp_options() {
    let (_, t) = tcp(
        "0 < S 0:0(0) win 1 <mss 1400,sackOK,TS val 7 ecr 0,nop,wscale 9,eol,sack 1:2 3:4,md5 0a1b2c,FO,FOEXP 12ab,FO 1234,FOEXP SOME_NAME,FO ffee>",
    );
    assert_eq!(
        t.options,
        Some(TcpOptions::List(vec![
            TcpOption::Mss(1400),
            TcpOption::SackPermitted,
            TcpOption::Timestamp { val: 7, ecr: 0 },
            TcpOption::Nop,
            TcpOption::WindowScale(9),
            TcpOption::Eol,
            TcpOption::Sack(vec![(1, 2), (3, 4)]),
            TcpOption::Md5("0a1b2c".into()),
            TcpOption::FastOpen(None),
            TcpOption::FastOpenExp(Some("12ab".into())),
            TcpOption::FastOpen(Some("1234".into())),
            TcpOption::FastOpenExp(Some("SOME_NAME".into())),
            TcpOption::FastOpen(Some("ffee".into())),
        ]))
    );
    let (_, t) = tcp("0 > S 0:0(0) <...>");
    assert_eq!(t.options, Some(TcpOptions::Any));
    // Spaces after commas are fine.
    let (_, t) = tcp("0 > S 0:0(0) <mss 1, nop>");
    assert_eq!(
        t.options,
        Some(TcpOptions::List(vec![TcpOption::Mss(1), TcpOption::Nop]))
    );
    for bad in [
        "0 > S 0:0(0) <bogus 1>",
        "0 > S 0:0(0) <mss>",
        "0 > S 0:0(0) <sack>",
        "0 > S 0:0(0) <TS 1 2>",
        "0 > S 0:0(0) <mss 1,>",
        "0 > S 0:0(0) <mss 1",
        "0 > S 0:0(0) <md5>",
    ] {
        assert!(parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn ip_info_and_ecn() {
    let (p, t) = tcp("0 > [ect0] P. 1:11(10) ack 1");
    assert_eq!(p.ip.unwrap().ecn, Some(Ecn::Ect0));
    assert!(t.flags.psh);
    for (mark, ecn) in [
        ("noecn", Ecn::NoEcn),
        ("ect1", Ecn::Ect1),
        ("ce", Ecn::Ce),
        ("ect01", Ecn::Ect01),
    ] {
        let (p, _) = tcp(&format!("0 < [{mark}] . 1:1(0) ack 1 win 1"));
        assert_eq!(p.ip.unwrap().ecn, Some(ecn));
    }
    let (p, _) = tcp("0 < (tos 0x10, flowlabel 0x12345) . 1:1(0) win 1");
    let ip = p.ip.unwrap();
    assert_eq!((ip.tos, ip.flow_label), (Some(0x10), Some(0x12345)));
    let (p, _) = tcp("0 < [ttl 3] . 1:1(0) win 1");
    assert_eq!(p.ip.unwrap().ttl, Some(3));
    assert!(parse("0 < [ect9] . 1:1(0)").is_err());
    assert!(parse("0 < [tos 256] . 1:1(0)").is_err());
}

#[test]
fn encapsulation() {
    let (p, _) = tcp("0 < ipv4 10.0.0.1 > 10.0.0.2: S 0:0(0) win 1");
    assert_eq!(
        p.encapsulation,
        vec![Encapsulation::Ipv4 {
            ip: None,
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap()
        }]
    );
    assert!(parse("0 < ipv4 10.0.0.1 > S 0:0(0)").is_err());
    assert!(parse("0 < gre: S 0:0(0)").is_err());
}

#[test]
fn udp_and_icmp() {
    let e = one("0 < udp (100)");
    let Action::Packet(p) = e.action else {
        panic!()
    };
    assert_eq!(
        p.body,
        PacketBody::Udp(UdpPacket {
            ports: None,
            len: 100
        })
    );
    let Action::Packet(p) = one("0 > udp 53>1234 (8)").action else {
        panic!()
    };
    assert_eq!(
        p.body,
        PacketBody::Udp(UdpPacket {
            ports: Some(Ports { src: 53, dst: 1234 }),
            len: 8
        })
    );

    let icmp = |src: &str| match one(src).action {
        Action::Packet(Packet {
            body: PacketBody::Icmp(i),
            ..
        }) => i,
        other => panic!("{other:?}"),
    };
    let i = icmp("0 < icmp unreachable frag_needed mtu 1200 [5:15(10)]");
    assert_eq!(i.icmp_type, "unreachable");
    assert_eq!(i.code.as_deref(), Some("frag_needed"));
    assert_eq!(i.mtu, Some(1200));
    assert_eq!(
        i.echoed,
        Some(IcmpEchoed::Tcp(SeqRange {
            start: 5,
            end: 15,
            len: 10
        }))
    );
    let i = icmp("0 < icmp too_big mtu 1280");
    assert_eq!((i.code, i.mtu, i.echoed), (None, Some(1280), None));
    let i = icmp("0 < icmp unreachable [2:3(1)]");
    assert_eq!(i.code, None);
    let i = icmp("0 < icmp echo_reply id 7 [udp (20)]");
    assert_eq!((i.echo_id, i.echoed), (Some(7), Some(IcmpEchoed::Udp(20))));
    let i = icmp("0 < icmp unreachable port_unreachable [raw (4)]");
    assert_eq!(i.echoed, Some(IcmpEchoed::Raw(4)));
    assert!(parse("0 < icmp").is_err());
    assert!(parse("0 < icmp x [1:2]").is_err());
}

#[test]
fn simple_syscalls() {
    let s = syscall("0 socket(..., SOCK_DGRAM, IPPROTO_UDP) = 4");
    assert_eq!(s.name, "socket");
    assert_eq!(s.args.len(), 3);
    assert_eq!(s.args[0].kind, ExprKind::Ellipsis);
    assert_eq!(s.args[2].as_word(), Some("IPPROTO_UDP"));
    assert_eq!(s.ret.as_int(), Some(4));
    assert_eq!((s.errno, s.note, s.end_time), (None, None, None));

    let s = syscall("0 getpid() = 0");
    assert!(s.args.is_empty());

    let s = syscall("+0 read(5, ..., 10) = -1 EWOULDBLOCK (Try again, later)");
    assert_eq!(s.ret.as_int(), Some(-1));
    assert_eq!(s.errno.as_deref(), Some("EWOULDBLOCK"));
    assert_eq!(s.note.as_deref(), Some("Try again, later"));

    let s = syscall("+0 fcntl(5, F_GETFL) = 0x802 (flags O_RDWR|O_NONBLOCK)");
    assert_eq!(s.ret.as_int(), Some(0x802));
    assert_eq!(s.errno, None);
    assert_eq!(s.note.as_deref(), Some("flags O_RDWR|O_NONBLOCK"));

    let s = syscall("+0 setsockopt(5, SOL_TCP, TCP_X, \"\", 2) = -1 (Not valid)");
    assert_eq!(s.args[3].kind, ExprKind::Str(vec![]));
    assert_eq!((s.errno, s.note.as_deref()), (None, Some("Not valid")));

    let s = syscall("+0 write(5, \"ab\\x00\\x7f\"..., 9) = 9 // trailing comment");
    assert_eq!(s.args[1].kind, ExprKind::StrPrefix(b"ab\x00\x7f".to_vec()));

    let s = syscall("+.5 ...1.25 accept(3, ..., ...) = 4");
    assert_eq!(s.end_time, Some(us(1_250_000)));
    let e = one("+.5...1.25 accept(3, ..., ...) = 4");
    assert_eq!(e.time, EventTime::Relative(us(500_000)));
    let Action::Syscall(s) = e.action else {
        panic!()
    };
    assert_eq!(s.end_time, Some(us(1_250_000)));

    assert!(parse("0 close(3)").is_err());
    assert!(parse("0 close(3) =").is_err());
    assert!(parse("0 close(3 = 0").is_err());
    assert!(parse("0 close(3) = 0 EBADF (unterminated").is_err());
}

#[test]
fn syscall_expressions() {
    let s = syscall("0 fcntl(3, F_SETFL, O_RDWR|O_NONBLOCK|0x10) = 0");
    match &s.args[2].kind {
        ExprKind::BitOr(a, b) => {
            assert_eq!(b.as_int(), Some(0x10));
            assert_eq!(a.or_words(), Some(vec!["O_RDWR", "O_NONBLOCK"]));
        }
        other => panic!("{other:?}"),
    }
    let s = syscall(
        "0 setsockopt(3, SOL_SOCKET, SO_LINGER, {onoff=1, linger=0}, sizeof(struct_linger)) = 0",
    );
    assert_eq!(s.args[3].field("onoff").and_then(Expr::as_int), Some(1));
    assert_eq!(s.args[3].field("linger").and_then(Expr::as_int), Some(0));
    assert_eq!(
        s.args[4].kind,
        ExprKind::Call(
            "sizeof".into(),
            vec![Expr {
                line: 1,
                kind: ExprKind::Word("struct_linger".into())
            }]
        )
    );

    let s = syscall("0 connect(3, {sa_family=AF_INET, sin_port=htons(9090), sin_addr=inet_addr(\"10.1.1.1\")}, 16) = 0");
    let sa = &s.args[1];
    assert_eq!(
        sa.field("sa_family").and_then(Expr::as_word),
        Some("AF_INET")
    );
    let ExprKind::Call(f, a) = &sa.field("sin_port").unwrap().kind else {
        panic!()
    };
    assert_eq!((f.as_str(), a[0].as_int()), ("htons", Some(9090)));
    let ExprKind::Call(f, a) = &sa.field("sin_addr").unwrap().kind else {
        panic!()
    };
    assert_eq!(
        (f.as_str(), &a[0].kind),
        ("inet_addr", &ExprKind::Str(b"10.1.1.1".to_vec()))
    );

    let s = syscall("0 pipe([7, 8]) = 0");
    assert_eq!(s.args[0].as_array().map(|a| a.len()), Some(2));
    let s = syscall("0 poll([], 0, 10) = 0");
    assert_eq!(s.args[0].as_array().map(|a| a.len()), Some(0));
}

#[test]
fn multi_line_structured_syscalls() {
    let src = "\
0 sendmsg(4, {msg_name(...)=...,
              msg_iov(2)=[{..., 10}, {..., 20}],
              msg_flags=0,
              msg_control=[{cmsg_level=SOL_IP,
                            cmsg_type=IP_TOS,
                            cmsg_data={ee_errno=EIO, ee_origin=2, ee_type=0,
                                       ee_code=0, ee_info=0, ee_data=7}},
                           {cmsg_level=SOL_SOCKET, cmsg_type=SCM_TIMESTAMPING,
                            cmsg_data={scm_sec=1, scm_nsec=500}}]},
          MSG_DONTWAIT) = 30
+0 poll([{fd=4, events=POLLIN|POLLOUT, revents=POLLOUT},
         {fd=5, events=0}], 2, 100) = 1
+0 epoll_wait(6, {events=EPOLLIN, ptr=0}, 1, 0) = 0
";
    let s = ok(src);
    assert_eq!(s.events.len(), 3);
    assert_eq!(s.events[1].line, 11);
    assert_eq!(s.events[2].line, 13);
    let Action::Syscall(sm) = &s.events[0].action else {
        panic!()
    };
    let msg = &sm.args[1];
    assert_eq!(msg.line, 1);
    let items = msg.as_struct().unwrap();
    assert_eq!(items[0].assign_name(), Some("msg_name"));
    let ExprKind::Assign(lhs, rhs) = &items[1].kind else {
        panic!()
    };
    assert_eq!(
        lhs.kind,
        ExprKind::Call(
            "msg_iov".into(),
            vec![Expr {
                line: 2,
                kind: ExprKind::Int(2)
            }]
        )
    );
    assert_eq!(
        rhs.as_array().unwrap()[1].as_struct().unwrap()[1].as_int(),
        Some(20)
    );
    let cmsgs = msg.field("msg_control").and_then(Expr::as_array).unwrap();
    assert_eq!(cmsgs.len(), 2);
    assert_eq!(cmsgs[0].line, 4);
    let ee = cmsgs[0].field("cmsg_data").unwrap();
    assert_eq!(ee.field("ee_errno").and_then(Expr::as_word), Some("EIO"));
    assert_eq!(ee.field("ee_data").and_then(Expr::as_int), Some(7));
    assert_eq!(ee.field("ee_data").unwrap().line, 7);
    let ts = cmsgs[1].field("cmsg_data").unwrap();
    assert_eq!(ts.field("scm_nsec").and_then(Expr::as_int), Some(500));
    assert_eq!(sm.args[2].as_word(), Some("MSG_DONTWAIT"));
    assert_eq!(sm.ret.as_int(), Some(30));

    let Action::Syscall(poll) = &s.events[1].action else {
        panic!()
    };
    let fds = poll.args[0].as_array().unwrap();
    assert_eq!(
        fds[0].field("revents").and_then(Expr::as_word),
        Some("POLLOUT")
    );
    assert_eq!(fds[1].field("revents"), None);
    assert_eq!(fds[1].line, 12);
    let Action::Syscall(ew) = &s.events[2].action else {
        panic!()
    };
    assert_eq!(ew.args[1].field("ptr").and_then(Expr::as_int), Some(0));
}

#[test]
fn code_blocks() {
    let s = ok("0 close(3) = 0\n+0 %{\nassert tcpi_state == 7, tcpi_state\nprint(tcpi_rtt)\n}%\n");
    let Action::Code(b) = &s.events[1].action else {
        panic!()
    };
    assert_eq!(b.line, 2);
    assert_eq!(
        b.text,
        "\nassert tcpi_state == 7, tcpi_state\nprint(tcpi_rtt)\n"
    );
    let st = b.statements.as_ref().unwrap();
    assert_eq!(st.len(), 2);
    assert_eq!((st[0].line, st[1].line), (3, 4));
    assert!(matches!(st[0].kind, CodeStmtKind::Assert { .. }));
    // Outside the subset: text kept, no statements, not an error.
    let Action::Code(b) = one("0 %{ for x in y: pass }%").action else {
        panic!()
    };
    assert_eq!(b.statements, None);
    assert_eq!(b.text, " for x in y: pass ");
}

#[test]
fn comments_everywhere() {
    let s = ok("// header\n/* block\ncomment */\n0 close(3) = 0 // after\n// between\n+0 > F. 1:1(0) ack 1 /* inline */\n");
    assert_eq!(s.events.len(), 2);
    assert_eq!(s.events[1].line, 6);
}

#[test]
fn error_positions() {
    let e = err("0 close(3) = 0\n+0 < S 1:1(0) win 1 <mss 1,bogus>\n");
    assert_eq!((e.line, e.column), (2, 28));
    assert!(e.message.contains("bogus"), "{e}");
    let e = err("0 close(3) = 0\n+0 read(3, ..., 1)");
    assert_eq!(e.line, 2);
    assert!(e.message.contains("end of script"), "{e}");
    let e = err("0 close(3) = 0\n\n   +0 `unterminated");
    assert_eq!((e.line, e.column), (3, 7));
    assert_eq!(e.to_string(), format!("3:7: {}", e.message));
    let e = err("0 < 70000>1 S 0:0(0)");
    assert!(e.message.contains("out of range"), "{e}");
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    for (open, close) in [("[", "]"), ("{", "}"), ("f(", ")")] {
        let deep = format!(
            "0 x({}1{}) = 0",
            open.repeat(100_000),
            close.repeat(100_000)
        );
        let e = err(&deep);
        assert!(e.message.contains("nesting"), "{e}");
        let fine = format!("0 x({}1{}) = 0", open.repeat(30), close.repeat(30));
        ok(&fine);
    }
    let deep_code = format!(
        "0 %{{ x = {}1{} }}%",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    let Action::Code(b) = one(&deep_code).action else {
        panic!()
    };
    assert_eq!(b.statements, None);
}

const SNIPPETS: &str = "\
--tolerance_usecs=5000
`prep.sh`
0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+0 < S 0:0(0) win 100 <mss 1000,sackOK,TS val 1 ecr 0,nop,wscale 2>
+0 > S. 0:0(0) ack 1 <mss 1460,nop,nop,sackOK,nop,wscale 8>
+.1 < . 1:1(0) ack 1 win 100 <sack 1:2,nop,nop>
+0 accept(3, ..., ...) = 4
+0...0.1 read(4, ..., 10) = -1 EAGAIN (Resource temporarily unavailable)
+0 > [ect0] P. 1:11(10) ack 1
+0 < icmp unreachable frag_needed mtu 900 [1:11(10)]
+0 recvmsg(4, {msg_name(...)=..., msg_iov(1)=[{...,0}], msg_flags=0,
               msg_control=[{cmsg_level=SOL_IP, cmsg_type=X, cmsg_data={ee_errno=0}}]}, 0) = 0
+.1~+.2 %{ assert 1 <= tcpi_rtt <= 9, 'rtt %d' % tcpi_rtt }%
* > F. 11:11(0) ack 1
`cleanup.sh`
";

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,400}") {
        let _ = parse(&s);
    }

    #[test]
    fn arbitrary_script_alphabet_never_panics(s in "[ \n0-9a-zA-Z.+*~<>\\[\\]{}(),:=|`%\"\\\\/#-]{0,300}") {
        let _ = parse(&s);
    }

    #[test]
    fn mutated_snippets_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0usize..30, any::<char>(), 0u8..4), 1..8),
    ) {
        let mut chars: Vec<char> = SNIPPETS.chars().collect();
        for (at, len, c, kind) in edits {
            if chars.is_empty() {
                break;
            }
            let i = at.index(chars.len());
            let j = (i + len).min(chars.len());
            match kind {
                0 => { chars.drain(i..j); }
                1 => chars.insert(i, c),
                2 => { let dup: Vec<char> = chars[i..j].to_vec(); chars.splice(i..i, dup); }
                _ => chars.truncate(i),
            }
        }
        let text: String = chars.into_iter().collect();
        if let Err(e) = parse(&text) {
            let lines = u32::try_from(text.split('\n').count()).unwrap();
            prop_assert!(e.line >= 1 && e.line <= lines, "{e} in {lines} lines");
            prop_assert!(e.column >= 1);
        }
    }
}

#[test]
fn the_snippets_parse() {
    let s = ok(SNIPPETS);
    assert_eq!(s.options.len(), 1);
    assert_eq!(s.events.len(), 14);
    assert!(s.cleanup_command.is_some());
}
