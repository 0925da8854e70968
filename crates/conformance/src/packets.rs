//! The packet half of the interpreter: building the segments a script injects and
//! matching the segments the stack sends against the script's expectations.
//!
//! Design. A [`Flow`] holds the one connection's context: the local (stack under test)
//! and remote (script) IPv4 addresses and ports, both initial sequence numbers and the
//! timestamp bookkeeping. [`build_inbound`] turns an inbound (`<`) line into a complete
//! IPv4 datagram (20-byte header, no options, no Ethernet) with correct checksums;
//! [`match_outbound`] parses what the stack sent and compares it, field by field, with
//! an outbound (`>`) line, reporting the first difference as a [`Mismatch`] in script
//! terms (relative numbers). TCP options are laid out and parsed here by hand, not
//! through `ember_core::wire::TcpOptions`, because that type keeps no order and scripts
//! state options in wire order (`<nop,nop,TS val 1 ecr 2>` is not
//! `<TS val 1 ecr 2,nop,nop>`).
//!
//! Relative numbers (the rules this module implements):
//!
//! * The script's own sequence numbers (inbound `seq`, outbound `ack`, outbound SACK
//!   blocks) are relative to [`Flow::script_isn`], fixed when the flow is made
//!   ([`DEFAULT_SCRIPT_ISN`] unless the caller picks another).
//! * The stack's sequence numbers (outbound `seq`, inbound `ack`, inbound SACK blocks,
//!   the segment quoted by an inbound ICMP error) are relative to [`Flow::stack_isn`].
//!   An outbound SYN teaches it (`ISN = wire seq - written start`); until then the
//!   stack's numbers are taken as absolute (ISN 0), which is also what a script means
//!   when it talks to a socket that never sent a SYN (a RST answering a stray ACK
//!   carries that ACK's number back).
//! * Timestamps. The script's TS values are its own clock and go on the wire as
//!   written: inbound `TS val` is used as written and an outbound `ecr` must equal the
//!   written value exactly. The stack's TS values cannot be predicted, so an outbound
//!   `TS val` matches any value; the first one seen on a connection fixes the offset
//!   between the stack's clock and the script's notation (`offset = wire val - written
//!   val`), and from then on an inbound `ecr` (which echoes the stack's clock) is sent
//!   as `written + offset`. With `--tcp_ts_tick_usecs` the stack's clock is checked
//!   too: a later outbound `TS val` must be `written + offset` within
//!   [`Flow::ts_val_slack`] ticks (the timing tolerance in ticks). Inbound `ecr` is used as written before any outbound
//!   timestamp has been seen and on segments without ACK (an inbound SYN's `ecr 0`;
//!   RFC 7323 gives TSecr meaning only with ACK set).
//! * Several connections in one script (the corpus has scripts that open a second
//!   connection after closing the first): a SYN whose ISN differs from the known one
//!   starts a new connection, so it re-teaches the stack's ISN and the stack's TS
//!   offset is learned afresh (Linux randomises the offset per connection). The
//!   script's ISN stays: a second inbound SYN writes its start relative to the same
//!   base (`S 6814000:6815000(1000)`).
//! * Windows, urgent pointers, MSS and window-scale values are raw header fields in
//!   both directions (an outbound `win 257` is the 16-bit field, not scaled), so no
//!   window-scale bookkeeping is needed.
//!
//! Other choices: an inbound payload is `len` zero bytes; inbound IP headers carry TTL
//! 64 (or the written `ttl`), DF set, an identification counting up per flow, and the
//! written `tos` with the written ECN codepoint in its low two bits (`ect01`, "either",
//! is sent as ECT(0)). An inbound option list that does not end on a 4-byte boundary is
//! padded with zero bytes (EOL). On the outbound side, fields the script does not write
//! (`win`, `urg`, `ack` number, `ttl`, `tos`, ECN, options when no `<...>` is written)
//! are not checked, `<...>` accepts any options, and trailing EOL padding the script
//! does not write is ignored.
//!
//! Unsupported (a [`BuildError::Unsupported`] with the reason, or a [`Mismatch`] on
//! the outbound side): IP-in-IP encapsulation; TCP MD5 signatures (the digest depends on
//! a key and the whole segment, which the script does not give); Fast Open cookies
//! written as a name (`FO TFO_COOKIE`: the value comes from the environment the
//! interpreter does not have; hex cookies and empty cookie requests are built);
//! ICMPv6 types (`packet_too_big`) in an IPv4 flow and ICMP type or code names this
//! module does not know; ICMP errors quoting a raw packet, or quoting nothing before
//! the stack has sent a segment (without a written range the error quotes the last
//! segment the stack sent); IPv6 flow labels; matching outbound ICMP lines. An ICMP
//! error's quote is the IPv4 header plus the first 8 TCP bytes (ports and seq),
//! addressed from the stack to the script.
//!
//! Verification (unit tests below): round trips through ember-core's parsers, every
//! kind of mismatch, never a panic on arbitrary bytes, every inbound TCP line of the
//! corpus builds or is unsupported with a reason, and a simulated stack that sends
//! exactly what each corpus outbound line says (with its own ISN and TS clock) matches
//! every one of them while the inbound `ack`s and `ecr`s land on its numbers.

use std::fmt;
use std::net::Ipv4Addr;

use ember_core::wire::checksum;
use ember_core::wire::tcp::option_kind;
use ember_core::wire::{ip_proto, Ipv4Repr, IPV4_HEADER_LEN, TCP_HEADER_LEN};

use crate::script::{
    Direction, Ecn, IcmpEchoed, IcmpPacket, IpInfo, Packet, PacketBody, Ports, SeqRange, TcpFlags,
    TcpOption, TcpOptions, TcpPacket, UdpPacket,
};

/// The script side's ISN unless the caller picks another: fixed, so runs repeat, and
/// random-looking, so a stack confusing relative and absolute numbers shows.
pub const DEFAULT_SCRIPT_ISN: u32 = 0x6d3a_91c5;

/// TTL of inbound packets whose line writes none.
pub const DEFAULT_TTL: u8 = 64;

/// Fast Open experimental option kind (RFC 7413 §4.1.1, before kind 34 was assigned).
const KIND_FASTOPEN_EXP: u8 = 254;
/// The experimental Fast Open magic.
const FASTOPEN_EXP_MAGIC: u16 = 0xF989;
/// RFC 7413 Fast Open option kind.
const KIND_FASTOPEN: u8 = 34;
/// RFC 2385 MD5 signature option kind.
const KIND_MD5: u8 = 19;

/// The connection context the packet lines of a script are read in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    /// The stack under test's address.
    pub local_addr: Ipv4Addr,
    /// The stack under test's port.
    pub local_port: u16,
    /// The script's (remote peer's) address.
    pub remote_addr: Ipv4Addr,
    /// The script's (remote peer's) port.
    pub remote_port: u16,
    /// The script side's ISN: inbound seq N is `script_isn + N` on the wire.
    pub script_isn: u32,
    /// The stack's ISN, once an outbound SYN has taught it.
    pub stack_isn: Option<u32>,
    /// `stack TS val on the wire - TS val written in the script`, once known.
    pub stack_ts_offset: Option<u32>,
    /// The last TS val the stack sent (wire value).
    pub last_stack_ts_val: Option<u32>,
    /// The last TS val the script sent (as written = as on the wire).
    pub last_script_ts_val: Option<u32>,
    /// The last outbound TCP segment matched: wire seq and payload length (an inbound
    /// ICMP error without a quoted range quotes it).
    pub last_outbound: Option<(u32, u32)>,
    /// Identification of the next inbound IPv4 header.
    pub next_ip_id: u16,
    /// `--tcp_ts_tick_usecs`: the stack's TS clock is checked. Once the offset is
    /// known, an outbound `TS val` must be within this many ticks of `written +
    /// offset` (`None`: TS val is not checked).
    pub ts_val_slack: Option<u32>,
}

impl Flow {
    /// A flow between the stack at `local` and the script at `remote`, with the
    /// script ISN [`DEFAULT_SCRIPT_ISN`] and nothing learned yet.
    pub fn new(local: (Ipv4Addr, u16), remote: (Ipv4Addr, u16)) -> Flow {
        Flow {
            local_addr: local.0,
            local_port: local.1,
            remote_addr: remote.0,
            remote_port: remote.1,
            script_isn: DEFAULT_SCRIPT_ISN,
            stack_isn: None,
            stack_ts_offset: None,
            last_stack_ts_val: None,
            last_script_ts_val: None,
            last_outbound: None,
            next_ip_id: 1,
            ts_val_slack: None,
        }
    }

    /// The base of the stack's relative numbers: its ISN, or 0 before one is known.
    pub fn stack_base(&self) -> u32 {
        self.stack_isn.unwrap_or(0)
    }

    /// Script-relative `rel` to the wire.
    pub fn script_abs(&self, rel: u32) -> u32 {
        self.script_isn.wrapping_add(rel)
    }

    /// Stack-relative `rel` to the wire.
    pub fn stack_abs(&self, rel: u32) -> u32 {
        self.stack_base().wrapping_add(rel)
    }

    /// An inbound `ecr` as written to the wire value (see the module comment).
    pub fn inbound_ecr(&self, written: u32) -> u32 {
        written.wrapping_add(self.stack_ts_offset.unwrap_or(0))
    }
}

/// Why an inbound line could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildError {
    /// The line asks for something this module does not build; the reason says what.
    Unsupported(String),
    /// The line is outbound (`>`).
    WrongDirection,
    /// A value does not fit its field (a `win` above 65535, options beyond 40 bytes).
    Invalid(String),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Unsupported(r) => write!(f, "unsupported: {r}"),
            BuildError::WrongDirection => f.write_str("not an inbound packet line"),
            BuildError::Invalid(r) => write!(f, "invalid: {r}"),
        }
    }
}

impl std::error::Error for BuildError {}

fn unsupported<T>(reason: impl Into<String>) -> Result<T, BuildError> {
    Err(BuildError::Unsupported(reason.into()))
}

fn invalid<T>(reason: impl Into<String>) -> Result<T, BuildError> {
    Err(BuildError::Invalid(reason.into()))
}

/// The first difference between an outbound line and what the stack sent, in script
/// terms: `ack: expected 1001, got 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The field (`flags`, `seq`, `ack`, `win`, `option 2`, ...).
    pub field: String,
    /// What the script says.
    pub expected: String,
    /// What the stack sent.
    pub actual: String,
}

impl Mismatch {
    fn new(field: impl Into<String>, expected: impl ToString, actual: impl ToString) -> Self {
        Mismatch {
            field: field.into(),
            expected: expected.to_string(),
            actual: actual.to_string(),
        }
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: expected {}, got {}",
            self.field, self.expected, self.actual
        )
    }
}

impl std::error::Error for Mismatch {}

fn check<T: PartialEq + fmt::Display>(field: &str, expected: T, actual: T) -> Result<(), Mismatch> {
    if expected == actual {
        Ok(())
    } else {
        Err(Mismatch::new(field, expected, actual))
    }
}

// ---------------------------------------------------------------------------------
// Flags and options in wire form.

/// Script flags to the header byte.
pub fn flags_byte(f: &TcpFlags) -> u8 {
    u8::from(f.fin)
        | u8::from(f.syn) << 1
        | u8::from(f.rst) << 2
        | u8::from(f.psh) << 3
        | u8::from(f.ack) << 4
        | u8::from(f.urg) << 5
        | u8::from(f.ece) << 6
        | u8::from(f.cwr) << 7
}

/// A flags byte in script notation (`S.`, `P.`, `F.`, `R`, `-` for none).
pub fn flags_text(b: u8) -> String {
    const ORDER: [(u8, char); 8] = [
        (0x01, 'F'),
        (0x02, 'S'),
        (0x04, 'R'),
        (0x08, 'P'),
        (0x20, 'U'),
        (0x40, 'E'),
        (0x80, 'W'),
        (0x10, '.'),
    ];
    let s: String = ORDER
        .iter()
        .filter(|(bit, _)| b & bit != 0)
        .map(|&(_, c)| c)
        .collect();
    if s.is_empty() {
        "-".into()
    } else {
        s
    }
}

/// One TCP option as found on the wire, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireOption {
    /// Kind 0.
    Eol,
    /// Kind 1.
    Nop,
    /// Kind 2.
    Mss(u16),
    /// Kind 3.
    WindowScale(u8),
    /// Kind 4.
    SackPermitted,
    /// Kind 5: wire (absolute) blocks.
    Sack(Vec<(u32, u32)>),
    /// Kind 8: wire values.
    Timestamp(u32, u32),
    /// Kind 19: the digest.
    Md5(Vec<u8>),
    /// Kind 34: the cookie (empty for a cookie request).
    FastOpen(Vec<u8>),
    /// Kind 254 with magic 0xF989: the cookie.
    FastOpenExp(Vec<u8>),
    /// Anything else: kind and data.
    Unknown(u8, Vec<u8>),
}

/// Parses an option area into its options in order; stops after an EOL (the rest is
/// padding). `Err` with a description on a malformed length. Never panics.
pub fn parse_options(bytes: &[u8]) -> Result<Vec<WireOption>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let kind = bytes[i];
        match kind {
            option_kind::EOL => {
                out.push(WireOption::Eol);
                break;
            }
            option_kind::NOP => {
                out.push(WireOption::Nop);
                i += 1;
                continue;
            }
            _ => {}
        }
        let Some(&len) = bytes.get(i + 1) else {
            return Err(format!("option kind {kind} at byte {i} has no length"));
        };
        let len = usize::from(len);
        if len < 2 || i + len > bytes.len() {
            return Err(format!(
                "option kind {kind} at byte {i} has bad length {len}"
            ));
        }
        let data = &bytes[i + 2..i + len];
        let be32 = |d: &[u8]| u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
        let opt = match (kind, data.len()) {
            (option_kind::MSS, 2) => WireOption::Mss(u16::from_be_bytes([data[0], data[1]])),
            (option_kind::WINDOW_SCALE, 1) => WireOption::WindowScale(data[0]),
            (option_kind::SACK_PERMITTED, 0) => WireOption::SackPermitted,
            (option_kind::SACK, n) if n % 8 == 0 => WireOption::Sack(
                data.chunks_exact(8)
                    .map(|c| (be32(&c[..4]), be32(&c[4..])))
                    .collect(),
            ),
            (option_kind::TIMESTAMPS, 8) => {
                WireOption::Timestamp(be32(&data[..4]), be32(&data[4..]))
            }
            (KIND_MD5, 16) => WireOption::Md5(data.to_vec()),
            (KIND_FASTOPEN, _) => WireOption::FastOpen(data.to_vec()),
            (KIND_FASTOPEN_EXP, n)
                if n >= 2 && u16::from_be_bytes([data[0], data[1]]) == FASTOPEN_EXP_MAGIC =>
            {
                WireOption::FastOpenExp(data[2..].to_vec())
            }
            _ => WireOption::Unknown(kind, data.to_vec()),
        };
        out.push(opt);
        i += len;
    }
    Ok(out)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    if s.len() % 2 != 0 || s.is_empty() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A cookie as written: `None` = no cookie; a hex string = its bytes; a name = Err.
fn cookie_bytes(c: &Option<String>) -> Result<Vec<u8>, String> {
    match c {
        None => Ok(Vec::new()),
        Some(s) => parse_hex(s).ok_or_else(|| {
            format!("Fast Open cookie `{s}` is a name, not hex (its value is not in the script)")
        }),
    }
}

/// A script option in script notation.
fn script_option_text(o: &TcpOption) -> String {
    match o {
        TcpOption::Nop => "nop".into(),
        TcpOption::Eol => "eol".into(),
        TcpOption::Mss(v) => format!("mss {v}"),
        TcpOption::WindowScale(v) => format!("wscale {v}"),
        TcpOption::SackPermitted => "sackOK".into(),
        TcpOption::Sack(b) => sack_text(b),
        TcpOption::Timestamp { val, ecr } => format!("TS val {val} ecr {ecr}"),
        TcpOption::Md5(d) => format!("md5 {d}"),
        TcpOption::FastOpen(c) => match c {
            Some(c) => format!("FO {c}"),
            None => "FO".into(),
        },
        TcpOption::FastOpenExp(c) => match c {
            Some(c) => format!("FOEXP {c}"),
            None => "FOEXP".into(),
        },
    }
}

fn sack_text(blocks: &[(u32, u32)]) -> String {
    let mut s = String::from("sack");
    for (l, r) in blocks {
        s.push_str(&format!(" {l}:{r}"));
    }
    s
}

/// A wire option in script notation, sequence numbers made relative to `sack_base`
/// and the TS val shown as written-equivalent when `ts_offset` is known.
fn wire_option_text(o: &WireOption, sack_base: u32) -> String {
    match o {
        WireOption::Eol => "eol".into(),
        WireOption::Nop => "nop".into(),
        WireOption::Mss(v) => format!("mss {v}"),
        WireOption::WindowScale(v) => format!("wscale {v}"),
        WireOption::SackPermitted => "sackOK".into(),
        WireOption::Sack(b) => sack_text(
            &b.iter()
                .map(|&(l, r)| (l.wrapping_sub(sack_base), r.wrapping_sub(sack_base)))
                .collect::<Vec<_>>(),
        ),
        WireOption::Timestamp(v, e) => format!("TS val {v} ecr {e}"),
        WireOption::Md5(d) => format!("md5 {}", hex(d)),
        WireOption::FastOpen(c) if c.is_empty() => "FO".into(),
        WireOption::FastOpen(c) => format!("FO {}", hex(c)),
        WireOption::FastOpenExp(c) if c.is_empty() => "FOEXP".into(),
        WireOption::FastOpenExp(c) => format!("FOEXP {}", hex(c)),
        WireOption::Unknown(k, d) => format!("kind {k} data {}", hex(d)),
    }
}

fn options_text(opts: &[String]) -> String {
    format!("<{}>", opts.join(","))
}

/// Lays out an inbound option list in written order, converting per the module rules.
fn emit_options(opts: &[TcpOption], ack_set: bool, flow: &mut Flow) -> Result<Vec<u8>, BuildError> {
    let mut b = Vec::new();
    for o in opts {
        match o {
            TcpOption::Nop => b.push(option_kind::NOP),
            TcpOption::Eol => b.push(option_kind::EOL),
            TcpOption::Mss(v) => {
                let Ok(v) = u16::try_from(*v) else {
                    return invalid(format!("mss {v} does not fit 16 bits"));
                };
                b.extend_from_slice(&[option_kind::MSS, 4]);
                b.extend_from_slice(&v.to_be_bytes());
            }
            TcpOption::WindowScale(v) => {
                let Ok(v) = u8::try_from(*v) else {
                    return invalid(format!("wscale {v} does not fit 8 bits"));
                };
                b.extend_from_slice(&[option_kind::WINDOW_SCALE, 3, v]);
            }
            TcpOption::SackPermitted => b.extend_from_slice(&[option_kind::SACK_PERMITTED, 2]),
            TcpOption::Sack(blocks) => {
                if blocks.len() > 4 {
                    return invalid(format!("{} SACK blocks (at most 4 fit)", blocks.len()));
                }
                b.extend_from_slice(&[option_kind::SACK, (2 + 8 * blocks.len()) as u8]);
                for &(l, r) in blocks {
                    b.extend_from_slice(&flow.stack_abs(l).to_be_bytes());
                    b.extend_from_slice(&flow.stack_abs(r).to_be_bytes());
                }
            }
            TcpOption::Timestamp { val, ecr } => {
                b.extend_from_slice(&[option_kind::TIMESTAMPS, 10]);
                b.extend_from_slice(&val.to_be_bytes());
                // RFC 7323 §3.2: TSecr means something only with ACK set.
                let ecr = if ack_set {
                    flow.inbound_ecr(*ecr)
                } else {
                    *ecr
                };
                b.extend_from_slice(&ecr.to_be_bytes());
                flow.last_script_ts_val = Some(*val);
            }
            TcpOption::Md5(_) => {
                return unsupported("TCP MD5 signature option (needs a key and the whole segment)")
            }
            TcpOption::FastOpen(c) => {
                let c = cookie_bytes(c).map_err(BuildError::Unsupported)?;
                b.extend_from_slice(&[KIND_FASTOPEN, (2 + c.len()) as u8]);
                b.extend_from_slice(&c);
            }
            TcpOption::FastOpenExp(c) => {
                let c = cookie_bytes(c).map_err(BuildError::Unsupported)?;
                b.extend_from_slice(&[KIND_FASTOPEN_EXP, (4 + c.len()) as u8]);
                b.extend_from_slice(&FASTOPEN_EXP_MAGIC.to_be_bytes());
                b.extend_from_slice(&c);
            }
        }
    }
    while b.len() % 4 != 0 {
        b.push(option_kind::EOL);
    }
    if b.len() > 40 {
        return invalid(format!("options take {} bytes (at most 40 fit)", b.len()));
    }
    Ok(b)
}

// ---------------------------------------------------------------------------------
// Building.

/// The IP header's TOS byte for an inbound line.
fn inbound_tos(ip: &Option<IpInfo>) -> Result<u8, BuildError> {
    let Some(ip) = ip else { return Ok(0) };
    if ip.flow_label.is_some() {
        return unsupported("IPv6 flow label in an IPv4 flow");
    }
    let mut tos = ip.tos.unwrap_or(0);
    if let Some(ecn) = ip.ecn {
        tos = (tos & !3)
            | match ecn {
                Ecn::NoEcn => 0,
                Ecn::Ect1 => 1,
                Ecn::Ect0 | Ecn::Ect01 => 2,
                Ecn::Ce => 3,
            };
    }
    Ok(tos)
}

/// An IPv4 datagram around `payload`.
fn ipv4_datagram(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    protocol: u8,
    tos: u8,
    ttl: u8,
    ident: u16,
    payload: &[u8],
) -> Result<Vec<u8>, BuildError> {
    let Ok(payload_len) = u16::try_from(payload.len()) else {
        return invalid("datagram longer than 65535 bytes");
    };
    if usize::from(payload_len) + IPV4_HEADER_LEN > usize::from(u16::MAX) {
        return invalid("datagram longer than 65535 bytes");
    }
    let repr = Ipv4Repr {
        src,
        dst,
        protocol,
        ttl,
        dscp_ecn: tos,
        ident,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
        payload_len,
    };
    let mut out = vec![0u8; IPV4_HEADER_LEN + payload.len()];
    repr.emit(&mut out);
    out[IPV4_HEADER_LEN..].copy_from_slice(payload);
    Ok(out)
}

/// Wire fields of one TCP segment (the lowest layer of [`build_inbound`], public so
/// that tests and the interpreter can make segments of either direction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSegment {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Wire sequence number.
    pub seq: u32,
    /// Wire acknowledgment number.
    pub ack: u32,
    /// Flags byte.
    pub flags: u8,
    /// Raw window field.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// The option area (a multiple of 4 bytes, at most 40).
    pub options: Vec<u8>,
    /// Payload bytes.
    pub payload: Vec<u8>,
    /// IP TOS byte.
    pub tos: u8,
    /// IP TTL.
    pub ttl: u8,
    /// IP identification.
    pub ident: u16,
}

impl RawSegment {
    /// The IPv4 datagram, checksums filled in.
    pub fn emit(&self) -> Result<Vec<u8>, BuildError> {
        if self.options.len() % 4 != 0 || self.options.len() > 40 {
            return invalid(format!("option area of {} bytes", self.options.len()));
        }
        let hlen = TCP_HEADER_LEN + self.options.len();
        let mut seg = vec![0u8; hlen + self.payload.len()];
        if seg.len() + IPV4_HEADER_LEN > usize::from(u16::MAX) {
            return invalid("segment longer than an IPv4 datagram can carry");
        }
        seg[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        seg[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        seg[4..8].copy_from_slice(&self.seq.to_be_bytes());
        seg[8..12].copy_from_slice(&self.ack.to_be_bytes());
        seg[12] = ((hlen / 4) as u8) << 4;
        seg[13] = self.flags;
        seg[14..16].copy_from_slice(&self.window.to_be_bytes());
        seg[18..20].copy_from_slice(&self.urgent.to_be_bytes());
        seg[TCP_HEADER_LEN..hlen].copy_from_slice(&self.options);
        seg[hlen..].copy_from_slice(&self.payload);
        let s = checksum::combine(
            checksum::pseudo_header(self.src, self.dst, ip_proto::TCP, seg.len() as u16),
            checksum::sum(&seg),
        );
        seg[16..18].copy_from_slice(&checksum::finish(s).to_be_bytes());
        ipv4_datagram(
            self.src,
            self.dst,
            ip_proto::TCP,
            self.tos,
            self.ttl,
            self.ident,
            &seg,
        )
    }
}

fn u16_field(name: &str, v: Option<u32>) -> Result<u16, BuildError> {
    match v {
        None => Ok(0),
        Some(v) => {
            u16::try_from(v).or_else(|_| invalid(format!("{name} {v} does not fit 16 bits")))
        }
    }
}

/// Builds the IPv4 datagram (no link header) an inbound script line injects; see the
/// module comment for the numbering rules. Updates `flow` (IP identification, the
/// script's last TS val).
pub fn build_inbound(packet: &Packet, flow: &mut Flow) -> Result<Vec<u8>, BuildError> {
    if packet.direction != Direction::Inbound {
        return Err(BuildError::WrongDirection);
    }
    if !packet.encapsulation.is_empty() {
        return unsupported("IP-in-IP encapsulation");
    }
    let tos = inbound_tos(&packet.ip)?;
    let ttl = packet.ip.and_then(|i| i.ttl).unwrap_or(DEFAULT_TTL);
    let ident = flow.next_ip_id;
    flow.next_ip_id = flow.next_ip_id.wrapping_add(1);
    match &packet.body {
        PacketBody::Tcp(t) => build_tcp(t, tos, ttl, ident, flow),
        PacketBody::Udp(u) => build_udp(u, tos, ttl, ident, flow),
        PacketBody::Icmp(i) => build_icmp(i, tos, ttl, ident, flow),
    }
}

fn ports_of(p: &Option<Ports>, flow: &Flow) -> (u16, u16) {
    match p {
        Some(p) => (p.src, p.dst),
        None => (flow.remote_port, flow.local_port),
    }
}

fn check_range(r: &SeqRange) -> Result<(), BuildError> {
    if r.end.wrapping_sub(r.start) != r.len {
        return invalid(format!(
            "sequence range {}:{}({}) is inconsistent",
            r.start, r.end, r.len
        ));
    }
    if r.len > 65_000 {
        return invalid(format!("payload of {} bytes", r.len));
    }
    Ok(())
}

fn build_tcp(
    t: &TcpPacket,
    tos: u8,
    ttl: u8,
    ident: u16,
    flow: &mut Flow,
) -> Result<Vec<u8>, BuildError> {
    check_range(&t.seq)?;
    let (src_port, dst_port) = ports_of(&t.ports, flow);
    let options = match &t.options {
        None => Vec::new(),
        Some(TcpOptions::Any) => return invalid("`<...>` (any options) on an inbound line"),
        Some(TcpOptions::List(l)) => emit_options(l, t.flags.ack, flow)?,
    };
    let seg = RawSegment {
        src: flow.remote_addr,
        dst: flow.local_addr,
        src_port,
        dst_port,
        seq: flow.script_abs(t.seq.start),
        ack: t.ack.map_or(0, |a| flow.stack_abs(a)),
        flags: flags_byte(&t.flags),
        window: u16_field("win", t.win)?,
        urgent: u16_field("urg", t.urg)?,
        options,
        payload: vec![0; t.seq.len as usize],
        tos,
        ttl,
        ident,
    };
    seg.emit()
}

fn build_udp(
    u: &UdpPacket,
    tos: u8,
    ttl: u8,
    ident: u16,
    flow: &Flow,
) -> Result<Vec<u8>, BuildError> {
    if u.len > 65_000 {
        return invalid(format!("UDP payload of {} bytes", u.len));
    }
    let (src_port, dst_port) = ports_of(&u.ports, flow);
    let total = 8 + u.len as usize;
    let mut d = vec![0u8; total];
    d[0..2].copy_from_slice(&src_port.to_be_bytes());
    d[2..4].copy_from_slice(&dst_port.to_be_bytes());
    d[4..6].copy_from_slice(&(total as u16).to_be_bytes());
    let s = checksum::combine(
        checksum::pseudo_header(
            flow.remote_addr,
            flow.local_addr,
            ip_proto::UDP,
            total as u16,
        ),
        checksum::sum(&d),
    );
    let c = match checksum::finish(s) {
        0 => 0xffff,
        c => c,
    };
    d[6..8].copy_from_slice(&c.to_be_bytes());
    ipv4_datagram(
        flow.remote_addr,
        flow.local_addr,
        ip_proto::UDP,
        tos,
        ttl,
        ident,
        &d,
    )
}

/// ICMPv4 type numbers by script name.
fn icmp_type_number(name: &str) -> Option<u8> {
    Some(match name {
        "echo_reply" => 0,
        "unreachable" | "dest_unreachable" | "destination_unreachable" => 3,
        "source_quench" => 4,
        "redirect" => 5,
        "echo_request" => 8,
        "time_exceeded" => 11,
        "parameter_problem" => 12,
        _ => return None,
    })
}

/// Destination-unreachable code numbers by script name (RFC 792, RFC 1122, RFC 1812).
fn unreachable_code_number(name: &str) -> Option<u8> {
    Some(match name {
        "net_unreachable" => 0,
        "host_unreachable" => 1,
        "protocol_unreachable" => 2,
        "port_unreachable" => 3,
        "frag_needed" => 4,
        "source_route_failed" => 5,
        "net_unknown" => 6,
        "host_unknown" => 7,
        "source_host_isolated" => 8,
        "net_prohibited" => 9,
        "host_prohibited" => 10,
        "net_tos" => 11,
        "host_tos" => 12,
        "packet_filtered" | "admin_prohibited" => 13,
        "precedence_violation" => 14,
        "precedence_cutoff" => 15,
        _ => return None,
    })
}

fn build_icmp(
    i: &IcmpPacket,
    tos: u8,
    ttl: u8,
    ident: u16,
    flow: &Flow,
) -> Result<Vec<u8>, BuildError> {
    let Some(ty) = icmp_type_number(&i.icmp_type) else {
        return unsupported(format!(
            "ICMP type `{}` (an ICMPv6 type or unknown) in an IPv4 flow",
            i.icmp_type
        ));
    };
    let code = match &i.code {
        None => 0,
        Some(c) => {
            let n = if ty == 3 {
                unreachable_code_number(c)
            } else if ty == 11 {
                match c.as_str() {
                    "ttl_exceeded" => Some(0),
                    "frag_reassembly_time_exceeded" => Some(1),
                    _ => None,
                }
            } else {
                None
            };
            match n {
                Some(n) => n,
                None => return unsupported(format!("ICMP code `{c}` for type `{}`", i.icmp_type)),
            }
        }
    };
    if ty != 3 && ty != 11 && ty != 4 && ty != 12 {
        return unsupported(format!("ICMP type `{}` is not an error", i.icmp_type));
    }
    // The quoted datagram: one the stack sent (local -> remote).
    let quoted_payload: Vec<u8> = match i.echoed {
        Some(IcmpEchoed::Tcp(r)) => {
            check_range(&r)?;
            quoted_tcp(flow, flow.stack_abs(r.start), r.len)
        }
        None => match flow.last_outbound {
            Some((seq, len)) => quoted_tcp(flow, seq, len),
            None => {
                return unsupported("ICMP error quoting no range before the stack sent any segment")
            }
        },
        Some(IcmpEchoed::Udp(len)) => {
            let mut u = vec![0u8; 8];
            u[0..2].copy_from_slice(&flow.local_port.to_be_bytes());
            u[2..4].copy_from_slice(&flow.remote_port.to_be_bytes());
            u[4..6].copy_from_slice(&((8 + len.min(65_000)) as u16).to_be_bytes());
            quoted_ip(flow, ip_proto::UDP, 8 + len.min(65_000), &u)
        }
        Some(IcmpEchoed::Raw(_)) => return unsupported("ICMP error quoting a raw packet"),
    };
    let mut m = vec![0u8; 8 + quoted_payload.len()];
    m[0] = ty;
    m[1] = code;
    if let Some(mtu) = i.mtu {
        let Ok(mtu) = u16::try_from(mtu) else {
            return invalid(format!("mtu {mtu} does not fit 16 bits"));
        };
        m[6..8].copy_from_slice(&mtu.to_be_bytes());
    }
    if let Some(id) = i.echo_id {
        let Ok(id) = u16::try_from(id) else {
            return invalid(format!("id {id} does not fit 16 bits"));
        };
        m[4..6].copy_from_slice(&id.to_be_bytes());
    }
    m[8..].copy_from_slice(&quoted_payload);
    let c = checksum::checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    ipv4_datagram(
        flow.remote_addr,
        flow.local_addr,
        ip_proto::ICMP,
        tos,
        ttl,
        ident,
        &m,
    )
}

/// An IPv4 header of a datagram the stack sent, followed by `first` (its first
/// transport bytes): what an ICMP error quotes. `payload_len` is the original length.
fn quoted_ip(flow: &Flow, protocol: u8, payload_len: u32, first: &[u8]) -> Vec<u8> {
    let repr = Ipv4Repr {
        src: flow.local_addr,
        dst: flow.remote_addr,
        protocol,
        ttl: DEFAULT_TTL,
        dscp_ecn: 0,
        ident: 0,
        dont_frag: true,
        more_frags: false,
        frag_offset: 0,
        payload_len: payload_len.min(65_000) as u16,
    };
    let mut out = vec![0u8; IPV4_HEADER_LEN + first.len()];
    repr.emit(&mut out);
    out[IPV4_HEADER_LEN..].copy_from_slice(first);
    out
}

/// The quote of a TCP segment the stack sent: IPv4 header + the first 8 bytes of the
/// TCP header (ports and sequence number; RFC 792's "64 bits of data").
fn quoted_tcp(flow: &Flow, seq: u32, len: u32) -> Vec<u8> {
    let mut t = vec![0u8; 8];
    t[0..2].copy_from_slice(&flow.local_port.to_be_bytes());
    t[2..4].copy_from_slice(&flow.remote_port.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    quoted_ip(flow, ip_proto::TCP, TCP_HEADER_LEN as u32 + len, &t)
}

// ---------------------------------------------------------------------------------
// Matching.

/// Compares what the stack sent (`actual`: one IPv4 datagram, no link header) with an
/// outbound script line. `Ok` if it matches; otherwise the first difference. Learns
/// the stack's ISN from the first SYN and the stack's timestamp offset from the first
/// TS val (see the module comment). Never panics, whatever the bytes.
pub fn match_outbound(packet: &Packet, actual: &[u8], flow: &mut Flow) -> Result<(), Mismatch> {
    if packet.direction != Direction::Outbound {
        return Err(Mismatch::new(
            "direction",
            "an outbound line",
            "an inbound line",
        ));
    }
    if !packet.encapsulation.is_empty() {
        return Err(Mismatch::new(
            "encapsulation",
            "IP-in-IP (not supported)",
            "a plain IPv4 packet",
        ));
    }
    let (ip, payload) = Ipv4Repr::parse(actual, true)
        .map_err(|e| Mismatch::new("packet", "an IPv4 datagram", e))?;
    if ip.is_fragment() {
        return Err(Mismatch::new(
            "packet",
            "an unfragmented datagram",
            "a fragment",
        ));
    }
    check("source address", flow.local_addr, ip.src)?;
    check("destination address", flow.remote_addr, ip.dst)?;
    if let Some(info) = &packet.ip {
        match_ip_info(info, &ip)?;
    }
    match &packet.body {
        PacketBody::Tcp(t) => {
            check("protocol", "tcp", proto_name(ip.protocol))?;
            match_tcp(t, &ip, payload, flow)
        }
        PacketBody::Udp(u) => {
            check("protocol", "udp", proto_name(ip.protocol))?;
            match_udp(u, payload, flow)
        }
        PacketBody::Icmp(i) => Err(Mismatch::new(
            "packet",
            format!(
                "icmp {} (matching outbound ICMP is not supported)",
                i.icmp_type
            ),
            proto_name(ip.protocol),
        )),
    }
}

fn proto_name(p: u8) -> &'static str {
    match p {
        ip_proto::TCP => "tcp",
        ip_proto::UDP => "udp",
        ip_proto::ICMP => "icmp",
        _ => "another protocol",
    }
}

fn ecn_name(bits: u8) -> &'static str {
    match bits & 3 {
        0 => "noecn",
        1 => "ect1",
        2 => "ect0",
        _ => "ce",
    }
}

fn match_ip_info(info: &IpInfo, ip: &Ipv4Repr) -> Result<(), Mismatch> {
    if let Some(ecn) = info.ecn {
        let got = ip.dscp_ecn & 3;
        let ok = match ecn {
            Ecn::NoEcn => got == 0,
            Ecn::Ect1 => got == 1,
            Ecn::Ect0 => got == 2,
            Ecn::Ce => got == 3,
            Ecn::Ect01 => got == 1 || got == 2,
        };
        if !ok {
            let want = match ecn {
                Ecn::NoEcn => "noecn",
                Ecn::Ect1 => "ect1",
                Ecn::Ect0 => "ect0",
                Ecn::Ce => "ce",
                Ecn::Ect01 => "ect01",
            };
            return Err(Mismatch::new("ecn", want, ecn_name(got)));
        }
    }
    if let Some(tos) = info.tos {
        // With an ECN mark written too, the tos names the DSCP part only.
        let mask = if info.ecn.is_some() { 0xfc } else { 0xff };
        if tos & mask != ip.dscp_ecn & mask {
            return Err(Mismatch::new(
                "tos",
                format!("{:#04x}", tos & mask),
                format!("{:#04x}", ip.dscp_ecn & mask),
            ));
        }
    }
    if let Some(ttl) = info.ttl {
        check("ttl", ttl, ip.ttl)?;
    }
    if info.flow_label.is_some() {
        return Err(Mismatch::new("flowlabel", "an IPv6 flow label", "IPv4"));
    }
    Ok(())
}

fn match_ports(p: &Option<Ports>, src: u16, dst: u16, flow: &Flow) -> Result<(), Mismatch> {
    let (want_src, want_dst) = match p {
        Some(p) => (p.src, p.dst),
        None => (flow.local_port, flow.remote_port),
    };
    check("source port", want_src, src)?;
    check("destination port", want_dst, dst)
}

fn match_udp(u: &UdpPacket, payload: &[u8], flow: &Flow) -> Result<(), Mismatch> {
    if payload.len() < 8 {
        return Err(Mismatch::new(
            "udp",
            "an 8-byte header",
            "a truncated datagram",
        ));
    }
    let src = u16::from_be_bytes([payload[0], payload[1]]);
    let dst = u16::from_be_bytes([payload[2], payload[3]]);
    match_ports(&u.ports, src, dst, flow)?;
    check("udp payload length", u.len as usize, payload.len() - 8)
}

fn match_tcp(t: &TcpPacket, ip: &Ipv4Repr, seg: &[u8], flow: &mut Flow) -> Result<(), Mismatch> {
    if seg.len() < TCP_HEADER_LEN {
        return Err(Mismatch::new(
            "tcp",
            "a 20-byte header",
            format!("{} bytes", seg.len()),
        ));
    }
    let hlen = usize::from(seg[12] >> 4) * 4;
    if hlen < TCP_HEADER_LEN || hlen > seg.len() {
        return Err(Mismatch::new(
            "tcp data offset",
            "20..=segment length",
            hlen,
        ));
    }
    let s = checksum::combine(
        checksum::pseudo_header(ip.src, ip.dst, ip_proto::TCP, seg.len() as u16),
        checksum::sum(seg),
    );
    if checksum::finish(s) != 0 {
        return Err(Mismatch::new("tcp checksum", "valid", "invalid"));
    }
    let be16 = |i: usize| u16::from_be_bytes([seg[i], seg[i + 1]]);
    let be32 = |i: usize| u32::from_be_bytes([seg[i], seg[i + 1], seg[i + 2], seg[i + 3]]);
    let (src_port, dst_port) = (be16(0), be16(2));
    let (seq, ack, flags, window, urgent) = (be32(4), be32(8), seg[13], be16(14), be16(18));
    let payload_len = (seg.len() - hlen) as u32;
    match_ports(&t.ports, src_port, dst_port, flow)?;
    check("flags", flags_text(flags_byte(&t.flags)), flags_text(flags))?;
    // The stack's ISN: taught by a SYN that starts a new connection (a SYN whose ISN
    // differs from the one known; a retransmitted SYN teaches nothing new).
    let mut learned_isn = None;
    if flags & 0x02 != 0 {
        let isn = seq.wrapping_sub(t.seq.start);
        if flow.stack_isn != Some(isn) {
            learned_isn = Some(isn);
        }
    }
    let base = learned_isn.unwrap_or(flow.stack_base());
    let rel = seq.wrapping_sub(base);
    let range = |s: u32, l: u32| format!("{s}:{}({l})", s.wrapping_add(l));
    if rel != t.seq.start || payload_len != t.seq.len {
        let field = if rel != t.seq.start {
            "seq"
        } else {
            "payload length"
        };
        return Err(Mismatch::new(
            field,
            range(t.seq.start, t.seq.len),
            range(rel, payload_len),
        ));
    }
    if let Some(a) = t.ack {
        check("ack", a, ack.wrapping_sub(flow.script_isn))?;
    }
    if let Some(w) = t.win {
        check("win", w, u32::from(window))?;
    }
    if let Some(u) = t.urg {
        check("urg", u, u32::from(urgent))?;
    }
    let opts = parse_options(&seg[TCP_HEADER_LEN..hlen])
        .map_err(|e| Mismatch::new("options", "well-formed options", e))?;
    let ts_seen = opts.iter().rev().find_map(|o| match o {
        WireOption::Timestamp(v, _) => Some(*v),
        _ => None,
    });
    // A new connection has a new timestamp clock offset.
    let mut ts_offset = if learned_isn.is_some() {
        None
    } else {
        flow.stack_ts_offset
    };
    if let Some(TcpOptions::List(want)) = &t.options {
        ts_offset = match_options(want, &opts, flow, ts_offset)?;
    }
    // Everything matched: commit what this segment taught.
    if let Some(isn) = learned_isn {
        flow.stack_isn = Some(isn);
    }
    flow.stack_ts_offset = ts_offset;
    if let Some(v) = ts_seen {
        flow.last_stack_ts_val = Some(v);
    }
    flow.last_outbound = Some((seq, payload_len));
    Ok(())
}

/// Compares options in order. Returns the stack's TS clock offset: `offset` if known,
/// else learned from this segment's TS option.
fn match_options(
    want: &[TcpOption],
    got: &[WireOption],
    flow: &Flow,
    offset: Option<u32>,
) -> Result<Option<u32>, Mismatch> {
    // Trailing EOL padding the script does not write is nothing.
    let mut got: &[WireOption] = got;
    if !want.contains(&TcpOption::Eol) {
        while let Some((WireOption::Eol, rest)) = got.split_last() {
            got = rest;
        }
    }
    let want_text = || options_text(&want.iter().map(script_option_text).collect::<Vec<_>>());
    let got_text = || {
        options_text(
            &got.iter()
                .map(|o| wire_option_text(o, flow.script_isn))
                .collect::<Vec<_>>(),
        )
    };
    if want.len() != got.len() {
        return Err(Mismatch::new("options", want_text(), got_text()));
    }
    let mut new_offset = offset;
    for (i, (w, g)) in want.iter().zip(got).enumerate() {
        let field = format!("option {} of {}", i + 1, want_text());
        let fail = || {
            Err(Mismatch::new(
                field.clone(),
                script_option_text(w),
                wire_option_text(g, flow.script_isn),
            ))
        };
        let ok = match (w, g) {
            (TcpOption::Nop, WireOption::Nop) | (TcpOption::Eol, WireOption::Eol) => true,
            (TcpOption::SackPermitted, WireOption::SackPermitted) => true,
            (TcpOption::Mss(a), WireOption::Mss(b)) => *a == u32::from(*b),
            (TcpOption::WindowScale(a), WireOption::WindowScale(b)) => *a == u32::from(*b),
            (TcpOption::Sack(a), WireOption::Sack(b)) => {
                a.len() == b.len()
                    && a.iter().zip(b).all(|(&(wl, wr), &(gl, gr))| {
                        flow.script_abs(wl) == gl && flow.script_abs(wr) == gr
                    })
            }
            (TcpOption::Timestamp { val, ecr }, WireOption::Timestamp(v, e)) => {
                if *ecr != *e {
                    return Err(Mismatch::new(format!("{field}: TS ecr"), ecr, e));
                }
                match (new_offset, flow.ts_val_slack) {
                    (None, _) => new_offset = Some(v.wrapping_sub(*val)),
                    (Some(off), Some(slack)) => {
                        let want_v = val.wrapping_add(off);
                        let diff = v.wrapping_sub(want_v) as i32;
                        if diff.unsigned_abs() > slack {
                            return Err(Mismatch::new(
                                format!("{field}: TS val"),
                                format!("{val} (within {slack} ticks)"),
                                format!("{}", v.wrapping_sub(off)),
                            ));
                        }
                    }
                    (Some(_), None) => {}
                }
                true
            }
            (TcpOption::Md5(_), WireOption::Md5(_)) => true,
            (TcpOption::FastOpen(c), WireOption::FastOpen(b))
            | (TcpOption::FastOpenExp(c), WireOption::FastOpenExp(b)) => match c {
                // A named cookie: any cookie will do (its value is not in the script).
                Some(c) => match parse_hex(c) {
                    Some(bytes) => bytes == *b,
                    None => !b.is_empty(),
                },
                None => b.is_empty(),
            },
            _ => false,
        };
        if !ok {
            return fail();
        }
    }
    Ok(new_offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::{parse, Action};
    use ember_core::wire::{Icmpv4Repr, TcpRepr};
    use proptest::prelude::*;

    const LOCAL: Ipv4Addr = Ipv4Addr::new(192, 168, 0, 1);
    const REMOTE: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const STACK_ISN: u32 = 0xfff0_0000; // wraps soon: relative arithmetic must wrap too

    fn flow() -> Flow {
        Flow::new((LOCAL, 8080), (REMOTE, 40000))
    }

    fn flow_with_isn() -> Flow {
        let mut f = flow();
        f.stack_isn = Some(STACK_ISN);
        f
    }

    /// The packet of a one-line script `0 <line>`.
    fn pkt(line: &str) -> Packet {
        let s = parse(&format!("0 {line}\n")).unwrap_or_else(|e| panic!("{e}: {line}"));
        match &s.events[0].action {
            Action::Packet(p) => p.clone(),
            other => panic!("{other:?}"),
        }
    }

    /// A parsed TCP datagram: checksums verified by ember-core's parsers.
    struct Seg {
        ip: Ipv4Repr,
        tcp: TcpRepr,
        opts: Vec<WireOption>,
        payload: Vec<u8>,
    }

    fn seg(bytes: &[u8]) -> Seg {
        let (ip, rest) = Ipv4Repr::parse(bytes, true).expect("ipv4");
        assert_eq!(ip.protocol, ip_proto::TCP);
        let (tcp, payload) = TcpRepr::parse(rest, ip.src, ip.dst, true).expect("tcp");
        let hlen = usize::from(rest[12] >> 4) * 4;
        let opts = parse_options(&rest[TCP_HEADER_LEN..hlen]).expect("options");
        Seg {
            ip,
            tcp,
            opts,
            payload: payload.to_vec(),
        }
    }

    fn build(line: &str, f: &mut Flow) -> Seg {
        seg(&build_inbound(&pkt(line), f).unwrap_or_else(|e| panic!("{e}: {line}")))
    }

    /// What the stack might send: wire values.
    fn out(
        f: &Flow,
        seq: u32,
        ack: u32,
        flags: u8,
        window: u16,
        options: &[u8],
        len: usize,
    ) -> Vec<u8> {
        let mut options = options.to_vec();
        while options.len() % 4 != 0 {
            options.push(0);
        }
        RawSegment {
            src: f.local_addr,
            dst: f.remote_addr,
            src_port: f.local_port,
            dst_port: f.remote_port,
            seq,
            ack,
            flags,
            window,
            urgent: 0,
            options,
            payload: vec![0x61; len],
            tos: 0,
            ttl: 64,
            ident: 7,
        }
        .emit()
        .unwrap()
    }

    const S: u8 = 0x02;
    const A: u8 = 0x10;
    const P: u8 = 0x08;
    const F: u8 = 0x01;

    fn ts(val: u32, ecr: u32) -> Vec<u8> {
        let mut b = vec![1, 1, 8, 10];
        b.extend_from_slice(&val.to_be_bytes());
        b.extend_from_slice(&ecr.to_be_bytes());
        b
    }

    #[test]
    fn syn_with_options_round_trips() {
        let mut f = flow();
        let s = build(
            "< S 0:0(0) win 32792 <mss 1460,sackOK,TS val 100 ecr 0,nop,wscale 7>",
            &mut f,
        );
        assert_eq!(
            (s.ip.src, s.ip.dst, s.ip.ttl, s.ip.dscp_ecn),
            (REMOTE, LOCAL, 64, 0)
        );
        assert_eq!((s.tcp.src_port, s.tcp.dst_port), (40000, 8080));
        assert_eq!(s.tcp.seq, DEFAULT_SCRIPT_ISN);
        assert_eq!(s.tcp.flags.0, S);
        assert_eq!(s.tcp.window, 32792);
        assert_eq!(
            s.opts,
            vec![
                WireOption::Mss(1460),
                WireOption::SackPermitted,
                WireOption::Timestamp(100, 0),
                WireOption::Nop,
                WireOption::WindowScale(7),
            ]
        );
        // ember's own option parser reads the same values.
        assert_eq!(s.tcp.options.mss, Some(1460));
        assert_eq!(s.tcp.options.window_scale, Some(7));
        assert!(s.tcp.options.sack_permitted);
        assert_eq!(s.tcp.options.timestamps, Some((100, 0)));
        assert!(s.payload.is_empty());
        assert_eq!(f.last_script_ts_val, Some(100));
        // The IP identification counts up.
        let s2 = build("< S 0:0(0) win 32792", &mut f);
        assert_eq!(s2.ip.ident, s.ip.ident.wrapping_add(1));
    }

    #[test]
    fn data_fin_rst_and_urg_round_trip() {
        let mut f = flow_with_isn();
        let s = build("< P. 1:1001(1000) ack 1 win 257", &mut f);
        assert_eq!(s.tcp.seq, DEFAULT_SCRIPT_ISN + 1);
        assert_eq!(s.tcp.ack, STACK_ISN + 1);
        assert_eq!(s.tcp.flags.0, P | A);
        assert_eq!(s.tcp.window, 257);
        assert_eq!(s.payload, vec![0; 1000]);
        assert!(s.opts.is_empty());

        let s = build("< F. 1001:1001(0) ack 70000 win 257", &mut f);
        assert_eq!(s.tcp.flags.0, F | A);
        assert_eq!(s.tcp.seq, DEFAULT_SCRIPT_ISN + 1001);
        assert_eq!(s.tcp.ack, STACK_ISN.wrapping_add(70000), "wraps past 2^32");

        let s = build("< R 1:1(0) win 0", &mut f);
        assert_eq!((s.tcp.flags.0, s.tcp.ack, s.tcp.window), (0x04, 0, 0));

        let s = build("< U. 1:101(100) ack 1 win 257 urg 100", &mut f);
        assert_eq!((s.tcp.flags.0, s.tcp.urgent), (0x20 | A, 100));
        assert_eq!(s.payload.len(), 100);

        let s = build("< [ect1] . 1:1(0) ack 1 win 320", &mut f);
        assert_eq!(s.ip.dscp_ecn & 3, 1);
        let s = build("< [ce] E. 1:1(0) ack 1 win 320", &mut f);
        assert_eq!((s.ip.dscp_ecn & 3, s.tcp.flags.0), (3, 0x40 | A));
        let s = build("< W. 1:1(0) ack 1 win 320", &mut f);
        assert_eq!(s.tcp.flags.0, 0x80 | A);
    }

    #[test]
    fn sack_blocks_are_relative_to_the_stack_isn() {
        let mut f = flow_with_isn();
        let s = build(
            "< . 1:1(0) ack 1 win 257 <nop,nop,sack 1001:2001 3001:4001>",
            &mut f,
        );
        assert_eq!(
            s.opts,
            vec![
                WireOption::Nop,
                WireOption::Nop,
                WireOption::Sack(vec![
                    (STACK_ISN + 1001, STACK_ISN + 2001),
                    (STACK_ISN + 3001, STACK_ISN + 4001)
                ]),
            ]
        );
        let b = s.tcp.options.sack_blocks();
        assert_eq!(
            (b[0].left, b[1].right),
            (STACK_ISN + 1001, STACK_ISN + 4001)
        );
    }

    #[test]
    fn odd_option_lists_are_padded_and_overlong_ones_refused() {
        let mut f = flow();
        let s = build("< S 0:0(0) win 100 <mss 1000,wscale 2>", &mut f);
        assert_eq!(
            s.opts,
            vec![
                WireOption::Mss(1000),
                WireOption::WindowScale(2),
                WireOption::Eol
            ]
        );
        let e = build_inbound(
            &pkt("< . 1:1(0) ack 1 win 1 <sack 1:2 3:4 5:6 7:8,TS val 1 ecr 2>"),
            &mut f,
        );
        assert!(matches!(e, Err(BuildError::Invalid(_))), "{e:?}");
        let e = build_inbound(&pkt("< . 1:1(0) ack 1 win 70000"), &mut f);
        assert!(matches!(e, Err(BuildError::Invalid(_))), "{e:?}");
    }

    #[test]
    fn unsupported_lines_say_why() {
        let mut f = flow();
        for line in [
            "< S 0:0(0) win 1 <md5 00112233445566778899aabbccddeeff>",
            "< S 0:0(0) win 1 <FO TFO_COOKIE>",
            "< icmp packet_too_big mtu 1400 [0:1440(1440)]",
            "< icmp unreachable CODE [0:10(10)]",
        ] {
            match build_inbound(&pkt(line), &mut f) {
                Err(BuildError::Unsupported(r)) => assert!(!r.is_empty()),
                other => panic!("{line}: {other:?}"),
            }
        }
        assert_eq!(
            build_inbound(&pkt("> S 0:0(0)"), &mut f),
            Err(BuildError::WrongDirection)
        );
        // Hex Fast Open cookies and cookie requests are built.
        let s = build("< S 0:0(0) win 1 <FO abcd1234,nop,nop>", &mut f);
        assert_eq!(
            s.opts[0],
            WireOption::FastOpen(vec![0xab, 0xcd, 0x12, 0x34])
        );
        let s = build("< S 0:0(0) win 1 <FOEXP,nop,nop>", &mut f);
        assert_eq!(s.opts[0], WireOption::FastOpenExp(vec![]));
    }

    #[test]
    fn icmp_errors_quote_the_stacks_segment() {
        let mut f = flow_with_isn();
        let bytes = build_inbound(
            &pkt("< icmp unreachable frag_needed mtu 1200 [1:1461(1460)]"),
            &mut f,
        )
        .unwrap();
        let (ip, body) = Ipv4Repr::parse(&bytes, true).unwrap();
        assert_eq!(
            (ip.protocol, ip.src, ip.dst),
            (ip_proto::ICMP, REMOTE, LOCAL)
        );
        let Ok(Icmpv4Repr::DestUnreachable {
            code,
            next_hop_mtu,
            original,
        }) = Icmpv4Repr::parse(body)
        else {
            panic!()
        };
        assert_eq!((code, next_hop_mtu), (4, 1200));
        let (qip, qtcp) = Ipv4Repr::parse_quoted(original).unwrap();
        assert_eq!(
            (qip.src, qip.dst, qip.protocol),
            (LOCAL, REMOTE, ip_proto::TCP)
        );
        assert_eq!(qip.payload_len, 20 + 1460);
        assert_eq!(&qtcp[0..4], &[0x1f, 0x90, 0x9c, 0x40]); // 8080 > 40000
        assert_eq!(&qtcp[4..8], &(STACK_ISN + 1).to_be_bytes());
        // Without a range: the last segment the stack sent.
        let mut f = flow();
        assert!(matches!(
            build_inbound(&pkt("< icmp unreachable frag_needed mtu 800"), &mut f),
            Err(BuildError::Unsupported(_))
        ));
        let syn = out(&f, 4242, 0, S, 1000, &[], 1000);
        match_outbound(&pkt("> S 0:1000(1000)"), &syn, &mut f).unwrap();
        let bytes = build_inbound(&pkt("< icmp unreachable frag_needed mtu 800"), &mut f).unwrap();
        let (_, body) = Ipv4Repr::parse(&bytes, true).unwrap();
        let Ok(Icmpv4Repr::DestUnreachable { original, .. }) = Icmpv4Repr::parse(body) else {
            panic!()
        };
        let (_, qtcp) = Ipv4Repr::parse_quoted(original).unwrap();
        assert_eq!(&qtcp[4..8], &4242u32.to_be_bytes());
    }

    /// A passive open: the stack's SYN-ACK teaches its ISN and its TS clock, and later
    /// lines are read relative to both.
    #[test]
    fn handshake_teaches_isn_and_timestamps() {
        let mut f = flow();
        let si = f.script_isn;
        build(
            "< S 0:0(0) win 32792 <mss 1460,sackOK,TS val 100 ecr 0,nop,wscale 7>",
            &mut f,
        );
        let mut o = vec![2, 4, 0x05, 0xb4, 4, 2];
        o.extend_from_slice(&ts(987_654, 100)[2..]);
        o.extend_from_slice(&[1, 3, 3, 8]);
        let synack = out(&f, 0x1234_5678, si + 1, S | A, 65160, &o, 0);
        let line = pkt("> S. 0:0(0) ack 1 <mss 1460,sackOK,TS val 10000 ecr 100,nop,wscale 8>");
        match_outbound(&line, &synack, &mut f).unwrap();
        assert_eq!(f.stack_isn, Some(0x1234_5678));
        assert_eq!(f.stack_ts_offset, Some(987_654 - 10000));
        assert_eq!(f.last_stack_ts_val, Some(987_654));
        // Inbound ack 1 and ecr 10000 are the stack's numbers.
        let s = build(
            "< . 1:1(0) ack 1 win 257 <nop,nop,TS val 101 ecr 10000>",
            &mut f,
        );
        assert_eq!(s.tcp.ack, 0x1234_5679);
        assert_eq!(s.tcp.options.timestamps, Some((101, 987_654)));
        // Outbound data, relative.
        let data = out(&f, 0x1234_5679, si + 1, P | A, 502, &ts(987_700, 101), 1000);
        let line = pkt("> P. 1:1001(1000) ack 1 win 502 <nop,nop,TS val 10046 ecr 101>");
        match_outbound(&line, &data, &mut f).unwrap();
        assert_eq!(
            f.stack_ts_offset,
            Some(987_654 - 10000),
            "the first TS fixes it"
        );
        assert_eq!(f.last_stack_ts_val, Some(987_700));
        // The TS val is not checked, the ecr is.
        let line = pkt("> P. 1:1001(1000) ack 1 <nop,nop,TS val 1 ecr 100>");
        let e = match_outbound(&line, &data, &mut f).unwrap_err();
        assert_eq!(e.expected, "100");
        assert_eq!(e.actual, "101");
        assert!(e.field.contains("TS ecr"), "{e}");
        // <...> takes anything; no option list written checks nothing.
        match_outbound(&pkt("> P. 1:1001(1000) ack 1 <...>"), &data, &mut f).unwrap();
        match_outbound(&pkt("> P. 1:1001(1000) ack 1"), &data, &mut f).unwrap();
    }

    #[test]
    fn each_kind_of_mismatch_is_named() {
        let mut f = flow_with_isn();
        let si = f.script_isn;
        let data = out(
            &f,
            STACK_ISN + 1,
            si + 1,
            P | A,
            257,
            &[1, 1, 8, 10, 0, 0, 0, 5, 0, 0, 0, 6],
            1000,
        );
        let base = "> P. 1:1001(1000) ack 1 win 257 <nop,nop,TS val 5 ecr 6>";
        match_outbound(&pkt(base), &data, &mut f).unwrap();
        let cases = [
            (
                "> . 1:1001(1000) ack 1 win 257",
                "flags: expected ., got P.",
            ),
            (
                "> P. 2:1002(1000) ack 1",
                "seq: expected 2:1002(1000), got 1:1001(1000)",
            ),
            (
                "> P. 1:501(500) ack 1",
                "payload length: expected 1:501(500), got 1:1001(1000)",
            ),
            ("> P. 1:1001(1000) ack 1001", "ack: expected 1001, got 1"),
            (
                "> P. 1:1001(1000) ack 1 win 256",
                "win: expected 256, got 257",
            ),
            (
                "> P. 1:1001(1000) ack 1 <TS val 5 ecr 6,nop,nop>",
                "option 1 of <TS val 5 ecr 6,nop,nop>: expected TS val 5 ecr 6, got nop",
            ),
            (
                "> P. 1:1001(1000) ack 1 <nop,nop>",
                "options: expected <nop,nop>, got <nop,nop,TS val 5 ecr 6>",
            ),
            (
                "> P. 1:1001(1000) ack 1 <nop,nop,TS val 5 ecr 7>",
                "option 3 of <nop,nop,TS val 5 ecr 7>: TS ecr: expected 7, got 6",
            ),
            (
                "> [ect0] P. 1:1001(1000) ack 1",
                "ecn: expected ect0, got noecn",
            ),
            (
                "< P. 1:1001(1000) ack 1",
                "direction: expected an outbound line, got an inbound line",
            ),
        ];
        for (line, want) in cases {
            let e = match_outbound(&pkt(line), &data, &mut f).unwrap_err();
            assert_eq!(e.to_string(), want, "{line}");
        }
        // Option values.
        let syn = out(&f, STACK_ISN, 0, S, 100, &[2, 4, 5, 0xb4, 1, 3, 3, 7], 0);
        let e =
            match_outbound(&pkt("> S 0:0(0) <mss 1400,nop,wscale 7>"), &syn, &mut f).unwrap_err();
        assert_eq!(
            e.to_string(),
            "option 1 of <mss 1400,nop,wscale 7>: expected mss 1400, got mss 1460"
        );
        let e =
            match_outbound(&pkt("> S 0:0(0) <mss 1460,nop,wscale 8>"), &syn, &mut f).unwrap_err();
        assert_eq!(e.expected, "wscale 8");
        match_outbound(&pkt("> S 0:0(0) <mss 1460,nop,wscale 7>"), &syn, &mut f).unwrap();
        // Outbound SACK blocks are relative to the script's ISN.
        let mut o = vec![1, 1, 5, 10];
        o.extend_from_slice(&(si + 1001).to_be_bytes());
        o.extend_from_slice(&(si + 2001).to_be_bytes());
        let ack = out(&f, STACK_ISN + 1, si + 1, A, 257, &o, 0);
        match_outbound(
            &pkt("> . 1:1(0) ack 1 <nop,nop,sack 1001:2001>"),
            &ack,
            &mut f,
        )
        .unwrap();
        let e = match_outbound(&pkt("> . 1:1(0) ack 1 <nop,nop,sack 1:2001>"), &ack, &mut f)
            .unwrap_err();
        assert_eq!(e.actual, "sack 1001:2001");
        // Addresses and ports.
        let mut other = f.clone();
        other.local_port = 9;
        let e = match_outbound(&pkt("> . 1:1(0) ack 1"), &ack, &mut other).unwrap_err();
        assert_eq!(e.to_string(), "source port: expected 9, got 8080");
        // Garbage.
        let e = match_outbound(&pkt("> . 1:1(0) ack 1"), &ack[..30], &mut f).unwrap_err();
        assert_eq!(e.field, "packet");
        let mut bad = ack.clone();
        bad[IPV4_HEADER_LEN + 4] ^= 1; // seq changed, TCP checksum stale
        let e = match_outbound(&pkt("> . 1:1(0) ack 1"), &bad, &mut f).unwrap_err();
        assert_eq!(e.field, "tcp checksum");
    }

    #[test]
    fn before_any_syn_stack_numbers_are_absolute() {
        // A stray ACK to a listener: its ack number comes back as the RST's seq.
        let mut f = flow();
        let s = build("< . 1:1(0) ack 5000 win 257", &mut f);
        assert_eq!(s.tcp.ack, 5000);
        let rst = out(&f, 5000, 0, 0x04, 0, &[], 0);
        match_outbound(&pkt("> R 5000:5000(0)"), &rst, &mut f).unwrap();
        assert_eq!(f.stack_isn, None, "only a SYN teaches the ISN");
        // Trailing EOL padding is ignored unless written.
        let syn = out(
            &f,
            77,
            0,
            S,
            100,
            &[2, 4, 5, 0xb4, 1, 3, 3, 7, 0, 0, 0, 0],
            0,
        );
        match_outbound(&pkt("> S 0:0(0) <mss 1460,nop,wscale 7>"), &syn, &mut f).unwrap();
        assert_eq!(f.stack_isn, Some(77));
    }

    /// A second connection in the same script: its SYN-ACK re-teaches the ISN and the
    /// TS offset; an inbound SYN's `ecr 0` stays 0.
    #[test]
    fn a_new_connection_relearns_isn_and_ts_offset() {
        let mut f = flow();
        let si = f.script_isn;
        let line = pkt("> S. 0:0(0) ack 1 <nop,nop,TS val 10000 ecr 1>");
        let synack = out(&f, 1000, si + 1, S | A, 1, &ts(50_000, 1), 0);
        match_outbound(&line, &synack, &mut f).unwrap();
        assert_eq!((f.stack_isn, f.stack_ts_offset), (Some(1000), Some(40_000)));
        // A retransmitted SYN-ACK (same ISN, later clock) changes nothing.
        let again = out(&f, 1000, si + 1, S | A, 1, &ts(50_300, 1), 0);
        match_outbound(&line, &again, &mut f).unwrap();
        assert_eq!((f.stack_isn, f.stack_ts_offset), (Some(1000), Some(40_000)));
        // The script's second SYN: ecr 0 as written, seq relative to the same base.
        let s = build(
            "< S 6814000:6814000(0) win 100 <nop,nop,TS val 10 ecr 0>",
            &mut f,
        );
        assert_eq!(s.tcp.options.timestamps, Some((10, 0)));
        assert_eq!(s.tcp.seq, si.wrapping_add(6_814_000));
        let synack2 = out(
            &f,
            777,
            si.wrapping_add(6_814_001),
            S | A,
            1,
            &ts(90_000, 10),
            0,
        );
        let line = pkt("> S. 0:0(0) ack 6814001 <nop,nop,TS val 10000 ecr 10>");
        match_outbound(&line, &synack2, &mut f).unwrap();
        assert_eq!((f.stack_isn, f.stack_ts_offset), (Some(777), Some(80_000)));
        let s = build(
            "< . 1:1(0) ack 1 win 1 <nop,nop,TS val 11 ecr 10000>",
            &mut f,
        );
        assert_eq!(
            (s.tcp.ack, s.tcp.options.timestamps),
            (778, Some((11, 90_000)))
        );
    }

    #[test]
    fn options_parser_handles_bad_lengths() {
        assert!(parse_options(&[2]).is_err());
        assert!(parse_options(&[2, 1]).is_err());
        assert!(parse_options(&[2, 9, 0, 0]).is_err());
        assert_eq!(parse_options(&[0, 2, 9]).unwrap(), vec![WireOption::Eol]);
        assert_eq!(
            parse_options(&[99, 3, 7]).unwrap(),
            vec![WireOption::Unknown(99, vec![7])]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        /// Any bytes: an answer, never a panic.
        #[test]
        fn match_outbound_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..120)) {
            let mut f = flow();
            for line in ["> S. 0:0(0) ack 1 <mss 1460,sackOK,TS val 1 ecr 0,nop,wscale 7>", "> udp (10)", "> P. 1:11(10) ack 1 <...>"] {
                let _ = match_outbound(&pkt(line), &bytes, &mut f);
            }
        }

        /// Valid packets with a few bytes changed (most then fail a checksum), and valid
        /// packets whose option area is arbitrary bytes (checksums right, so the option
        /// parser and the comparison see them): an answer, never a panic.
        #[test]
        fn mutated_segments_never_panic(edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8), opts in prop::collection::vec(any::<u8>(), 0..40)) {
            let mut f = flow_with_isn();
            let mut b = out(&f, 1, 2, S | A, 3, &opts[..opts.len() - opts.len() % 4], 5);
            for (at, v) in edits {
                let i = at.index(b.len());
                b[i] = v;
            }
            let _ = match_outbound(&pkt("> S. 0:0(0) ack 1 <mss 1460,nop,nop,sack 1:2>"), &b, &mut f);
            // With valid checksums, the option parser sees arbitrary bytes.
            let b = out(&f, 1, 2, S | A, 3, &opts[..opts.len() - opts.len() % 4], 0);
            let _ = match_outbound(&pkt("> S. 0:0(0) ack 1 <mss 1460,nop,nop,sack 1:2,TS val 1 ecr 2>"), &b, &mut f);
        }
    }

    /// Every inbound TCP line of the packetdrill corpus builds, or is unsupported with a
    /// reason. The corpus lives outside the repository (see `tests/corpus.rs`).
    #[test]
    fn every_inbound_corpus_line_builds_or_says_why() {
        let Some(files) = super::corpus_tests::corpus() else {
            return;
        };
        let (mut ok, mut other_errors) = (0usize, Vec::new());
        let mut reasons: std::collections::BTreeMap<String, usize> = Default::default();
        let (mut icmp_ok, mut icmp_unsupported) = (0usize, 0usize);
        for (path, text) in &files {
            let script = parse(text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for ev in &script.events {
                let Action::Packet(p) = &ev.action else {
                    continue;
                };
                if p.direction != Direction::Inbound {
                    continue;
                }
                let mut f = flow_with_isn();
                f.stack_ts_offset = Some(12345);
                let r = build_inbound(p, &mut f);
                let is_tcp = matches!(p.body, PacketBody::Tcp(_));
                match (&r, is_tcp) {
                    (Ok(bytes), true) => {
                        let s = seg(bytes);
                        let PacketBody::Tcp(t) = &p.body else {
                            unreachable!()
                        };
                        assert_eq!(s.tcp.seq, f.script_abs(t.seq.start));
                        assert_eq!(s.payload.len(), t.seq.len as usize);
                        ok += 1;
                    }
                    (Err(BuildError::Unsupported(reason)), true) => {
                        assert!(!reason.is_empty());
                        *reasons.entry(reason.clone()).or_default() += 1;
                    }
                    (Err(e), true) => {
                        other_errors.push(format!("{}:{}: {e}", path.display(), p.line))
                    }
                    (Ok(_), false) => icmp_ok += 1,
                    (Err(_), false) => icmp_unsupported += 1,
                }
            }
        }
        let unsupported: usize = reasons.values().sum();
        println!(
            "{} scripts: {ok} inbound TCP lines built, {unsupported} unsupported, {} other errors; \
             non-TCP inbound lines: {icmp_ok} built, {icmp_unsupported} not",
            files.len(),
            other_errors.len()
        );
        for (r, n) in &reasons {
            println!("{n:5} unsupported: {r}");
        }
        assert!(other_errors.is_empty(), "{}", other_errors.join("\n"));
        assert!(ok > 1000, "{ok}");
    }
}

#[cfg(test)]
mod corpus_tests {
    use super::*;
    use crate::script::{parse, Action};

    const STACK_ISN: u32 = 0x9000_0000;
    const TS_OFFSET: u32 = 0x0100_0000;

    /// The corpus scripts (path, text), sorted; `None` with a note if it is absent.
    pub(super) fn corpus() -> Option<Vec<(std::path::PathBuf, String)>> {
        crate::corpus::load(&crate::corpus::default_root())
    }

    /// The option bytes a stack that does exactly what the line says would send.
    fn stack_options(opts: &[TcpOption], script_isn: u32) -> Vec<u8> {
        let mut b = Vec::new();
        for o in opts {
            match o {
                TcpOption::Nop => b.push(1),
                TcpOption::Eol => b.push(0),
                TcpOption::Mss(v) => {
                    b.extend_from_slice(&[2, 4]);
                    b.extend_from_slice(&(*v as u16).to_be_bytes());
                }
                TcpOption::WindowScale(v) => b.extend_from_slice(&[3, 3, *v as u8]),
                TcpOption::SackPermitted => b.extend_from_slice(&[4, 2]),
                TcpOption::Sack(bl) => {
                    b.extend_from_slice(&[5, (2 + 8 * bl.len()) as u8]);
                    for &(l, r) in bl {
                        b.extend_from_slice(&script_isn.wrapping_add(l).to_be_bytes());
                        b.extend_from_slice(&script_isn.wrapping_add(r).to_be_bytes());
                    }
                }
                TcpOption::Timestamp { val, ecr } => {
                    b.extend_from_slice(&[8, 10]);
                    b.extend_from_slice(&val.wrapping_add(TS_OFFSET).to_be_bytes());
                    b.extend_from_slice(&ecr.to_be_bytes());
                }
                TcpOption::Md5(_) => {
                    b.extend_from_slice(&[19, 18]);
                    b.extend_from_slice(&[0; 16]);
                }
                TcpOption::FastOpen(c) | TcpOption::FastOpenExp(c) => {
                    let cookie = match c {
                        None => vec![],
                        Some(c) => parse_hex(c).unwrap_or(vec![0x5a; 8]),
                    };
                    if matches!(o, TcpOption::FastOpen(_)) {
                        b.extend_from_slice(&[34, (2 + cookie.len()) as u8]);
                    } else {
                        b.extend_from_slice(&[254, (4 + cookie.len()) as u8, 0xf9, 0x89]);
                    }
                    b.extend_from_slice(&cookie);
                }
            }
        }
        while b.len() % 4 != 0 {
            b.push(0);
        }
        b
    }

    /// Plays every corpus script against a simulated stack that sends exactly what
    /// each outbound line says (with its own ISN and TS clock): every outbound TCP
    /// line must match, and every inbound line's `ack` and `ecr` must land on the
    /// simulated stack's numbers. This checks the relative-number rules against the
    /// whole corpus.
    #[test]
    fn a_conforming_stack_matches_every_corpus_line() {
        let Some(files) = corpus() else { return };
        let (mut matched, mut built, mut skipped) = (0usize, 0usize, 0usize);
        let mut ecrs_checked = 0usize;
        let mut failures = Vec::new();
        for (path, text) in &files {
            let script = parse(text).unwrap();
            let mut f = Flow::new(
                (Ipv4Addr::new(192, 168, 0, 1), 8080),
                (Ipv4Addr::new(192, 0, 2, 1), 40000),
            );
            for ev in &script.events {
                let Action::Packet(p) = &ev.action else {
                    continue;
                };
                let PacketBody::Tcp(t) = &p.body else {
                    skipped += 1;
                    continue;
                };
                if p.direction == Direction::Inbound {
                    match build_inbound(p, &mut f) {
                        Ok(bytes) => {
                            built += 1;
                            let (_, seg) = Ipv4Repr::parse(&bytes, true).unwrap();
                            let ack = u32::from_be_bytes([seg[8], seg[9], seg[10], seg[11]]);
                            let hlen = usize::from(seg[12] >> 4) * 4;
                            let wire_ecr = parse_options(&seg[TCP_HEADER_LEN..hlen])
                                .unwrap()
                                .into_iter()
                                .find_map(|o| match o {
                                    WireOption::Timestamp(_, e) => Some(e),
                                    _ => None,
                                });
                            let written_ecr = match &t.options {
                                Some(TcpOptions::List(l)) => l.iter().find_map(|o| match o {
                                    TcpOption::Timestamp { ecr, .. } => Some(*ecr),
                                    _ => None,
                                }),
                                _ => None,
                            };
                            if let (Some(w), Some(e)) = (written_ecr, wire_ecr) {
                                if t.flags.ack
                                    && f.stack_ts_offset.is_some()
                                    && e != w.wrapping_add(TS_OFFSET)
                                {
                                    failures.push(format!(
                                        "{}:{}: inbound ecr {w} built as {e:#x}",
                                        path.display(),
                                        p.line
                                    ));
                                }
                                ecrs_checked += 1;
                            }
                            if let Some(a) = t.ack {
                                if f.stack_isn.is_some() && ack != STACK_ISN.wrapping_add(a) {
                                    failures.push(format!(
                                        "{}:{}: inbound ack {a} built as {ack:#x}",
                                        path.display(),
                                        p.line
                                    ));
                                }
                            }
                        }
                        Err(BuildError::Unsupported(_)) => skipped += 1,
                        Err(e) => failures.push(format!("{}:{}: {e}", path.display(), p.line)),
                    }
                    continue;
                }
                let options = match &t.options {
                    Some(TcpOptions::List(l)) => stack_options(l, f.script_isn),
                    _ => Vec::new(),
                };
                let tos = match p.ip.and_then(|i| i.ecn) {
                    Some(Ecn::Ect0 | Ecn::Ect01) => 2,
                    Some(Ecn::Ect1) => 1,
                    Some(Ecn::Ce) => 3,
                    _ => 0,
                } | p.ip.and_then(|i| i.tos).unwrap_or(0);
                let bytes = RawSegment {
                    src: f.local_addr,
                    dst: f.remote_addr,
                    src_port: f.local_port,
                    dst_port: f.remote_port,
                    seq: STACK_ISN.wrapping_add(t.seq.start),
                    ack: t.ack.map_or(0, |a| f.script_abs(a)),
                    flags: flags_byte(&t.flags),
                    window: t.win.unwrap_or(1000) as u16,
                    urgent: t.urg.unwrap_or(0) as u16,
                    options,
                    payload: vec![0; t.seq.len as usize],
                    tos,
                    ttl: p.ip.and_then(|i| i.ttl).unwrap_or(64),
                    ident: 0,
                }
                .emit()
                .unwrap();
                match match_outbound(p, &bytes, &mut f) {
                    Ok(()) => matched += 1,
                    Err(m) => failures.push(format!("{}:{}: {m}", path.display(), p.line)),
                }
            }
        }
        println!(
            "{} scripts: {matched} outbound TCP lines matched, {built} inbound built, \
             {skipped} non-TCP or unsupported lines skipped, {ecrs_checked} inbound ecr \
             values checked, {} failures",
            files.len(),
            failures.len()
        );
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        assert!(matched > 900, "{matched}");
    }
}
