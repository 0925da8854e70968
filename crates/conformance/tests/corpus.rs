//! Every script of the packetdrill corpus parses, and the trees say what the scripts say.
//!
//! Design. The corpus lives outside the repository (it is never copied in): at
//! `$EMBER_PACKETDRILL_CORPUS`, else at `../shared/conformance/packetdrill` beside the
//! workspace root. When it is absent the tests print why and pass, so the crate still
//! tests on a machine without it. All `*.pkt` files under `gtests/net` must parse; a
//! failure is a parser bug. Beyond "it parsed", the tests check totals against a crude
//! independent count of the text (packet lines, code blocks, shell commands) and a few
//! facts of specific scripts, so a parser that swallowed everything as opaque text
//! could not pass. A property test mutates real scripts and checks parsing never panics.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ember_conformance::script::{
    parse, Action, CodeCmpOp, CodeExpr, CodeStmtKind, Direction, Ecn, EventTime, ExprKind,
    IcmpEchoed, PacketBody, Script, TcpOption, TcpOptions, Time,
};
use proptest::prelude::*;

/// The `*.pkt` files under the corpus, sorted; `None` (with a note printed) if absent.
fn scripts() -> Option<Vec<(PathBuf, String)>> {
    ember_conformance::corpus::load(&ember_conformance::corpus::default_root())
}

fn parse_one(scripts: &[(PathBuf, String)], rel: &str) -> Script {
    let (_, text) = scripts
        .iter()
        .find(|(p, _)| p == Path::new(rel))
        .unwrap_or_else(|| panic!("{rel} not in corpus"));
    parse(text).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[derive(Default, Debug)]
struct Counts {
    packets: usize,
    syscalls: usize,
    commands: usize,
    code: usize,
    code_parsed: usize,
}

fn count(s: &Script, c: &mut Counts) {
    c.commands += usize::from(s.init_command.is_some()) + usize::from(s.cleanup_command.is_some());
    for e in &s.events {
        match &e.action {
            Action::Packet(_) => c.packets += 1,
            Action::Syscall(_) => c.syscalls += 1,
            Action::Command(_) => c.commands += 1,
            Action::Code(b) => {
                c.code += 1;
                c.code_parsed += usize::from(b.statements.is_some());
            }
        }
    }
}

/// A crude, independent count: lines whose second whitespace-separated token is
/// `<` or `>` (packets), `%{` occurrences (code blocks), back quotes / 2 (commands).
fn text_counts(text: &str) -> (usize, usize, usize) {
    let packets = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .filter(|l| matches!(l.split_whitespace().nth(1), Some("<" | ">")))
        .count();
    (
        packets,
        text.matches("%{").count(),
        text.matches('`').count() / 2,
    )
}

#[test]
fn every_script_parses() {
    let Some(scripts) = scripts() else { return };
    let mut per_dir: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut total = Counts::default();
    let (mut text_packets, mut text_code, mut text_commands) = (0, 0, 0);
    for (path, text) in &scripts {
        let dir = path
            .parent()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        match parse(text) {
            Ok(s) => {
                *per_dir.entry(dir).or_default() += 1;
                let mut c = Counts::default();
                count(&s, &mut c);
                let (p, k, m) = text_counts(text);
                assert_eq!(c.packets, p, "{}: packet count vs text", path.display());
                assert_eq!(c.code, k, "{}: code-block count vs text", path.display());
                assert_eq!(c.commands, m, "{}: command count vs text", path.display());
                text_packets += p;
                text_code += k;
                text_commands += m;
                count(&s, &mut total);
            }
            Err(e) => failures.push(format!("{}:{e}", path.display())),
        }
    }
    for (dir, n) in &per_dir {
        println!("{n:4} {dir}");
    }
    println!(
        "{} scripts: {} packets, {} syscalls, {} shell commands, {} code blocks ({} parsed into statements)",
        scripts.len(),
        total.packets,
        total.syscalls,
        total.commands,
        total.code,
        total.code_parsed
    );
    assert!(
        failures.is_empty(),
        "{} scripts failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(scripts.len(), 162, "the corpus has 162 scripts");
    assert_eq!(per_dir.values().sum::<usize>(), 162);
    assert_eq!(
        (total.packets, total.code, total.commands),
        (text_packets, text_code, text_commands)
    );
    // Plausible proportions: thousands of events, syscalls rivalling packets.
    assert!(total.packets > 2000, "{total:?}");
    assert!(total.syscalls > 1500, "{total:?}");
    assert!(total.commands >= 162, "{total:?}");
    assert_eq!(total.code, 304, "{total:?}");
    assert_eq!(
        total.code_parsed, total.code,
        "every corpus code block is within the subset"
    );
}

#[test]
fn a_passive_open_script_reads_right() {
    let Some(scripts) = scripts() else { return };
    let s = parse_one(&scripts, "tcp/zerocopy/epoll_edge.pkt");
    assert!(s.options.is_empty());
    assert_eq!(
        s.init_command.as_ref().map(|c| c.text.as_str()),
        Some("../common/defaults.sh")
    );
    // First event: socket(..., SOCK_STREAM, IPPROTO_TCP) = 3 at time 0.
    let e0 = &s.events[0];
    assert_eq!(e0.time, EventTime::Absolute(Time { micros: 0 }));
    let Action::Syscall(sc) = &e0.action else {
        panic!("{e0:?}")
    };
    assert_eq!(sc.name, "socket");
    assert_eq!(sc.args[0].kind, ExprKind::Ellipsis);
    assert_eq!(sc.args[1].as_word(), Some("SOCK_STREAM"));
    assert_eq!(sc.ret.as_int(), Some(3));
    // First packet: an inbound SYN with an mss option.
    let (line, p) = s
        .events
        .iter()
        .find_map(|e| match &e.action {
            Action::Packet(p) => Some((e.line, p)),
            _ => None,
        })
        .unwrap();
    assert_eq!(p.direction, Direction::Inbound);
    let PacketBody::Tcp(t) = &p.body else {
        panic!()
    };
    assert!(t.flags.syn && !t.flags.ack);
    assert_eq!((t.seq.start, t.seq.end, t.seq.len), (0, 0, 0));
    assert_eq!(t.win, Some(32792));
    let Some(TcpOptions::List(opts)) = &t.options else {
        panic!()
    };
    assert_eq!(opts[0], TcpOption::Mss(1000));
    assert_eq!(opts.last(), Some(&TcpOption::WindowScale(7)));
    assert_eq!(line, p.line);
    assert!(line > 10, "the packet is below the comment header");
    // epoll_ctl(5, EPOLL_CTL_ADD, 4, {events=EPOLLOUT|EPOLLET, fd=4}) = 0
    let ctl = s
        .events
        .iter()
        .find_map(|e| match &e.action {
            Action::Syscall(sc) if sc.name == "epoll_ctl" => Some(sc),
            _ => None,
        })
        .unwrap();
    let ev = &ctl.args[3];
    assert_eq!(
        ev.field("events").and_then(|e| e.or_words()),
        Some(vec!["EPOLLOUT", "EPOLLET"])
    );
    assert_eq!(ev.field("fd").and_then(|e| e.as_int()), Some(4));
    // The last recvmsg: msghdr with one cmsg whose data is an extended error.
    let rm = s
        .events
        .iter()
        .rev()
        .find_map(|e| match &e.action {
            Action::Syscall(sc) if sc.name == "recvmsg" => Some(sc),
            _ => None,
        })
        .unwrap();
    let msg = &rm.args[1];
    let iov = msg.field("msg_iov").and_then(|v| v.as_array()).unwrap();
    assert_eq!(iov[0].as_struct().map(|s| s.len()), Some(2));
    let cmsgs = msg.field("msg_control").and_then(|v| v.as_array()).unwrap();
    assert_eq!(cmsgs.len(), 1);
    let data = cmsgs[0].field("cmsg_data").unwrap();
    assert_eq!(
        data.field("ee_origin").and_then(|v| v.as_word()),
        Some("SO_EE_ORIGIN_ZEROCOPY")
    );
    assert_eq!(data.field("ee_data").and_then(|v| v.as_int()), Some(2));
    assert_eq!(rm.args[2].as_word(), Some("MSG_ERRQUEUE"));
    assert!(
        data.line > msg.line,
        "multi-line expressions keep their own lines"
    );
}

#[test]
fn times_errnos_icmp_ecn_and_code_read_right() {
    let Some(scripts) = scripts() else { return };
    // A blocking accept with an end time, an errno with a note, ICMP with a quoted
    // segment, a code block with an assertion.
    let s = parse_one(&scripts, "tcp/fastopen/server/opt34/icmp-before-accept.pkt");
    let mut saw = (false, false, false);
    for e in &s.events {
        match &e.action {
            Action::Syscall(sc) if sc.errno.as_deref() == Some("EHOSTUNREACH") => {
                assert_eq!(sc.ret.as_int(), Some(-1));
                assert_eq!(sc.note.as_deref(), Some("No route to host"));
                saw.0 = true;
            }
            Action::Packet(p) => {
                if let PacketBody::Icmp(i) = &p.body {
                    assert_eq!(i.icmp_type, "unreachable");
                    if i.code.as_deref() == Some("host_unreachable") {
                        let Some(IcmpEchoed::Tcp(r)) = i.echoed else {
                            panic!()
                        };
                        assert_eq!((r.start, r.end, r.len), (0, 10, 10));
                        saw.1 = true;
                    }
                }
            }
            Action::Code(b) => {
                let st = b.statements.as_ref().unwrap();
                let CodeStmtKind::Assert {
                    test: CodeExpr::Compare(_, rest),
                    message,
                } = &st[0].kind
                else {
                    panic!("{st:?}")
                };
                assert_eq!(rest[0], (CodeCmpOp::Ne, CodeExpr::Int(0)));
                assert_eq!(message, &Some(CodeExpr::Name("tcpi_options".into())));
                assert_eq!(st[0].line, b.line);
                saw.2 = true;
            }
            _ => {}
        }
    }
    assert_eq!(saw, (true, true, true));

    let s = parse_one(
        &scripts,
        "tcp/fastopen/server/opt34/basic-non-tfo-listener.pkt",
    );
    let blocking = s
        .events
        .iter()
        .find_map(|e| match &e.action {
            Action::Syscall(sc) if sc.end_time.is_some() => Some((e.time, sc)),
            _ => None,
        })
        .unwrap();
    assert_eq!(blocking.0, EventTime::Relative(Time { micros: 100_000 }));
    assert_eq!(blocking.1.end_time, Some(Time { micros: 400_000 }));
    assert_eq!(blocking.1.name, "accept");

    // ECN marks and ranges.
    let s = parse_one(&scripts, "tcp/ecn/ecn-uses-ect0.pkt");
    assert!(s.events.iter().any(|e| matches!(&e.action,
        Action::Packet(p) if p.direction == Direction::Outbound && p.ip.and_then(|i| i.ecn) == Some(Ecn::Ect0))));
    let s = parse_one(&scripts, "tcp/fast_retransmit/fr-4pkt-fack-last-byte.pkt");
    assert!(s
        .events
        .iter()
        .any(|e| e.time
            == EventTime::RelativeRange(Time { micros: 100_000 }, Time { micros: 105_000 })));
}

#[test]
fn options_and_cleanup_commands_read_right() {
    let Some(scripts) = scripts() else { return };
    let mut with_options = 0;
    let mut with_cleanup = 0;
    for (path, text) in &scripts {
        let s = parse(text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        with_options += usize::from(!s.options.is_empty());
        if let Some(c) = &s.cleanup_command {
            with_cleanup += 1;
            assert!(c.line > s.events.last().unwrap().line);
        }
        for o in &s.options {
            if o.name == "tolerance_usecs" {
                let v: u64 = o.value.as_deref().unwrap().parse().unwrap();
                assert!((1000..=100_000).contains(&v));
            }
            assert!(o.line < s.events[0].line);
        }
    }
    assert!(with_options > 10, "{with_options}");
    assert!(with_cleanup > 10, "{with_cleanup}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Cut, splice and garble real scripts: parsing returns, never panics.
    #[test]
    fn mutated_corpus_scripts_never_panic(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0usize..40, any::<char>(), 0u8..4), 1..6),
    ) {
        let Some(scripts) = scripts() else { return Ok(()) };
        let mut chars: Vec<char> = scripts[which.index(scripts.len())].1.chars().collect();
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
        let _ = parse(&text);
    }
}
