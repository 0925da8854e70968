//! The ember backend's `tcp_info`: the fields of ember's [`TcbInfo`] in Linux's
//! units, and what Linux reports for a socket with no connection and for a listener.

use ember_core::tcp::{State, TcbInfo};
use ember_core::Instant;

/// A `tcp_info` field from ember's [`TcbInfo`], in Linux's units (segments for
/// windows, µs for RTTs, ms for the `last_*` idle times, Linux's numbering for states);
/// `None` for fields ember does not have.
pub(crate) fn tcpi(name: &str, i: &TcbInfo, now: Instant) -> Option<i64> {
    let mss = i64::from(i.snd_mss.max(1));
    let ms_since = |t: Instant| now.saturating_duration_since(t).as_millis() as i64;
    Some(match name {
        "tcpi_snd_cwnd" => i64::from(i.cwnd) / mss,
        // Linux reports an unset ssthresh as TCP_INFINITE_SSTHRESH.
        "tcpi_snd_ssthresh" => {
            if i.ssthresh >= 0x7fff_ffff {
                0x7fff_ffff
            } else {
                i64::from(i.ssthresh) / mss
            }
        }
        "tcpi_snd_mss" => i64::from(i.snd_mss),
        "tcpi_rcv_mss" => i64::from(i.rcv_mss),
        "tcpi_advmss" => i64::from(i.adv_mss),
        "tcpi_pmtu" => i64::from(i.pmtu),
        "tcpi_unacked" => (i64::from(i.unacked) + mss - 1) / mss,
        "tcpi_sacked" => (i64::from(i.sacked) + mss - 1) / mss,
        "tcpi_backoff" => i64::from(i.backoff),
        "tcpi_probes" => i64::from(i.probes),
        "tcpi_rto" => i.rto.as_micros() as i64,
        "tcpi_rtt" => i.srtt?.as_micros() as i64,
        "tcpi_rttvar" => i.rttvar.as_micros() as i64,
        "tcpi_min_rtt" => i.min_rtt?.as_micros() as i64,
        "tcpi_snd_wscale" => i64::from(i.snd_wscale),
        "tcpi_rcv_wscale" => i64::from(i.rcv_wscale),
        "tcpi_ca_state" => i64::from(i.ca_state),
        "tcpi_state" => linux_tcp_state(i.state),
        "tcpi_options" => [
            (i.timestamps, TCPI_OPT_TIMESTAMPS),
            (i.sack, TCPI_OPT_SACK),
            (i.window_scaling, TCPI_OPT_WSCALE),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .fold(0, |m, (_, bit)| m | bit),
        "tcpi_last_data_recv" => ms_since(i.last_data_recv),
        "tcpi_last_data_sent" => ms_since(i.last_data_sent),
        "tcpi_bytes_received" => i.bytes_received.min(i64::MAX as u64) as i64,
        "tcpi_segs_in" => i.stats.segs_in.min(i64::MAX as u64) as i64,
        "tcpi_segs_out" => i.stats.segs_out.min(i64::MAX as u64) as i64,
        "tcpi_total_retrans" => i.stats.retrans_segs.min(i64::MAX as u64) as i64,
        "tcpi_lost" => i64::from(i.lost),
        "tcpi_retrans" => i64::from(i.retrans),
        "tcpi_reordering" => i64::from(i.reordering),
        "tcpi_delivered" => i.delivered.min(i64::MAX as u64) as i64,
        "tcpi_busy_time" => i.chrono.busy_time(now).as_micros() as i64,
        "tcpi_rwnd_limited" => i.chrono.rwnd_limited_time(now).as_micros() as i64,
        "tcpi_sndbuf_limited" => i.chrono.sndbuf_limited_time(now).as_micros() as i64,
        // ember has no ECN: nothing is ever delivered CE-marked.
        "tcpi_delivered_ce" => 0,
        _ => return None,
    })
}

/// What a code block's `tcpi_*` names read.
pub(crate) enum InfoSource {
    /// A connection's `tcp_info`.
    Conn(Box<TcbInfo>),
    /// The socket's connection is gone (reset or timed out, and reaped): Linux's socket
    /// is in TCP_CLOSE; ember kept no other figure of it.
    Gone,
    /// A socket with no connection yet (Linux's TCP_CLOSE).
    Closed,
    /// A listener: its accept queue and backlog.
    Listen { queued: i64, backlog: i64 },
}

/// Linux's `TCP_CLOSE` (include/net/tcp_states.h).
pub(crate) const TCP_CLOSE: i64 = 7;

/// `tcp_info` of a socket with no connection yet, as Linux's `tcp_get_info` reports a
/// socket fresh from `tcp_init_sock`: TCP_CLOSE, the initial RTO (and RTTVAR a
/// quarter of it), the default MSS, the initial window, no ssthresh, the reordering
/// degree, no minimum RTT (~0U); every other field ember reports is 0. The
/// `tcpi_last_*` times count from boot on Linux: not answered.
pub(crate) fn closed_tcpi(name: &str, p: &ember_core::params::Params) -> Option<i64> {
    let rto_us = i64::from(p.tcp_rexmit_interval_initial) * 1000;
    Some(match name {
        "tcpi_state" => TCP_CLOSE,
        "tcpi_rto" => rto_us,
        "tcpi_rttvar" => rto_us / 4,
        "tcpi_snd_mss" => i64::from(p.tcp_mss_def_ipv4),
        "tcpi_snd_cwnd" => i64::from(p.tcp_init_cwnd),
        "tcpi_snd_ssthresh" => 0x7fff_ffff,
        "tcpi_reordering" => i64::from(p.tcp_dupack_fast_retransmit),
        "tcpi_min_rtt" => i64::from(u32::MAX),
        n if n.starts_with("tcpi_last_") => return None,
        n => return zero_tcpi(n),
    })
}

/// `tcp_info` of a listener, as Linux's `tcp_get_info` reports one: TCP_LISTEN,
/// `tcpi_unacked` the connections waiting for accept(), `tcpi_sacked` the backlog, the
/// initial window and the reordering degree; every other field ember reports is 0.
pub(crate) fn listen_tcpi(
    name: &str,
    queued: i64,
    backlog: i64,
    p: &ember_core::params::Params,
) -> Option<i64> {
    Some(match name {
        "tcpi_state" => 10,
        "tcpi_unacked" => queued,
        "tcpi_sacked" => backlog,
        "tcpi_snd_cwnd" => i64::from(p.tcp_init_cwnd),
        "tcpi_reordering" => i64::from(p.tcp_dupack_fast_retransmit),
        n => return zero_tcpi(n),
    })
}

/// 0 for a field [`tcpi`] knows (so a socket without a connection answers the same
/// names a connection does), `None` for the others.
pub(crate) fn zero_tcpi(name: &str) -> Option<i64> {
    TCPI_FIELDS.contains(&name).then_some(0)
}

/// The fields [`tcpi`] answers (a test keeps the two in step).
pub(crate) const TCPI_FIELDS: &[&str] = &[
    "tcpi_snd_cwnd",
    "tcpi_snd_ssthresh",
    "tcpi_snd_mss",
    "tcpi_rcv_mss",
    "tcpi_advmss",
    "tcpi_pmtu",
    "tcpi_unacked",
    "tcpi_sacked",
    "tcpi_backoff",
    "tcpi_probes",
    "tcpi_rto",
    "tcpi_rtt",
    "tcpi_rttvar",
    "tcpi_min_rtt",
    "tcpi_snd_wscale",
    "tcpi_rcv_wscale",
    "tcpi_ca_state",
    "tcpi_state",
    "tcpi_options",
    "tcpi_last_data_recv",
    "tcpi_last_data_sent",
    "tcpi_bytes_received",
    "tcpi_segs_in",
    "tcpi_segs_out",
    "tcpi_total_retrans",
    "tcpi_lost",
    "tcpi_retrans",
    "tcpi_reordering",
    "tcpi_delivered",
    "tcpi_busy_time",
    "tcpi_rwnd_limited",
    "tcpi_sndbuf_limited",
    "tcpi_delivered_ce",
];

pub(crate) const TCPI_OPT_TIMESTAMPS: i64 = 1;
pub(crate) const TCPI_OPT_SACK: i64 = 2;
pub(crate) const TCPI_OPT_WSCALE: i64 = 4;

/// Linux's `TCP_*` state numbers (`tcpi_state`).
pub(crate) fn linux_tcp_state(s: State) -> i64 {
    match s {
        State::Established => 1,
        State::SynSent => 2,
        State::SynReceived => 3,
        State::FinWait1 => 4,
        State::FinWait2 => 5,
        State::TimeWait => 6,
        State::Closed => 7,
        State::CloseWait => 8,
        State::LastAck => 9,
        State::Listen => 10,
        State::Closing => 11,
    }
}

/// Names a code block may use without defining them: Linux's `tcpi_ca_state`,
/// `tcpi_options` and `tcpi_state` values (the names packetdrill's code.c defines, with
/// TCPI_OPT_SACK and TCPI_OPT_ECN_SEEN besides; the states are include/net/tcp_states.h's,
/// TCP_ESTABLISHED = 1 to TCP_BOUND_INACTIVE = 13).
pub(crate) fn code_constant(n: &str) -> Option<i64> {
    Some(match n {
        "TCP_CA_Open" => 0,
        "TCP_CA_Disorder" => 1,
        "TCP_CA_CWR" => 2,
        "TCP_CA_Recovery" => 3,
        "TCP_CA_Loss" => 4,
        "TCPI_OPT_TIMESTAMPS" => TCPI_OPT_TIMESTAMPS,
        "TCPI_OPT_SACK" => TCPI_OPT_SACK,
        "TCPI_OPT_WSCALE" => TCPI_OPT_WSCALE,
        "TCPI_OPT_ECN" => 8,
        "TCPI_OPT_ECN_SEEN" => 16,
        "TCPI_OPT_SYN_DATA" => 32,
        "TCP_ESTABLISHED" => 1,
        "TCP_SYN_SENT" => 2,
        "TCP_SYN_RECV" => 3,
        "TCP_FIN_WAIT1" => 4,
        "TCP_FIN_WAIT2" => 5,
        "TCP_TIME_WAIT" => 6,
        "TCP_CLOSE" => 7,
        "TCP_CLOSE_WAIT" => 8,
        "TCP_LAST_ACK" => 9,
        "TCP_LISTEN" => 10,
        "TCP_CLOSING" => 11,
        "TCP_NEW_SYN_RECV" => 12,
        "TCP_BOUND_INACTIVE" => 13,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::linux_profile;
    use ember_core::tcp::tcb::ConnSpec;
    use ember_core::tcp::{SeqNum, Tcb, TcpSettings};
    use std::net::{Ipv4Addr, SocketAddrV4};
    use std::time::Duration;

    /// `TCPI_FIELDS` lists what `tcpi` answers for a connection; a socket with no
    /// connection and a listener answer the same names (but the `tcpi_last_*` times of
    /// a socket Linux counts from boot).
    #[test]
    fn tcpi_fields_in_step() {
        let a = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 1), 40_000);
        let b = SocketAddrV4::new(Ipv4Addr::new(198, 18, 0, 2), 80);
        let spec = |local, remote, iss| ConnSpec {
            local,
            remote,
            iss: SeqNum(iss),
            ts_offset: 0,
            mtu: 1500,
        };
        let t0 = Instant::from_secs(1);
        let mut c = Tcb::connect(t0, spec(a, b, 1000), TcpSettings::default());
        let syn = c.poll_transmit(t0).expect("SYN").repr;
        let mut s = Tcb::accept(t0, spec(b, a, 5000), TcpSettings::default(), &syn);
        let synack = s.poll_transmit(t0).expect("SYN,ACK").repr;
        let t1 = t0 + Duration::from_millis(10);
        c.handle_segment(t1, &synack, &[]);
        let info = c.info();
        for n in TCPI_FIELDS {
            assert!(tcpi(n, &info, t1).is_some(), "{n}");
        }
        for n in ["tcpi_reord_seen", "tcpi_snd_wnd", "tcpi_nonsense"] {
            assert_eq!(tcpi(n, &info, t1), None, "{n}");
        }
        let p = linux_profile();
        for n in TCPI_FIELDS {
            assert!(listen_tcpi(n, 1, 5, &p).is_some(), "{n}");
            assert_eq!(
                closed_tcpi(n, &p).is_some(),
                !n.starts_with("tcpi_last_"),
                "{n}"
            );
        }
        assert_eq!(closed_tcpi("tcpi_state", &p), Some(7));
        assert_eq!(listen_tcpi("tcpi_state", 1, 5, &p), Some(10));
        assert_eq!(listen_tcpi("tcpi_unacked", 1, 5, &p), Some(1));
        assert_eq!(listen_tcpi("tcpi_sacked", 1, 5, &p), Some(5));
        assert_eq!(closed_tcpi("tcpi_reord_seen", &p), None);
    }
}
