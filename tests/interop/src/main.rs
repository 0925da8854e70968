//! The interop suite: ember against a TCP it did not write.
//!
//! Runs as root (tests/interop/run calls it; `.ci/run` calls that). It creates one network
//! namespace with two persistent TAP interfaces in it, kernel side addressed in
//! 198.18.0.0/15 only:
//!
//! * `etap0` (multi-queue), kernel 198.18.0.1/24, where `ember serve` runs as 198.18.0.2;
//! * `etap1`, kernel 198.18.1.1/24, where `ember client` runs as 198.18.1.2;
//!
//! (later phases add a veth pair `ea0`/`ek0`, kernel 198.18.2.1/24, for ember on
//! AF_PACKET as 198.18.2.2, and the `handshake:` steps' pair below) and then checks, each step bounded in time (a step that overruns is killed and fails):
//! ping; curl of 1 MB and 100 MB against `X-SHA256`; curl to a closed port refused at
//! once; wrk with no socket errors and no non-2xx; nc to discard and socat through echo
//! (with half-close) byte-exact; iperf3 plain, `-R` and `-P 4` (throughput recorded), with
//! offload off and on; ember's client against `python3 -m http.server` and bulk both ways
//! against socat; the same transfers with ember-side impairment (1% loss, 1% reorder,
//! 10 ms delay); and a tshark reading of a capture: SYN options, the FIN within 1 ms of the
//! last data (or of the peer's FIN, where the peer closed first), no malformed packets or
//! errors in the expert info; and a spoofed SYN flood
//! (hping3) during which curl keeps fetching, answered with SYN cookies. ember serve must exit
//! cleanly (status 0) on SIGTERM after each phase.
//!
//! The `handshake:` steps (`handshake.rs`) craft the client side of handshakes
//! from a raw socket in the namespace, against a fresh ember serve and, as the control,
//! against a kernel listener at 198.18.3.2 in a second namespace joined by a veth pair
//! (`ekc0`/`ekc1`, 198.18.3.1 on our side): 50 tries of SYN, the SYN,ACK, then a duplicate
//! of the SYN and the final ACK back to back (one `sendmmsg`), each watched for 200 ms,
//! must draw no RST; 30 identical SYNs within 50 ms must draw at most 2 SYN,ACKs in the
//! 500 ms after the last. An nft table drops the namespace kernel's own RSTs to the
//! crafted connections meanwhile; without nft these steps say they skipped.
//!
//! `--only SUBSTR` runs only the steps whose names contain SUBSTR (and the phases that
//! hold them), e.g. `--only handshake`.
//!
//! The namespaces are deleted at the end, also when a step fails. Figures go to a JSON file
//! (`--json`, default target/interop.json) and a table on stdout; the exit status is
//! non-zero if any step failed (a step that skipped, saying why, has not failed).

mod handshake;

use ember_runtime::dev::netns::{self, privileged, run_bounded, NetNs};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SERVE: &str = "198.18.0.2";
const CLIENT_ADDR: &str = "198.18.1.2/24";
const KERNEL1: &str = "198.18.1.1";
/// ember-side impairment of the impaired phases.
const IMPAIR: [&str; 2] = ["--impair", "loss=1%,reorder=1%,delay=10ms,seed=5"];

struct Ctx {
    /// The address `ember serve` has in the current phase.
    server: &'static str,
    /// The control socket of the running `ember serve`, if it printed one.
    control: Option<String>,
    ember: PathBuf,
    ns: NetNs,
    dir: PathBuf,
    results: Vec<(String, Result<Value, String>, f64)>,
    /// `--only SUBSTR`: run only the steps whose names contain it (and the phases that
    /// hold them).
    only: Option<String>,
}

/// A running `ember serve`.
struct Serve {
    /// `None` once `stop` took care of the process.
    child: Option<Child>,
    stderr: mpsc::Receiver<String>,
    /// The control socket path serve printed.
    control: Option<String>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        // A step that panicked or returned early must not leave ember running (it would
        // keep the namespace alive after its deletion).
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn sh(ns: &NetNs, script: &str, limit: Duration) -> Result<(String, String), String> {
    let o = run_bounded(ns.command("sh").args(["-c", script]), limit)
        .map_err(|e| format!("`{script}`: {e}"))?;
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    if !o.status.success() {
        return Err(format!(
            "`{script}` exited {}: {}{}",
            o.status,
            tail(&out),
            tail(&err)
        ));
    }
    Ok((out, err))
}

fn tail(s: &str) -> String {
    let t: Vec<&str> = s.lines().rev().take(8).collect();
    t.into_iter().rev().collect::<Vec<_>>().join("\n")
}

fn sha256_file(path: &Path) -> Result<String, String> {
    let o = Command::new("sha256sum")
        .arg(path)
        .output()
        .map_err(|e| format!("sha256sum: {e}"))?;
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .map(str::to_string)
        .ok_or_else(|| format!("sha256sum {}: no output", path.display()))
}

/// A step's result that says it skipped, and why (it counts as passed).
fn skipped(why: &str) -> Value {
    json!({ "skipped": why })
}

fn is_skip(v: &Value) -> Option<&str> {
    v.get("skipped").and_then(Value::as_str)
}

impl Ctx {
    /// Whether `--only` selects any of `names` (always, without `--only`).
    fn wants(&self, names: &[&str]) -> bool {
        self.only
            .as_deref()
            .is_none_or(|o| names.iter().any(|n| n.contains(o)))
    }

    fn step(&mut self, name: &str, f: impl FnOnce(&mut Ctx) -> Result<Value, String>) {
        if !self.wants(&[name]) {
            return;
        }
        let t = Instant::now();
        eprintln!("-- {name}");
        let r = f(self);
        let secs = t.elapsed().as_secs_f64();
        match &r {
            Ok(v) => match is_skip(v) {
                Some(why) => eprintln!("   SKIPPED: {why}"),
                None => eprintln!("   ok ({secs:.1} s) {v}"),
            },
            Err(e) => eprintln!("   FAILED ({secs:.1} s): {e}"),
        }
        self.results.push((name.to_string(), r, secs));
    }

    fn serve(&self, extra: &[&str]) -> Result<Serve, String> {
        self.serve_on(&["--tap", "etap0", "--addr", &format!("{SERVE}/24")], extra)
    }

    fn serve_on(&self, link: &[&str], extra: &[&str]) -> Result<Serve, String> {
        let mut args: Vec<String> = vec![
            "netns".into(),
            "exec".into(),
            self.ns.name().into(),
            self.ember.display().to_string(),
            "serve".into(),
        ];
        args.extend(link.iter().map(|s| s.to_string()));
        args.extend([
            "--squeues".into(),
            "2".into(),
            "--queues".into(),
            "2".into(),
            "--root".into(),
            self.dir.join("www").display().to_string(),
        ]);
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut child = Command::new("ip")
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("ember serve: {e}"))?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let err = child.stderr.take().ok_or("no stderr")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let (etx, erx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = etx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut control = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if l == "ready" => break,
                Ok(l) if l.starts_with("control socket ") => {
                    control = l.split_whitespace().nth(2).map(String::from);
                    eprintln!("   serve: {l}");
                }
                Ok(l) => eprintln!("   serve: {l}"),
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let e: Vec<String> = erx.try_iter().collect();
                    return Err(format!(
                        "ember serve did not get ready in 20 s: {}",
                        e.join("\n")
                    ));
                }
            }
        }
        // Keep draining stdout so serve never blocks on it.
        std::thread::spawn(move || for _ in rx {});
        Ok(Serve {
            child: Some(child),
            stderr: erx,
            control,
        })
    }

    /// SIGTERM, then a clean exit within 10 s.
    fn stop(&self, s: Serve) -> Result<Value, String> {
        self.stop_with(s, 15)
    }

    /// Signal `sig` (SIGINT 2 or SIGTERM 15), then a clean exit within 10 s.
    fn stop_with(&self, mut s: Serve, sig: i32) -> Result<Value, String> {
        let t = Instant::now();
        // `ip netns exec` execs ember, so the child's pid is ember's.
        // SAFETY: kill(2) takes no pointers; the pid is our unreaped child's.
        let mut child = s.child.take().ok_or("ember serve already stopped")?;
        unsafe { libc_kill(child.id() as i32, sig) };
        let (tx, rx) = mpsc::channel();
        let pid = child.id();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let status = match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(st)) => st,
            _ => {
                // SAFETY: as above.
                unsafe { libc_kill(pid as i32, 9) };
                return Err("ember serve did not exit within 10 s of SIGTERM".into());
            }
        };
        let err: Vec<String> = s.stderr.try_iter().collect();
        if !status.success() {
            return Err(format!("ember serve exited {status}: {}", err.join("\n")));
        }
        let counters: Vec<&String> = err
            .iter()
            .filter(|l| {
                l.starts_with("tap ") || l.starts_with("af_packet ") || l.starts_with("capture:")
            })
            .collect();
        Ok(json!({"exit": "clean", "seconds": t.elapsed().as_secs_f64(), "counters": counters}))
    }

    fn client(&self, extra: &[&str], args: &[&str], limit: Duration) -> Result<Value, String> {
        let mut cmd = self.ns.command(&self.ember.display().to_string());
        cmd.args([
            "client",
            "--tap",
            "etap1",
            "--addr",
            CLIENT_ADDR,
            "--squeues",
            "2",
            "--queues",
            "1",
        ]);
        cmd.args(extra);
        cmd.args(args);
        let o = run_bounded(&mut cmd, limit).map_err(|e| format!("ember client: {e}"))?;
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        if !o.status.success() {
            return Err(format!(
                "ember client {args:?} exited {}: {}",
                o.status,
                tail(&String::from_utf8_lossy(&o.stderr))
            ));
        }
        let line = out.lines().last().unwrap_or("");
        serde_json::from_str(line).map_err(|e| format!("ember client output {line:?}: {e}"))
    }
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

// ---------------------------------------------------------------------------------------
// Steps against `ember serve`.

fn ping(c: &mut Ctx) -> Result<Value, String> {
    let srv = c.server;
    let (out, _) = sh(
        &c.ns,
        &format!("ping -c 100 -i 0.01 -W 2 {srv}"),
        Duration::from_secs(30),
    )?;
    let line = out
        .lines()
        .find(|l| l.contains("packets transmitted"))
        .ok_or("no ping summary")?;
    let received: u32 = line
        .split(',')
        .nth(1)
        .and_then(|p| p.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("cannot read {line:?}"))?;
    let rtt = out
        .lines()
        .find(|l| l.starts_with("rtt"))
        .unwrap_or("")
        .to_string();
    if received != 100 {
        return Err(format!("{received}/100 replies ({line})"));
    }
    Ok(json!({"replies": received, "rtt": rtt}))
}

fn curl_bytes(c: &mut Ctx, n: u64, limit: Duration) -> Result<Value, String> {
    let srv = c.server;
    let body = c.dir.join(format!("body-{n}"));
    let hdr = c.dir.join(format!("hdr-{n}"));
    let (out, _) = sh(
        &c.ns,
        &format!(
            "curl -sS --max-time {} -D {} -o {} -w '%{{http_code}} %{{speed_download}}' http://{srv}/bytes/{n}",
            limit.as_secs(),
            hdr.display(),
            body.display()
        ),
        limit + Duration::from_secs(5),
    )?;
    let mut it = out.split_whitespace();
    let code = it.next().unwrap_or("");
    let speed: f64 = it.next().and_then(|s| s.parse().ok()).unwrap_or(0.0);
    if code != "200" {
        return Err(format!("status {code}"));
    }
    let headers = std::fs::read_to_string(&hdr).map_err(|e| e.to_string())?;
    let want = headers
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("x-sha256")
                .then(|| v.trim().to_ascii_lowercase())
        })
        .ok_or("no X-SHA256 header")?;
    let got = sha256_file(&body)?;
    let len = std::fs::metadata(&body).map_err(|e| e.to_string())?.len();
    let _ = std::fs::remove_file(&body);
    if got != want || len != n {
        return Err(format!("{len} bytes, sha256 {got}, X-SHA256 {want}"));
    }
    Ok(json!({"bytes": n, "sha256_ok": true, "mbit_s": speed * 8.0 / 1e6}))
}

fn closed_port(c: &mut Ctx) -> Result<Value, String> {
    let srv = c.server;
    let t = Instant::now();
    let o = run_bounded(
        c.ns.command("curl")
            .args(["-sS", "--max-time", "5", &format!("http://{srv}:81/")]),
        Duration::from_secs(10),
    )
    .map_err(|e| e.to_string())?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let err = String::from_utf8_lossy(&o.stderr);
    // curl's exit code 7: failed to connect (a refusal; a lost SYN would be a timeout,
    // exit code 28, after seconds).
    if o.status.code() != Some(7) {
        return Err(format!("curl exited {:?}: {}", o.status.code(), err.trim()));
    }
    if ms > 1000.0 {
        return Err(format!("refused only after {ms:.0} ms"));
    }
    Ok(json!({"refused_ms": ms}))
}

/// The administrator's commands against the running `ember serve`, through its control
/// socket, while wrk keeps 40 connections busy: `ember ls` lists it, `ember netstat` shows
/// the connections spread over both squeues, `ember kstat tcp` counts them, and
/// `ember ndd -set` changes a tunable that `ember ndd` then reads back.
fn observe(c: &mut Ctx) -> Result<Value, String> {
    let path = c
        .control
        .clone()
        .ok_or("ember serve printed no control socket")?;
    let srv = c.server;
    let mut wrk =
        c.ns.command("wrk")
            .args([
                "-t2",
                "-c40",
                "-d4s",
                "--timeout",
                "5s",
                &format!("http://{srv}/bytes/1024"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("wrk: {e}"))?;
    std::thread::sleep(Duration::from_millis(1500));
    let ember = |args: &[&str]| -> Result<String, String> {
        let o = run_bounded(Command::new(&c.ember).args(args), Duration::from_secs(20))
            .map_err(|e| format!("ember {}: {e}", args.join(" ")))?;
        if !o.status.success() {
            return Err(format!(
                "ember {} exited {}: {}",
                args.join(" "),
                o.status,
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&o.stdout).to_string())
    };
    let before = ember(&["ndd", "--stack", &path, "tcp_xmit_hiwat"])?;
    let ls = ember(&["ls"]);
    let netstat = ember(&["netstat", "--stack", &path]);
    let kstat = ember(&["kstat", "--stack", &path, "tcp"]);
    let set = ember(&["ndd", "--stack", &path, "-set", "tcp_xmit_hiwat", "262144"]);
    let get = ember(&["ndd", "--stack", &path, "tcp_xmit_hiwat"]);
    let reset = ember(&[
        "ndd",
        "--stack",
        &path,
        "-set",
        "tcp_xmit_hiwat",
        before.trim(),
    ]);
    let t = Instant::now();
    while wrk.try_wait().map_err(|e| e.to_string())?.is_none() {
        if t.elapsed() > Duration::from_secs(30) {
            let _ = wrk.kill();
            let _ = wrk.wait();
            return Err("wrk did not finish in 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (ls, netstat, kstat, set, get) = (ls?, netstat?, kstat?, set?, get?);
    reset?;
    let id = Path::new(&path)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    if !ls
        .lines()
        .any(|l| l.split_whitespace().next() == Some(id.as_str()))
    {
        return Err(format!("ember ls does not list {id}:\n{ls}"));
    }
    let estab: Vec<&str> = netstat
        .lines()
        .filter(|l| l.contains("ESTABLISHED") && l.contains(&format!("{srv}:80")))
        .collect();
    let mut squeues: Vec<String> = estab
        .iter()
        .filter_map(|l| l.split_whitespace().nth(3).map(String::from))
        .collect();
    squeues.sort();
    squeues.dedup();
    eprintln!(
        "   netstat (head):\n{}",
        netstat.lines().take(6).collect::<Vec<_>>().join("\n")
    );
    if estab.len() < 20 {
        return Err(format!(
            "netstat lists {} established HTTP connections during wrk -c40:\n{netstat}",
            estab.len()
        ));
    }
    if squeues.len() < 2 {
        return Err(format!("the connections sit on squeues {squeues:?} only"));
    }
    let curr: u64 = kstat
        .lines()
        .find_map(|l| l.strip_prefix("tcp:tcpCurrEstab "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no tcp:tcpCurrEstab in:\n{kstat}"))?;
    if curr == 0 {
        return Err("kstat tcp:tcpCurrEstab is 0 during wrk".into());
    }
    if set.trim() != "tcp_xmit_hiwat 262144" || get.trim() != "262144" {
        return Err(format!("ndd -set answered {set:?}, ndd read back {get:?}"));
    }
    Ok(json!({"established": estab.len(), "squeues": squeues, "curr_estab": curr}))
}

/// A spoofed SYN flood (`hping3 -S`, 200,000 SYNs from 198.18.0.77, an address nobody
/// has, one source port each) at ember serve while curl keeps fetching: ember's SYN
/// queue fills, it answers with SYN cookies (RFC 4987), and the fetches succeed. Bounded
/// by count and by a 30 s `timeout`.
fn syn_flood(c: &mut Ctx) -> Result<Value, String> {
    let path = c
        .control
        .clone()
        .ok_or("ember serve printed no control socket")?;
    let srv = c.server;
    let kstat = |c: &Ctx| -> Result<Vec<(String, u64)>, String> {
        let o = run_bounded(
            Command::new(&c.ember).args(["kstat", "--stack", &path, "tcp"]),
            Duration::from_secs(20),
        )
        .map_err(|e| format!("ember kstat: {e}"))?;
        Ok(String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(' ')?;
                Some((k.strip_prefix("tcp:")?.to_string(), v.trim().parse().ok()?))
            })
            .collect())
    };
    let get =
        |k: &[(String, u64)], name: &str| k.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v);
    let before = kstat(c)?;
    let mut flood =
        c.ns.command("timeout")
            .args([
                "30",
                "hping3",
                "-q",
                "-S",
                "-p",
                "80",
                "-a",
                "198.18.0.77",
                "-i",
                "u20",
                "-c",
                "200000",
                srv,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("hping3: {e}"))?;
    std::thread::sleep(Duration::from_millis(300));
    let (mut tried, mut ok) = (0u32, 0u32);
    let t = Instant::now();
    let mut during = 0u32;
    while tried < 400 && t.elapsed() < Duration::from_secs(35) {
        let running = flood.try_wait().map_err(|e| e.to_string())?.is_none();
        if !running && tried >= 50 {
            break;
        }
        tried += 1;
        during += u32::from(running);
        let o = run_bounded(
            c.ns.command("curl").args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "5",
                &format!("http://{srv}/bytes/1000"),
            ]),
            Duration::from_secs(10),
        );
        if o.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "200") {
            ok += 1;
        }
    }
    let t2 = Instant::now();
    while flood.try_wait().map_err(|e| e.to_string())?.is_none() {
        if t2.elapsed() > Duration::from_secs(35) {
            let _ = flood.kill();
            let _ = flood.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = kstat(c)?;
    let delta = |n: &str| get(&after, n).saturating_sub(get(&before, n));
    let sent = delta("tcpSynCookiesSent");
    let v = json!({
        "curl_ok": ok,
        "curl_tried": tried,
        "curl_during_flood": during,
        "success_rate": f64::from(ok) / f64::from(tried.max(1)),
        "tcpSynCookiesSent": sent,
        "tcpSynCookiesRecv": delta("tcpSynCookiesRecv"),
        "tcpSynCookiesFailed": delta("tcpSynCookiesFailed"),
        "tcpListenDropQ0": delta("tcpListenDropQ0"),
        "tcpPassiveOpens": delta("tcpPassiveOpens"),
        "tcpInSegs": delta("tcpInSegs"),
        "tcpConns_after": get(&after, "tcpConns"),
    });
    if during < 20 {
        return Err(format!("only {during} fetches ran during the flood: {v}"));
    }
    if sent < 1000 {
        return Err(format!("the flood drew only {sent} SYN cookies: {v}"));
    }
    if u64::from(ok) * 100 < u64::from(tried) * 99 {
        return Err(format!(
            "{ok} of {tried} fetches succeeded during the flood: {v}"
        ));
    }
    Ok(v)
}

fn wrk(c: &mut Ctx) -> Result<Value, String> {
    let srv = c.server;
    let (out, _) = sh(
        &c.ns,
        &format!("wrk -t2 -c50 -d5s --timeout 5s http://{srv}/bytes/1024"),
        Duration::from_secs(30),
    )?;
    if out.contains("Socket errors") {
        return Err(format!("wrk saw socket errors:\n{}", tail(&out)));
    }
    if out.contains("Non-2xx") {
        return Err(format!("wrk saw non-2xx responses:\n{}", tail(&out)));
    }
    let rps: f64 = out
        .lines()
        .find(|l| l.starts_with("Requests/sec:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no Requests/sec in:\n{out}"))?;
    let requests: u64 = out
        .lines()
        .find(|l| l.contains("requests in"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if requests == 0 {
        return Err(format!("no requests completed:\n{out}"));
    }
    Ok(json!({"requests": requests, "requests_per_s": rps}))
}

fn make_file(c: &Ctx, name: &str, mb: u64) -> Result<(PathBuf, String), String> {
    let p = c.dir.join(name);
    if !p.exists() {
        let st = Command::new("head")
            .args(["-c", &format!("{}", mb << 20)])
            .arg("/dev/urandom")
            .stdout(std::fs::File::create(&p).map_err(|e| e.to_string())?)
            .status()
            .map_err(|e| e.to_string())?;
        if !st.success() {
            return Err("head /dev/urandom failed".into());
        }
    }
    let s = sha256_file(&p)?;
    Ok((p, s))
}

fn discard(c: &mut Ctx, mb: u64) -> Result<Value, String> {
    let srv = c.server;
    let (f, _) = make_file(c, &format!("rand-{mb}m"), mb)?;
    let t = Instant::now();
    sh(
        &c.ns,
        &format!("nc -N -w 20 {srv} 9 < {}", f.display()),
        Duration::from_secs(60),
    )?;
    let s = t.elapsed().as_secs_f64();
    Ok(json!({"bytes": mb << 20, "mbit_s": (mb << 20) as f64 * 8.0 / s / 1e6}))
}

fn echo(c: &mut Ctx, mb: u64) -> Result<Value, String> {
    let srv = c.server;
    let (f, want) = make_file(c, &format!("rand-{mb}m"), mb)?;
    let out = c.dir.join(format!("echo-out-{mb}"));
    let t = Instant::now();
    // socat half-closes its write side at the end of the file, then waits (-t) for
    // echo's own FIN after the last echoed byte.
    sh(
        &c.ns,
        &format!(
            "socat -t 30 -T 30 - TCP:{srv}:7 < {} > {}",
            f.display(),
            out.display()
        ),
        Duration::from_secs(90),
    )?;
    let s = t.elapsed().as_secs_f64();
    let got = sha256_file(&out)?;
    let _ = std::fs::remove_file(&out);
    if got != want {
        return Err(format!("echoed sha256 {got} != sent {want}"));
    }
    Ok(json!({"bytes": mb << 20, "sha256_ok": true, "seconds": s}))
}

fn iperf3(c: &mut Ctx, args: &str) -> Result<Value, String> {
    let srv = c.server;
    let (out, _) = sh(
        &c.ns,
        &format!("iperf3 -c {srv} -t 5 -J {args}"),
        Duration::from_secs(40),
    )?;
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("iperf3 -J output: {e}"))?;
    if let Some(e) = v.get("error") {
        return Err(format!("iperf3: {e}"));
    }
    let recv = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .ok_or("no end.sum_received.bits_per_second")?;
    let sent = v["end"]["sum_sent"]["bits_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    let retr = v["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    if recv <= 0.0 {
        return Err("0 bits/s".into());
    }
    Ok(
        json!({"args": args, "received_gbit_s": recv / 1e9, "sent_gbit_s": sent / 1e9, "retransmits": retr}),
    )
}

// ---------------------------------------------------------------------------------------
// ember's client against the kernel.

fn client_http(c: &mut Ctx, extra: &[&str]) -> Result<Value, String> {
    let (_, want) = make_file(c, "www/file-20m.bin", 20)?;
    let out = c.dir.join("client-http-out");
    let v = c.client(
        extra,
        &[
            "http",
            &format!("http://{KERNEL1}:8000/file-20m.bin"),
            "--out",
            &out.display().to_string(),
        ],
        Duration::from_secs(90),
    )?;
    let got = sha256_file(&out)?;
    let _ = std::fs::remove_file(&out);
    if v["sha256"].as_str() != Some(want.as_str()) || got != want {
        return Err(format!("client saw {v}, file sha256 {got}, want {want}"));
    }
    Ok(v)
}

fn client_send(c: &mut Ctx, extra: &[&str], mb: u64) -> Result<Value, String> {
    let sink = c.dir.join("kernel-recv");
    let _ = std::fs::remove_file(&sink);
    let mut srv =
        c.ns.command("socat")
            .args([
                "-u",
                &format!("TCP-LISTEN:9000,bind={KERNEL1},reuseaddr"),
                &format!("CREATE:{}", sink.display()),
            ])
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
    if let Err(e) = wait_listening(&c.ns, 9000) {
        let _ = srv.kill();
        let _ = srv.wait();
        return Err(e);
    }
    let r = c.client(
        extra,
        &[
            "send",
            &format!("{KERNEL1}:9000"),
            "--bytes",
            &format!("{}", mb << 20),
        ],
        Duration::from_secs(90),
    );
    let done = wait_child(&mut srv, Duration::from_secs(20));
    let v = r?;
    done?;
    let got = sha256_file(&sink)?;
    let _ = std::fs::remove_file(&sink);
    if v["sent_sha256"].as_str() != Some(got.as_str()) {
        return Err(format!("kernel received sha256 {got}, ember sent {v}"));
    }
    Ok(v)
}

fn client_recv(c: &mut Ctx, extra: &[&str]) -> Result<Value, String> {
    let (f, want) = make_file(c, "rand-20m", 20)?;
    let mut srv =
        c.ns.command("socat")
            .args([
                "-u",
                &format!("OPEN:{}", f.display()),
                &format!("TCP-LISTEN:9001,bind={KERNEL1},reuseaddr"),
            ])
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
    if let Err(e) = wait_listening(&c.ns, 9001) {
        let _ = srv.kill();
        let _ = srv.wait();
        return Err(e);
    }
    let r = c.client(
        extra,
        &["recv", &format!("{KERNEL1}:9001")],
        Duration::from_secs(90),
    );
    let done = wait_child(&mut srv, Duration::from_secs(20));
    let v = r?;
    done?;
    if v["received_sha256"].as_str() != Some(want.as_str()) {
        return Err(format!("ember received {v}, file sha256 {want}"));
    }
    Ok(v)
}

/// Waits until a kernel socket listens on `port` in the namespace (bounded).
fn wait_listening(ns: &NetNs, port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok((out, _)) = sh(ns, "ss -Hltn", Duration::from_secs(5)) {
            if out.contains(&format!(":{port} ")) {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("nothing listens on port {port} after 10 s"))
}

fn wait_child(ch: &mut Child, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        match ch.try_wait() {
            Ok(Some(s)) if s.success() => return Ok(()),
            Ok(Some(s)) => return Err(format!("kernel-side peer exited {s}")),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = ch.kill();
                let _ = ch.wait();
                return Err("kernel-side peer did not finish in time".into());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Crafted handshakes: a raw socket in the namespace against ember serve and,
// as the control, a kernel listener.

/// The kernel listener of the `handshake:` steps, in a namespace of its own.
const KLISTEN: Ipv4Addr = Ipv4Addr::new(198, 18, 3, 2);
/// The crafted clients' address toward [`KLISTEN`] (our end of the veth pair).
const KCRAFT: Ipv4Addr = Ipv4Addr::new(198, 18, 3, 1);
/// The crafted clients' address toward ember: the TAP's kernel side.
const ECRAFT: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

const HANDSHAKE_STEPS: [&str; 5] = [
    "handshake: dup SYN + ACK (ember): no RST in 50",
    "handshake: dup SYN + ACK (kernel): no RST in 50",
    "handshake: 30 SYNs (ember): <= 2 SYN,ACKs",
    "handshake: 30 SYNs (kernel): <= 2 SYN,ACKs",
    "ember serve (handshake): clean exit",
];

/// Phase 1b: ember serve on the TAP as 198.18.0.2 and a kernel listener at 198.18.3.2 (a
/// second namespace, joined by a veth pair); a raw socket in the suite's namespace plays
/// the client of both. The nft table that drops the namespace kernel's RSTs lives as long
/// as the phase; without nft the steps say they skipped.
fn handshakes(c: &mut Ctx) -> Result<(), String> {
    let [dup_e, dup_k, burst_e, burst_k, exit] = HANDSHAKE_STEPS;
    let rst_drop = match handshake::RstDrop::install(&c.ns, &c.dir) {
        Ok(d) => d,
        Err(why) => {
            let why = format!("nft cannot drop the namespace's own RSTs: {why}");
            for n in [dup_e, dup_k, burst_e, burst_k] {
                c.step(n, |_| Ok(skipped(&why)));
            }
            return Ok(());
        }
    };
    // The kernel listener's namespace (deleted on drop, with its veth end).
    let kns = NetNs::create(&format!("ember-interop-k-{}", std::process::id()))
        .map_err(|e| format!("kernel listener namespace: {e}"))?;
    c.ns.ip(&[
        "link",
        "add",
        "ekc0",
        "type",
        "veth",
        "peer",
        "name",
        "ekc1",
        "netns",
        kns.name(),
    ])
    .map_err(|e| e.to_string())?;
    c.ns.ip(&["addr", "add", &format!("{KCRAFT}/24"), "dev", "ekc0"])
        .map_err(|e| e.to_string())?;
    c.ns.ip(&["link", "set", "ekc0", "up"])
        .map_err(|e| e.to_string())?;
    kns.ip(&["addr", "add", &format!("{KLISTEN}/24"), "dev", "ekc1"])
        .map_err(|e| e.to_string())?;
    kns.ip(&["link", "set", "ekc1", "up"])
        .map_err(|e| e.to_string())?;
    let open = |name: &str| {
        std::fs::File::open(format!("/var/run/netns/{name}"))
            .map_err(|e| format!("namespace {name}: {e}"))
    };
    let (ours, theirs) = (open(c.ns.name())?, open(kns.name())?);
    let listener = netns::within(&theirs, || std::net::TcpListener::bind((KLISTEN, 80)))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("kernel listener {KLISTEN}:80: {e}"))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    // Accepted connections are dropped at once (the raw socket has reset them already).
    let mut drain = || while listener.accept().is_ok() {};
    let raw = handshake::RawTcp::open(&ours).map_err(|e| format!("raw socket: {e}"))?;
    let ember: Ipv4Addr = SERVE.parse().map_err(|e| format!("{SERVE}: {e}"))?;
    let (p0, _) = handshake::PORTS;

    let s = c.serve(&["--offload", "false"])?;
    let control = s.control.clone();
    // The crafted connections still open at ember (each try ends with a RST): `ember
    // netstat` lines with our address and a port of the crafted range (2xxxx).
    let ember_left = |c: &Ctx| -> Result<usize, String> {
        let path = control
            .as_deref()
            .ok_or("ember serve printed no control socket")?;
        let o = run_bounded(
            Command::new(&c.ember).args(["netstat", "--stack", path]),
            Duration::from_secs(20),
        )
        .map_err(|e| format!("ember netstat: {e}"))?;
        Ok(String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains(&format!("{ECRAFT}:2")))
            .count())
    };
    let kernel_left = |kns: &NetNs| -> Result<usize, String> {
        let o = run_bounded(kns.command("ss").args(["-Htan"]), Duration::from_secs(20))
            .map_err(|e| format!("ss: {e}"))?;
        Ok(String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains(&format!("{KCRAFT}:2")))
            .count())
    };
    c.step(dup_e, |c| {
        let before = rst_drop.dropped()?;
        let r = handshake::dup_syn_run(&raw, ECRAFT, ember, 80, p0, &mut || {})?;
        let mut v = dup_syn_figures(&r, rst_drop.dropped()?.saturating_sub(before));
        v["left_open"] = json!(ember_left(c)?);
        if r.tries_with_rst > 0 {
            return Err(format!(
                "{} of {} tries drew a RST from ember for a valid final ACK: {v}",
                r.tries_with_rst, r.tries
            ));
        }
        left_open(v)
    });
    c.step(dup_k, |_| {
        let before = rst_drop.dropped()?;
        let r = handshake::dup_syn_run(&raw, KCRAFT, KLISTEN, 80, p0 + 1000, &mut drain)?;
        let mut v = dup_syn_figures(&r, rst_drop.dropped()?.saturating_sub(before));
        v["left_open"] = json!(kernel_left(&kns)?);
        if r.tries_with_rst > 0 {
            return Err(format!(
                "the control: {} of {} tries drew a RST from the kernel: {v}",
                r.tries_with_rst, r.tries
            ));
        }
        left_open(v)
    });
    let burst = |src, dst, sport, who: &str| -> Result<Value, String> {
        let flow = handshake::Flow {
            src,
            dst,
            sport,
            dport: 80,
        };
        let v = handshake::syn_burst(&raw, &flow)?;
        let n = v["synacks"].as_u64().unwrap_or(0);
        if !(1..=2).contains(&n) {
            return Err(format!(
                "{who} answered {} identical SYNs with {n} SYN,ACKs (at most 2): {v}",
                handshake::BURST
            ));
        }
        Ok(v)
    };
    c.step(burst_e, |c| {
        let mut v = burst(ECRAFT, ember, p0 + 2000, "ember")?;
        v["left_open"] = json!(ember_left(c)?);
        left_open(v)
    });
    c.step(burst_k, |_| {
        let v = burst(KCRAFT, KLISTEN, p0 + 2001, "the control: the kernel");
        drain();
        let mut v = v?;
        v["left_open"] = json!(kernel_left(&kns)?);
        left_open(v)
    });
    let r = c.stop(s);
    if c.wants(&[exit]) {
        c.results.push((exit.into(), r, 0.0));
    }
    drop((raw, listener, rst_drop, kns));
    Ok(())
}

/// `v`, unless its `left_open` says crafted connections outlived the RST that ends each
/// (they would pile up over the tries).
fn left_open(v: Value) -> Result<Value, String> {
    match v["left_open"].as_u64() {
        Some(0) => Ok(v),
        _ => Err(format!(
            "crafted connections still open after the RSTs that end them: {v}"
        )),
    }
}

fn dup_syn_figures(r: &handshake::DupSynRun, dropped: u64) -> Value {
    json!({
        "tries": r.tries,
        "tries_with_rst": r.tries_with_rst,
        "rsts": r.rsts,
        "synacks_after_dup": r.synacks_after_dup,
        "namespace_rsts_dropped_by_nft": dropped,
    })
}

// ---------------------------------------------------------------------------------------
// The capture, read by tshark.

fn tshark_fields(cap: &Path, filter: &str, fields: &[&str]) -> Result<Vec<Vec<String>>, String> {
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"])
        .arg(cap)
        .args(["-Y", filter, "-T", "fields", "-E", "separator=|"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let o = run_bounded(&mut cmd, Duration::from_secs(60)).map_err(|e| e.to_string())?;
    if !o.status.success() {
        return Err(format!("tshark: {}", String::from_utf8_lossy(&o.stderr)));
    }
    Ok(String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect())
}

fn capture_checks(cap: &Path) -> Result<Value, String> {
    // SYN options, both ways.
    let syns = tshark_fields(
        cap,
        "tcp.flags.syn==1",
        &[
            "ip.src",
            "tcp.options.mss_val",
            "tcp.options.wscale.shift",
            "tcp.options.sack_perm",
            "tcp.options.timestamp.tsval",
        ],
    )?;
    let ember_synack = syns
        .iter()
        .find(|r| r[0] == SERVE)
        .ok_or("no SYN-ACK from ember in the capture")?;
    for (i, name) in ["MSS", "window scale", "SACK permitted", "timestamps"]
        .iter()
        .enumerate()
    {
        if ember_synack.get(i + 1).is_none_or(|v| v.is_empty()) {
            return Err(format!(
                "ember's SYN-ACK has no {name} option: {ember_synack:?}"
            ));
        }
    }
    // The FIN leaves within 1 ms of the last data (a NIC's LSO buffer once held a
    // server's FIN for 3.4 s): every ember FIN, timed from ember's last data on its
    // connection or, where the peer closed first (curl ending a keep-alive connection),
    // from the peer's FIN: how long curl takes to close is not ember's to answer for.
    let segs = tshark_fields(
        cap,
        "tcp",
        &[
            "ip.src",
            "tcp.stream",
            "frame.time_epoch",
            "tcp.len",
            "tcp.flags.fin",
        ],
    )?;
    let mut since: std::collections::HashMap<String, f64> = Default::default();
    let mut worst_gap_ms: f64 = 0.0;
    let mut fins = 0;
    for r in &segs {
        let (ours, stream, t, len, fin) = (
            r[0] == SERVE,
            r[1].clone(),
            r[2].parse::<f64>().unwrap_or(0.0),
            r[3].parse::<u64>().unwrap_or(0),
            r[4] == "1" || r[4] == "True",
        );
        if ours && fin {
            fins += 1;
            if let Some(d) = since.get(&stream) {
                worst_gap_ms = worst_gap_ms.max((t - d) * 1e3);
            }
        }
        if (ours && len > 0) || (!ours && fin) {
            since.insert(stream, t);
        }
    }
    if fins == 0 {
        return Err("no FIN from ember in the capture".into());
    }
    if worst_gap_ms > 1.0 {
        return Err(format!(
            "a FIN left {worst_gap_ms:.3} ms after the connection's last data (limit 1 ms)"
        ));
    }
    // tshark's expert info: no malformed packets, no errors.
    let o = run_bounded(
        Command::new("tshark")
            .args(["-n", "-q", "-r"])
            .arg(cap)
            .args(["-z", "expert,error"]),
        Duration::from_secs(60),
    )
    .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let malformed = tshark_fields(
        cap,
        "_ws.malformed || _ws.expert.severity==error",
        &["frame.number"],
    )?;
    if !malformed.is_empty() {
        return Err(format!(
            "tshark flags {} frames as malformed or errors:\n{}",
            malformed.len(),
            tail(&text)
        ));
    }
    Ok(json!({
        "synack_options": {"mss": ember_synack[1], "wscale": ember_synack[2], "sack_perm": ember_synack[3], "tsval": ember_synack[4]},
        "fins": fins,
        "worst_fin_after_last_data_ms": worst_gap_ms,
        "expert_errors": 0,
    }))
}

// ---------------------------------------------------------------------------------------

fn main() {
    let mut args = std::env::args().skip(1);
    let mut ember = PathBuf::from("target/release/ember");
    let mut json_out = PathBuf::from("target/interop.json");
    let mut only = None;
    while let Some(a) = args.next() {
        match (a.as_str(), args.next()) {
            ("--ember", Some(v)) => ember = PathBuf::from(v),
            ("--json", Some(v)) => json_out = PathBuf::from(v),
            ("--only", Some(v)) => only = Some(v),
            _ => {
                eprintln!("usage: ember-interop [--ember PATH] [--json FILE] [--only SUBSTR]");
                std::process::exit(2);
            }
        }
    }
    if let Err(why) = privileged() {
        println!("interop suite skipped: {why}");
        return;
    }
    let missing: Vec<&str> = [
        "ping",
        "curl",
        "wrk",
        "nc",
        "socat",
        "iperf3",
        "tshark",
        "python3",
        "sha256sum",
        "ss",
        "hping3",
    ]
    .into_iter()
    .filter(|t| {
        !Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
    .collect();
    if !missing.is_empty() {
        eprintln!("interop suite: missing tools {missing:?} (tests/interop/run installs them)");
        // A run of a few steps (`--only`) goes on: a step whose tool is missing fails.
        if only.is_none() {
            std::process::exit(1);
        }
    }
    let ember = std::fs::canonicalize(&ember).unwrap_or_else(|e| {
        eprintln!("interop suite: ember binary {}: {e}", ember.display());
        std::process::exit(1);
    });
    let ns = match NetNs::create(&format!("ember-interop-{}", std::process::id())) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("interop suite: cannot create a namespace: {e}");
            std::process::exit(1);
        }
    };
    let dir = std::env::temp_dir().join(format!("ember-interop-{}", std::process::id()));
    let _ = std::fs::create_dir_all(dir.join("www"));
    let mut c = Ctx {
        server: SERVE,
        control: None,
        ember,
        ns,
        dir: dir.clone(),
        results: Vec::new(),
        only,
    };
    let started = Instant::now();
    if let Err(e) = run_all(&mut c) {
        c.results.push(("setup".into(), Err(e), 0.0));
    }
    let failed: Vec<String> = c
        .results
        .iter()
        .filter(|(_, r, _)| r.is_err())
        .map(|(n, _, _)| n.clone())
        .collect();
    println!("\n{:<44} {:>8}  result", "step", "seconds");
    for (n, r, s) in &c.results {
        match r {
            Ok(v) => match is_skip(v) {
                Some(why) => println!("{n:<44} {s:>8.1}  skipped: {why}"),
                None => println!("{n:<44} {s:>8.1}  ok {v}"),
            },
            Err(e) => println!("{n:<44} {s:>8.1}  FAILED {e}"),
        }
    }
    let skips = c
        .results
        .iter()
        .filter(|(_, r, _)| r.as_ref().is_ok_and(|v| is_skip(v).is_some()))
        .count();
    let doc = json!({
        "suite": "interop",
        "seconds": started.elapsed().as_secs_f64(),
        "passed": c.results.len() - failed.len() - skips,
        "skipped": skips,
        "failed": failed.len(),
        "only": c.only,
        "steps": c.results.iter().map(|(n, r, s)| match r {
            Ok(v) if is_skip(v).is_some() => json!({"step": n, "ok": true, "skipped": true, "seconds": s, "detail": v}),
            Ok(v) => json!({"step": n, "ok": true, "seconds": s, "detail": v}),
            Err(e) => json!({"step": n, "ok": false, "seconds": s, "error": e}),
        }).collect::<Vec<_>>(),
    });
    if let Some(p) = json_out.parent() {
        let _ = std::fs::create_dir_all(p);
    }
    let _ = std::fs::write(
        &json_out,
        serde_json::to_string_pretty(&doc).unwrap_or_default(),
    );
    let _ = std::fs::remove_dir_all(&dir);
    let steps = c.results.len();
    drop(c);
    println!(
        "\ninterop: {steps} steps, {} failed, {} skipped, {:.0} s; figures in {}",
        failed.len(),
        skips,
        started.elapsed().as_secs_f64(),
        json_out.display()
    );
    if !failed.is_empty() {
        std::process::exit(1);
    }
}

fn run_all(c: &mut Ctx) -> Result<(), String> {
    let ns = &c.ns;
    ns.ip(&[
        "tuntap",
        "add",
        "dev",
        "etap0",
        "mode",
        "tap",
        "multi_queue",
    ])
    .map_err(|e| e.to_string())?;
    ns.ip(&["addr", "add", "198.18.0.1/24", "dev", "etap0"])
        .map_err(|e| e.to_string())?;
    ns.ip(&["link", "set", "etap0", "up"])
        .map_err(|e| e.to_string())?;
    ns.ip(&["tuntap", "add", "dev", "etap1", "mode", "tap"])
        .map_err(|e| e.to_string())?;
    ns.ip(&["addr", "add", "198.18.1.1/24", "dev", "etap1"])
        .map_err(|e| e.to_string())?;
    ns.ip(&["link", "set", "etap1", "up"])
        .map_err(|e| e.to_string())?;

    // Phase 1: ember serve, offload off.
    if c.wants(&[
        "ping -c 100",
        "curl /bytes/1000000",
        "curl /bytes/100000000",
        "curl to a closed port: refused",
        "wrk -t2 -c50 -d5s",
        "ember ls, netstat, kstat, ndd -set during wrk",
        "hping3 -S flood (200,000 spoofed SYNs) while curl fetches",
        "nc 20 MB to discard",
        "socat 20 MB through echo (half-close)",
        "iperf3 -c (offload off)",
        "iperf3 -c -R (offload off)",
        "iperf3 -c -P 4 (offload off)",
        "ember serve: clean exit on SIGTERM",
    ]) {
        phase1(c)?;
    }
    // Phase 1b: crafted handshakes against a fresh ember serve (no state left by the SYN
    // flood, whose half-open connections would turn ember to SYN cookies) and the kernel.
    if c.wants(&HANDSHAKE_STEPS) {
        handshakes(c)?;
    }
    // Phase 2: offload on (virtio-net header, checksum and TSO).
    if c.wants(&[
        "curl /bytes/100000000 (offload on)",
        "iperf3 -c (offload on)",
        "iperf3 -c -R (offload on)",
        "iperf3 -c -P 4 (offload on)",
        "ember serve (offload): clean exit",
    ]) {
        phase2(c)?;
    }
    // Phase 3: a capture, read by tshark.
    if c.wants(&[
        "capture: curl with Connection: close",
        "ember serve (capture): clean exit on SIGINT",
        "tshark: SYN options, FIN timing, expert info",
    ]) {
        phase3(c)?;
    }
    // Phases 4 and 5: ember's client against the kernel, then the same with ember-side
    // impairment, and ember serve impaired.
    if c.wants(&[
        "ember client http from python3 http.server (20 MB)",
        "ember client send 20 MB to socat",
        "ember client recv 20 MB from socat",
        "impaired: ember client http (20 MB)",
        "impaired: ember client send 5 MB",
        "impaired: ember client recv 20 MB",
        "impaired: curl /bytes/1000000",
        "impaired: curl /bytes/10000000",
        "impaired: socat 5 MB through echo",
        "ember serve (impaired): clean exit",
    ]) {
        phases4_5(c)?;
    }
    // Phase 6: AF_PACKET on a veth pair (the kernel owns the other end, ek0).
    if c.wants(&[
        "af_packet: ping -c 100",
        "af_packet: curl /bytes/100000000",
        "af_packet: socat 20 MB through echo",
        "af_packet: iperf3 -c -P 4",
        "af_packet: iperf3 -c -R",
        "ember serve (af_packet): clean exit",
        "af_packet impaired: curl /bytes/1000000",
        "af_packet impaired: socat 2 MB through echo",
        "ember serve (af_packet, impaired): clean exit",
    ]) {
        phase6(c)?;
    }
    Ok(())
}

fn phase1(c: &mut Ctx) -> Result<(), String> {
    let s = c.serve(&["--offload", "false"])?;
    c.step("ping -c 100", ping);
    c.step("curl /bytes/1000000", |c| {
        curl_bytes(c, 1_000_000, Duration::from_secs(30))
    });
    c.step("curl /bytes/100000000", |c| {
        curl_bytes(c, 100_000_000, Duration::from_secs(120))
    });
    c.step("curl to a closed port: refused", closed_port);
    c.step("wrk -t2 -c50 -d5s", wrk);
    c.control = s.control.clone();
    c.step("ember ls, netstat, kstat, ndd -set during wrk", observe);
    c.step(
        "hping3 -S flood (200,000 spoofed SYNs) while curl fetches",
        syn_flood,
    );
    c.step("nc 20 MB to discard", |c| discard(c, 20));
    c.step("socat 20 MB through echo (half-close)", |c| echo(c, 20));
    c.step("iperf3 -c (offload off)", |c| iperf3(c, ""));
    c.step("iperf3 -c -R (offload off)", |c| iperf3(c, "-R"));
    c.step("iperf3 -c -P 4 (offload off)", |c| iperf3(c, "-P 4"));
    let r = c.stop(s);
    c.results
        .push(("ember serve: clean exit on SIGTERM".into(), r, 0.0));

    Ok(())
}

fn phase2(c: &mut Ctx) -> Result<(), String> {
    let s = c.serve(&["--offload", "true"])?;
    c.step("curl /bytes/100000000 (offload on)", |c| {
        curl_bytes(c, 100_000_000, Duration::from_secs(120))
    });
    c.step("iperf3 -c (offload on)", |c| iperf3(c, ""));
    c.step("iperf3 -c -R (offload on)", |c| iperf3(c, "-R"));
    c.step("iperf3 -c -P 4 (offload on)", |c| iperf3(c, "-P 4"));
    let r = c.stop(s);
    c.results
        .push(("ember serve (offload): clean exit".into(), r, 0.0));

    Ok(())
}

fn phase3(c: &mut Ctx) -> Result<(), String> {
    let cap = c.dir.join("serve.pcap");
    let cap_s = cap.display().to_string();
    let s = c.serve(&["--capture", &cap_s])?;
    c.step("capture: curl with Connection: close", |c| {
        sh(
            &c.ns,
            &format!("curl -sS --max-time 20 -H 'Connection: close' -o /dev/null http://{SERVE}/bytes/300000 && curl -sS --max-time 20 -o /dev/null http://{SERVE}/bytes/5000"),
            Duration::from_secs(30),
        )
        .map(|_| json!({}))
    });
    let r = c.stop_with(s, 2);
    c.results
        .push(("ember serve (capture): clean exit on SIGINT".into(), r, 0.0));
    c.step("tshark: SYN options, FIN timing, expert info", |_| {
        capture_checks(&cap)
    });

    Ok(())
}

fn phases4_5(c: &mut Ctx) -> Result<(), String> {
    let www = c.dir.join("www");
    let mut http =
        c.ns.command("python3")
            .args([
                "-m",
                "http.server",
                "8000",
                "--bind",
                KERNEL1,
                "--directory",
            ])
            .arg(&www)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("python3 http.server: {e}"))?;
    let ready = wait_listening(&c.ns, 8000);
    if let Err(e) = ready {
        let _ = http.kill();
        return Err(e);
    }
    c.step("ember client http from python3 http.server (20 MB)", |c| {
        client_http(c, &[])
    });
    c.step("ember client send 20 MB to socat", |c| {
        client_send(c, &[], 20)
    });
    c.step("ember client recv 20 MB from socat", |c| {
        client_recv(c, &[])
    });

    // Phase 5: the same with ember-side impairment.
    let imp = IMPAIR;
    c.step("impaired: ember client http (20 MB)", |c| {
        client_http(c, &imp)
    });
    c.step("impaired: ember client send 5 MB", |c| {
        client_send(c, &imp, 5)
    });
    c.step("impaired: ember client recv 20 MB", |c| {
        client_recv(c, &imp)
    });
    let _ = http.kill();
    let _ = http.wait();
    let s = c.serve(&imp)?;
    c.step("impaired: curl /bytes/1000000", |c| {
        curl_bytes(c, 1_000_000, Duration::from_secs(60))
    });
    c.step("impaired: curl /bytes/10000000", |c| {
        curl_bytes(c, 10_000_000, Duration::from_secs(120))
    });
    c.step("impaired: socat 5 MB through echo", |c| echo(c, 5));
    let r = c.stop(s);
    c.results
        .push(("ember serve (impaired): clean exit".into(), r, 0.0));

    Ok(())
}

fn phase6(c: &mut Ctx) -> Result<(), String> {
    let ns = &c.ns;
    ns.ip(&["link", "add", "ea0", "type", "veth", "peer", "name", "ek0"])
        .map_err(|e| e.to_string())?;
    ns.ip(&["addr", "add", "198.18.2.1/24", "dev", "ek0"])
        .map_err(|e| e.to_string())?;
    ns.ip(&["link", "set", "ek0", "up"])
        .map_err(|e| e.to_string())?;
    ns.ip(&["link", "set", "ea0", "up"])
        .map_err(|e| e.to_string())?;
    c.server = "198.18.2.2";
    let s = c.serve_on(&["--af-packet", "ea0", "--addr", "198.18.2.2/24"], &[])?;
    c.step("af_packet: ping -c 100", ping);
    c.step("af_packet: curl /bytes/100000000", |c| {
        curl_bytes(c, 100_000_000, Duration::from_secs(120))
    });
    c.step("af_packet: socat 20 MB through echo", |c| echo(c, 20));
    c.step("af_packet: iperf3 -c -P 4", |c| iperf3(c, "-P 4"));
    c.step("af_packet: iperf3 -c -R", |c| iperf3(c, "-R"));
    let r = c.stop(s);
    c.results
        .push(("ember serve (af_packet): clean exit".into(), r, 0.0));
    let s = c.serve_on(&["--af-packet", "ea0", "--addr", "198.18.2.2/24"], &IMPAIR)?;
    c.step("af_packet impaired: curl /bytes/1000000", |c| {
        curl_bytes(c, 1_000_000, Duration::from_secs(60))
    });
    c.step("af_packet impaired: socat 2 MB through echo", |c| {
        echo(c, 2)
    });
    let r = c.stop(s);
    c.results.push((
        "ember serve (af_packet, impaired): clean exit".into(),
        r,
        0.0,
    ));
    c.server = SERVE;
    Ok(())
}
