//! The parser: tokens to a [`Script`].
//!
//! Design. A hand-written recursive-descent parser over the token list, following
//! the grammar in packetdrill's `syntax.md` (the clean-room source for this crate)
//! with the corpus as the judge of what is used. Two tokens of look-ahead are enough
//! everywhere: an event starts with its time (`*`, `+t`, `t`, `a~b`), and the token
//! after the time picks the action (`<`/`>` a packet, a back-quoted command, a code
//! block, `...` or a word a syscall). Because events always start with a time and
//! nothing inside an event can start with one in the same position, the grammar is
//! not line-sensitive and multi-line syscalls need no special treatment.
//!
//! Syscall arguments are parsed into one generic expression grammar (ellipsis,
//! integers, words, strings, `|` chains, `name = value`, arrays, braces, calls),
//! which covers every special form the grammar lists (sockaddr, msghdr, iovec,
//! pollfd, epoll events, linger, cmsgs, extended errors) without special-casing them.
//! Nesting depth is bounded ([`MAX_DEPTH`]) so hostile input cannot overflow the stack;
//! every loop consumes a token or fails, so parsing ends.

use super::ast::*;
use super::code;
use super::lexer::{tokenize, Tok, Token};
use super::ParseError;

/// The deepest nesting of brackets, braces and parentheses accepted.
pub const MAX_DEPTH: usize = 64;

struct Parser<'a> {
    src: &'a str,
    toks: Vec<Token>,
    pos: usize,
    eof_line: u32,
    eof_col: u32,
}

type PResult<T> = Result<T, ParseError>;

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.tok)
    }

    fn peek_at(&self, k: usize) -> Option<&Tok> {
        self.toks.get(self.pos + k).map(|t| &t.tok)
    }

    fn line(&self) -> u32 {
        self.toks.get(self.pos).map_or(self.eof_line, |t| t.line)
    }

    fn err_here(&self, msg: impl Into<String>) -> ParseError {
        let (line, column) = self
            .toks
            .get(self.pos)
            .map_or((self.eof_line, self.eof_col), |t| (t.line, t.col));
        ParseError {
            line,
            column,
            message: msg.into(),
        }
    }

    fn unexpected(&self, wanted: &str) -> ParseError {
        let found = self
            .peek()
            .map_or_else(|| "end of script".to_string(), Tok::describe);
        self.err_here(format!("expected {wanted}, found {found}"))
    }

    fn bump(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos)?.tok.clone();
        self.pos += 1;
        Some(t)
    }

    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == Some(t) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, t: &Tok, wanted: &str) -> PResult<()> {
        if self.eat(t) {
            Ok(())
        } else {
            Err(self.unexpected(wanted))
        }
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Some(Tok::Word(x)) if x == w)
    }

    fn eat_word(&mut self, w: &str) -> bool {
        if self.is_word(w) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn word(&mut self, wanted: &str) -> PResult<String> {
        match self.peek() {
            Some(Tok::Word(w)) => {
                let w = w.clone();
                self.pos += 1;
                Ok(w)
            }
            _ => Err(self.unexpected(wanted)),
        }
    }

    /// An integer that must fit `T` (checked before the token is consumed, so the
    /// error points at it).
    fn int_in<T: TryFrom<i64>>(&mut self, wanted: &str) -> PResult<T> {
        let v = match self.peek() {
            Some(Tok::Int(v)) => *v,
            _ => return Err(self.unexpected(wanted)),
        };
        let out =
            T::try_from(v).map_err(|_| self.err_here(format!("{wanted} {v} is out of range")))?;
        self.pos += 1;
        Ok(out)
    }

    // ---- script level ----

    fn script(&mut self) -> PResult<Script> {
        let mut options = Vec::new();
        while let Some(Tok::Option { name, value }) = self.peek() {
            options.push(ScriptOption {
                line: self.line(),
                name: name.clone(),
                value: value.clone(),
            });
            self.pos += 1;
        }
        let init_command = match self.peek() {
            Some(Tok::BackQuoted(text)) => {
                let c = Command {
                    line: self.line(),
                    text: text.clone(),
                };
                self.pos += 1;
                Some(c)
            }
            _ => None,
        };
        let mut events = Vec::new();
        let mut cleanup_command = None;
        while let Some(t) = self.peek() {
            if let Tok::BackQuoted(text) = t {
                // An untimed command after the events: must be the last thing.
                let c = Command {
                    line: self.line(),
                    text: text.clone(),
                };
                self.pos += 1;
                if self.peek().is_some() {
                    return Err(self.err_here(
                        "only the last shell command of a script may lack a time (expected end of script)",
                    ));
                }
                cleanup_command = Some(c);
                break;
            }
            if let Tok::Option { .. } = t {
                return Err(self.err_here("options must come before the first event"));
            }
            events.push(self.event()?);
        }
        if events.is_empty() {
            return Err(self.err_here("a script needs at least one event"));
        }
        Ok(Script {
            options,
            init_command,
            events,
            cleanup_command,
        })
    }

    fn time(&mut self) -> PResult<Time> {
        let (line, col) = self
            .toks
            .get(self.pos)
            .map_or((self.eof_line, self.eof_col), |t| (t.line, t.col));
        let micros = match self.peek() {
            Some(Tok::Int(v)) if *v >= 0 => v.checked_mul(1_000_000),
            Some(Tok::Float(text)) => parse_seconds(text),
            _ => return Err(self.unexpected("a time")),
        };
        let micros = micros.ok_or(ParseError {
            line,
            column: col,
            message: "time out of range".into(),
        })?;
        self.pos += 1;
        Ok(Time { micros })
    }

    fn event_time(&mut self) -> PResult<EventTime> {
        if self.eat(&Tok::Star) {
            return Ok(EventTime::Any);
        }
        if self.eat(&Tok::Plus) {
            let a = self.time()?;
            if self.eat(&Tok::Tilde) {
                self.expect(&Tok::Plus, "`+` (a relative range is `+a~+b`)")?;
                let b = self.time()?;
                return Ok(EventTime::RelativeRange(a, b));
            }
            return Ok(EventTime::Relative(a));
        }
        let a = self.time()?;
        if self.eat(&Tok::Tilde) {
            let b = self.time()?;
            return Ok(EventTime::AbsoluteRange(a, b));
        }
        Ok(EventTime::Absolute(a))
    }

    fn event(&mut self) -> PResult<Event> {
        let line = self.line();
        let time = self.event_time()?;
        let action = match self.peek() {
            Some(Tok::Lt | Tok::Gt) => Action::Packet(self.packet()?),
            Some(Tok::BackQuoted(text)) => {
                let c = Command {
                    line: self.line(),
                    text: text.clone(),
                };
                self.pos += 1;
                Action::Command(c)
            }
            Some(Tok::Code(text)) => {
                let line = self.line();
                let text = text.clone();
                self.pos += 1;
                let statements = code::parse_code(&text, line);
                Action::Code(CodeBlock {
                    line,
                    text,
                    statements,
                })
            }
            Some(Tok::Ellipsis | Tok::Word(_)) => Action::Syscall(self.syscall()?),
            _ => return Err(self.unexpected("a packet, syscall, shell command or code block")),
        };
        Ok(Event { line, time, action })
    }

    // ---- packets ----

    fn packet(&mut self) -> PResult<Packet> {
        let line = self.line();
        let direction = match self.bump() {
            Some(Tok::Lt) => Direction::Inbound,
            _ => Direction::Outbound,
        };
        let mut encapsulation = Vec::new();
        while self.is_word("ipv4") {
            self.pos += 1;
            let ip = self.opt_ip_info()?;
            let src = self.ipv4_addr()?;
            self.expect(&Tok::Gt, "`>` between outer addresses")?;
            let dst = self.ipv4_addr()?;
            self.expect(&Tok::Colon, "`:` after the outer header")?;
            encapsulation.push(Encapsulation::Ipv4 { ip, src, dst });
            if encapsulation.len() > MAX_DEPTH {
                return Err(self.err_here("too many outer headers"));
            }
        }
        if matches!(self.peek(), Some(Tok::Word(w)) if w == "ipv6" || w == "gre" || w == "mpls") {
            return Err(self.err_here("ipv6, gre and mpls encapsulation are not supported"));
        }
        let ip = self.opt_ip_info()?;
        let body = if self.eat_word("udp") {
            let ports = self.opt_ports()?;
            self.expect(&Tok::LParen, "`(` before the UDP length")?;
            let len = self.int_in("UDP length")?;
            self.expect(&Tok::RParen, "`)`")?;
            PacketBody::Udp(UdpPacket { ports, len })
        } else if self.eat_word("icmp") {
            PacketBody::Icmp(self.icmp()?)
        } else {
            PacketBody::Tcp(self.tcp()?)
        };
        Ok(Packet {
            line,
            direction,
            encapsulation,
            ip,
            body,
        })
    }

    fn ipv4_addr(&mut self) -> PResult<std::net::Ipv4Addr> {
        match self.peek() {
            Some(Tok::Ipv4(a)) => {
                let a = *a;
                self.pos += 1;
                Ok(a)
            }
            _ => Err(self.unexpected("an IPv4 address")),
        }
    }

    fn opt_ip_info(&mut self) -> PResult<Option<IpInfo>> {
        let close = match self.peek() {
            Some(Tok::LBracket) => Tok::RBracket,
            Some(Tok::LParen) => Tok::RParen,
            _ => return Ok(None),
        };
        self.pos += 1;
        let mut info = IpInfo::default();
        loop {
            let w = self.word("an IP field (ecn mark, tos, flowlabel, ttl)")?;
            match w.as_str() {
                "noecn" => info.ecn = Some(Ecn::NoEcn),
                "ect0" => info.ecn = Some(Ecn::Ect0),
                "ect1" => info.ecn = Some(Ecn::Ect1),
                "ce" => info.ecn = Some(Ecn::Ce),
                "ect01" => info.ecn = Some(Ecn::Ect01),
                "tos" => info.tos = Some(self.int_in("tos")?),
                "flowlabel" => info.flow_label = Some(self.int_in("flow label")?),
                "ttl" => info.ttl = Some(self.int_in("ttl")?),
                other => {
                    self.pos -= 1;
                    return Err(self.err_here(format!("unknown IP field `{other}`")));
                }
            }
            if !self.eat(&Tok::Comma) {
                break;
            }
        }
        self.expect(&close, "the end of the IP fields")?;
        Ok(Some(info))
    }

    fn opt_ports(&mut self) -> PResult<Option<Ports>> {
        if matches!(self.peek(), Some(Tok::Int(_))) && self.peek_at(1) == Some(&Tok::Gt) {
            let src = self.int_in("source port")?;
            self.pos += 1;
            let dst = self.int_in("destination port")?;
            return Ok(Some(Ports { src, dst }));
        }
        Ok(None)
    }

    fn seq_range(&mut self) -> PResult<SeqRange> {
        let start = self.int_in("sequence number")?;
        self.expect(&Tok::Colon, "`:` in start:end(len)")?;
        let end = self.int_in("end sequence number")?;
        self.expect(&Tok::LParen, "`(` in start:end(len)")?;
        let len = self.int_in("length")?;
        self.expect(&Tok::RParen, "`)` in start:end(len)")?;
        Ok(SeqRange { start, end, len })
    }

    fn flags(&mut self) -> PResult<TcpFlags> {
        let mut f = TcpFlags::default();
        match self.peek() {
            Some(Tok::Minus) => {
                self.pos += 1;
                Ok(f)
            }
            Some(Tok::Dot) => {
                self.pos += 1;
                f.ack = true;
                Ok(f)
            }
            Some(Tok::Word(w)) => {
                for c in w.chars() {
                    let slot = match c {
                        'F' => &mut f.fin,
                        'S' => &mut f.syn,
                        'R' => &mut f.rst,
                        'P' => &mut f.psh,
                        'U' => &mut f.urg,
                        'E' => &mut f.ece,
                        'W' => &mut f.cwr,
                        _ => return Err(self.err_here(format!("unknown TCP flag {c:?} in `{w}`"))),
                    };
                    if *slot {
                        return Err(self.err_here(format!("TCP flag {c:?} repeated in `{w}`")));
                    }
                    *slot = true;
                }
                self.pos += 1;
                if self.eat(&Tok::Dot) {
                    f.ack = true;
                }
                Ok(f)
            }
            _ => Err(self.unexpected("TCP flags, `udp` or `icmp`")),
        }
    }

    fn tcp(&mut self) -> PResult<TcpPacket> {
        let ports = self.opt_ports()?;
        let flags = self.flags()?;
        let seq = self.seq_range()?;
        let ack = if self.eat_word("ack") {
            Some(self.int_in("ack number")?)
        } else {
            None
        };
        let win = if self.eat_word("win") {
            Some(self.int_in("window")?)
        } else {
            None
        };
        let urg = if self.eat_word("urg") {
            Some(self.int_in("urgent pointer")?)
        } else {
            None
        };
        let options = if self.eat(&Tok::Lt) {
            if self.eat(&Tok::Ellipsis) {
                self.expect(&Tok::Gt, "`>` after `<...`")?;
                Some(TcpOptions::Any)
            } else {
                let mut list = Vec::new();
                loop {
                    list.push(self.tcp_option()?);
                    if !self.eat(&Tok::Comma) {
                        break;
                    }
                }
                self.expect(&Tok::Gt, "`,` or `>` in the TCP options")?;
                Some(TcpOptions::List(list))
            }
        } else {
            None
        };
        Ok(TcpPacket {
            ports,
            flags,
            seq,
            ack,
            win,
            urg,
            options,
        })
    }

    /// An optional hex blob (cookie): a word or an integer, as written.
    fn opt_hex_blob(&mut self) -> Option<String> {
        let t = self.toks.get(self.pos)?;
        match &t.tok {
            Tok::Word(_) | Tok::Int(_) => {
                let text = self.src[t.start..t.end].to_string();
                self.pos += 1;
                Some(text)
            }
            _ => None,
        }
    }

    fn tcp_option(&mut self) -> PResult<TcpOption> {
        let w = self.word("a TCP option")?;
        Ok(match w.as_str() {
            "nop" => TcpOption::Nop,
            "eol" => TcpOption::Eol,
            "mss" => TcpOption::Mss(self.int_in("mss")?),
            "wscale" => TcpOption::WindowScale(self.int_in("window scale")?),
            "sackOK" => TcpOption::SackPermitted,
            "sack" => {
                let mut blocks = Vec::new();
                while matches!(self.peek(), Some(Tok::Int(_))) {
                    let a = self.int_in("SACK block start")?;
                    self.expect(&Tok::Colon, "`:` in a SACK block")?;
                    let b = self.int_in("SACK block end")?;
                    blocks.push((a, b));
                }
                if blocks.is_empty() {
                    return Err(self.unexpected("a SACK block start:end"));
                }
                TcpOption::Sack(blocks)
            }
            "TS" => {
                if !self.eat_word("val") {
                    return Err(self.unexpected("`val`"));
                }
                let val = self.int_in("TS val")?;
                if !self.eat_word("ecr") {
                    return Err(self.unexpected("`ecr`"));
                }
                let ecr = self.int_in("TS ecr")?;
                TcpOption::Timestamp { val, ecr }
            }
            "md5" => match self.opt_hex_blob() {
                Some(h) => TcpOption::Md5(h),
                None => return Err(self.unexpected("an MD5 digest")),
            },
            "FO" => TcpOption::FastOpen(self.opt_hex_blob()),
            "FOEXP" => TcpOption::FastOpenExp(self.opt_hex_blob()),
            other => {
                self.pos -= 1;
                return Err(self.err_here(format!("unknown TCP option `{other}`")));
            }
        })
    }

    fn icmp(&mut self) -> PResult<IcmpPacket> {
        let icmp_type = self.word("an ICMP type")?;
        let code = match self.peek() {
            Some(Tok::Word(w)) if w != "mtu" && w != "id" => {
                let w = w.clone();
                self.pos += 1;
                Some(w)
            }
            _ => None,
        };
        let mtu = if self.eat_word("mtu") {
            Some(self.int_in("mtu")?)
        } else {
            None
        };
        let echo_id = if self.eat_word("id") {
            Some(self.int_in("echo id")?)
        } else {
            None
        };
        let echoed = if self.eat(&Tok::LBracket) {
            let e = if self.eat_word("udp") {
                self.expect(&Tok::LParen, "`(`")?;
                let n = self.int_in("length")?;
                self.expect(&Tok::RParen, "`)`")?;
                IcmpEchoed::Udp(n)
            } else if self.eat_word("raw") {
                self.expect(&Tok::LParen, "`(`")?;
                let n = self.int_in("length")?;
                self.expect(&Tok::RParen, "`)`")?;
                IcmpEchoed::Raw(n)
            } else {
                IcmpEchoed::Tcp(self.seq_range()?)
            };
            self.expect(&Tok::RBracket, "`]`")?;
            Some(e)
        } else {
            None
        };
        Ok(IcmpPacket {
            icmp_type,
            code,
            mtu,
            echo_id,
            echoed,
        })
    }

    // ---- syscalls ----

    fn syscall(&mut self) -> PResult<Syscall> {
        let end_time = if self.eat(&Tok::Ellipsis) {
            Some(self.time()?)
        } else {
            None
        };
        let name = self.word("a syscall name")?;
        self.expect(&Tok::LParen, "`(` after the syscall name")?;
        let args = self.expr_list(&Tok::RParen, 1)?;
        self.expect(&Tok::Eq, "`=` and the expected return value")?;
        let ret = self.expr(false, 1)?;
        let errno = match self.peek() {
            Some(Tok::Word(w)) => {
                let w = w.clone();
                self.pos += 1;
                Some(w)
            }
            _ => None,
        };
        let note = if self.peek() == Some(&Tok::LParen) {
            Some(self.note()?)
        } else {
            None
        };
        Ok(Syscall {
            end_time,
            name,
            args,
            ret,
            errno,
            note,
        })
    }

    /// `( free text )`: the source text between the parentheses, trimmed.
    fn note(&mut self) -> PResult<String> {
        let open = self.toks[self.pos].end;
        self.pos += 1;
        loop {
            match self.peek() {
                Some(Tok::RParen) => {
                    let close = self.toks[self.pos].start;
                    self.pos += 1;
                    return Ok(self.src[open..close].trim().to_string());
                }
                Some(Tok::LParen | Tok::BackQuoted(_) | Tok::Code(_) | Tok::Option { .. })
                | None => return Err(self.unexpected("`)` closing the note")),
                Some(_) => self.pos += 1,
            }
        }
    }

    /// Comma-separated expressions up to `close` (consumed).
    fn expr_list(&mut self, close: &Tok, depth: usize) -> PResult<Vec<Expr>> {
        let mut out = Vec::new();
        if self.eat(close) {
            return Ok(out);
        }
        loop {
            out.push(self.expr(true, depth)?);
            if self.eat(close) {
                return Ok(out);
            }
            if !self.eat(&Tok::Comma) {
                return Err(self.unexpected(&format!("`,` or {}", close.describe())));
            }
        }
    }

    /// An expression: `a | b | ...`, and inside brackets `lhs = expr`.
    fn expr(&mut self, allow_assign: bool, depth: usize) -> PResult<Expr> {
        if depth > MAX_DEPTH {
            return Err(self.err_here(format!("nesting deeper than {MAX_DEPTH}")));
        }
        let line = self.line();
        let mut lhs = self.primary(depth)?;
        if allow_assign && self.peek() == Some(&Tok::Eq) {
            if !matches!(lhs.kind, ExprKind::Word(_) | ExprKind::Call(..)) {
                return Err(self.err_here("only a name or name(...) can be assigned to"));
            }
            self.pos += 1;
            let rhs = self.expr(true, depth + 1)?;
            return Ok(Expr {
                line,
                kind: ExprKind::Assign(Box::new(lhs), Box::new(rhs)),
            });
        }
        while self.eat(&Tok::Pipe) {
            let rhs = self.primary(depth)?;
            lhs = Expr {
                line,
                kind: ExprKind::BitOr(Box::new(lhs), Box::new(rhs)),
            };
        }
        Ok(lhs)
    }

    fn primary(&mut self, depth: usize) -> PResult<Expr> {
        let line = self.line();
        let kind = match self.peek() {
            Some(Tok::Ellipsis) => {
                self.pos += 1;
                ExprKind::Ellipsis
            }
            Some(Tok::Int(v)) => {
                let v = *v;
                self.pos += 1;
                ExprKind::Int(v)
            }
            Some(Tok::Str(s)) => {
                let s = s.clone();
                self.pos += 1;
                if self.eat(&Tok::Ellipsis) {
                    ExprKind::StrPrefix(s)
                } else {
                    ExprKind::Str(s)
                }
            }
            Some(Tok::Word(w)) => {
                let w = w.clone();
                self.pos += 1;
                if self.eat(&Tok::LParen) {
                    ExprKind::Call(w, self.expr_list(&Tok::RParen, depth + 1)?)
                } else {
                    ExprKind::Word(w)
                }
            }
            Some(Tok::LBracket) => {
                self.pos += 1;
                ExprKind::Array(self.expr_list(&Tok::RBracket, depth + 1)?)
            }
            Some(Tok::LBrace) => {
                self.pos += 1;
                ExprKind::Struct(self.expr_list(&Tok::RBrace, depth + 1)?)
            }
            _ => return Err(self.unexpected("an expression")),
        };
        Ok(Expr { line, kind })
    }
}

/// Decimal seconds (`1.25`, `.1`) to microseconds, exactly for up to six fractional
/// digits (further digits are truncated).
fn parse_seconds(text: &str) -> Option<i64> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let whole: i64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut micros: i64 = 0;
    for c in frac.chars().chain(std::iter::repeat('0')).take(6) {
        micros = micros * 10 + i64::from(c.to_digit(10)?);
    }
    whole.checked_mul(1_000_000)?.checked_add(micros)
}

/// Parses a whole script.
pub fn parse(source: &str) -> Result<Script, ParseError> {
    let toks = tokenize(source)?;
    let newlines = source.bytes().filter(|&b| b == b'\n').count();
    let eof_line = u32::try_from(newlines + 1).unwrap_or(u32::MAX);
    let last_line = source.rsplit('\n').next().unwrap_or("");
    let eof_col = u32::try_from(last_line.chars().count() + 1).unwrap_or(u32::MAX);
    let mut p = Parser {
        src: source,
        toks,
        pos: 0,
        eof_line,
        eof_col,
    };
    p.script()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds() {
        assert_eq!(parse_seconds(".1"), Some(100_000));
        assert_eq!(parse_seconds("0.400"), Some(400_000));
        assert_eq!(parse_seconds("1.2"), Some(1_200_000));
        assert_eq!(parse_seconds("2.0000019"), Some(2_000_001));
    }
}
