//! A one-line text rendering of a frame, for `ember sim --trace` (tcpdump-like).

use ember_core::wire::{ethertype, ip_proto, ArpRepr, EthernetRepr, Ipv4Repr, TcpRepr};

/// Describes an Ethernet frame in one line.
pub fn describe(frame: &[u8]) -> String {
    let Ok((eth, payload)) = EthernetRepr::parse(frame) else {
        return format!("runt frame ({} bytes)", frame.len());
    };
    match eth.ethertype {
        ethertype::ARP => match ArpRepr::parse(payload) {
            Ok(a) => format!(
                "ARP {:?} who-has {} tell {}",
                a.op, a.target_ip, a.sender_ip
            ),
            Err(e) => format!("ARP bad: {e}"),
        },
        ethertype::IPV4 => {
            let (ip, p) = match Ipv4Repr::parse(payload, true) {
                Ok(x) => x,
                Err(e) => return format!("IP bad: {e}"),
            };
            if ip.protocol != ip_proto::TCP {
                return format!(
                    "IP {} > {} proto {} len {}",
                    ip.src, ip.dst, ip.protocol, ip.payload_len
                );
            }
            match TcpRepr::parse(p, ip.src, ip.dst, true) {
                Ok((t, data)) => {
                    let mut s = format!(
                        "{}:{} > {}:{} {:?} seq {} ack {} win {} len {}",
                        ip.src,
                        t.src_port,
                        ip.dst,
                        t.dst_port,
                        t.flags,
                        t.seq,
                        t.ack,
                        t.window,
                        data.len()
                    );
                    let o = &t.options;
                    if let Some(m) = o.mss {
                        s.push_str(&format!(" mss {m}"));
                    }
                    if let Some(w) = o.window_scale {
                        s.push_str(&format!(" ws {w}"));
                    }
                    if o.sack_permitted {
                        s.push_str(" sackOK");
                    }
                    if let Some((v, e)) = o.timestamps {
                        s.push_str(&format!(" ts {v}/{e}"));
                    }
                    for b in o.sack_blocks() {
                        s.push_str(&format!(" sack {}-{}", b.left, b.right));
                    }
                    s
                }
                Err(e) => format!("TCP bad: {e}"),
            }
        }
        t => format!("ethertype {t:#06x}"),
    }
}
