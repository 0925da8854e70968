//! `ember client`: ember's own clients on a real link, against any server (the kernel's,
//! or another ember).
//!
//! * `http URL [--out FILE]`: GET, the body ended by Content-Length or chunked encoding
//!   (never by waiting for the server's FIN when the length is known: a FIN held in a
//!   NIC's LSO buffer once cost such a client 3.4 s);
//! * `send ADDR --bytes N`: N pseudo-random bytes, then a half-close, then whatever comes
//!   back until the server's FIN (against echo: the round trip is checked);
//! * `recv ADDR`: reads until the server's FIN.
//!
//! Each prints one JSON line (status or byte counts, SHA-256 digests, seconds, Mbit/s), so
//! scripts can compare digests. The stack starts on the link given by the same options as
//! `ember serve` (`--tap`/`--af-packet`, `--addr`, `--gw`, `--impair`, `--capture`, ...).

use crate::link::{self, LinkArgs};
use clap::{Args, Subcommand};
use ember_apps::client::{self as apps, BulkOptions};
use ember_apps::net::EmberNet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `ember client` options.
#[derive(Args, Debug)]
pub struct ClientArgs {
    #[command(flatten)]
    pub link: LinkArgs,
    /// Bound on the connect and on each read and write, seconds.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    #[command(subcommand)]
    pub what: What,
}

/// What the client does.
#[derive(Subcommand, Debug)]
pub enum What {
    /// GET a URL (http://A.B.C.D[:PORT]/PATH).
    Http {
        url: String,
        /// Write the body here (default: discard it; its digest is printed).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Send N bytes to ADDR (A.B.C.D:PORT), half-close, read what comes back.
    Send {
        addr: SocketAddr,
        #[arg(long)]
        bytes: u64,
        /// Seed of the pseudo-random bytes.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Read from ADDR until the server closes (or --max-bytes).
    Recv {
        addr: SocketAddr,
        /// Stop after this many bytes.
        #[arg(long)]
        max_bytes: Option<u64>,
    },
}

pub fn main(a: ClientArgs) -> ExitCode {
    crate::serve::init_logging();
    let link = match a.link.check(Vec::new()) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ember client: {e}");
            return ExitCode::from(2);
        }
    };
    if !(a.timeout.is_finite() && a.timeout > 0.0 && a.timeout <= 3600.0) {
        eprintln!(
            "ember client: --timeout {}: must be > 0 and at most 3600 s",
            a.timeout
        );
        return ExitCode::from(2);
    }
    let timeout = Duration::from_secs_f64(a.timeout);
    let running = match link::start(&link) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ember client: {e}");
            return ExitCode::FAILURE;
        }
    };
    let net = EmberNet(running.stack.clone());
    let result = match &a.what {
        What::Http { url, out } => http(&net, url, out.as_ref(), timeout),
        What::Send { addr, bytes, seed } => {
            let opts = BulkOptions {
                timeout,
                seed: *seed,
                ..BulkOptions::default()
            };
            apps::send(&net, *addr, *bytes, &opts)
                .map(|r| bulk_json("send", &r))
                .map_err(|e| format!("send to {addr}: {e}"))
        }
        What::Recv { addr, max_bytes } => {
            let opts = BulkOptions {
                timeout,
                max_receive: *max_bytes,
                ..BulkOptions::default()
            };
            apps::recv(&net, *addr, &opts)
                .map(|r| bulk_json("recv", &r))
                .map_err(|e| format!("recv from {addr}: {e}"))
        }
    };
    // Let the last ACK/FIN leave before the stack goes.
    std::thread::sleep(Duration::from_millis(100));
    running.finish();
    match result {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("ember client: {e}");
            ExitCode::FAILURE
        }
    }
}

fn http(
    net: &EmberNet,
    url: &str,
    out: Option<&PathBuf>,
    timeout: Duration,
) -> Result<String, String> {
    let mut sink: Box<dyn std::io::Write> = match out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| format!("--out {}: {e}", p.display()))?,
        )),
        None => Box::new(std::io::sink()),
    };
    let r = apps::http_get(net, url, &mut sink, timeout).map_err(|e| format!("{url}: {e}"))?;
    sink.flush().map_err(|e| format!("writing the body: {e}"))?;
    let x = r.header("x-sha256").unwrap_or("");
    let v = serde_json::json!({
        "url": url,
        "status": r.status,
        "bytes": r.body_len,
        "sha256": r.sha256,
        "x_sha256": x,
        "digest_ok": if x.is_empty() { serde_json::Value::Null } else { serde_json::Value::Bool(x.eq_ignore_ascii_case(&r.sha256)) },
        "framing": format!("{:?}", r.framing),
        "seconds": r.seconds,
        "mbit_s": r.body_len as f64 * 8.0 / r.seconds.max(1e-9) / 1e6,
    });
    if !(200..300).contains(&r.status) {
        return Err(format!("{url}: status {} ({v})", r.status));
    }
    Ok(v.to_string())
}

fn bulk_json(what: &str, r: &apps::BulkReport) -> String {
    serde_json::json!({
        "op": what,
        "sent": r.sent,
        "sent_sha256": r.sent_sha256,
        "received": r.received,
        "received_sha256": r.received_sha256,
        "eof": r.eof,
        "round_trip_ok": r.round_trip_ok(),
        "seconds": r.seconds,
        "sent_mbit_s": r.sent_bps() / 1e6,
        "received_mbit_s": r.received_bps() / 1e6,
    })
    .to_string()
}
