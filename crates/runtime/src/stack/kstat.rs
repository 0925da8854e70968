//! Counters: every counter of the stack, summed over its squeues (`Stack::stats`), and
//! their kstat names (`Stack::kstat`).
//!
//! The runtime's own counters are declared in tables (`counters!`, `counters.rs`), as the core's
//! MIB groups are (`ember_core::host::stats`): each field once, with its kstat name
//! beside it, so a counter cannot be added without its name or summed in one place and
//! forgotten in another.

use super::perimeter::TcpPerimeter;
use super::{Stack, TxStats};
use crate::squeue::SqCounters;
use ember_core::host::HostStats;
use std::sync::atomic::Ordering;

counters!(
    /// Fusion, loopback and classifier counters of one squeue's perimeter.
    PerimeterStats {
        /// A fused writer stopped (a full buffer, or too many unread writes).
        fusion_flowctl => "fusion:tcp_fusion_flowctl",
        /// A stopped fused writer resumed.
        fusion_backenabled => "fusion:tcp_fusion_backenabled",
        /// Unfused for urgent data.
        fusion_urg => "fusion:tcp_fusion_urg",
        /// Fused writes that moved data.
        fusion_putnext => "fusion:tcp_fusion_putnext",
        /// Connections found unfusable at admission.
        fusion_unfusable => "fusion:tcp_fusion_unfusable",
        /// Unfused by a real segment or a filter rule.
        fusion_aborted => "fusion:tcp_fusion_aborted",
        /// Admission refused (the peer elsewhere, not local, or not quiescent).
        fusion_unqualified => "fusion:tcp_fusion_unqualified",
        /// Pairs fused now.
        fusion_fused_now => "fusion:tcp_fusion_fused",
        /// Pairs ever fused.
        fusion_fused_total => "fusion:tcp_fusion_fused_total",
        /// Bytes moved fused.
        fusion_bytes => "fusion:tcp_fusion_bytes",
        /// Stops by the unread-writes limit (`tcp_fusion_rcv_unread_min`).
        fusion_rrw_stops => "fusion:tcp_fusion_rrw_stops",
        /// Active opens (folded into `tcp:tcpActiveOpens`).
        active_opens,
        /// Loopback datagrams through IP (folded into ipOutRequests / ipInReceives /
        /// ipInDelivers: the loopback path has no IP header, but it is IP traffic).
        ip_lo_out,
        ip_lo_in,
        /// Segments for another squeue's connection, entered there.
        cross_sq => "classifier:cross_squeue",
        /// Loopback segments.
        lo_segs => "classifier:loopback_segs",
        /// Loopback segments left for a later entry (`LO_BUDGET`).
        lo_requeued => "classifier:loopback_requeued",
        /// TCP segments the filter dropped.
        filtered => "classifier:filtered",
    }
);

/// All counters of a stack.
#[derive(Debug, Clone, Default)]
pub struct StackStats {
    /// IP, ICMP, UDP counters of the IP layer; TCP counters summed over squeues.
    pub host: HostStats,
    /// Fusion and classifier counters, summed over squeues.
    pub tcp: PerimeterStats,
    /// Squeue counters, summed.
    pub squeue: SqCounters,
    /// Per squeue.
    pub per_squeue: Vec<SqCounters>,
    /// The transmit side (GSO, fair queues, TCP Small Queues), summed over squeues.
    pub tx: TxStats,
}

impl Stack {
    /// Every counter.
    pub fn stats(&self) -> StackStats {
        let mut out = StackStats {
            host: self.inner.ip().stats(),
            ..StackStats::default()
        };
        let mut all_tcb = ember_core::tcp::TcbStats::default();
        let mut endpoint = ember_core::tcp::EndpointStats::default();
        for sq in &self.inner.squeues {
            let (tcbs, estab, ps, es, tx) = sq.with(|p: &mut TcpPerimeter| {
                let (s, e) = p.tcb_stats();
                (s, e, p.stats, p.endpoint.stats, p.tx.stats())
            });
            out.tx += tx;
            all_tcb.accumulate(&tcbs);
            endpoint.accumulate(&es);
            out.host.tcp.curr_estab += estab;
            out.tcp += ps;
            let c = sq.stats().snapshot();
            out.squeue += c;
            out.per_squeue.push(c);
        }
        out.host.ip.out_requests += out.tcp.ip_lo_out;
        out.host.ip.in_receives += out.tcp.ip_lo_in;
        out.host.ip.in_delivers += out.tcp.ip_lo_in;
        let h = &mut out.host.tcp;
        h.add_tcb(&all_tcb);
        h.active_opens += out.tcp.active_opens;
        h.add_endpoint(&endpoint);
        h.conns_now = u64::from(self.inner.conns_now.load(Ordering::Relaxed));
        h.mem_bytes = self.inner.tcp_mem_used.load(Ordering::Relaxed);
        out
    }

    /// kstat-style `(module:name, value)` pairs.
    pub fn kstat(&self) -> Vec<(String, u64)> {
        let s = self.stats();
        let mut v = Vec::new();
        for (k, x) in s.host.ip.kstat() {
            v.push((format!("ip:{k}"), x));
        }
        for (k, x) in s.host.icmp.kstat() {
            v.push((format!("icmp:{k}"), x));
        }
        for (k, x) in s.host.udp.kstat() {
            v.push((format!("udp:{k}"), x));
        }
        for (k, x) in s.host.tcp.kstat() {
            v.push((format!("tcp:{k}"), x));
        }
        let t = s.tcp.kstat();
        let module = |m: &'static str| {
            t.iter()
                .filter(move |(k, _)| k.split(':').next() == Some(m))
                .map(|(k, x)| (k.to_string(), *x))
        };
        v.extend(module("fusion"));
        v.extend(
            s.squeue
                .kstat()
                .into_iter()
                .map(|(k, x)| (k.to_string(), x)),
        );
        let x = &s.tx;
        for (k, val) in [
            ("gso_splits", x.gso_splits),
            ("gso_segs", x.gso_segs),
            ("gso_errors", x.gso_errors),
            ("tso_sends", x.tso_sends),
            ("direct", x.direct),
            ("dev_queue_waits", x.dev_queue_waits),
            ("tsq_throttles", x.tsq_throttles),
            ("fq_enqueued", x.fq.enqueued),
            ("fq_dequeued", x.fq.dequeued),
            ("fq_drops_overlimit", x.fq.drops_overlimit),
            ("fq_codel_drops", x.fq.codel_drops),
            ("fq_new_flows", x.fq.new_flows),
            ("fq_paced_waits", x.fq.paced_waits),
        ] {
            v.push((format!("txq:{k}"), val));
        }
        v.push((
            "classifier:conns".to_string(),
            self.inner.classifier.len() as u64,
        ));
        v.extend(module("classifier"));
        // Devices: module `devN` per interface, each counter summed over its queues.
        for (i, (_, queues)) in self.inner.devices.iter().enumerate() {
            let mut sum: Vec<(&'static str, u64)> = Vec::new();
            for q in queues {
                for (k, x) in q.counters() {
                    match sum.iter_mut().find(|(n, _)| *n == k) {
                        Some((_, t)) => *t += x,
                        None => sum.push((k, x)),
                    }
                }
            }
            v.push((format!("dev{i}:queues"), queues.len() as u64));
            for (k, x) in sum {
                v.push((format!("dev{i}:{k}"), x));
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::Stack;

    /// The runtime's kstat names and their order are what `ember kstat` users and
    /// scripts read: declaring them in tables must not change them.
    #[test]
    fn runtime_kstat_names_in_order() {
        let stack = Stack::loopback(1).expect("stack");
        let names: Vec<String> = stack
            .kstat()
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| {
                !["ip:", "icmp:", "udp:", "tcp:"]
                    .iter()
                    .any(|m| k.starts_with(m))
            })
            .collect();
        let want = [
            "fusion:tcp_fusion_flowctl",
            "fusion:tcp_fusion_backenabled",
            "fusion:tcp_fusion_urg",
            "fusion:tcp_fusion_putnext",
            "fusion:tcp_fusion_unfusable",
            "fusion:tcp_fusion_aborted",
            "fusion:tcp_fusion_unqualified",
            "fusion:tcp_fusion_fused",
            "fusion:tcp_fusion_fused_total",
            "fusion:tcp_fusion_bytes",
            "fusion:tcp_fusion_rrw_stops",
            "squeue:inline",
            "squeue:queued",
            "squeue:nested",
            "squeue:drained_by_caller",
            "squeue:drain_handoffs",
            "squeue:worker_drains",
            "squeue:wakeups",
            "squeue:poll_switches",
            "squeue:kicks_by_caller",
            "squeue:drain_ns",
            "txq:gso_splits",
            "txq:gso_segs",
            "txq:gso_errors",
            "txq:tso_sends",
            "txq:direct",
            "txq:dev_queue_waits",
            "txq:tsq_throttles",
            "txq:fq_enqueued",
            "txq:fq_dequeued",
            "txq:fq_drops_overlimit",
            "txq:fq_codel_drops",
            "txq:fq_new_flows",
            "txq:fq_paced_waits",
            "classifier:conns",
            "classifier:cross_squeue",
            "classifier:loopback_segs",
            "classifier:loopback_requeued",
            "classifier:filtered",
        ];
        assert_eq!(names, want);
        stack.shutdown();
    }
}
