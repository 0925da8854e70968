//! The link options `ember serve` and `ember client` share: which device (TAP or
//! AF_PACKET), ember's address, squeues and queues, offload, capture, impairment and
//! tunables; their checking (every bad value is an error naming the option and its valid
//! range); and starting a stack on the device they describe.

use clap::Args;
use ember_core::wire::MacAddr;
use ember_runtime::control::ControlServer;
use ember_runtime::dev::capture::{Capture, CaptureOptions};
use ember_runtime::dev::{
    AfPacket, AfPacketConfig, Device, ImpairConfig, Impaired, Tap, TapConfig,
};
use ember_runtime::{IfaceConfig, Stack};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Where and how ember attaches to a link.
#[derive(Args, Debug, Default, Clone)]
pub struct LinkArgs {
    /// Run on this TAP interface (attached to, or created if missing).
    #[arg(long)]
    pub tap: Option<String>,
    /// Run on this existing interface through AF_PACKET sockets.
    #[arg(long)]
    pub af_packet: Option<String>,
    /// ember's address and prefix, e.g. 198.18.0.2/24.
    #[arg(long)]
    pub addr: Option<String>,
    /// Default gateway.
    #[arg(long)]
    pub gw: Option<Ipv4Addr>,
    /// Squeues (default: one per CPU).
    #[arg(long)]
    pub squeues: Option<usize>,
    /// Device queues (default: as many as squeues).
    #[arg(long)]
    pub queues: Option<usize>,
    /// TAP: virtio-net header with checksum and TCP segmentation offload (default off).
    #[arg(long)]
    pub offload: Option<bool>,
    /// Set the interface MTU (TAP only).
    #[arg(long)]
    pub mtu: Option<u32>,
    /// Write every frame, both ways, to this pcap file.
    #[arg(long)]
    pub capture: Option<PathBuf>,
    /// Capture snap length (bytes kept per frame, 1 ..= 262144).
    #[arg(long)]
    pub capture_snaplen: Option<u32>,
    /// Stop capturing once the file reaches this many bytes (traffic goes on).
    #[arg(long)]
    pub capture_max_bytes: Option<u64>,
    /// Impair both directions on ember's side, e.g. loss=1%,reorder=1%,delay=10ms
    /// (keys: loss dup reorder corrupt delay jitter rate queue seed).
    #[arg(long)]
    pub impair: Option<String>,
    /// Tunables, NAME=VALUE (repeatable).
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
}

/// Which device.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkKind {
    Tap(String),
    AfPacket(String),
}

/// Checked link settings.
#[derive(Debug)]
pub struct Link {
    pub kind: LinkKind,
    pub addr: Ipv4Addr,
    pub prefix: u8,
    pub gw: Option<Ipv4Addr>,
    pub squeues: usize,
    pub queues: usize,
    pub offload: bool,
    pub mtu: Option<u32>,
    pub capture: Option<PathBuf>,
    pub snaplen: u32,
    pub capture_max_bytes: Option<u64>,
    pub impair: Option<(ImpairConfig, u64)>,
    pub params: Vec<(String, String)>,
}

impl LinkArgs {
    /// Checks every value. `extra_params` (from a configuration file) come first, so the
    /// command line's `--param` wins.
    pub fn check(&self, extra_params: Vec<(String, String)>) -> Result<Link, String> {
        let mut params = extra_params;
        // Then the environment's EMBER_<NAME> settings, then the command line.
        params.extend(env_params()?);
        for p in &self.params {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| format!("--param {p:?}: expected NAME=VALUE"))?;
            params.push((k.to_string(), v.to_string()));
        }
        // All at once: relations between tunables (buffers, RTO bounds) are checked
        // after the last, so the order the settings come in does not matter.
        stack_params(&params)?;
        let kind = match (&self.tap, &self.af_packet) {
            (Some(_), Some(_)) => return Err("give one of --tap and --af-packet, not both".into()),
            (Some(t), None) => LinkKind::Tap(t.clone()),
            (None, Some(i)) => LinkKind::AfPacket(i.clone()),
            (None, None) => return Err("give --tap NAME or --af-packet IFACE".into()),
        };
        let addr = self
            .addr
            .as_deref()
            .ok_or("--addr A.B.C.D/LEN is required")?;
        let (ip, plen) = addr
            .split_once('/')
            .ok_or_else(|| format!("--addr {addr:?}: expected A.B.C.D/LEN"))?;
        let ip: Ipv4Addr = ip
            .parse()
            .map_err(|_| format!("--addr {addr:?}: {ip:?} is not an IPv4 address"))?;
        let prefix: u8 = plen
            .parse()
            .ok()
            .filter(|p| (1..=32).contains(p))
            .ok_or_else(|| format!("--addr {addr:?}: prefix length must be 1 ..= 32"))?;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let squeues = self.squeues.unwrap_or(cpus.min(64));
        if !(1..=64).contains(&squeues) {
            return Err(format!("--squeues {squeues}: must be 1 ..= 64"));
        }
        let queues = self.queues.unwrap_or(squeues);
        if !(1..=64).contains(&queues) {
            return Err(format!("--queues {queues}: must be 1 ..= 64"));
        }
        if let Some(m) = self.mtu {
            if !(68..=65_535).contains(&m) {
                return Err(format!("--mtu {m}: must be 68 ..= 65535"));
            }
        }
        let snaplen = self.capture_snaplen.unwrap_or(262_144);
        if snaplen == 0 || snaplen > 262_144 {
            return Err(format!("--capture-snaplen {snaplen}: must be 1 ..= 262144"));
        }
        if let Some(m) = self.capture_max_bytes {
            if m < 1024 {
                return Err(format!("--capture-max-bytes {m}: must be at least 1024"));
            }
        }
        let impair = match &self.impair {
            Some(s) => Some(parse_impair(s)?),
            None => None,
        };
        Ok(Link {
            kind,
            addr: ip,
            prefix,
            gw: self.gw,
            squeues,
            queues,
            offload: self.offload.unwrap_or(false),
            mtu: self.mtu,
            capture: self.capture.clone(),
            snaplen,
            capture_max_bytes: self.capture_max_bytes,
            impair,
            params,
        })
    }
}

/// A probability: `0.01` or `1%`, within 0 ..= 1.
fn parse_prob(k: &str, v: &str) -> Result<f64, String> {
    let p = match v.strip_suffix('%') {
        Some(pc) => pc.trim().parse::<f64>().map(|x| x / 100.0),
        None => v.parse::<f64>(),
    }
    .map_err(|_| format!("impair {k}={v}: not a number"))?;
    if !(0.0..=1.0).contains(&p) {
        return Err(format!(
            "impair {k}={v}: must be within 0 ..= 1 (or 0% ..= 100%)"
        ));
    }
    Ok(p)
}

/// A duration: `10ms`, `500us`, `2s` (a bare number is milliseconds; at most 10 s).
fn parse_dur(k: &str, v: &str) -> Result<Duration, String> {
    let (num, unit) = v
        .find(|c: char| c.is_ascii_alphabetic())
        .map_or((v, "ms"), |i| v.split_at(i));
    let x: f64 = num
        .parse()
        .map_err(|_| format!("impair {k}={v}: expected e.g. 10ms, 500us, 1s"))?;
    let s = match unit {
        "s" => x,
        "ms" => x / 1e3,
        "us" => x / 1e6,
        _ => return Err(format!("impair {k}={v}: unit must be s, ms or us")),
    };
    if !(0.0..=10.0).contains(&s) {
        return Err(format!("impair {k}={v}: must be within 0 ..= 10 s"));
    }
    Ok(Duration::from_secs_f64(s))
}

/// A rate in bits/s: `100M`, `1G`, `500k`, or a plain number.
fn parse_rate(k: &str, v: &str) -> Result<u64, String> {
    let (num, mult) = match v.chars().last() {
        Some('k' | 'K') => (&v[..v.len() - 1], 1e3),
        Some('m' | 'M') => (&v[..v.len() - 1], 1e6),
        Some('g' | 'G') => (&v[..v.len() - 1], 1e9),
        _ => (v, 1.0),
    };
    let x: f64 = num
        .parse()
        .map_err(|_| format!("impair {k}={v}: expected e.g. 100M"))?;
    let r = x * mult;
    if !(1e3..=1e12).contains(&r) {
        return Err(format!("impair {k}={v}: must be 1k ..= 1000G bits/s"));
    }
    Ok(r as u64)
}

/// Parses `loss=1%,reorder=1%,delay=10ms,...` into a wire model (for each direction)
/// and a seed.
pub fn parse_impair(s: &str) -> Result<(ImpairConfig, u64), String> {
    let mut c = ImpairConfig {
        mtu: 65_535,
        ..ImpairConfig::default()
    };
    let mut seed = 1u64;
    for kv in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("impair {kv:?}: expected KEY=VALUE"))?;
        match k {
            "loss" => c.loss = parse_prob(k, v)?,
            "dup" => c.dup = parse_prob(k, v)?,
            "reorder" => c.reorder = parse_prob(k, v)?,
            "corrupt" => c.corrupt = parse_prob(k, v)?,
            "delay" => c.delay = parse_dur(k, v)?,
            "jitter" => c.jitter = parse_dur(k, v)?,
            "dup-delay" => c.dup_delay = parse_dur(k, v)?,
            "rate" => c.rate_bps = Some(parse_rate(k, v)?),
            "queue" => {
                c.queue_bytes = v
                    .parse()
                    .ok()
                    .filter(|q| (65_549..=1 << 30).contains(q))
                    .ok_or_else(|| format!("impair queue={v}: bytes, 65549 ..= 2^30"))?
            }
            "seed" => {
                seed = v
                    .parse()
                    .map_err(|_| format!("impair seed={v}: not an integer"))?
            }
            _ => {
                return Err(format!(
                "impair: unknown key {k:?} (loss dup dup-delay reorder corrupt delay jitter rate queue seed)"
            ))
            }
        }
    }
    c.validate().map_err(|e| format!("impair: {e}"))?;
    Ok((c, seed))
}

/// A stack running on its link, with what watches the link.
pub struct Running {
    pub stack: Arc<Stack>,
    pub describe: String,
    pub tap: Option<Tap>,
    pub afpacket: Option<AfPacket>,
    pub captures: Vec<Arc<Capture>>,
    /// The stack's control socket (`ember ndd`, `kstat`, `netstat`), if it could be made.
    pub control: Option<ControlServer>,
}

impl Running {
    /// Shuts the stack down, flushes the capture, and prints the device counters.
    pub fn finish(self) {
        self.stack.shutdown();
        for c in &self.captures {
            let _ = c.flush();
        }
        if let Some(c) = self.captures.first() {
            let st = c.stats();
            eprintln!(
                "capture: {} frames ({} bytes), {} not captured{}",
                st.captured,
                st.bytes,
                st.not_captured,
                c.error().map(|e| format!(" ({e})")).unwrap_or_default()
            );
        }
        if let Some(t) = &self.tap {
            let c = t.counters();
            eprintln!(
                "tap {}: rx {} frames ({} gso, {} checksums completed), tx {} frames ({} gso), errors rx {} tx {}",
                t.name(), c.rx_frames, c.rx_gso, c.rx_csum_filled, c.tx_frames, c.tx_gso, c.rx_errors, c.tx_errors
            );
        }
        if let Some(a) = &self.afpacket {
            let c = a.counters();
            eprintln!(
                "af_packet {}: rx {} frames ({} over the MTU, {} filtered, {} ring drops), tx {} frames, {} dropped, {} errors",
                a.name(), c.rx_frames, c.rx_jumbo, c.rx_filtered, c.rx_ring_drops, c.tx_frames, c.tx_dropped, c.tx_errors
            );
        }
    }
}

/// Device queues, and the captures among their wrappers.
type Wrapped = (Vec<Arc<dyn Device>>, Vec<Arc<Capture>>);

/// Wraps each queue for capture and impairment, as asked.
fn wrap_queues(l: &Link, queues: Vec<Arc<dyn Device>>) -> Result<Wrapped, String> {
    let mut out = Vec::with_capacity(queues.len());
    let mut caps: Vec<Arc<Capture>> = Vec::new();
    for (i, q) in queues.into_iter().enumerate() {
        let mut d = q;
        if let Some(path) = &l.capture {
            let opts = CaptureOptions {
                snaplen: l.snaplen,
                max_bytes: l.capture_max_bytes,
            };
            let c = match caps.first() {
                Some(first) => first.share(d),
                None => Capture::to_file(d, path, opts)
                    .map_err(|e| format!("--capture {}: {e}", path.display()))?,
            };
            let c = Arc::new(c);
            caps.push(c.clone());
            d = c;
        }
        if let Some((cfg, seed)) = &l.impair {
            // Outside the capture: the capture shows frames as they crossed the real link.
            d = Arc::new(
                Impaired::new(
                    d,
                    cfg.clone(),
                    cfg.clone(),
                    ember_runtime::dev::derive_seed(*seed, i as u64),
                )
                .map_err(|e| format!("--impair: {e}"))?,
            );
        }
        out.push(d);
    }
    Ok((out, caps))
}

/// Environment variables that are ember's but not tunables.
const NOT_TUNABLES: &[&str] = &["LOG", "CONTROL_DIR", "PD_TRACE", "PACKETDRILL_CORPUS"];

/// The tunables `EMBER_<NAME>` environment variables set (`ember_core::Params::env_settings`).
/// A tunable's variable whose value is not UTF-8 is an error; an `EMBER_` variable that
/// looks like a misspelt tunable is reported (with the nearest names) and ignored, since
/// other programs' `EMBER_` variables may be set too. Never panics on a non-UTF-8
/// environment.
pub fn env_params() -> Result<Vec<(String, String)>, String> {
    let mut vars = Vec::new();
    for (k, v) in std::env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        let Some(rest) = k.strip_prefix("EMBER_") else {
            continue;
        };
        if ember_core::Params::env_tunable(k).is_some() {
            let v = v
                .to_str()
                .ok_or_else(|| format!("{k}: the value is not UTF-8"))?;
            vars.push((k.to_string(), v.to_string()));
        } else if !NOT_TUNABLES.contains(&rest) {
            let name = rest.to_ascii_lowercase();
            let near = ember_core::Params::nearest(&name);
            if !near.is_empty() {
                eprintln!(
                    "ember: ignoring {k}: no tunable {name}; nearest: {}",
                    near.join(", ")
                );
            }
        }
    }
    Ok(ember_core::Params::env_settings(vars)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect())
}

/// The tunables `pairs` make, applied together (`Params::set_many`).
pub fn stack_params(pairs: &[(String, String)]) -> Result<ember_core::Params, String> {
    let mut p = ember_core::Params::default();
    p.set_many(pairs).map_err(|e| match &e {
        ember_core::params::ParamError::Unknown(n) => format!("param {n}: {e}"),
        ember_core::params::ParamError::Invalid { .. } => format!("param {e}"),
    })?;
    Ok(p)
}

/// Opens the device and starts a stack on it.
pub fn start(l: &Link) -> Result<Running, String> {
    // The MAC the stack would derive itself; AF_PACKET needs to know it to filter frames.
    let o = l.addr.octets();
    let mac = MacAddr([0x02, 0x65, o[0], o[1], o[2], o[3]]);
    let mut afp = None;
    let (queues, describe, tap) = match &l.kind {
        LinkKind::Tap(name) => {
            let mut cfg = TapConfig::new(name);
            cfg.queues = l.queues;
            cfg.offload = l.offload;
            cfg.mtu = l.mtu;
            let tap = Tap::open(&cfg).map_err(|e| format!("--tap {name}: {e}"))?;
            let d = format!(
                "tap {name} ({} queue{}, offload {}, MTU {})",
                l.queues,
                if l.queues == 1 { "" } else { "s" },
                if l.offload { "on" } else { "off" },
                tap.mtu()
            );
            (tap.devices(), d, Some(tap))
        }
        LinkKind::AfPacket(iface) => {
            if l.offload || l.mtu.is_some() {
                return Err("--offload and --mtu apply to --tap only".into());
            }
            let mut cfg = AfPacketConfig::new(iface, mac);
            cfg.queues = l.queues;
            let af = AfPacket::open(&cfg).map_err(|e| format!("--af-packet {iface}: {e}"))?;
            let d = format!(
                "AF_PACKET on {iface} ({} queue{}, MTU {})",
                l.queues,
                if l.queues == 1 { "" } else { "s" },
                af.mtu()
            );
            let devs = af.devices();
            afp = Some(af);
            (devs, d, None)
        }
    };
    let (queues, captures) = wrap_queues(l, queues)?;
    let mut b = Stack::builder().squeues(l.squeues).interface_queues(
        IfaceConfig {
            addr: l.addr,
            prefix_len: l.prefix,
            mac: Some(mac),
            mtu: None,
        },
        queues,
    );
    b = b.params(stack_params(&l.params)?);
    if let Some(g) = l.gw {
        b = b.route(Ipv4Addr::UNSPECIFIED, 0, Some(g));
    }
    let stack = Arc::new(b.build().map_err(|e| format!("stack: {e}"))?);
    let control = match stack.serve_control() {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, "no control socket: ember ndd/kstat/netstat cannot reach this stack");
            None
        }
    };
    Ok(Running {
        control,
        stack,
        describe: format!(
            "{}/{} on {describe}, {} squeues",
            l.addr, l.prefix, l.squeues
        ),
        tap,
        afpacket: afp,
        captures,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn la(tap: Option<&str>, addr: Option<&str>) -> LinkArgs {
        LinkArgs {
            tap: tap.map(str::to_string),
            addr: addr.map(str::to_string),
            ..LinkArgs::default()
        }
    }

    #[test]
    fn impairment_strings() {
        let (c, seed) = parse_impair("loss=1%,reorder=0.01,delay=10ms,rate=100M,seed=7").unwrap();
        assert_eq!((c.loss, c.reorder, seed), (0.01, 0.01, 7));
        assert_eq!(c.delay, Duration::from_millis(10));
        assert_eq!(c.rate_bps, Some(100_000_000));
        for (bad, want) in [
            ("loss=2", "0 ..= 1"),
            ("loss=x", "not a number"),
            ("wat=1", "unknown key"),
            ("delay=5h", "unit"),
            ("delay=20s", "0 ..= 10 s"),
            ("rate=1", "1k ..= 1000G"),
            ("queue=5", "65549"),
            ("loss", "KEY=VALUE"),
        ] {
            let e = parse_impair(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
    }

    #[test]
    fn link_values_are_checked() {
        let l = la(Some("t"), Some("198.18.0.2/24"))
            .check(Vec::new())
            .unwrap();
        assert_eq!(l.kind, LinkKind::Tap("t".into()));
        assert_eq!((l.addr, l.prefix), (Ipv4Addr::new(198, 18, 0, 2), 24));
        let cases: Vec<(LinkArgs, &str)> = vec![
            (la(None, Some("1.2.3.4/8")), "--tap NAME"),
            (la(Some("t"), None), "--addr"),
            (la(Some("t"), Some("1.2.3.4")), "A.B.C.D/LEN"),
            (la(Some("t"), Some("1.2.3.4/33")), "1 ..= 32"),
            (la(Some("t"), Some("x/8")), "not an IPv4"),
            (
                LinkArgs {
                    squeues: Some(0),
                    ..la(Some("t"), Some("1.2.3.4/8"))
                },
                "1 ..= 64",
            ),
            (
                LinkArgs {
                    mtu: Some(20),
                    ..la(Some("t"), Some("1.2.3.4/8"))
                },
                "68 ..= 65535",
            ),
            (
                LinkArgs {
                    capture_max_bytes: Some(10),
                    ..la(Some("t"), Some("1.2.3.4/8"))
                },
                "at least 1024",
            ),
            (
                LinkArgs {
                    params: vec!["nope=1".into()],
                    ..la(Some("t"), Some("1.2.3.4/8"))
                },
                "param nope",
            ),
            (
                LinkArgs {
                    params: vec!["x".into()],
                    ..la(Some("t"), Some("1.2.3.4/8"))
                },
                "NAME=VALUE",
            ),
            (
                LinkArgs {
                    af_packet: Some("e".into()),
                    ..la(Some("t"), Some("1.2.3.4/8"))
                },
                "not both",
            ),
        ];
        for (a, want) in cases {
            let e = a.check(Vec::new()).unwrap_err();
            assert!(e.contains(want), "{a:?}: {e}");
        }
    }
}
