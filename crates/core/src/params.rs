//! Tunables: one parameters struct whose field names are the ndd names.
//!
//! Every tunable has a type, a range, a default, a unit and a one-line description, all in
//! the single table below (the `tunables!` invocation). The same table drives
//! [`Params::set`] (used by configuration files, the environment, the command line and
//! `ember ndd`), [`Params::get`] and [`Params::describe`]. A bad value is refused with a
//! [`ParamError`] whose message names the valid range; nothing already set changes.
//!
//! Names follow Solaris `ndd` where Solaris has the knob (`tcp_xmit_hiwat`,
//! `tcp_rexmit_interval_min`, ...) and Linux sysctl names otherwise (`tcp_keepalive_intvl`).
//! Durations are whole milliseconds (or microseconds where the name says `_us`).
//!
//! The protocol core reads values when it needs them; most TCP values are copied into a
//! connection when it is created, so a change applies to new connections (as with ndd).

use crate::tcp::cc::CcAlgorithm;
use core::fmt;
use core::time::Duration;

/// Why a tunable could not be set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamError {
    /// No tunable has this name.
    Unknown(String),
    /// The value is not of the tunable's type, or outside its range; the message says which.
    Invalid { name: &'static str, message: String },
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::Unknown(n) => {
                write!(f, "unknown tunable '{n}'")?;
                let near = Params::nearest(n);
                if !near.is_empty() {
                    write!(f, "; nearest: {}", near.join(", "))?;
                }
                Ok(())
            }
            ParamError::Invalid { name, message } => write!(f, "{name}: {message}"),
        }
    }
}

impl std::error::Error for ParamError {}

impl From<ParamError> for std::io::Error {
    fn from(e: ParamError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
    }
}

/// The description of one tunable, for listings (`ember ndd`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamInfo {
    pub name: &'static str,
    pub value: String,
    pub default: String,
    /// The valid values, e.g. `1..=65535` or `cubic|newreno`.
    pub range: String,
    pub unit: &'static str,
    pub description: &'static str,
}

/// A value type a tunable can have.
trait TunableType: Sized + Copy + fmt::Display {
    fn parse_value(s: &str) -> Option<Self>;
    fn in_range(self, min: u64, max: u64) -> bool;
    fn range_text(min: u64, max: u64) -> String;
}

impl TunableType for u32 {
    fn parse_value(s: &str) -> Option<Self> {
        s.trim().parse().ok()
    }
    fn in_range(self, min: u64, max: u64) -> bool {
        (min..=max).contains(&u64::from(self))
    }
    fn range_text(min: u64, max: u64) -> String {
        format!("{min}..={max}")
    }
}

impl TunableType for bool {
    fn parse_value(s: &str) -> Option<Self> {
        match s.trim() {
            "1" | "true" | "on" | "yes" => Some(true),
            "0" | "false" | "off" | "no" => Some(false),
            _ => None,
        }
    }
    fn in_range(self, _: u64, _: u64) -> bool {
        true
    }
    fn range_text(_: u64, _: u64) -> String {
        "0|1".into()
    }
}

impl TunableType for CcAlgorithm {
    fn parse_value(s: &str) -> Option<Self> {
        s.trim().parse().ok()
    }
    fn in_range(self, _: u64, _: u64) -> bool {
        true
    }
    fn range_text(_: u64, _: u64) -> String {
        "cubic|newreno".into()
    }
}

/// Wrapper so booleans print as ndd does (0/1).
struct Shown<T>(T);

impl fmt::Display for Shown<bool> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0 { "1" } else { "0" })
    }
}
impl fmt::Display for Shown<u32> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
impl fmt::Display for Shown<CcAlgorithm> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

macro_rules! tunables {
    ($( $name:ident : $ty:ty = $default:expr, $min:expr, $max:expr, $unit:expr, $desc:expr; )*) => {
        /// All tunables of one ember stack. Field names are the ndd names; see the table in
        /// the source of this module for ranges and meanings, or [`Params::describe`].
        #[derive(Debug, Clone, PartialEq)]
        pub struct Params {
            $( #[doc = $desc] pub $name: $ty, )*
        }

        impl Default for Params {
            fn default() -> Self {
                Params { $( $name: $default, )* }
            }
        }

        impl Params {
            /// The names of all tunables, in table order.
            pub const NAMES: &'static [&'static str] = &[ $( stringify!($name), )* ];

            /// Parses and range-checks one value into `self` (no relation checks).
            fn set_field(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
                match name {
                    $( stringify!($name) => {
                        let n: &'static str = stringify!($name);
                        let range = <$ty as TunableType>::range_text($min, $max);
                        let v = <$ty as TunableType>::parse_value(value).ok_or_else(|| {
                            ParamError::Invalid {
                                name: n,
                                message: format!("'{value}' is not a valid value; valid: {range}"),
                            }
                        })?;
                        if !v.in_range($min, $max) {
                            return Err(ParamError::Invalid {
                                name: n,
                                message: format!("{} is out of range; valid: {range} {}", v, $unit),
                            });
                        }
                        self.$name = v;
                        Ok(())
                    } )*
                    _ => Err(ParamError::Unknown(name.to_string())),
                }
            }

            /// The current value of tunable `name`, as text.
            pub fn get(&self, name: &str) -> Option<String> {
                match name {
                    $( stringify!($name) => Some(Shown(self.$name).to_string()), )*
                    _ => None,
                }
            }

            /// Every tunable with its value, default, range, unit and description.
            pub fn describe(&self) -> Vec<ParamInfo> {
                let d = Params::default();
                vec![ $( ParamInfo {
                    name: stringify!($name),
                    value: Shown(self.$name).to_string(),
                    default: Shown(d.$name).to_string(),
                    range: <$ty as TunableType>::range_text($min, $max),
                    unit: $unit,
                    description: $desc,
                }, )* ]
            }
        }
    };
}

const MS_DAY: u64 = 86_400_000;
const GIB: u64 = 1 << 30;

tunables! {
    do_tcp_fusion: bool = true, 0, 1, "", "fuse TCP connections whose two ends are sockets of this stack";
    tcp_fusion_rcv_unread_min: u32 = 8, 0, 1 << 20, "writes", "fused writes the reader has not read before the writer stops; 0 = no such limit";
    tcp_xmit_hiwat: u32 = 128_000, 4096, GIB, "bytes", "default send buffer size";
    tcp_xmit_lowat: u32 = 4096, 1, GIB, "bytes", "send buffer space that makes a stopped writer writable again";
    tcp_recv_hiwat: u32 = 1_048_576, 2048, GIB, "bytes", "default receive buffer size (the largest window offered)";
    tcp_max_buf: u32 = 1_048_576, 8192, GIB, "bytes", "largest send or receive buffer a socket may ask for (raise for high bandwidth-delay paths)";
    tcp_naglim_def: u32 = 4095, 1, 65535, "bytes", "Nagle limit: writes smaller than min(this, MSS) wait for outstanding data to be acknowledged";
    tcp_push_segs: u32 = 2, 0, 65_535, "segments", "set PSH on every this many new-data segments sent back to back, as Linux does on each GSO chunk; 0 = PSH only on the segment that empties the send queue (RFC 1122 4.2.2.2)";
    tcp_deferred_ack_interval: u32 = 40, 1, 500, "ms", "delayed-ACK timer (below 0.5 s, RFC 9293 MUST-40)";
    tcp_rexmit_interval_initial: u32 = 1000, 1, 20_000, "ms", "initial retransmission timeout (RFC 6298 section 2.1)";
    tcp_rexmit_interval_min: u32 = 200, 1, 20_000, "ms", "lower bound of the retransmission timeout";
    tcp_rexmit_interval_max: u32 = 60_000, 1, 7_200_000, "ms", "upper bound of the retransmission timeout (RFC 6298 section 2.5)";
    tcp_rexmit_min_on_variance: bool = false, 0, 1, "", "apply tcp_rexmit_interval_min to the variance term, RTO = SRTT + max(4 RTTVAR, min), as Linux, rather than to the whole RTO (RFC 6298 section 2.4)";
    tcp_ip_abort_interval: u32 = 480_000, 500, MS_DAY, "ms", "R2: give up on an established connection after retransmitting for this long (RFC 9293 section 3.8.3)";
    tcp_ip_abort_cinterval: u32 = 180_000, 500, MS_DAY, "ms", "R2 for a SYN: give up on a connection attempt after this long";
    tcp_time_wait_interval: u32 = 60_000, 1, 600_000, "ms", "time a closed connection stays in TIME_WAIT (2 MSL)";
    tcp_fin_wait_2_flush_interval: u32 = 60_000, 1, 7_200_000, "ms", "time a connection closed by the application waits in FIN_WAIT_2 for the peer's FIN";
    tcp_keepalive_interval: u32 = 7_200_000, 1000, 10 * MS_DAY, "ms", "idle time before the first keepalive probe";
    tcp_keepalive_intvl: u32 = 75_000, 100, MS_DAY, "ms", "time between unanswered keepalive probes";
    tcp_keepalive_probes: u32 = 9, 1, 1000, "probes", "unanswered keepalive probes before the connection is dropped";
    tcp_conn_req_max_q: u32 = 128, 1, 65_535, "connections", "largest accept queue a listener may have";
    tcp_conn_req_max_q0: u32 = 1024, 1, 65_535, "connections", "largest queue of half-open connections (SYN received) per listener";
    tcp_max_conns: u32 = 262_144, 1, 16_777_216, "connections", "TCP connections a stack holds, in every state; past it SYNs are dropped (tcpConnLimitDrops) and connect() fails with ENOBUFS";
    tcp_mem_max: u32 = 1_048_576, 1024, 1 << 30, "KiB", "bytes all TCP connections of a stack may hold received in order and not yet read (fused pairs excepted); past it data arriving from the network is dropped unacknowledged (tcpRcvMemDrops) until applications read";
    tcp_syncookies: u32 = 1, 0, 2, "", "SYN cookies (RFC 4987): 0 never, 1 when a listener's half-open queue (tcp_conn_req_max_q0) is full, 2 for every SYN";
    tcp_init_cwnd: u32 = 10, 1, 1000, "segments", "initial congestion window (RFC 6928)";
    tcp_congestion_control: CcAlgorithm = CcAlgorithm::Cubic, 0, 0, "", "congestion control for new connections";
    tcp_slow_start_after_idle: bool = true, 0, 1, "", "restart from the initial window after an idle period longer than the RTO (RFC 5681 section 4.1)";
    tcp_sack_permitted: u32 = 2, 0, 2, "", "SACK (RFC 2018): 0 never, 1 when the peer offers it, 2 offer it on active opens too";
    tcp_wscale_always: u32 = 2, 0, 2, "", "window scaling (RFC 7323): 0 never (neither offered nor accepted), 1 when the peer's SYN offers it, 2 offer it on active opens too (the words true/false of the old switch mean 2/1)";
    tcp_tstamp_always: u32 = 2, 0, 2, "", "timestamps (RFC 7323): 0 never (neither offered nor accepted), 1 when the peer's SYN offers it, 2 offer them on active opens too (the words true/false of the old switch mean 2/1)";
    tcp_dupack_fast_retransmit: u32 = 3, 1, 10_000, "ACKs", "duplicate ACKs that trigger fast retransmit (DupThresh)";
    tcp_recovery: bool = true, 0, 1, "", "RACK loss detection (RFC 8985 section 6) when SACK is negotiated: time-based loss marking with a reordering window adapted by D-SACK, instead of the DupThresh rules";
    tcp_tlp: bool = true, 0, 1, "", "tail loss probes (RFC 8985 section 7) when SACK is negotiated: a probe after 2 SRTT without ACKs instead of waiting for the RTO";
    tcp_mss_def_ipv4: u32 = 536, 68, 65_495, "bytes", "send MSS assumed when the peer's SYN carries no MSS option (RFC 9293 section 3.7.1)";
    tcp_mss_min: u32 = 108, 48, 65_495, "bytes", "smallest MSS ember will use, whatever the peer or the path says";
    tcp_cork_interval: u32 = 200, 1, 60_000, "ms", "longest time a corked partial segment is held";
    tcp_invalid_ratelimit: u32 = 500, 0, 60_000, "ms", "least time between challenge ACKs or ACKs to out-of-window segments on one connection (RFC 5961 section 7)";
    tcp_rst_sent_rate: u32 = 40, 0, 1_000_000, "per s", "RSTs sent for segments to no connection per second; 0 = unlimited";
    tcp_reass_max_segs: u32 = 512, 1, 65_535, "pieces", "out-of-order pieces a connection holds before it drops new ones";
    tcp_sack_max_ranges: u32 = 64, 4, 4096, "ranges", "SACKed ranges a sender tracks per connection";
    tcp_smallest_anon_port: u32 = 32_768, 1024, 65_535, "", "lowest ephemeral port";
    tcp_largest_anon_port: u32 = 65_535, 1024, 65_535, "", "highest ephemeral port";
    icmp_err_interval: u32 = 100, 0, 99_999, "ms", "one ICMP error token per interval; 0 = no rate limit";
    icmp_err_burst: u32 = 10, 1, 99_999, "errors", "ICMP errors sent back to back before the rate limit applies";
    ip_def_ttl: u32 = 64, 1, 255, "hops", "TTL of datagrams ember originates";
    ip_reass_timeout: u32 = 30_000, 100, 120_000, "ms", "time a partly reassembled datagram is kept";
    ip_reass_queue_bytes: u32 = 4_194_304, 65_536, GIB, "bytes", "memory for datagrams under reassembly, all together";
    ip_lso_outbound: bool = true, 0, 1, "", "build TCP segments larger than the MTU and split them at the device (LSO/GSO)";
    ip_gro: bool = true, 0, 1, "", "join consecutive in-order TCP segments of one flow in a receive batch before TCP sees them (GRO)";
    tcp_gro_stretch_acks: bool = false, 0, 1, "", "a run of in-order segments joined on receive (GRO), and the segments of one receive batch, draw one ACK, as Linux's GRO does; 0 = the peer gets the ACKs the segments would have drawn one by one (every second full segment)";
    arp_cleanup_interval: u32 = 300_000, 1000, MS_DAY, "ms", "lifetime of a resolved ARP entry";
    arp_retry_interval: u32 = 1000, 10, 60_000, "ms", "time between ARP requests for an unresolved address";
    arp_max_retries: u32 = 3, 1, 100, "requests", "ARP requests before an address is declared unreachable";
    arp_pending_max: u32 = 64, 1, 4096, "packets", "packets queued per address awaiting ARP resolution";
    ip_fq: bool = true, 0, 1, "", "fair queueing in front of devices whose queue drains at a known rate: deficit round robin over flows, new flows first, a CoDel delay bound per flow (RFC 8289); off = frames go to the device queue in order";
    ip_fq_quantum: u32 = 1514, 256, 65_536, "bytes", "bytes a flow may send per round of the fair queue";
    ip_fq_limit: u32 = 10_240, 16, 1_000_000, "packets", "frames the fair queue of one device queue holds before it drops from the longest flow";
    ip_fq_codel_target: u32 = 5_000, 100, 1_000_000, "us", "CoDel target: acceptable standing queue delay per flow";
    ip_fq_codel_interval: u32 = 100_000, 1_000, 10_000_000, "us", "CoDel interval: how long the delay must stay above target before the first drop";
    tcp_tsq_us: u32 = 1_000, 0, 1_000_000, "us", "TCP Small Queues: a connection keeps at most this long at the link rate, or two of its segments if more, in the device queues; 0 = no limit";
    tcp_pacing: bool = false, 0, 1, "", "pace each connection at cwnd/srtt (twice that in slow start, 1.2 times after) on devices whose queue drains at a known rate";
    squeue_drain_ms: u32 = 20, 0, 1000, "ms", "time a non-worker thread may spend draining a squeue";
    squeue_spin_us: u32 = 20, 0, 100_000, "us", "time a thread spins before parking (like SO_BUSY_POLL)";
}

impl Params {
    /// Relations between tunables that single-value ranges cannot express.
    fn check_relations(&self) -> Result<(), ParamError> {
        // (tunable, its value, the tunable it may not exceed, that one's value)
        let at_most: [(&'static str, u32, &'static str, u32); 5] = [
            (
                "tcp_xmit_hiwat",
                self.tcp_xmit_hiwat,
                "tcp_max_buf",
                self.tcp_max_buf,
            ),
            (
                "tcp_recv_hiwat",
                self.tcp_recv_hiwat,
                "tcp_max_buf",
                self.tcp_max_buf,
            ),
            (
                "tcp_xmit_lowat",
                self.tcp_xmit_lowat,
                "tcp_xmit_hiwat",
                self.tcp_xmit_hiwat,
            ),
            (
                "tcp_rexmit_interval_min",
                self.tcp_rexmit_interval_min,
                "tcp_rexmit_interval_max",
                self.tcp_rexmit_interval_max,
            ),
            (
                "tcp_smallest_anon_port",
                self.tcp_smallest_anon_port,
                "tcp_largest_anon_port",
                self.tcp_largest_anon_port,
            ),
        ];
        for (name, value, limit_name, limit) in at_most {
            if value > limit {
                return Err(ParamError::Invalid {
                    name,
                    message: format!("must be at most {limit_name} ({limit})"),
                });
            }
        }
        Ok(())
    }

    /// Sets tunable `name` from its text form. On error nothing changes.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), ParamError> {
        self.set_many(&[(name, value)])
    }

    /// Sets several tunables at once (e.g. raising `tcp_max_buf` together with the
    /// buffers), checking the relations between them only after all are applied.
    /// On error nothing changes.
    pub fn set_many<K: AsRef<str>, V: AsRef<str>>(
        &mut self,
        pairs: &[(K, V)],
    ) -> Result<(), ParamError> {
        let mut next = self.clone();
        for (name, value) in pairs {
            let (name, value) = (name.as_ref(), value.as_ref());
            next.set_field(name, legacy_value(name, value).unwrap_or(value))?;
        }
        next.check_relations()?;
        *self = next;
        Ok(())
    }

    /// A duration tunable (stored in milliseconds) as a [`Duration`].
    pub fn ms(value: u32) -> Duration {
        Duration::from_millis(u64::from(value))
    }
}

/// The value a former boolean switch's word stands for: `tcp_wscale_always` and
/// `tcp_tstamp_always` were on/off ("offer on active opens" or not, always accepting
/// a peer's offer) before they took 0/1/2, so `true`/`on`/`yes` are 2 and
/// `false`/`off`/`no` are 1 (accept only). Numbers are the new values as written.
fn legacy_value(name: &str, value: &str) -> Option<&'static str> {
    if !matches!(name, "tcp_wscale_always" | "tcp_tstamp_always") {
        return None;
    }
    match value.trim() {
        "true" | "on" | "yes" => Some("2"),
        "false" | "off" | "no" => Some("1"),
        _ => None,
    }
}

/// Edit distance (Levenshtein) between two names, in bytes.
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

impl Params {
    /// The settings that environment variables `EMBER_<NAME>` make (`NAME` a tunable's
    /// name in upper case, e.g. `EMBER_TCP_XMIT_HIWAT=262144`), from `vars` as the
    /// process environment lists them (the core reads no environment itself). Variables
    /// whose name is no tunable (`EMBER_LOG`, `EMBER_CONTROL_DIR`) are not settings and
    /// are left out. Values are not checked here: apply them with [`Params::set_many`].
    pub fn env_settings<I, K, V>(vars: I) -> Vec<(&'static str, String)>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut v: Vec<(&'static str, String)> = vars
            .into_iter()
            .filter_map(|(k, val)| Some((Params::env_tunable(k.as_ref())?, val.as_ref().into())))
            .collect();
        v.sort();
        v
    }

    /// The tunable environment variable `var` sets (`EMBER_TCP_XMIT_HIWAT` sets
    /// `tcp_xmit_hiwat`), if it is one.
    pub fn env_tunable(var: &str) -> Option<&'static str> {
        let rest = var.strip_prefix("EMBER_")?;
        if rest.bytes().any(|b| b.is_ascii_lowercase()) {
            return None;
        }
        Params::NAMES
            .iter()
            .find(|n| n.eq_ignore_ascii_case(rest))
            .copied()
    }

    /// The tunables whose names are closest to `name` (for "did you mean"): at most
    /// three, each within a third of the name's length in edits or containing it.
    pub fn nearest(name: &str) -> Vec<&'static str> {
        let name = name.trim().to_ascii_lowercase();
        if name.is_empty() || name.len() > 64 {
            return Vec::new();
        }
        let limit = (name.len() / 3).max(2);
        let mut v: Vec<(usize, &'static str)> = Params::NAMES
            .iter()
            .filter_map(|&n| {
                let d = edit_distance(&name, n);
                if d <= limit {
                    Some((d, n))
                } else if name.len() >= 4 && n.contains(name.as_str()) {
                    Some((limit + 1, n))
                } else {
                    None
                }
            })
            .collect();
        v.sort();
        v.into_iter().take(3).map(|(_, n)| n).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_spec() {
        let p = Params::default();
        assert!(p.do_tcp_fusion);
        assert_eq!(p.tcp_fusion_rcv_unread_min, 8);
        assert_eq!((p.tcp_xmit_hiwat, p.tcp_xmit_lowat), (128_000, 4096));
        assert_eq!(p.tcp_recv_hiwat, 1_048_576);
        assert_eq!(p.tcp_max_buf, 1_048_576);
        assert_eq!(p.tcp_naglim_def, 4095);
        assert_eq!(p.tcp_deferred_ack_interval, 40);
        assert_eq!(
            (
                p.tcp_rexmit_interval_initial,
                p.tcp_rexmit_interval_min,
                p.tcp_rexmit_interval_max
            ),
            (1000, 200, 60_000)
        );
        assert_eq!(p.tcp_time_wait_interval, 60_000);
        assert_eq!((p.tcp_conn_req_max_q, p.tcp_conn_req_max_q0), (128, 1024));
        assert_eq!(p.tcp_init_cwnd, 10);
        assert_eq!(p.tcp_congestion_control, CcAlgorithm::Cubic);
        assert!(p.ip_lso_outbound);
        assert!(p.ip_gro);
        assert_eq!(p.squeue_drain_ms, 20);
        assert!(p.check_relations().is_ok());
    }

    /// `tcp_wscale_always`/`tcp_tstamp_always` take 0/1/2 like `tcp_sack_permitted`
    /// (default 2); the words of the former on/off switch keep their meaning (on: offer,
    /// 2; off: accept only, 1).
    #[test]
    fn window_scale_and_timestamp_levels() {
        let d = Params::default();
        assert_eq!((d.tcp_wscale_always, d.tcp_tstamp_always), (2, 2));
        for name in ["tcp_wscale_always", "tcp_tstamp_always"] {
            let mut p = Params::default();
            for (v, want) in [
                ("0", "0"),
                ("1", "1"),
                ("2", "2"),
                ("true", "2"),
                ("on", "2"),
                ("yes", "2"),
                ("false", "1"),
                ("off", "1"),
                ("no", "1"),
            ] {
                p.set(name, v).unwrap_or_else(|e| panic!("{name}={v}: {e}"));
                assert_eq!(p.get(name).as_deref(), Some(want), "{name}={v}");
            }
            p.set(name, "0").unwrap();
            let e = p.set(name, "3").unwrap_err();
            assert!(e.to_string().contains("0..=2"), "{e}");
            assert!(p.set(name, "maybe").is_err());
            assert_eq!(p.get(name).as_deref(), Some("0"), "unchanged on error");
        }
        // Only these two take the old words as levels.
        let mut p = Params::default();
        assert!(p.set("tcp_sack_permitted", "true").is_err());
    }

    #[test]
    fn set_get_and_refuse() {
        let mut p = Params::default();
        p.set("tcp_naglim_def", "1").unwrap();
        assert_eq!(p.get("tcp_naglim_def").as_deref(), Some("1"));
        p.set("tcp_congestion_control", "newreno").unwrap();
        assert_eq!(p.get("tcp_congestion_control").as_deref(), Some("newreno"));
        p.set("do_tcp_fusion", "0").unwrap();
        assert_eq!(p.get("do_tcp_fusion").as_deref(), Some("0"));

        let before = p.clone();
        let e = p.set("tcp_naglim_def", "70000").unwrap_err();
        assert!(e.to_string().contains("1..=65535"), "{e}");
        assert!(p.set("tcp_naglim_def", "-1").is_err());
        assert!(p.set("tcp_naglim_def", "").is_err());
        assert!(p
            .set("tcp_congestion_control", "bbr")
            .unwrap_err()
            .to_string()
            .contains("cubic|newreno"));
        assert!(matches!(p.set("no_such", "1"), Err(ParamError::Unknown(_))));
        // Relations: a buffer above tcp_max_buf is refused alone, accepted with it.
        let e = p.set("tcp_recv_hiwat", "4194304").unwrap_err();
        assert!(e.to_string().contains("tcp_max_buf"), "{e}");
        assert_eq!(p, before);
        p.set_many(&[("tcp_max_buf", "8388608"), ("tcp_recv_hiwat", "4194304")])
            .unwrap();
        assert_eq!(p.tcp_recv_hiwat, 4_194_304);
        let e: std::io::Error = ParamError::Unknown("x".into()).into();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    }

    #[test]
    fn describe_lists_every_name() {
        let p = Params::default();
        let d = p.describe();
        assert_eq!(d.len(), Params::NAMES.len());
        for (info, name) in d.iter().zip(Params::NAMES) {
            assert_eq!(info.name, *name);
            assert_eq!(info.value, info.default);
            assert!(!info.description.is_empty());
            // Every default round-trips through set().
            let mut q = Params::default();
            q.set(name, &info.default).unwrap();
            assert_eq!(q, p);
        }
    }

    #[test]
    fn unknown_names_get_the_nearest_ones() {
        let e = Params::default().set("tcp_xmit_hiwatt", "1").unwrap_err();
        let m = e.to_string();
        assert!(m.contains("unknown tunable 'tcp_xmit_hiwatt'"), "{m}");
        assert!(m.contains("nearest: tcp_xmit_hiwat"), "{m}");
        assert_eq!(Params::nearest("fusion")[..1], ["do_tcp_fusion"]);
        assert!(Params::nearest("zzzzzzzzzzzzzzzzzzzzzzz").is_empty());
        assert!(Params::nearest(&"x".repeat(10_000)).is_empty());
    }

    #[test]
    fn environment_variables_name_tunables_in_upper_case() {
        let vars = [
            ("EMBER_TCP_XMIT_HIWAT", "262144"),
            ("EMBER_LOG", "debug"),
            ("EMBER_tcp_recv_hiwat", "1"),
            ("HOME", "/root"),
            ("EMBER_DO_TCP_FUSION", "0"),
        ];
        let s = Params::env_settings(vars);
        assert_eq!(
            s,
            vec![
                ("do_tcp_fusion", "0".to_string()),
                ("tcp_xmit_hiwat", "262144".to_string())
            ]
        );
        let mut p = Params::default();
        let pairs: Vec<(&str, &str)> = s.iter().map(|(k, v)| (*k, v.as_str())).collect();
        p.set_many(&pairs).unwrap();
        assert_eq!(p.tcp_xmit_hiwat, 262_144);
        assert!(!p.do_tcp_fusion);
    }
}
