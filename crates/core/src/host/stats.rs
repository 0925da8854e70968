//! MIB-II style counters (RFC 4293 IP-MIB, RFC 4022 TCP-MIB, RFC 4113 UDP-MIB) for one
//! host, with the kstat names ember reports.
//!
//! IP, ICMP and UDP counters are bumped where the event happens. TCP counters are the sum
//! of every connection's own [`TcbStats`] (live ones plus those already gone) and a few
//! host-level events (listen drops, RSTs to closed ports).

use crate::tcp::{EndpointStats, TcbStats};

macro_rules! mib {
    ($(#[$doc:meta])* $name:ident { $( $field:ident => $kname:literal, )* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $name { $( pub $field: u64, )* }

        impl $name {
            /// (kstat name, value) pairs in table order.
            pub fn kstat(&self) -> Vec<(&'static str, u64)> {
                vec![ $( ($kname, self.$field), )* ]
            }
        }
    };
}

mib!(
    /// IP group (RFC 4293 names).
    IpStats {
        in_receives => "ipInReceives",
        in_hdr_errors => "ipInHdrErrors",
        in_addr_errors => "ipInAddrErrors",
        in_unknown_protos => "ipInUnknownProtos",
        in_discards => "ipInDiscards",
        in_delivers => "ipInDelivers",
        out_requests => "ipOutRequests",
        out_discards => "ipOutDiscards",
        out_no_routes => "ipOutNoRoutes",
        reasm_reqds => "ipReasmReqds",
        reasm_oks => "ipReasmOKs",
        reasm_fails => "ipReasmFails",
        frag_oks => "ipFragOKs",
        frag_fails => "ipFragFails",
        frag_creates => "ipFragCreates",
        arp_requests_out => "arpRequestsOut",
        arp_replies_out => "arpRepliesOut",
        arp_in => "arpIn",
        arp_in_errors => "arpInErrors",
        arp_resolve_fails => "arpResolveFails",
        eth_in_errors => "ethInErrors",
        eth_not_for_us => "ethNotForUs",
        gso_splits => "gsoSplits",
        gso_segs => "gsoSegs",
        gro_merged => "groMerged",
        gro_segs_out => "groSegsOut",
    }
);

mib!(
    /// ICMP group.
    IcmpStats {
        in_msgs => "icmpInMsgs",
        in_errors => "icmpInErrors",
        in_dest_unreachs => "icmpInDestUnreachs",
        in_time_excds => "icmpInTimeExcds",
        in_echos => "icmpInEchos",
        in_echo_reps => "icmpInEchoReps",
        out_msgs => "icmpOutMsgs",
        out_dest_unreachs => "icmpOutDestUnreachs",
        out_time_excds => "icmpOutTimeExcds",
        out_echos => "icmpOutEchos",
        out_echo_reps => "icmpOutEchoReps",
        out_rate_limited => "icmpOutDrops",
        pmtu_updates => "icmpInFragNeeded",
        pmtu_rejected => "icmpInFragNeededBad",
    }
);

mib!(
    /// UDP group.
    UdpStats {
        in_datagrams => "udpInDatagrams",
        no_ports => "udpNoPorts",
        in_errors => "udpInErrors",
        rcvbuf_errors => "udpInOverflows",
        out_datagrams => "udpOutDatagrams",
    }
);

mib!(
    /// TCP group (RFC 4022 names, Solaris extras).
    TcpStats {
        active_opens => "tcpActiveOpens",
        passive_opens => "tcpPassiveOpens",
        attempt_fails => "tcpAttemptFails",
        estab_resets => "tcpEstabResets",
        curr_estab => "tcpCurrEstab",
        in_segs => "tcpInSegs",
        out_segs => "tcpOutSegs",
        retrans_segs => "tcpRetransSegs",
        retrans_bytes => "tcpRetransBytes",
        in_errs => "tcpInErrs",
        out_rsts => "tcpOutRsts",
        in_dup_ack => "tcpInDupAck",
        out_ack_delayed => "tcpOutAckDelayed",
        tim_retrans => "tcpTimRetrans",
        fast_retrans => "tcpFastRetrans",
        out_win_probe => "tcpOutWinProbe",
        keepalive_probes => "tcpTimKeepaliveProbe",
        in_data_unord_segs => "tcpInDataUnorderSegs",
        in_data_dup_segs => "tcpInDataDupSegs",
        dsacks_out => "tcpOutDsack",
        dsacks_in => "tcpInDsack",
        challenge_acks => "tcpChallengeAck",
        paws_drops => "tcpInPawsDrop",
        listen_drop => "tcpListenDrop",
        listen_drop_q0 => "tcpListenDropQ0",
        syncookies_sent => "tcpSynCookiesSent",
        syncookies_recv => "tcpSynCookiesRecv",
        syncookies_failed => "tcpSynCookiesFailed",
        conn_limit_drops => "tcpConnLimitDrops",
        mem_drops => "tcpRcvMemDrops",
        sack_ranges_forgotten => "tcpSackRangesForgotten",
        acks_skipped_syn_recv => "tcpAckSkippedSynRecv",
        acks_skipped_time_wait => "tcpAckSkippedTimeWait",
        conns_now => "tcpConns",
        mem_bytes => "tcpMemBytes",
        in_closed => "tcpInClosed",
        rst_rate_limited => "tcpRstDropped",
        time_wait_reuse => "tcpTimeWaitReuse",
        ooo_drops => "tcpInDataPastWinDrop",
    }
);

impl TcpStats {
    /// Adds the counters of an owner's TCP endpoint (segments that reached no
    /// connection, listeners, SYN cookies, the stack-wide bounds).
    pub fn add_endpoint(&mut self, e: &EndpointStats) {
        self.in_segs += e.in_segs;
        self.in_errs += e.in_errs;
        self.in_closed += e.in_closed;
        self.out_rsts += e.out_rsts;
        // The RSTs and cookie SYN,ACKs that belong to no connection.
        self.out_segs += e.out_rsts + e.syncookies_sent;
        self.rst_rate_limited += e.rst_rate_limited;
        self.passive_opens += e.passive_opens;
        self.listen_drop += e.listen_drop;
        self.listen_drop_q0 += e.listen_drop_q0;
        self.syncookies_sent += e.syncookies_sent;
        self.syncookies_recv += e.syncookies_recv;
        self.syncookies_failed += e.syncookies_failed;
        self.conn_limit_drops += e.conn_limit_drops;
        self.mem_drops += e.mem_drops;
        self.time_wait_reuse += e.time_wait_reuse;
    }

    /// Adds one connection's counters.
    pub fn add_tcb(&mut self, s: &TcbStats) {
        self.in_segs += s.segs_in;
        self.out_segs += s.segs_out;
        self.retrans_segs += s.retrans_segs;
        self.retrans_bytes += s.retrans_bytes;
        self.out_rsts += s.rsts_out;
        self.in_dup_ack += s.dup_acks_in;
        self.out_ack_delayed += s.acks_delayed;
        self.tim_retrans += s.timeouts;
        self.fast_retrans += s.fast_retransmits;
        self.out_win_probe += s.window_probes;
        self.keepalive_probes += s.keepalive_probes;
        self.in_data_unord_segs += s.ooo_segs_in;
        self.in_data_dup_segs += s.dup_segs_in;
        self.dsacks_out += s.dsacks_sent;
        self.dsacks_in += s.dsacks_in;
        self.challenge_acks += s.challenge_acks;
        self.sack_ranges_forgotten += s.sack_ranges_forgotten;
        self.acks_skipped_syn_recv += s.acks_skipped_syn_recv;
        self.acks_skipped_time_wait += s.acks_skipped_time_wait;
        self.paws_drops += s.paws_drops;
        self.ooo_drops += s.rcv_drops_full;
        self.attempt_fails += s.attempt_fails;
        self.estab_resets += s.estab_resets;
    }
}

impl TcbStats {
    /// Adds `o` into `self` (for totals of connections that are gone).
    pub fn accumulate(&mut self, o: &TcbStats) {
        let TcbStats {
            segs_in,
            segs_out,
            bytes_in,
            bytes_out,
            data_segs_out,
            retrans_segs,
            retrans_bytes,
            fast_retransmits,
            timeouts,
            dup_acks_in,
            ooo_segs_in,
            dup_segs_in,
            dsacks_sent,
            dsacks_in,
            challenge_acks,
            paws_drops,
            rsts_out,
            rsts_in,
            acks_delayed,
            window_probes,
            keepalive_probes,
            zero_window_adv,
            rcv_drops_full,
            bad_acks,
            recoveries,
            prr_segs,
            rtt_samples,
            attempt_fails,
            estab_resets,
            rack_losses,
            tlp_probes,
            tlp_recoveries,
            spurious_rtx,
            tsq_throttled,
            sack_ranges_forgotten,
            acks_skipped_syn_recv,
            acks_skipped_time_wait,
        } = *o;
        self.segs_in += segs_in;
        self.segs_out += segs_out;
        self.bytes_in += bytes_in;
        self.bytes_out += bytes_out;
        self.data_segs_out += data_segs_out;
        self.retrans_segs += retrans_segs;
        self.retrans_bytes += retrans_bytes;
        self.fast_retransmits += fast_retransmits;
        self.timeouts += timeouts;
        self.dup_acks_in += dup_acks_in;
        self.ooo_segs_in += ooo_segs_in;
        self.dup_segs_in += dup_segs_in;
        self.dsacks_sent += dsacks_sent;
        self.dsacks_in += dsacks_in;
        self.challenge_acks += challenge_acks;
        self.paws_drops += paws_drops;
        self.rsts_out += rsts_out;
        self.rsts_in += rsts_in;
        self.acks_delayed += acks_delayed;
        self.window_probes += window_probes;
        self.keepalive_probes += keepalive_probes;
        self.zero_window_adv += zero_window_adv;
        self.rcv_drops_full += rcv_drops_full;
        self.rack_losses += rack_losses;
        self.tlp_probes += tlp_probes;
        self.tlp_recoveries += tlp_recoveries;
        self.spurious_rtx += spurious_rtx;
        self.tsq_throttled += tsq_throttled;
        self.sack_ranges_forgotten += sack_ranges_forgotten;
        self.acks_skipped_syn_recv += acks_skipped_syn_recv;
        self.acks_skipped_time_wait += acks_skipped_time_wait;
        self.bad_acks += bad_acks;
        self.recoveries += recoveries;
        self.prr_segs += prr_segs;
        self.rtt_samples += rtt_samples;
        self.attempt_fails += attempt_fails;
        self.estab_resets += estab_resets;
    }
}

/// All counters of one host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostStats {
    pub ip: IpStats,
    pub icmp: IcmpStats,
    pub udp: UdpStats,
    pub tcp: TcpStats,
}
