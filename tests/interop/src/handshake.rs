//! Crafted handshakes: a raw socket in the namespace plays the client, segment
//! by segment, against `ember serve` on the TAP and, as the control, against a kernel
//! listener in a second namespace joined by a veth pair.
//!
//! * A duplicate SYN and the final ACK back to back (one `sendmmsg`) after the SYN,ACK:
//!   a server in SYN-RECEIVED that rewinds SND.NXT for the duplicate and then takes the
//!   ACK (ISS+1) before the retransmitted SYN,ACK leaves fails `SEG.ACK <= SND.NXT` and
//!   answers the ACK with `<SEQ=SEG.ACK><CTL=RST>` (RFC 9293 §3.10.7.4), which kills the
//!   client's connection, ESTABLISHED by then. Linux answers the duplicate with a SYN,ACK
//!   (rate-limited) and takes the ACK.
//! * 30 identical SYNs within 50 ms: Linux sends 2 SYN,ACKs (the first, and one
//!   retransmission for the duplicates, `tcp_invalid_ratelimit` = 500 ms), not one each.
//!
//! The namespace's own kernel has no socket for a crafted connection and would answer
//! every segment from the server with a RST (which would end the server's half-open
//! connection): an nft table drops those while the checks run. It matches RSTs from the
//! crafted source ports only and lets through those of the raw socket (which closes each
//! try with a RST of its own), told apart by the socket's `SO_MARK`. The table is deleted
//! afterwards; without nft the checks say they skipped.
//!
//! Every wait is bounded; every address is in 198.18.0.0/15.

use ember_runtime::dev::netns::{self, run_bounded, NetNs};
use serde_json::{json, Value};
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The crafted connections' source ports are in this range (the nft rule's too), below the
/// kernel's ephemeral range (32768-60999) so no kernel socket of the namespace uses them.
pub const PORTS: (u16, u16) = (20000, 22999);

/// The raw socket's `SO_MARK`: RSTs carrying it are the raw socket's own and pass.
const MARK: u32 = 0x454d_4252;

const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

/// Tries of the duplicate-SYN check.
pub const TRIES: u32 = 50;
/// How long each try watches for the server's answer after the duplicate and the ACK.
const WATCH: Duration = Duration::from_millis(200);
/// Identical SYNs of the burst check, sent within [`BURST_SPAN`].
pub const BURST: u32 = 30;
const BURST_SPAN: Duration = Duration::from_millis(45);
/// How long after the burst's last SYN its SYN,ACKs are counted.
const BURST_WATCH: Duration = Duration::from_millis(500);
/// The longest wait for a SYN,ACK to a fresh SYN.
const SYNACK_WAIT: Duration = Duration::from_secs(2);

/// One TCP segment as read from the raw socket (header fields only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seg {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
}

impl Seg {
    fn has(&self, f: u8) -> bool {
        self.flags & f == f
    }
}

/// An IPv4 packet holding a TCP segment, parsed with every length checked; `None` for
/// anything else (too short, not IPv4, not TCP, a header length past the end).
pub fn parse(p: &[u8]) -> Option<Seg> {
    if p.len() < 20 || p[0] >> 4 != 4 || p[9] != 6 {
        return None;
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    if ihl < 20 || total < ihl || total > p.len() {
        return None;
    }
    let t = &p[ihl..total];
    if t.len() < 20 {
        return None;
    }
    let doff = usize::from(t[12] >> 4) * 4;
    if doff < 20 || doff > t.len() {
        return None;
    }
    let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    Some(Seg {
        src: Ipv4Addr::new(p[12], p[13], p[14], p[15]),
        dst: Ipv4Addr::new(p[16], p[17], p[18], p[19]),
        sport: u16::from_be_bytes([t[0], t[1]]),
        dport: u16::from_be_bytes([t[2], t[3]]),
        seq: be32(&t[4..8]),
        ack: be32(&t[8..12]),
        flags: t[13],
    })
}

/// The Internet checksum (RFC 1071) of `parts`, concatenated.
fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = 0;
    let mut odd: Option<u8> = None;
    for part in parts {
        for &b in *part {
            match odd.take() {
                Some(hi) => sum += u32::from(u16::from_be_bytes([hi, b])),
                None => odd = Some(b),
            }
        }
    }
    if let Some(hi) = odd {
        sum += u32::from(u16::from_be_bytes([hi, 0]));
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// One endpoint pair of a crafted connection.
#[derive(Debug, Clone, Copy)]
pub struct Flow {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub sport: u16,
    pub dport: u16,
}

impl Flow {
    /// Whether `s` comes from the server of this flow.
    fn is_from_server(&self, s: &Seg) -> bool {
        s.src == self.dst && s.dst == self.src && s.sport == self.dport && s.dport == self.sport
    }

    /// An IPv4 packet (DF, TTL 64; the kernel fills the identification and the header
    /// checksum) with a TCP segment of no payload, window 65535, with its checksum.
    pub fn segment(&self, seq: u32, ack: u32, flags: u8, options: &[u8]) -> Vec<u8> {
        assert!(options.len() % 4 == 0 && options.len() <= 40);
        let tcp_len = 20 + options.len();
        let total = 20 + tcp_len;
        let mut p = Vec::with_capacity(total);
        p.extend_from_slice(&[0x45, 0]);
        p.extend_from_slice(&(total as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
        p.extend_from_slice(&self.src.octets());
        p.extend_from_slice(&self.dst.octets());
        p.extend_from_slice(&self.sport.to_be_bytes());
        p.extend_from_slice(&self.dport.to_be_bytes());
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&ack.to_be_bytes());
        p.push(((tcp_len / 4) as u8) << 4);
        p.push(flags);
        p.extend_from_slice(&65535u16.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 0]);
        p.extend_from_slice(options);
        let mut pseudo = [0u8; 12];
        pseudo[..4].copy_from_slice(&self.src.octets());
        pseudo[4..8].copy_from_slice(&self.dst.octets());
        pseudo[9] = 6;
        pseudo[10..12].copy_from_slice(&(tcp_len as u16).to_be_bytes());
        let c = checksum(&[&pseudo, &p[20..]]);
        p[36..38].copy_from_slice(&c.to_be_bytes());
        p
    }

    /// The client's SYN (ISS `iss`, MSS 1460, no other option).
    fn syn(&self, iss: u32) -> Vec<u8> {
        self.segment(iss, 0, SYN, &[2, 4, 0x05, 0xb4])
    }
}

/// A raw IPv4 TCP socket (`IP_HDRINCL`) made inside a namespace: it sends whole crafted
/// packets and receives a copy of every TCP packet the namespace's kernel takes in.
pub struct RawTcp {
    fd: OwnedFd,
}

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

impl RawTcp {
    /// Opens the socket inside the namespace whose file is `ns_file`.
    pub fn open(ns_file: &std::fs::File) -> io::Result<RawTcp> {
        let fd = netns::within(ns_file, || {
            // SAFETY: socket(2) takes no pointers.
            cvt(unsafe {
                libc::socket(
                    libc::AF_INET,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    libc::IPPROTO_TCP,
                )
            })
        })??;
        // SAFETY: `fd` is a descriptor socket(2) just returned, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let one: libc::c_int = 1;
        let mark: u32 = MARK;
        // SAFETY: each option value points at a live integer of the length given.
        unsafe {
            cvt(libc::setsockopt(
                fd.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_HDRINCL,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            ))?;
            cvt(libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_MARK,
                (&mark as *const u32).cast(),
                std::mem::size_of::<u32>() as libc::socklen_t,
            ))?;
        }
        Ok(RawTcp { fd })
    }

    /// Sends `pkts` (whole IPv4 packets to `dst`) in one `sendmmsg` call, back to back.
    pub fn send(&self, dst: Ipv4Addr, pkts: &[&[u8]]) -> io::Result<()> {
        // SAFETY: sockaddr_in is plain data; all-zero is a valid value.
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_addr.s_addr = u32::from_ne_bytes(dst.octets());
        let mut iovs: Vec<libc::iovec> = pkts
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iovs
            .iter_mut()
            .map(|iov| {
                // SAFETY: msghdr and mmsghdr are plain data; all-zero is valid.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_name = (&mut sa as *mut libc::sockaddr_in).cast();
                m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
                m.msg_hdr.msg_iov = iov;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        let mut done = 0;
        while done < msgs.len() {
            // SAFETY: every header points at `sa` and at an iovec of a packet in `pkts`,
            // all alive for the call; `vlen` is the number of headers left.
            let n = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    msgs[done..].as_mut_ptr(),
                    (msgs.len() - done) as libc::c_uint,
                    0,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Err(io::Error::other("sendmmsg sent nothing"));
            }
            done += n as usize;
        }
        Ok(())
    }

    /// The next TCP segment the namespace takes in before `deadline`, or `None` once the
    /// deadline has passed.
    pub fn recv(&self, deadline: Instant) -> io::Result<Option<Seg>> {
        let mut buf = [0u8; 2048];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, 10_000) as libc::c_int;
            // SAFETY: one pollfd, alive for the call.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if r == 0 {
                continue;
            }
            // SAFETY: `buf` has room for `buf.len()` bytes.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) {
                    continue;
                }
                return Err(e);
            }
            // A packet longer than the buffer is cut: its IP total length then runs past
            // what was read and `parse` refuses it (none of ours is that long).
            if let Some(s) = parse(&buf[..n as usize]) {
                return Ok(Some(s));
            }
        }
    }

    /// Segments from the server of `flow` until `deadline`.
    fn collect(&self, flow: &Flow, deadline: Instant) -> io::Result<Vec<Seg>> {
        let mut v = Vec::new();
        while let Some(s) = self.recv(deadline)? {
            if flow.is_from_server(&s) {
                v.push(s);
            }
        }
        Ok(v)
    }

    /// The server's SYN,ACK to the SYN with ISS `iss`, waited for up to [`SYNACK_WAIT`].
    fn synack(&self, flow: &Flow, iss: u32) -> io::Result<Option<Seg>> {
        let deadline = Instant::now() + SYNACK_WAIT;
        while let Some(s) = self.recv(deadline)? {
            if flow.is_from_server(&s) && s.has(SYN | ACK) && s.ack == iss.wrapping_add(1) {
                return Ok(Some(s));
            }
        }
        Ok(None)
    }
}

/// An nft table in a namespace that drops the namespace kernel's RSTs from the crafted
/// source ports (not the raw socket's own, which carry [`MARK`]); deleted on drop.
pub struct RstDrop {
    /// The namespace's name.
    ns: String,
    table: String,
}

/// `nft ARGS...` inside namespace `ns`.
fn nft(ns: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "nft"]);
    c
}

impl RstDrop {
    /// Installs the table (named after this process) in `ns`; `Err` says why nft could
    /// not (not installed, or the kernel refused the table).
    pub fn install(ns: &NetNs, dir: &Path) -> Result<RstDrop, String> {
        netns::need_tool("nft", "nftables")?;
        let table = format!("ember_interop_rst_{}", std::process::id());
        let rules = format!(
            "table ip {table} {{\n\
             \tchain out {{\n\
             \t\ttype filter hook output priority 0; policy accept;\n\
             \t\tmeta mark != {MARK:#x} tcp sport {}-{} tcp flags & rst == rst counter drop\n\
             \t}}\n\
             }}\n",
            PORTS.0, PORTS.1
        );
        let file = dir.join("rst-drop.nft");
        std::fs::write(&file, rules).map_err(|e| format!("{}: {e}", file.display()))?;
        let o = run_bounded(nft(ns.name()).arg("-f").arg(&file), Duration::from_secs(20))
            .map_err(|e| format!("nft -f: {e}"))?;
        let _ = std::fs::remove_file(&file);
        if !o.status.success() {
            return Err(format!(
                "nft -f (table {table}) exited {}: {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            ));
        }
        Ok(RstDrop {
            ns: ns.name().to_string(),
            table,
        })
    }

    /// How many RSTs the rule has dropped so far.
    pub fn dropped(&self) -> Result<u64, String> {
        let o = run_bounded(
            nft(&self.ns).args(["list", "chain", "ip", &self.table, "out"]),
            Duration::from_secs(20),
        )
        .map_err(|e| format!("nft list chain: {e}"))?;
        let text = String::from_utf8_lossy(&o.stdout);
        text.split_whitespace()
            .skip_while(|w| *w != "packets")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("no counter in `nft list chain`: {text}"))
    }
}

impl Drop for RstDrop {
    fn drop(&mut self) {
        let r = run_bounded(
            nft(&self.ns).args(["delete", "table", "ip", &self.table]),
            Duration::from_secs(20),
        );
        if !r.as_ref().is_ok_and(|o| o.status.success()) {
            eprintln!("   nft delete table {}: {r:?}", self.table);
        }
    }
}

/// A client ISS for the try on `sport` (any value works; distinct ones keep tries apart).
fn iss_for(sport: u16) -> u32 {
    u32::from(sport).wrapping_mul(0x9E37_79B1) ^ 0x5a5a_0000
}

/// One try of the duplicate-SYN check: SYN; the SYN,ACK; then the same SYN again and the
/// ACK of the SYN,ACK in one `sendmmsg`; then [`WATCH`] of the server's answers; then a
/// RST (with ACK) that ends the connection. Returns the server's RSTs and SYN,ACKs seen
/// after the duplicate.
fn dup_syn_try(raw: &RawTcp, flow: &Flow) -> Result<(u32, u32), String> {
    let iss = iss_for(flow.sport);
    let syn = flow.syn(iss);
    raw.send(flow.dst, &[&syn]).map_err(|e| e.to_string())?;
    let sa = raw
        .synack(flow, iss)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no SYN,ACK within {SYNACK_WAIT:?} on port {}", flow.sport))?;
    let ack = flow.segment(iss.wrapping_add(1), sa.seq.wrapping_add(1), ACK, &[]);
    raw.send(flow.dst, &[&syn, &ack])
        .map_err(|e| e.to_string())?;
    let seen = raw
        .collect(flow, Instant::now() + WATCH)
        .map_err(|e| e.to_string())?;
    let rsts = seen.iter().filter(|s| s.has(RST)).count() as u32;
    let synacks = seen.iter().filter(|s| s.has(SYN | ACK)).count() as u32;
    // Close: the server is ESTABLISHED (or already gone); RCV.NXT is iss + 1.
    let rst = flow.segment(iss.wrapping_add(1), sa.seq.wrapping_add(1), RST | ACK, &[]);
    raw.send(flow.dst, &[&rst]).map_err(|e| e.to_string())?;
    Ok((rsts, synacks))
}

/// What a run of the duplicate-SYN check saw.
pub struct DupSynRun {
    pub tries: u32,
    pub tries_with_rst: u32,
    pub rsts: u32,
    pub synacks_after_dup: u32,
}

/// [`TRIES`] tries against `dst:dport` from `src`, source ports from `port0` up.
pub fn dup_syn_run(
    raw: &RawTcp,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    dport: u16,
    port0: u16,
    after_each: &mut dyn FnMut(),
) -> Result<DupSynRun, String> {
    let mut r = DupSynRun {
        tries: 0,
        tries_with_rst: 0,
        rsts: 0,
        synacks_after_dup: 0,
    };
    for i in 0..TRIES {
        let sport = port0
            .checked_add(i as u16)
            .filter(|p| (PORTS.0..=PORTS.1).contains(p))
            .ok_or_else(|| format!("try {i} from port {port0}: outside {PORTS:?}"))?;
        let flow = Flow {
            src,
            dst,
            sport,
            dport,
        };
        let (rsts, synacks) = dup_syn_try(raw, &flow)?;
        r.tries += 1;
        r.rsts += rsts;
        r.tries_with_rst += u32::from(rsts > 0);
        r.synacks_after_dup += synacks;
        after_each();
    }
    Ok(r)
}

/// The burst check: [`BURST`] identical SYNs within [`BURST_SPAN`] from `src:sport`, then
/// the SYN,ACKs counted until [`BURST_WATCH`] after the last one; then a RST that ends the
/// half-open connection. Returns the figures.
pub fn syn_burst(raw: &RawTcp, flow: &Flow) -> Result<Value, String> {
    if flow.sport < PORTS.0 || flow.sport > PORTS.1 {
        return Err(format!("source port {} outside {PORTS:?}", flow.sport));
    }
    let iss = iss_for(flow.sport);
    let syn = flow.syn(iss);
    let t0 = Instant::now();
    let mut seen = Vec::new();
    for i in 0..BURST {
        // Paced: SYN i leaves at i * BURST_SPAN / (BURST - 1); answers are read meanwhile.
        let at = t0 + BURST_SPAN * i / (BURST - 1);
        seen.extend(raw.collect(flow, at).map_err(|e| e.to_string())?);
        raw.send(flow.dst, &[&syn]).map_err(|e| e.to_string())?;
    }
    let sent_in = t0.elapsed();
    seen.extend(
        raw.collect(flow, Instant::now() + BURST_WATCH)
            .map_err(|e| e.to_string())?,
    );
    let synacks: Vec<&Seg> = seen
        .iter()
        .filter(|s| s.has(SYN | ACK) && s.ack == iss.wrapping_add(1))
        .collect();
    let rsts = seen.iter().filter(|s| s.has(RST)).count();
    let other = seen.iter().filter(|s| !s.has(SYN) && !s.has(RST)).count();
    if let Some(sa) = synacks.first() {
        let rst = flow.segment(iss.wrapping_add(1), sa.seq.wrapping_add(1), RST | ACK, &[]);
        raw.send(flow.dst, &[&rst]).map_err(|e| e.to_string())?;
    }
    Ok(json!({
        "syns": BURST,
        "syns_sent_within_ms": sent_in.as_secs_f64() * 1e3,
        "watched_ms_after_last_syn": BURST_WATCH.as_millis() as u64,
        "synacks": synacks.len(),
        "rsts": rsts,
        "other_segments": other,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_segments_parse_back_with_a_valid_checksum() {
        let f = Flow {
            src: Ipv4Addr::new(198, 18, 0, 1),
            dst: Ipv4Addr::new(198, 18, 0, 2),
            sport: 20001,
            dport: 80,
        };
        let p = f.syn(7);
        assert_eq!(p.len(), 44);
        let s = parse(&p).unwrap();
        assert_eq!(
            (s.src, s.dst, s.sport, s.dport, s.seq, s.ack, s.flags),
            (f.src, f.dst, 20001, 80, 7, 0, SYN)
        );
        // The TCP checksum over the pseudo-header and the segment comes out as zero.
        let mut pseudo = [0u8; 12];
        pseudo[..4].copy_from_slice(&f.src.octets());
        pseudo[4..8].copy_from_slice(&f.dst.octets());
        pseudo[9] = 6;
        pseudo[10..12].copy_from_slice(&24u16.to_be_bytes());
        assert_eq!(checksum(&[&pseudo, &p[20..]]), 0);
        // RFC 1071's worked example: 0001 f203 f4f5 f6f7 sums to ddf2, complemented 220d.
        assert_eq!(
            checksum(&[&[0x00, 0x01, 0xf2, 0x03], &[0xf4, 0xf5, 0xf6, 0xf7]]),
            0x220d
        );
        // An odd length pads with a zero byte.
        assert_eq!(checksum(&[&[0x01]]), !0x0100);
    }

    #[test]
    fn parse_refuses_what_it_cannot_read() {
        let f = Flow {
            src: Ipv4Addr::new(198, 18, 0, 1),
            dst: Ipv4Addr::new(198, 18, 0, 2),
            sport: 20001,
            dport: 80,
        };
        let p = f.segment(1, 2, ACK, &[]);
        assert!(parse(&p).is_some());
        // Every truncation is refused, none panics.
        for n in 0..p.len() {
            assert!(parse(&p[..n]).is_none(), "{n} bytes");
        }
        let mut q = p.clone();
        q[9] = 17; // UDP
        assert!(parse(&q).is_none());
        let mut q = p.clone();
        q[0] = 0x65; // IPv6 version nibble
        assert!(parse(&q).is_none());
        let mut q = p.clone();
        q[0] = 0x44; // IHL 16 bytes
        assert!(parse(&q).is_none());
        let mut q = p.clone();
        q[32] = 0xf0; // data offset 60 bytes, past the end
        assert!(parse(&q).is_none());
        let mut q = p;
        q[32] = 0x40; // data offset 16 bytes
        assert!(parse(&q).is_none());
    }
}
