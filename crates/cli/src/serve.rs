//! `ember serve`: an ember stack on a real link (a TAP interface or an AF_PACKET socket on
//! an existing interface), serving ICMP echo, echo (RFC 862), discard (RFC 863), chargen
//! (RFC 864), HTTP/1.1 and the iperf3 server protocol, so that stock tools on the kernel's
//! side (ping, curl, wrk, nc, socat, iperf3) can talk to it.
//!
//! Options come from a TOML file (`--config`) and the command line, the command line
//! winning; every value is checked before anything starts, and a bad one is an error that
//! names the option and its valid range. SIGINT and SIGTERM stop the services, close every
//! connection with a FIN, give the FINs a moment to leave, then shut the stack down.
//! Logging goes through `tracing` (filter: `EMBER_LOG`, default `info`; nothing is logged
//! per packet at that level).

use crate::link::{self, LinkArgs};
use clap::Args;
use ember_apps::net::EmberNet;
use ember_apps::server::{spawn_service, ServiceStats, Stop};
use ember_config::FileConfig;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// `ember serve` options (each also a key of the `--config` TOML file).
#[derive(Args, Debug, Default, Clone)]
pub struct ServeArgs {
    /// A TOML file with any of these options (keys as the long options, `_` for `-`;
    /// tunables in a `[params]` table).
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub link: LinkArgs,
    /// Serve files below this directory over HTTP (besides /bytes/N).
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// echo port (0 turns the service off).
    #[arg(long)]
    pub echo_port: Option<u16>,
    /// discard port (0: off).
    #[arg(long)]
    pub discard_port: Option<u16>,
    /// chargen port (0: off).
    #[arg(long)]
    pub chargen_port: Option<u16>,
    /// HTTP port (0: off).
    #[arg(long)]
    pub http_port: Option<u16>,
    /// iperf3 port (0: off).
    #[arg(long)]
    pub iperf3_port: Option<u16>,
    /// Most live connections per service (1 ..= 65536).
    #[arg(long)]
    pub max_conns: Option<usize>,
    /// Stop by itself after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long)]
    pub duration: Option<f64>,
}

/// Checked settings.
#[derive(Debug)]
struct Settings {
    link: link::Link,
    root: Option<PathBuf>,
    ports: [(&'static str, u16); 5],
    max_conns: usize,
    duration: Option<Duration>,
}

/// Merges the file and the command line (the command line wins) and checks every value.
fn settings(mut a: ServeArgs) -> Result<Settings, String> {
    let file = match &a.config {
        Some(p) => {
            let meta =
                std::fs::metadata(p).map_err(|e| format!("--config {}: {e}", p.display()))?;
            // Not read at all when it is too large (`parse` would refuse it).
            if meta.len() > ember_config::MAX_SIZE as u64 {
                return Err(format!("--config {}: larger than 1 MiB", p.display()));
            }
            let text =
                std::fs::read_to_string(p).map_err(|e| format!("--config {}: {e}", p.display()))?;
            ember_config::parse(&text).map_err(|e| format!("--config {}: {e}", p.display()))?
        }
        None => FileConfig::default(),
    };
    macro_rules! merge {
        ($dst:expr; $($f:ident),*) => { $( if $dst.$f.is_none() { $dst.$f = file.$f.clone(); } )* };
    }
    merge!(a.link; tap, af_packet, addr, gw, squeues, queues, offload, mtu, capture, capture_snaplen, capture_max_bytes, impair);
    merge!(a; root, echo_port, discard_port, chargen_port, http_port, iperf3_port, max_conns, duration);
    let link = a.link.check(file.param_pairs())?;
    if let Some(r) = &a.root {
        if !r.is_dir() {
            return Err(format!("--root {}: not a directory", r.display()));
        }
    }
    let max_conns = a.max_conns.unwrap_or(4096);
    if !(1..=65_536).contains(&max_conns) {
        return Err(format!("--max-conns {max_conns}: must be 1 ..= 65536"));
    }
    let duration = match a.duration {
        Some(d) if d.is_finite() && d > 0.0 && d <= 86_400.0 => Some(Duration::from_secs_f64(d)),
        Some(d) => return Err(format!("--duration {d}: must be > 0 and at most 86400 s")),
        None => None,
    };
    Ok(Settings {
        link,
        root: a.root,
        ports: [
            ("echo", a.echo_port.unwrap_or(7)),
            ("discard", a.discard_port.unwrap_or(9)),
            ("chargen", a.chargen_port.unwrap_or(19)),
            ("http", a.http_port.unwrap_or(80)),
            ("iperf3", a.iperf3_port.unwrap_or(5201)),
        ],
        max_conns,
        duration,
    })
}

/// Blocks SIGINT and SIGTERM in this thread (and every thread started after), so that
/// one thread can take them with `sigwait`.
pub fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it, and
    // pthread_sigmask reads it; no pointer outlives the calls.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Logging through `tracing`, filtered by `EMBER_LOG` (default `info`), to stderr.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("EMBER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

pub fn main(a: ServeArgs) -> ExitCode {
    init_logging();
    let s = match settings(a) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ember serve: {e}");
            return ExitCode::from(2);
        }
    };
    // Before any thread exists: every thread inherits the mask.
    let sigs = block_signals();
    match run(s, sigs) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ember serve: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(s: Settings, sigs: libc::sigset_t) -> Result<(), String> {
    let running = link::start(&s.link)?;
    let net = EmberNet(running.stack.clone());
    let stop = Stop::new();
    let mut threads = Vec::new();
    let mut serving = Vec::new();
    for (name, port) in s.ports {
        if port == 0 {
            continue;
        }
        let at = SocketAddr::V4(SocketAddrV4::new(s.link.addr, port));
        let h = start_service(&net, name, at, &stop, &s)
            .map_err(|e| format!("{name} on port {port}: {e}"))?;
        threads.push(h);
        serving.push(format!("{name} {port}"));
    }
    println!(
        "ember serve: {}; serving icmp-echo, {}",
        running.describe,
        serving.join(", ")
    );
    if let Some(c) = &running.control {
        println!(
            "control socket {} (stack {}: ember ndd, ember kstat, ember netstat)",
            c.path().display(),
            c.id()
        );
    }
    println!("ready");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    tracing::info!(addr = %s.link.addr, "ember serve ready");

    // Wait for SIGINT/SIGTERM (or the duration).
    let stop2 = stop.clone();
    let main_thread = std::thread::current();
    let waiter = std::thread::spawn(move || {
        let mut sig: libc::c_int = 0;
        // SAFETY: `sigs` is an initialised set and `sig` a live int for the call.
        unsafe { libc::sigwait(&sigs, &mut sig) };
        stop2.stop();
        main_thread.unpark();
        sig
    });
    if !wait_stop(&stop, s.duration) {
        stop.stop();
        // Release the signal thread: SIGTERM to ourselves (blocked everywhere, so only
        // sigwait takes it).
        // SAFETY: kill(2) takes no pointers.
        unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    }
    let sig = waiter.join().unwrap_or(0);
    tracing::info!(signal = sig, "stopping: closing connections");
    for h in threads {
        let _ = h.join();
    }
    // Every connection was shut down both ways by the stop (FINs queued). Give the FINs
    // and their ACKs a moment on the link before the stack aborts what is left.
    std::thread::sleep(Duration::from_millis(200));
    running.finish();
    println!("ember serve: stopped");
    Ok(())
}

/// Waits until `stop` is raised (true; the signal thread unparks us) or `limit` passes
/// (false).
fn wait_stop(stop: &Stop, limit: Option<Duration>) -> bool {
    let end = limit.map(|d| std::time::Instant::now() + d);
    loop {
        if stop.is_stopped() {
            return true;
        }
        match end {
            Some(e) => {
                let now = std::time::Instant::now();
                if now >= e {
                    return false;
                }
                std::thread::park_timeout(e - now);
            }
            None => std::thread::park(),
        }
    }
}

fn start_service(
    net: &EmberNet,
    name: &str,
    at: SocketAddr,
    stop: &Arc<Stop>,
    s: &Settings,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    use ember_apps::net::Net;
    let l = net.listen(at)?;
    let stats = Arc::new(ServiceStats::default());
    match name {
        "echo" => spawn_service(name, l, stop.clone(), s.max_conns, stats, |c| {
            ember_apps::simple::echo(c)
        }),
        "discard" => spawn_service(name, l, stop.clone(), s.max_conns, stats, |c| {
            ember_apps::simple::discard(c)
        }),
        "chargen" => spawn_service(name, l, stop.clone(), s.max_conns, stats, |c| {
            ember_apps::simple::chargen(c)
        }),
        "http" => {
            let srv = ember_apps::http::HttpServer::new(ember_apps::http::HttpConfig {
                root: s.root.clone(),
                ..ember_apps::http::HttpConfig::default()
            })?;
            spawn_service(name, l, stop.clone(), s.max_conns, stats, srv.handler())
        }
        "iperf3" => ember_apps::iperf3::spawn_iperf3::<EmberNet>(
            l,
            stop.clone(),
            ember_apps::iperf3::Iperf3Options::default(),
            Arc::new(ember_apps::iperf3::Iperf3Stats::default()),
        ),
        _ => Err(std::io::Error::other(format!("no service {name}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> ServeArgs {
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: ServeArgs,
        }
        let mut all = vec!["serve"];
        all.extend_from_slice(v);
        <P as clap::Parser>::try_parse_from(all).unwrap().a
    }

    #[test]
    fn good_settings() {
        let s = settings(args(&[
            "--tap",
            "etap0",
            "--addr",
            "198.18.0.2/24",
            "--impair",
            "loss=1%,reorder=0.01,delay=10ms",
            "--param",
            "tcp_sack_permitted=1",
        ]))
        .unwrap();
        assert_eq!(s.link.kind, link::LinkKind::Tap("etap0".into()));
        assert_eq!(s.ports[3], ("http", 80));
        assert!(s.link.impair.is_some());
    }

    #[test]
    fn bad_values_are_named() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--tap", "t", "--addr", "1.2.3.4/8", "--max-conns", "0"],
                "1 ..= 65536",
            ),
            (
                &["--tap", "t", "--addr", "1.2.3.4/8", "--duration=-1"],
                "--duration",
            ),
            (
                &[
                    "--tap",
                    "t",
                    "--addr",
                    "1.2.3.4/8",
                    "--root",
                    "/nonexistent/x",
                ],
                "not a directory",
            ),
            (&["--tap", "t", "--addr", "1.2.3.4"], "A.B.C.D/LEN"),
        ];
        for (a, want) in cases {
            let e = settings(args(a)).unwrap_err();
            assert!(e.contains(want), "{a:?}: {e}");
        }
    }

    #[test]
    fn toml_file_and_command_line_merge() {
        let dir = std::env::temp_dir().join(format!("ember-serve-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("serve.toml");
        std::fs::write(
            &p,
            "tap = \"etap9\"\naddr = \"198.18.9.2/24\"\nhttp_port = 8080\n[params]\ntcp_sack_permitted = 0\n",
        )
        .unwrap();
        let s = settings(args(&[
            "--config",
            p.to_str().unwrap(),
            "--http-port",
            "81",
        ]))
        .unwrap();
        assert_eq!(s.link.kind, link::LinkKind::Tap("etap9".into()));
        assert_eq!(s.ports[3], ("http", 81));
        assert_eq!(
            s.link.params,
            vec![("tcp_sack_permitted".into(), "0".into())]
        );
        std::fs::write(&p, "tap = \"x\"\nbogus = 1\n").unwrap();
        let e = settings(args(&["--config", p.to_str().unwrap()])).unwrap_err();
        assert!(e.contains("bogus"), "{e}");
        std::fs::write(&p, "[params]\ntcp_sack_permitted = 7\n").unwrap();
        let e = settings(args(&[
            "--config",
            p.to_str().unwrap(),
            "--tap",
            "t",
            "--addr",
            "1.2.3.4/8",
        ]))
        .unwrap_err();
        assert!(e.contains("tcp_sack_permitted"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
