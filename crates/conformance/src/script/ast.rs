//! The abstract syntax of a packetdrill script.
//!
//! Design. The tree follows the grammar's shape (options, an optional init command,
//! timed events, an optional cleanup command) but keeps packets strongly typed (flags
//! as bits, sequence ranges as numbers, TCP options as an enum) because the
//! interpreter builds and matches real segments from them, while syscall arguments
//! stay a generic expression tree ([`Expr`]): the same `{...}` syntax means a
//! sockaddr, a msghdr, a pollfd or an epoll event depending on the syscall and
//! argument position, so giving it meaning is the interpreter's job, not the parser's.
//! [`Expr::field`] and friends make the common look-ups short.
//!
//! Times are integer microseconds, converted exactly from the decimal seconds in the
//! script. Every event, option, command, code statement and expression keeps the
//! 1-based line it starts on; the parts of a packet share the packet's line (a packet
//! is always one line).

use std::net::Ipv4Addr;

/// A whole script.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    /// `--name[=value]` lines at the top.
    pub options: Vec<ScriptOption>,
    /// An untimed shell command before the first event.
    pub init_command: Option<Command>,
    /// The timed events, in order.
    pub events: Vec<Event>,
    /// An untimed shell command after the last event.
    pub cleanup_command: Option<Command>,
}

/// A `--name` or `--name=value` option line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptOption {
    /// Source line.
    pub line: u32,
    /// The name without the leading `--`.
    pub name: String,
    /// The value as written, if there was an `=`.
    pub value: Option<String>,
}

/// A back-quoted shell command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Source line of the opening back quote.
    pub line: u32,
    /// The text between the back quotes, verbatim (it may span lines).
    pub text: String,
}

/// A time in microseconds, from decimal seconds in the script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time {
    /// Microseconds.
    pub micros: i64,
}

/// When an event happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventTime {
    /// `t`: at t after the script's start.
    Absolute(Time),
    /// `+t`: t after the previous event.
    Relative(Time),
    /// `*`: any time.
    Any,
    /// `a~b`: between a and b after the start.
    AbsoluteRange(Time, Time),
    /// `+a~+b`: between a and b after the previous event.
    RelativeRange(Time, Time),
}

/// One timed line (or multi-line syscall) of a script.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Source line of the time.
    pub line: u32,
    /// When.
    pub time: EventTime,
    /// What.
    pub action: Action,
}

/// What an event does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// A packet to inject or to expect.
    Packet(Packet),
    /// A system call and its expected outcome.
    Syscall(Syscall),
    /// A shell command.
    Command(Command),
    /// A `%{ ... }%` code block.
    Code(CodeBlock),
}

/// A packet's direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// `<`: injected into the stack under test.
    Inbound,
    /// `>`: expected from the stack under test.
    Outbound,
}

/// The ECN codepoint of an IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ecn {
    /// `noecn`: not ECN-capable.
    NoEcn,
    /// `ect0`
    Ect0,
    /// `ect1`
    Ect1,
    /// `ce`: congestion experienced.
    Ce,
    /// `ect01`: either ECT codepoint.
    Ect01,
}

/// IP header fields given in `[...]` or `(...)` before a packet body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IpInfo {
    /// The ECN codepoint.
    pub ecn: Option<Ecn>,
    /// `tos 0x..`: the whole TOS/traffic-class byte.
    pub tos: Option<u8>,
    /// `flowlabel 0x..` (IPv6).
    pub flow_label: Option<u32>,
    /// `ttl N`.
    pub ttl: Option<u8>,
}

/// An outer header in front of the packet proper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encapsulation {
    /// `ipv4 [ip info] a.b.c.d > e.f.g.h:`
    Ipv4 {
        /// Outer header fields.
        ip: Option<IpInfo>,
        /// Outer source.
        src: Ipv4Addr,
        /// Outer destination.
        dst: Ipv4Addr,
    },
}

/// A packet line.
#[derive(Debug, Clone, PartialEq)]
pub struct Packet {
    /// Source line.
    pub line: u32,
    /// `<` or `>`.
    pub direction: Direction,
    /// Outer headers, outermost first.
    pub encapsulation: Vec<Encapsulation>,
    /// Fields of the (inner) IP header, if given.
    pub ip: Option<IpInfo>,
    /// The transport part.
    pub body: PacketBody,
}

/// The transport part of a packet.
#[derive(Debug, Clone, PartialEq)]
pub enum PacketBody {
    /// A TCP segment.
    Tcp(TcpPacket),
    /// A UDP datagram.
    Udp(UdpPacket),
    /// An ICMP message.
    Icmp(IcmpPacket),
}

/// `src > dst` ports written in a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    /// Source port.
    pub src: u16,
    /// Destination port.
    pub dst: u16,
}

/// TCP header flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpFlags {
    /// `F`
    pub fin: bool,
    /// `S`
    pub syn: bool,
    /// `R`
    pub rst: bool,
    /// `P`
    pub psh: bool,
    /// `.`
    pub ack: bool,
    /// `U`
    pub urg: bool,
    /// `E`
    pub ece: bool,
    /// `W`
    pub cwr: bool,
}

/// `start:end(len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqRange {
    /// First sequence number.
    pub start: u32,
    /// Sequence number after the last byte.
    pub end: u32,
    /// Payload length.
    pub len: u32,
}

/// A TCP segment line.
#[derive(Debug, Clone, PartialEq)]
pub struct TcpPacket {
    /// Ports, if written.
    pub ports: Option<Ports>,
    /// Flags (`-` is none).
    pub flags: TcpFlags,
    /// The sequence range.
    pub seq: SeqRange,
    /// `ack N`.
    pub ack: Option<u32>,
    /// `win N`.
    pub win: Option<u32>,
    /// `urg N`.
    pub urg: Option<u32>,
    /// The `<...>` option list, if written.
    pub options: Option<TcpOptions>,
}

/// A TCP option list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpOptions {
    /// `<...>`: whatever the stack sends.
    Any,
    /// The options in order.
    List(Vec<TcpOption>),
}

/// One TCP option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpOption {
    /// `nop`
    Nop,
    /// `eol`
    Eol,
    /// `mss N`
    Mss(u32),
    /// `wscale N`
    WindowScale(u32),
    /// `sackOK`
    SackPermitted,
    /// `sack a:b c:d ...`
    Sack(Vec<(u32, u32)>),
    /// `TS val V ecr E`
    Timestamp {
        /// TSval.
        val: u32,
        /// TSecr.
        ecr: u32,
    },
    /// `md5 <hex>`: the digest as written.
    Md5(String),
    /// `FO [cookie]`: Fast Open (kind 34); the cookie as written (hex or a name).
    FastOpen(Option<String>),
    /// `FOEXP [cookie]`: experimental Fast Open (kind 254, magic 0xF989).
    FastOpenExp(Option<String>),
}

/// A UDP datagram line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket {
    /// Ports, if written.
    pub ports: Option<Ports>,
    /// Payload length.
    pub len: u32,
}

/// The packet quoted in an ICMP error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcmpEchoed {
    /// `[start:end(len)]`: a TCP segment.
    Tcp(SeqRange),
    /// `[udp (len)]`
    Udp(u32),
    /// `[raw (len)]`
    Raw(u32),
}

/// An ICMP line: `icmp type [code] [mtu N] [id N] [[echoed]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcmpPacket {
    /// Type name (`unreachable`, `packet_too_big`, ...).
    pub icmp_type: String,
    /// Code name (`frag_needed`, `host_unreachable`, ...).
    pub code: Option<String>,
    /// `mtu N`.
    pub mtu: Option<u32>,
    /// `id N`.
    pub echo_id: Option<u32>,
    /// The quoted packet.
    pub echoed: Option<IcmpEchoed>,
}

/// A system call line: `name(args) = ret [ERRNO] [(note)]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Syscall {
    /// `...t` before the name: the call blocks and returns at t.
    pub end_time: Option<Time>,
    /// Function name.
    pub name: String,
    /// Arguments.
    pub args: Vec<Expr>,
    /// Expected return value.
    pub ret: Expr,
    /// Expected errno name (`EAGAIN`).
    pub errno: Option<String>,
    /// The parenthesised note after the return value, as written.
    pub note: Option<String>,
}

/// An expression in a syscall, with its line.
#[derive(Debug, Clone, PartialEq)]
pub struct Expr {
    /// Source line of its first token.
    pub line: u32,
    /// The expression.
    pub kind: ExprKind,
}

/// The kinds of expression.
#[derive(Debug, Clone, PartialEq)]
pub enum ExprKind {
    /// `...`: anything (or "fill in a sensible value").
    Ellipsis,
    /// An integer literal (decimal or hex).
    Int(i64),
    /// A named constant or field name (`SOCK_STREAM`, `O_RDWR`).
    Word(String),
    /// A string literal, escapes decoded.
    Str(Vec<u8>),
    /// `"..."...`: a string prefix.
    StrPrefix(Vec<u8>),
    /// `a | b`.
    BitOr(Box<Expr>, Box<Expr>),
    /// `lhs = rhs` inside a struct: lhs is a word or a call (`msg_iov(1)`).
    Assign(Box<Expr>, Box<Expr>),
    /// `[a, b]`.
    Array(Vec<Expr>),
    /// `{a, b}` (a struct; its items are often [`ExprKind::Assign`]).
    Struct(Vec<Expr>),
    /// `name(args)`: `htons(8080)`, `inet_addr("...")`, `sizeof(...)`, `msg_iov(1)`.
    Call(String, Vec<Expr>),
}

impl Expr {
    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self.kind {
            ExprKind::Int(v) => Some(v),
            _ => None,
        }
    }

    /// The word, if this is one.
    pub fn as_word(&self) -> Option<&str> {
        match &self.kind {
            ExprKind::Word(w) => Some(w),
            _ => None,
        }
    }

    /// The items, if this is a struct.
    pub fn as_struct(&self) -> Option<&[Expr]> {
        match &self.kind {
            ExprKind::Struct(v) => Some(v),
            _ => None,
        }
    }

    /// The items, if this is an array.
    pub fn as_array(&self) -> Option<&[Expr]> {
        match &self.kind {
            ExprKind::Array(v) => Some(v),
            _ => None,
        }
    }

    /// The name an assignment's left side gives: `f` for `f=...` and `f(...)=...`.
    pub fn assign_name(&self) -> Option<&str> {
        match &self.kind {
            ExprKind::Assign(lhs, _) => match &lhs.kind {
                ExprKind::Word(w) | ExprKind::Call(w, _) => Some(w),
                _ => None,
            },
            _ => None,
        }
    }

    /// In a struct, the value assigned to field `name`.
    pub fn field(&self, name: &str) -> Option<&Expr> {
        self.as_struct()?.iter().find_map(|item| match &item.kind {
            ExprKind::Assign(_, rhs) if item.assign_name() == Some(name) => Some(&**rhs),
            _ => None,
        })
    }

    /// The names of a bitwise-or chain (`A|B|C`), or the single word.
    pub fn or_words(&self) -> Option<Vec<&str>> {
        match &self.kind {
            ExprKind::Word(w) => Some(vec![w]),
            ExprKind::BitOr(a, b) => {
                let mut v = a.or_words()?;
                v.extend(b.or_words()?);
                Some(v)
            }
            _ => None,
        }
    }
}

/// A `%{ ... }%` block.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeBlock {
    /// Source line of `%{`.
    pub line: u32,
    /// The text between the delimiters, verbatim.
    pub text: String,
    /// The statements, when the text is within the simple subset (assertions,
    /// assignments, prints) that [`super::code`] parses; `None` otherwise.
    pub statements: Option<Vec<CodeStmt>>,
}

/// A statement of the code subset.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeStmt {
    /// Source line in the script.
    pub line: u32,
    /// The statement.
    pub kind: CodeStmtKind,
}

/// The statements of the code subset.
#[derive(Debug, Clone, PartialEq)]
pub enum CodeStmtKind {
    /// `assert test[, message]`.
    Assert {
        /// The condition.
        test: CodeExpr,
        /// The message expression.
        message: Option<CodeExpr>,
    },
    /// `name = value`, `name += value`, ...
    Assign {
        /// Target variable.
        target: String,
        /// `None` for `=`, else the operator of `op=`.
        op: Option<CodeBinOp>,
        /// The value.
        value: CodeExpr,
    },
    /// A bare expression (`print(x)`).
    Expr(CodeExpr),
}

/// Binary operators of the code subset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeBinOp {
    /// `or`
    Or,
    /// `and`
    And,
    /// `|`
    BitOr,
    /// `^`
    BitXor,
    /// `&`
    BitAnd,
    /// `<<`
    Shl,
    /// `>>`
    Shr,
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `//`
    FloorDiv,
    /// `%`
    Mod,
}

/// Comparison operators of the code subset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeCmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// Expressions of the code subset (a small part of Python).
#[derive(Debug, Clone, PartialEq)]
pub enum CodeExpr {
    /// An integer.
    Int(i64),
    /// A name (`tcpi_snd_cwnd`, `TCP_CA_Open`).
    Name(String),
    /// A string literal.
    Str(String),
    /// `f(args)`.
    Call(String, Vec<CodeExpr>),
    /// `a op b`.
    Binary(CodeBinOp, Box<CodeExpr>, Box<CodeExpr>),
    /// A comparison chain `a < b <= c`.
    Compare(Box<CodeExpr>, Vec<(CodeCmpOp, CodeExpr)>),
    /// `not a`.
    Not(Box<CodeExpr>),
    /// `-a`.
    Neg(Box<CodeExpr>),
    /// `~a`.
    Invert(Box<CodeExpr>),
    /// `(a, b)`.
    Tuple(Vec<CodeExpr>),
}
