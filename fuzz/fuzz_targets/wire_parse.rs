//! Every wire parser on arbitrary bytes: Ethernet, ARP, IPv4 (and the quoted-header
//! variant), ICMP, UDP, TCP with options, and the Internet checksum.
//!
//! Beyond "never panics", each successful parse is checked: the payload is a sub-slice
//! within the input, and emitting the parsed repr and parsing it again gives the same repr
//! (`wire/mod.rs`: "Round trip: for every representable repr, parse(emit(r)) == r").
//! The checksum is compared with a naive RFC 1071 implementation.
#![no_main]

use ember_core::wire::{
    checksum, ArpRepr, EthernetRepr, Icmpv4Repr, Ipv4Repr, TcpOptions, TcpRepr, UdpRepr, ARP_LEN,
    ETHERNET_HEADER_LEN, IPV4_HEADER_LEN,
};
use libfuzzer_sys::fuzz_target;
use std::net::Ipv4Addr;

const SRC: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

/// RFC 1071, the obvious way.
fn naive_sum(data: &[u8]) -> u16 {
    let mut s: u64 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        s += u64::from(w);
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

fn within(outer: &[u8], inner: &[u8]) -> bool {
    let o = outer.as_ptr() as usize;
    let i = inner.as_ptr() as usize;
    inner.is_empty() || (i >= o && i + inner.len() <= o + outer.len())
}

/// The SACK blocks ember can emit next to the other options (the emission layout puts
/// `NOP NOP kind len` before them; anything that does not fit in 40 bytes is dropped).
fn emittable_blocks(o: &TcpOptions) -> usize {
    let mut base = 0;
    if o.mss.is_some() {
        base += 4;
    }
    if o.timestamps.is_some() {
        base += 12;
    } else if o.sack_permitted {
        base += 4;
    }
    if o.window_scale.is_some() {
        base += 4;
    }
    let room = 40usize.saturating_sub(base + 4) / 8;
    o.sack_blocks().len().min(room)
}

fn tcp_round_trip(r: &TcpRepr, payload: &[u8]) {
    let hl = r.header_len();
    assert!(
        (20..=60).contains(&hl) && hl.is_multiple_of(4),
        "header_len {hl}"
    );
    let mut buf = vec![0u8; hl + payload.len()];
    buf[hl..].copy_from_slice(payload);
    r.emit(&mut buf, SRC, DST);
    let (r2, p2) = TcpRepr::parse(&buf, SRC, DST, true).expect("emitted TCP must parse");
    assert_eq!(p2, payload);
    let n = emittable_blocks(&r.options);
    assert_eq!(r2.options.sack_blocks(), &r.options.sack_blocks()[..n]);
    let mut a = *r;
    let mut b = r2;
    a.options.clear_sack_blocks();
    b.options.clear_sack_blocks();
    assert_eq!(a, b, "TCP round trip");
}

fuzz_target!(|data: &[u8]| {
    // Internet checksum: the optimised sum equals the naive one, and summing in two even
    // pieces and combining gives the same result.
    let s = checksum::sum(data);
    assert!(s <= 0xffff);
    let folded = {
        let mut x = s;
        while x > 0xffff {
            x = (x & 0xffff) + (x >> 16);
        }
        x as u16
    };
    let n = naive_sum(data);
    assert!(
        folded == n || (folded == 0 && n == 0xffff) || (folded == 0xffff && n == 0),
        "checksum::sum {folded:#x} != naive {n:#x}"
    );
    if data.len() >= 2 {
        let cut = (usize::from(data[0]) * 2).min(data.len() & !1);
        let c = checksum::combine(checksum::sum(&data[..cut]), checksum::sum(&data[cut..]));
        assert_eq!(checksum::finish(c), checksum::finish(s));
    }

    // Ethernet.
    if let Ok((e, payload)) = EthernetRepr::parse(data) {
        assert_eq!(payload.len(), data.len() - ETHERNET_HEADER_LEN);
        let mut b = [0u8; ETHERNET_HEADER_LEN];
        e.emit(&mut b);
        assert_eq!(&b[..], &data[..ETHERNET_HEADER_LEN]);
    }

    // ARP.
    if let Ok(a) = ArpRepr::parse(data) {
        let mut b = [0u8; ARP_LEN];
        a.emit(&mut b);
        assert_eq!(ArpRepr::parse(&b), Ok(a));
    }

    // IPv4, with and without checksum verification, and as a quoted header.
    for verify in [true, false] {
        if let Ok((ip, payload)) = Ipv4Repr::parse(data, verify) {
            assert!(within(data, payload));
            assert_eq!(payload.len(), usize::from(ip.payload_len));
            let mut b = vec![0u8; IPV4_HEADER_LEN + payload.len()];
            ip.emit(&mut b);
            b[IPV4_HEADER_LEN..].copy_from_slice(payload);
            let (ip2, p2) = Ipv4Repr::parse(&b, true).expect("emitted IPv4 must parse");
            assert_eq!(ip, ip2, "IPv4 round trip");
            assert_eq!(p2, payload);
        }
    }
    if let Ok((_, rest)) = Ipv4Repr::parse_quoted(data) {
        assert!(within(data, rest));
    }

    // ICMP.
    if let Ok(m) = Icmpv4Repr::parse(data) {
        if !matches!(m, Icmpv4Repr::Other { .. }) {
            let mut b = vec![0u8; m.buffer_len()];
            m.emit(&mut b);
            assert_eq!(Icmpv4Repr::parse(&b), Ok(m), "ICMP round trip");
        }
    }

    // UDP and TCP over the pseudo-header, with and without checksum verification.
    for verify in [true, false] {
        if let Ok((u, payload)) = UdpRepr::parse(data, SRC, DST, verify) {
            assert!(within(data, payload));
            let mut b = vec![0u8; 8 + payload.len()];
            b[8..].copy_from_slice(payload);
            u.emit(&mut b, SRC, DST);
            let (u2, p2) = UdpRepr::parse(&b, SRC, DST, true).expect("emitted UDP must parse");
            assert_eq!(u, u2);
            assert_eq!(p2, payload);
        }
        if let Ok((t, payload)) = TcpRepr::parse(data, SRC, DST, verify) {
            assert!(within(data, payload));
            tcp_round_trip(&t, payload);
        }
    }

    // The option parser on its own (any length, not only multiples of 4).
    let opts = &data[..data.len().min(40)];
    if let Ok(o) = TcpOptions::parse(opts) {
        assert!(o.sack_blocks().len() <= 4);
        let mut b = [0u8; 40];
        let n = o.emit(&mut b);
        assert_eq!(n, o.encoded_len());
        let o2 = TcpOptions::parse(&b[..n]).expect("emitted options must parse");
        assert_eq!(o2.sack_blocks(), &o.sack_blocks()[..emittable_blocks(&o)]);
    }
});
