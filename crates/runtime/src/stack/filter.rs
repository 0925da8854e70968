//! The IP filter: drop rules by protocol, addresses and ports, read on every datagram
//! TCP sends or receives. Adding a rule unfuses every fused connection it matches,
//! because fused data would bypass it.

use super::perimeter::TcpPerimeter;
use super::{Stack, StackInner};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::Ordering;

/// A rule of the IP filter: drop datagrams that match every field given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FilterRule {
    /// IP protocol (6 = TCP, 17 = UDP); `None` = any.
    pub protocol: Option<u8>,
    pub src: Option<Ipv4Addr>,
    pub dst: Option<Ipv4Addr>,
    pub src_port: Option<u16>,
    pub dst_port: Option<u16>,
}

impl FilterRule {
    fn matches(&self, proto: u8, from: SocketAddrV4, to: SocketAddrV4) -> bool {
        self.protocol.is_none_or(|p| p == proto)
            && self.src.is_none_or(|a| a == *from.ip())
            && self.dst.is_none_or(|a| a == *to.ip())
            && self.src_port.is_none_or(|p| p == from.port())
            && self.dst_port.is_none_or(|p| p == to.port())
    }
}

impl StackInner {
    /// Would the filter drop a datagram of `proto` from `from` to `to`?
    #[inline]
    pub(crate) fn filtered(&self, proto: u8, from: SocketAddrV4, to: SocketAddrV4) -> bool {
        if !self.filter_on.load(Ordering::Relaxed) {
            return false;
        }
        self.filter
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|r| r.matches(proto, from, to))
    }
}

impl Stack {
    /// Adds a drop rule to the IP filter. Fused connections the rule matches are unfused
    /// first (their data would otherwise bypass the filter).
    pub fn add_filter_rule(&self, rule: FilterRule) {
        self.inner
            .filter
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(rule);
        self.inner.filter_on.store(true, Ordering::SeqCst);
        for sq in &self.inner.squeues {
            sq.with(move |p: &mut TcpPerimeter| {
                let Some(st) = p.stack.upgrade() else { return };
                let now = crate::clock::now();
                let keys: Vec<_> = p
                    .conns
                    .iter()
                    .filter(|(_, c)| {
                        c.peer.is_some()
                            && (rule.matches(6, c.tcb.local(), c.tcb.remote())
                                || rule.matches(6, c.tcb.remote(), c.tcb.local()))
                    })
                    .map(|(k, _)| k)
                    .collect();
                for k in keys {
                    if p.conns.get(k).is_some_and(|c| c.peer.is_some()) {
                        p.stats.fusion_aborted += 1;
                        p.unfuse(&st, now, k);
                        p.after(&st, now, k);
                    }
                }
            });
        }
    }

    /// Removes every filter rule.
    pub fn clear_filter(&self) {
        self.inner
            .filter
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.inner.filter_on.store(false, Ordering::SeqCst);
    }
}
