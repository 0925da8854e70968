//! The control socket (`ember_runtime::control`) on running stacks: `ndd` at run time
//! changing fusion's slow-reader behaviour, `kstat` counters moving, `netstat` listing
//! connections with their squeues, and hostile clients (oversized, malformed, silent,
//! too many) getting errors without stalling the stack or the socket.

use ember_runtime::control::{self, ControlServer, MAX_CLIENTS, MAX_REQUEST};
use ember_runtime::{Stack, TcpListener, TcpStream};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);

/// A fresh directory for this test's sockets.
fn tmp_dir(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "ember-control-test-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn kstat_of(path: &Path, name: &str) -> u64 {
    let body = control::request(path, &format!("kstat {name}")).unwrap();
    let line = body.lines().next().unwrap_or_default();
    let (k, v) = line.split_once(' ').unwrap();
    assert_eq!(k, name);
    v.parse().unwrap()
}

fn pair(st: &Stack) -> (TcpListener, TcpStream, TcpStream) {
    let l = TcpListener::bind(st, "127.0.0.1:0").unwrap();
    l.set_accept_timeout(Some(T)).unwrap();
    let SocketAddr::V4(a) = l.local_addr().unwrap() else {
        unreachable!()
    };
    let c = TcpStream::connect_timeout(st, a, T).unwrap();
    let (s, _) = l.accept().unwrap();
    for x in [&c, &s] {
        x.set_read_timeout(Some(T)).unwrap();
        x.set_write_timeout(Some(T)).unwrap();
    }
    (l, c, s)
}

/// Nonblocking 100-byte writes until one would block (at most `max`); a write the
/// buffer takes only part of is the last.
fn writes_until_blocked(c: &TcpStream, max: usize) -> usize {
    for i in 0..max {
        match (&*c).write(&[i as u8; 100]) {
            Ok(100) => {}
            Ok(_) => return i + 1,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return i,
            Err(e) => panic!("write {i}: {e}"),
        }
    }
    max
}

fn drain(s: &TcpStream, n: usize) {
    let mut v = vec![0u8; n];
    (&*s).read_exact(&mut v).unwrap();
}

#[test]
fn ndd_set_through_the_socket_changes_the_slow_reader_limit_and_kstat_moves() {
    let st = Stack::builder().squeues(2).build().unwrap();
    let dir = tmp_dir("ndd");
    let srv = ControlServer::start(&st, Some(&dir)).unwrap();
    let p = srv.path().to_path_buf();
    let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "socket mode");

    assert_eq!(
        control::request(&p, "ndd get tcp_fusion_rcv_unread_min").unwrap(),
        "8\n"
    );
    let stops0 = kstat_of(&p, "fusion:tcp_fusion_rrw_stops");
    let fused0 = kstat_of(&p, "fusion:tcp_fusion_fused_total");

    // Default: the ninth unread write stops the writer.
    let (_l, c, s) = pair(&st);
    assert!(c.is_fused().unwrap());
    c.set_nonblocking(true).unwrap();
    assert_eq!(writes_until_blocked(&c, 100), 8);
    assert_eq!(kstat_of(&p, "fusion:tcp_fusion_fused_total"), fused0 + 1);
    assert_eq!(kstat_of(&p, "fusion:tcp_fusion_rrw_stops"), stops0 + 1);
    let bytes1 = kstat_of(&p, "fusion:tcp_fusion_bytes");
    assert!(bytes1 >= 800, "fusion bytes {bytes1}");

    // Raise the limit at run time through the socket: the same pair now takes 20.
    assert_eq!(
        control::request(&p, "ndd set tcp_fusion_rcv_unread_min 20").unwrap(),
        "tcp_fusion_rcv_unread_min 20\n"
    );
    assert_eq!(st.params().tcp_fusion_rcv_unread_min, 20);
    drain(&s, 800);
    assert_eq!(writes_until_blocked(&c, 100), 20);
    assert_eq!(kstat_of(&p, "fusion:tcp_fusion_rrw_stops"), stops0 + 2);
    assert!(kstat_of(&p, "fusion:tcp_fusion_bytes") >= bytes1 + 2000);

    // 0 turns the unread-writes limit off: the writer goes on until the buffer is full,
    // and the unread-writes stop count no longer moves.
    control::request(&p, "ndd set tcp_fusion_rcv_unread_min 0").unwrap();
    drain(&s, 2000);
    let n = writes_until_blocked(&c, 100_000);
    assert!(n > 100, "without the limit the writer took only {n} writes");
    assert_eq!(kstat_of(&p, "fusion:tcp_fusion_rrw_stops"), stops0 + 2);
    assert!(kstat_of(&p, "fusion:tcp_fusion_flowctl") >= 1);

    // A bad value is refused with the range, an unknown name with the nearest ones, and
    // nothing changes.
    let e = control::request(&p, "ndd set tcp_fusion_rcv_unread_min 99999999").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("valid: 0..=1048576"), "{e}");
    let e = control::request(&p, "ndd set tcp_fusion_rcv_unread_mni 3").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(
        e.to_string().contains("nearest: tcp_fusion_rcv_unread_min"),
        "{e}"
    );
    let e = control::request(&p, "ndd get nope_nope").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert_eq!(st.params().tcp_fusion_rcv_unread_min, 0);
    let list = control::request(&p, "ndd list").unwrap();
    assert!(list.lines().count() >= 40, "{list}");
    assert!(list
        .lines()
        .any(|l| l.starts_with("tcp_fusion_rcv_unread_min")
            && l.split_whitespace().nth(1) == Some("0")));

    drop((c, s));
    drop(srv);
    assert!(!p.exists(), "dropping the server removes the socket");
    st.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn netstat_lists_connections_with_squeues_and_fusion() {
    let st = Stack::builder().squeues(2).build().unwrap();
    let dir = tmp_dir("netstat");
    let srv = ControlServer::start(&st, Some(&dir)).unwrap();
    let (l, c, s) = pair(&st);
    let port = l.local_addr().unwrap().port();
    let out = control::request(srv.path(), "netstat").unwrap();
    let head = out.lines().next().unwrap();
    for col in [
        "Local Address",
        "State",
        "Sq",
        "Fused",
        "Send-Q",
        "cwnd",
        "srtt",
        "retrans",
    ] {
        assert!(head.contains(col), "header {head:?} lacks {col}");
    }
    let listen = out
        .lines()
        .find(|x| x.contains("LISTEN"))
        .unwrap_or_else(|| panic!("no listener in\n{out}"));
    assert!(listen.starts_with(&format!("127.0.0.1:{port}")), "{listen}");
    let estab: Vec<&str> = out.lines().filter(|x| x.contains("ESTABLISHED")).collect();
    assert_eq!(estab.len(), 2, "{out}");
    for e in &estab {
        let f: Vec<&str> = e.split_whitespace().collect();
        let sq: usize = f[3].parse().unwrap();
        assert!(sq < 2, "squeue {sq}");
        assert_eq!(f[4], "yes", "fused: {e}");
    }
    let full = control::request(srv.path(), "netstat -f").unwrap();
    assert!(full.contains("rto:") && full.contains("cubic"), "{full}");
    let k = control::request(srv.path(), "kstat squeue").unwrap();
    assert!(k.lines().all(|x| x.starts_with("squeue:")) && k.contains("squeue:inline"));
    let e = control::request(srv.path(), "kstat tcp:currestab").unwrap_err();
    assert!(e.to_string().contains("nearest: tcp:tcpCurrEstab"), "{e}");
    let e = control::request(srv.path(), "kstat nomodule").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(e.to_string().contains("modules: ip, icmp, udp, tcp"), "{e}");
    let info = control::request(srv.path(), "info").unwrap();
    assert!(info.contains(&format!("id {}", srv.id())) && info.contains("squeues 2"));
    drop((c, s, l));
    st.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn hostile_clients_get_errors_and_do_not_stall_anything() {
    let st = Stack::builder().squeues(1).build().unwrap();
    let dir = tmp_dir("hostile");
    let srv = ControlServer::start(&st, Some(&dir)).unwrap();
    let p = srv.path().to_path_buf();
    let raw = |bytes: &[u8]| -> String {
        let mut c = UnixStream::connect(&p).unwrap();
        c.set_read_timeout(Some(T)).unwrap();
        let _ = c.write_all(bytes);
        let _ = c.shutdown(std::net::Shutdown::Write);
        let mut s = String::new();
        let _ = c.read_to_string(&mut s);
        s
    };
    // Oversized: no newline within the limit.
    let big = vec![b'k'; MAX_REQUEST * 4];
    assert!(raw(&big).starts_with("error invalid: request longer than"));
    // Not UTF-8, empty, unknown, wrong arity.
    assert!(raw(b"\xff\xfe\n").starts_with("error invalid: request is not UTF-8"));
    assert!(raw(b"").starts_with("error invalid: empty request"));
    assert!(raw(b"reboot now\n").starts_with("error invalid: unknown request"));
    assert!(raw(b"ndd set a\n").starts_with("error invalid: unknown request"));
    assert!(raw(b"\0\0\0\n").starts_with("error invalid"));
    // A client that drips its request a byte at a time is cut off at the deadline for
    // the whole request, not kept for as long as each byte comes within a read timeout.
    let t0 = Instant::now();
    let mut drip = UnixStream::connect(&p).unwrap();
    drip.set_read_timeout(Some(T)).unwrap();
    let mut got = String::new();
    for _ in 0..200 {
        if drip.write_all(b"k").is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        if t0.elapsed() > control::IO_TIMEOUT + Duration::from_secs(1) {
            break;
        }
    }
    let _ = drip.read_to_string(&mut got);
    assert!(got.starts_with("error timeout"), "{got:?}");
    assert!(t0.elapsed() < control::IO_TIMEOUT + Duration::from_secs(2));
    // The client refuses to send a second line.
    assert_eq!(
        control::request(&p, "info\nndd list").unwrap_err().kind(),
        ErrorKind::InvalidInput
    );

    // Silent clients fill every slot; the next request is told `busy` at once, and once
    // the silent ones are cut off (IO_TIMEOUT) requests are served again. The stack
    // itself keeps working throughout.
    // (Requests answered just before may still hold a slot for a moment, and a silent
    // client that found every slot taken is closed at once: keep adding silent ones until
    // a request is refused.)
    let mut silent = Vec::new();
    let mut saw_busy = false;
    for _ in 0..(20 * MAX_CLIENTS) {
        silent.push(UnixStream::connect(&p).unwrap());
        std::thread::sleep(Duration::from_millis(5));
        if let Err(e) = control::request(&p, "info") {
            if e.kind() == ErrorKind::ResourceBusy {
                saw_busy = true;
                break;
            }
        }
    }
    assert!(
        saw_busy,
        "a request beyond {MAX_CLIENTS} at once was not told busy"
    );
    let (_l, c, s) = pair(&st);
    (&c).write_all(b"still working").unwrap();
    drain(&s, 13);
    let dl = Instant::now() + Duration::from_secs(10);
    loop {
        match control::request(&p, "info") {
            Ok(_) => break,
            Err(e) => assert!(Instant::now() < dl, "not served again: {e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(silent);

    // A stack that is gone answers `gone`.
    drop((c, s, _l));
    st.shutdown();
    let e = control::request(&p, "kstat").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotConnected, "{e}");
    assert!(control::request(&p, "info")
        .unwrap()
        .contains("state shut-down"));
    drop(st);
    drop(srv);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn stacks_are_found_by_id_and_path() {
    let dir = tmp_dir("find");
    let a = Stack::builder().squeues(1).build().unwrap();
    let b = Stack::builder().squeues(1).build().unwrap();
    let e = control::find_stack(None, Some(&dir)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let sa = ControlServer::start(&a, Some(&dir)).unwrap();
    assert_eq!(control::find_stack(None, Some(&dir)).unwrap(), sa.path());
    let sb = ControlServer::start(&b, Some(&dir)).unwrap();
    let e = control::find_stack(None, Some(&dir)).unwrap_err();
    assert!(e.to_string().contains("several stacks"), "{e}");
    assert_eq!(
        control::find_stack(Some(sb.id()), Some(&dir)).unwrap(),
        sb.path()
    );
    let p = sa.path().to_str().unwrap().to_string();
    assert_eq!(
        control::find_stack(Some(&p), Some(&dir)).unwrap(),
        sa.path()
    );
    let ids: Vec<String> = control::list_stacks(Some(&dir))
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, vec![sa.id().to_string(), sb.id().to_string()]);
    // A socket nobody listens on any more (its process ended without removing it) is
    // cleaned up; files that are not sockets, or not named PID.N.sock, are left alone.
    drop(std::os::unix::net::UnixListener::bind(dir.join("4000000000.1.sock")).unwrap());
    std::fs::write(dir.join("4000000000.2.sock"), b"").unwrap();
    std::fs::write(dir.join("notes.1.sock"), b"").unwrap();
    assert_eq!(control::list_stacks(Some(&dir)).unwrap().len(), 2);
    assert!(!dir.join("4000000000.1.sock").exists());
    assert!(dir.join("4000000000.2.sock").exists() && dir.join("notes.1.sock").exists());
    // `--stack` takes the socket's file name too.
    let file = format!("{}.sock", sb.id());
    assert_eq!(
        control::find_stack(Some(&file), Some(&dir)).unwrap(),
        sb.path()
    );
    drop((sa, sb));
    a.shutdown();
    b.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn device_counters_of_both_ends_of_a_link_agree() {
    use ember_runtime::dev::{mem_link, ImpairConfig};
    use ember_runtime::IfaceConfig;
    use std::net::{Ipv4Addr, SocketAddrV4};
    let (ea, eb) = mem_link(ImpairConfig::default(), ImpairConfig::default(), 3);
    let iface = |a| IfaceConfig {
        addr: a,
        prefix_len: 24,
        mac: None,
        mtu: None,
    };
    let a = Stack::builder()
        .squeues(1)
        .interface(iface(Ipv4Addr::new(198, 18, 0, 1)), ea)
        .build()
        .unwrap();
    let b = Stack::builder()
        .squeues(1)
        .interface(iface(Ipv4Addr::new(198, 18, 0, 2)), eb)
        .build()
        .unwrap();
    let dir = tmp_dir("dev");
    let (ca, cb) = (
        ControlServer::start(&a, Some(&dir)).unwrap(),
        ControlServer::start(&b, Some(&dir)).unwrap(),
    );
    let at = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 9000);
    let l = TcpListener::bind(&b, at).unwrap();
    l.set_accept_timeout(Some(T)).unwrap();
    let c = TcpStream::connect_timeout(&a, at, T).unwrap();
    let (s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    (&c).write_all(&[7u8; 200_000]).unwrap();
    drain(&s, 200_000);
    // Let the last ACKs land.
    std::thread::sleep(Duration::from_millis(50));
    let tx_a = kstat_of(ca.path(), "dev0:tx_frames");
    let rx_b = kstat_of(cb.path(), "dev0:rx_frames");
    assert!(tx_a > 10, "client sent {tx_a} frames");
    assert_eq!(tx_a, rx_b, "what one end sent the other received");
    assert_eq!(
        kstat_of(ca.path(), "dev0:tx_bytes"),
        kstat_of(cb.path(), "dev0:rx_bytes")
    );
    assert!(kstat_of(ca.path(), "dev0:rx_frames") > 0);
    assert_eq!(kstat_of(ca.path(), "dev0:queues"), 1);
    drop((c, s, l, ca, cb));
    a.shutdown();
    b.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}

/// `ControlServer`'s drop wakes its accept through the listening descriptor (the one
/// `unsafe` call of the control socket), so it returns even when the socket's path is
/// gone and nothing could connect to wake it.
#[test]
fn dropping_the_server_stops_it_even_without_its_path() {
    let st = Stack::builder().squeues(1).build().unwrap();
    let dir = tmp_dir("drop");
    let srv = ControlServer::start(&st, Some(&dir)).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(srv);
        let _ = tx.send(());
    });
    rx.recv_timeout(T).expect("the server's drop returned");
    st.shutdown();
}
