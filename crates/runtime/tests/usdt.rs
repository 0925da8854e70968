//! ember's USDT probes seen by a real tracer (docs/PROBES.md): bpftrace attaches to this
//! test process (`bpftrace -p`) while it moves data over a fused loopback connection, and
//! counts `tcp:send` (with the probe's arguments checked) and `ip:send`; `bpftrace -l`
//! lists the probes `Probe::name` documents.
//!
//! Needs root and bpftrace (Debian package `bpftrace`; `.ci/run` installs it as root
//! through tests/interop/install-tools). Without either, or where bpftrace cannot run at
//! all (no BPF in a container), the test says why it skipped and passes. It installs
//! nothing itself. This file holds one test on purpose: bpftrace counts probes of the
//! whole process, so no other stack may run in it meanwhile.

use ember_runtime::dev::netns::run_bounded;
use ember_runtime::{Probe, Stack, TcpListener, TcpStream};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// Bound of every blocking socket call.
const T: Duration = Duration::from_secs(10);

/// Why bpftrace cannot be used here, if it cannot.
fn unusable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (bpftrace attaches uprobes: it needs root)".into());
    }
    let o = match run_bounded(
        Command::new("bpftrace").args(["-e", "BEGIN { exit(); }"]),
        Duration::from_secs(60),
    ) {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some("bpftrace is not installed (Debian package bpftrace)".into())
        }
        Err(e) => return Some(format!("bpftrace: {e}")),
    };
    if !o.status.success() {
        return Some(format!(
            "bpftrace cannot run here: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    None
}

/// The value of `@name: N` in bpftrace's map dump (absent: the probe never fired).
fn map_value(out: &str, name: &str) -> u64 {
    let key = format!("@{name}: ");
    out.lines()
        .find_map(|l| l.strip_prefix(&key))
        .map_or(0, |v| v.trim().parse().expect("a count"))
}

/// The entries `@name[a, b]: N` of a map keyed by two numbers.
fn map_entries(out: &str, name: &str) -> Vec<((u64, u64), u64)> {
    let key = format!("@{name}[");
    out.lines()
        .filter_map(|l| {
            let (k, v) = l.strip_prefix(&key)?.split_once("]: ")?;
            let (a, b) = k.split_once(", ")?;
            Some((
                (a.trim().parse().ok()?, b.trim().parse().ok()?),
                v.trim().parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn bpftrace_counts_tcp_send_and_no_ip_send_on_a_fused_transfer() {
    if let Some(why) = unusable() {
        eprintln!("usdt test skipped: {why}");
        return;
    }
    const N: usize = 4 << 20;
    const CHUNK: usize = 16 << 10;
    let st = Stack::builder().squeues(2).build().expect("stack");
    let l = TcpListener::bind(&st, "127.0.0.1:0").expect("bind");
    l.set_accept_timeout(Some(T)).unwrap();
    let SocketAddr::V4(la) = l.local_addr().unwrap() else {
        panic!("IPv4 listener")
    };
    let c = TcpStream::connect_timeout(&st, la, T).expect("connect");
    let (s, _) = l.accept().expect("accept");
    for x in [&c, &s] {
        x.set_read_timeout(Some(T)).unwrap();
        x.set_write_timeout(Some(T)).unwrap();
    }
    assert!(c.is_fused().unwrap(), "the loopback pair fused");
    let cport = c.local_addr().unwrap().port();

    // bpftrace lists exactly the probes `Probe::name` documents.
    let exe_path = std::env::current_exe().expect("test binary");
    let o = run_bounded(
        Command::new("bpftrace").args(["-l", &format!("usdt:{}:*", exe_path.display())]),
        Duration::from_secs(60),
    )
    .expect("bpftrace -l");
    let mut listed: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let mut parts = l.rsplitn(3, ':');
            let (name, provider) = (parts.next()?, parts.next()?);
            Some(format!("{provider}:{name}"))
        })
        .collect();
    listed.sort();
    let mut want: Vec<String> = Probe::ALL.iter().map(|p| p.name().to_string()).collect();
    want.sort();
    assert_eq!(listed, want, "bpftrace -l");

    // Attached once BEGIN has run (bpftrace runs it after attaching every probe). The
    // predicate checks the arguments: 127.0.0.1 as its octets in memory (a little-endian
    // u32 0x0100007f), local port arg1, remote port arg3, length arg4.
    let exe = std::env::current_exe().expect("test binary");
    let exe = exe.display();
    let script = format!(
        "BEGIN {{ printf(\"ready\\n\"); }}
         usdt:{exe}:tcp:send {{ @send = count(); }}
         usdt:{exe}:tcp:send /arg0 == 0x0100007f && arg1 == {cport} && arg3 == {port}/ \
             {{ @mine = count(); @bytes = sum(arg4); }}
         usdt:{exe}:ip:send {{ @ipsend[arg1, arg3] = count(); }}
         usdt:{exe}:ip:receive {{ @iprecv[arg1, arg3] = count(); }}
         usdt:{exe}:squeue:enter {{ @enter = count(); }}
         interval:s:60 {{ exit(); }}",
        port = la.port()
    );
    let mut bt = Command::new("timeout")
        .args(["120", "bpftrace", "-p"])
        .arg(std::process::id().to_string())
        .args(["-e", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bpftrace");
    let (tx, rx) = mpsc::channel::<String>();
    let out = BufReader::new(bt.stdout.take().unwrap());
    let reader = thread::spawn(move || {
        let mut all = String::new();
        for line in out.lines().map_while(Result::ok) {
            let _ = tx.send(line.clone());
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let mut err = bt.stderr.take().unwrap();
    let err_reader = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let ready = loop {
        match rx.recv_timeout(Duration::from_secs(90)) {
            Ok(l) if l.trim() == "ready" => break true,
            Ok(_) => continue,
            Err(_) => break false,
        }
    };
    if !ready {
        // SAFETY: kill(2) takes no pointers; the pid is our unreaped child's (`timeout`,
        // which passes the signal on to bpftrace).
        unsafe { libc::kill(bt.id() as libc::pid_t, libc::SIGTERM) };
        let _ = bt.wait();
        panic!("bpftrace never attached: {}", err_reader.join().unwrap());
    }

    let data: Vec<u8> = (0..N).map(|i| (i * 7 + i / 4093) as u8).collect();
    let got = thread::scope(|sc| {
        let r = sc.spawn(|| {
            let mut v = vec![0u8; N];
            (&s).read_exact(&mut v).expect("read");
            v
        });
        for ch in data.chunks(CHUNK) {
            (&c).write_all(ch).expect("write");
        }
        r.join().expect("reader")
    });
    assert!(got == data, "fused transfer corrupted");

    // The control: a connection made with fusion off goes through IP, and bpftrace sees
    // its ip:send and ip:receive (so a zero above is not a probe that never fires).
    st.set_param("do_tcp_fusion", "0").unwrap();
    let c2 = TcpStream::connect_timeout(&st, la, T).expect("connect");
    let (s2, _) = l.accept().expect("accept");
    s2.set_read_timeout(Some(T)).unwrap();
    assert!(!c2.is_fused().unwrap());
    let uport = c2.local_addr().unwrap().port();
    (&c2).write_all(&[5u8; 1000]).unwrap();
    let mut b = [0u8; 1000];
    (&s2).read_exact(&mut b).unwrap();

    // Detach before closing (a close may unfuse and send a FIN through IP); SIGINT makes
    // bpftrace print its maps and exit.
    // SAFETY: as above.
    unsafe { libc::kill(bt.id() as libc::pid_t, libc::SIGINT) };
    let status = bt.wait().expect("bpftrace exit");
    let out = reader.join().unwrap();
    let err = err_reader.join().unwrap();
    eprintln!("bpftrace output:\n{out}{err}");
    assert!(status.success(), "bpftrace: {status}: {err}");
    let writes = (N / CHUNK) as u64;
    assert!(
        map_value(&out, "send") >= writes,
        "tcp:send per write ({writes})"
    );
    assert!(map_value(&out, "mine") >= writes, "tcp:send arguments");
    assert_eq!(map_value(&out, "bytes"), N as u64, "tcp:send len (arg4)");
    assert!(map_value(&out, "enter") >= writes, "squeue:enter per call");
    let (lport, cport, uport) = (u64::from(la.port()), u64::from(cport), u64::from(uport));
    for m in ["ipsend", "iprecv"] {
        let e = map_entries(&out, m);
        let count = |a: u64, b: u64| {
            e.iter()
                .filter(|&&(k, _)| k == (a, b) || k == (b, a))
                .map(|&(_, n)| n)
                .sum::<u64>()
        };
        assert_eq!(count(cport, lport), 0, "{m}: none for the fused connection");
        assert!(count(uport, lport) >= 3, "{m}: the unfused connection's");
    }
    drop((c, s, c2, s2, l));
    st.shutdown();
}
