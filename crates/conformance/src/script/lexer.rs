//! The lexer: script text to a flat list of tokens, each with its line, column and
//! byte span.
//!
//! Design. The script language is not line-oriented (a syscall may span a dozen lines),
//! so the lexer ignores newlines and the parser works on tokens alone. A few lexemes
//! are read whole because their insides are not script syntax: back-quoted shell
//! commands, `%{ ... }%` code blocks (kept verbatim), string literals (escapes decoded
//! to bytes) and `--name=value` option lines (the value is kept as raw text, because
//! it may be an IPv6 address or a quoted string). Comments are `//` to the end of the
//! line and `/* ... */`.
//!
//! Numbers: decimal and `0x` hex integers, decimals with a fraction (`0.400`, `.1`),
//! and dotted quads (`192.0.2.1`). A run of digits followed directly by letters
//! (`3021b9d889017eeb`, a Fast Open cookie) is one word, not a number and a word. A
//! `-` directly before a digit makes a negative integer (`= -1`); alone it is
//! [`Tok::Minus`] (the "no flags" packet). `.` before a digit starts a number, `...` is
//! [`Tok::Ellipsis`], any other `.` is [`Tok::Dot`] (the ACK flag in `S.`).
//!
//! A character the language does not use becomes [`Tok::Other`] rather than an error,
//! so that free text inside an errno note still lexes; the parser rejects it anywhere
//! else. The lexer always moves forward and every loop consumes input, so it ends on any
//! input.

use super::ParseError;

/// One lexeme.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// An identifier or a letters-and-digits run (`socket`, `S`, `sackOK`, `00ab12`).
    Word(String),
    /// A decimal or hex integer, possibly negative; the text is kept for hex blobs.
    Int(i64),
    /// A number with a fraction, as written (`0.400`, `.1`).
    Float(String),
    /// A dotted-quad IPv4 address.
    Ipv4(std::net::Ipv4Addr),
    /// A string literal, escapes decoded.
    Str(Vec<u8>),
    /// A back-quoted shell command (without the quotes).
    BackQuoted(String),
    /// A `%{ ... }%` code block (without the delimiters), verbatim.
    Code(String),
    /// `--name` or `--name=value`.
    Option {
        /// The name after `--`.
        name: String,
        /// The raw text after `=`, if any.
        value: Option<String>,
    },
    /// `...`
    Ellipsis,
    /// `.`
    Dot,
    /// `-` not followed by a digit.
    Minus,
    /// `+`
    Plus,
    /// `*`
    Star,
    /// `~`
    Tilde,
    /// `(`
    LParen,
    /// `)`
    RParen,
    /// `[`
    LBracket,
    /// `]`
    RBracket,
    /// `{`
    LBrace,
    /// `}`
    RBrace,
    /// `<`
    Lt,
    /// `>`
    Gt,
    /// `,`
    Comma,
    /// `:`
    Colon,
    /// `=`
    Eq,
    /// `|`
    Pipe,
    /// Any other character.
    Other(char),
}

impl Tok {
    /// A short description for error messages.
    pub fn describe(&self) -> String {
        match self {
            Tok::Word(w) => format!("word `{w}`"),
            Tok::Int(i) => format!("integer {i}"),
            Tok::Float(f) => format!("number {f}"),
            Tok::Ipv4(a) => format!("address {a}"),
            Tok::Str(_) => "string".to_string(),
            Tok::BackQuoted(_) => "shell command".to_string(),
            Tok::Code(_) => "code block".to_string(),
            Tok::Option { name, .. } => format!("option --{name}"),
            Tok::Ellipsis => "`...`".to_string(),
            Tok::Dot => "`.`".to_string(),
            Tok::Minus => "`-`".to_string(),
            Tok::Plus => "`+`".to_string(),
            Tok::Star => "`*`".to_string(),
            Tok::Tilde => "`~`".to_string(),
            Tok::LParen => "`(`".to_string(),
            Tok::RParen => "`)`".to_string(),
            Tok::LBracket => "`[`".to_string(),
            Tok::RBracket => "`]`".to_string(),
            Tok::LBrace => "`{`".to_string(),
            Tok::RBrace => "`}`".to_string(),
            Tok::Lt => "`<`".to_string(),
            Tok::Gt => "`>`".to_string(),
            Tok::Comma => "`,`".to_string(),
            Tok::Colon => "`:`".to_string(),
            Tok::Eq => "`=`".to_string(),
            Tok::Pipe => "`|`".to_string(),
            Tok::Other(c) => format!("character {c:?}"),
        }
    }
}

/// A token with its position.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    /// The lexeme.
    pub tok: Tok,
    /// 1-based line of its first character.
    pub line: u32,
    /// 1-based column (in characters) of its first character.
    pub col: u32,
    /// Byte offset of its first character in the source.
    pub start: usize,
    /// Byte offset just past its last character.
    pub end: usize,
}

struct Lexer<'a> {
    src: &'a str,
    chars: Vec<(usize, char)>,
    i: usize,
    line: u32,
    col: u32,
}

impl<'a> Lexer<'a> {
    fn peek(&self, k: usize) -> Option<char> {
        self.chars.get(self.i + k).map(|&(_, c)| c)
    }

    fn offset(&self) -> usize {
        self.chars.get(self.i).map_or(self.src.len(), |&(o, _)| o)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        self.i += 1;
        if c == '\n' {
            self.line = self.line.saturating_add(1);
            self.col = 1;
        } else {
            self.col = self.col.saturating_add(1);
        }
        Some(c)
    }

    fn err(&self, line: u32, col: u32, msg: impl Into<String>) -> ParseError {
        ParseError {
            line,
            column: col,
            message: msg.into(),
        }
    }

    fn starts_with(&self, s: &str) -> bool {
        s.chars().enumerate().all(|(k, c)| self.peek(k) == Some(c))
    }

    /// Skips whitespace and comments.
    fn skip_trivia(&mut self) -> Result<(), ParseError> {
        loop {
            match self.peek(0) {
                Some(c) if c.is_whitespace() => {
                    self.bump();
                }
                Some('/') if self.peek(1) == Some('/') => {
                    while let Some(c) = self.peek(0) {
                        if c == '\n' {
                            break;
                        }
                        self.bump();
                    }
                }
                Some('/') if self.peek(1) == Some('*') => {
                    let (line, col) = (self.line, self.col);
                    self.bump();
                    self.bump();
                    loop {
                        if self.starts_with("*/") {
                            self.bump();
                            self.bump();
                            break;
                        }
                        if self.bump().is_none() {
                            return Err(self.err(line, col, "unterminated /* comment"));
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn is_word_char(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '_'
    }

    fn take_while(&mut self, f: impl Fn(char) -> bool) -> String {
        let mut s = String::new();
        while let Some(c) = self.peek(0) {
            if !f(c) {
                break;
            }
            s.push(c);
            self.bump();
        }
        s
    }

    fn string(&mut self, line: u32, col: u32) -> Result<Vec<u8>, ParseError> {
        self.bump(); // opening quote
        let mut out = Vec::new();
        loop {
            let Some(c) = self.bump() else {
                return Err(self.err(line, col, "unterminated string"));
            };
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let Some(e) = self.bump() else {
                        return Err(self.err(line, col, "unterminated string"));
                    };
                    match e {
                        'n' => out.push(b'\n'),
                        't' => out.push(b'\t'),
                        'r' => out.push(b'\r'),
                        '0' => out.push(0),
                        '\\' => out.push(b'\\'),
                        '"' => out.push(b'"'),
                        '\'' => out.push(b'\''),
                        'x' => {
                            let mut v: u32 = 0;
                            let mut n = 0;
                            while n < 2 {
                                match self.peek(0).and_then(|c| c.to_digit(16)) {
                                    Some(d) => {
                                        v = v * 16 + d;
                                        n += 1;
                                        self.bump();
                                    }
                                    None => break,
                                }
                            }
                            if n == 0 {
                                return Err(self.err(
                                    self.line,
                                    self.col,
                                    "\\x without hex digits",
                                ));
                            }
                            out.push(v as u8);
                        }
                        other => {
                            return Err(self.err(
                                self.line,
                                self.col,
                                format!("unknown string escape \\{other}"),
                            ))
                        }
                    }
                }
                c => {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
    }

    /// Reads everything up to (not including) `close`, consuming the terminator.
    fn delimited(
        &mut self,
        close: &str,
        line: u32,
        col: u32,
        what: &str,
    ) -> Result<String, ParseError> {
        let mut s = String::new();
        loop {
            if self.starts_with(close) {
                for _ in close.chars() {
                    self.bump();
                }
                return Ok(s);
            }
            match self.bump() {
                Some(c) => s.push(c),
                None => return Err(self.err(line, col, format!("unterminated {what}"))),
            }
        }
    }

    /// The raw value of an `--option=value`: up to whitespace or a `//` comment, with
    /// quoted parts read whole.
    fn option_value(&mut self, line: u32, col: u32) -> Result<String, ParseError> {
        let mut s = String::new();
        while let Some(c) = self.peek(0) {
            if c.is_whitespace() || self.starts_with("//") {
                break;
            }
            if c == '"' || c == '`' {
                self.bump();
                s.push(c);
                loop {
                    match self.bump() {
                        Some(d) if d == c => {
                            s.push(d);
                            break;
                        }
                        Some(d) => s.push(d),
                        None => {
                            return Err(self.err(line, col, "unterminated quote in option value"))
                        }
                    }
                }
                continue;
            }
            s.push(c);
            self.bump();
        }
        Ok(s)
    }

    fn number(&mut self, line: u32, col: u32, negative: bool) -> Result<Tok, ParseError> {
        // Hex.
        if self.peek(0) == Some('0') && matches!(self.peek(1), Some('x' | 'X')) {
            self.bump();
            self.bump();
            let digits = self.take_while(|c| c.is_ascii_hexdigit());
            if digits.is_empty() || self.peek(0).is_some_and(Self::is_word_char) {
                return Err(self.err(line, col, "malformed hex integer"));
            }
            let v = u64::from_str_radix(&digits, 16)
                .ok()
                .and_then(|v| i64::try_from(v).ok())
                .ok_or_else(|| self.err(line, col, "hex integer out of range"))?;
            return Ok(Tok::Int(if negative { -v } else { v }));
        }
        let mut text = self.take_while(|c| c.is_ascii_digit());
        // Dotted quad?
        if !negative && !text.is_empty() && self.is_dotted_quad_ahead() {
            for _ in 0..3 {
                text.push('.');
                self.bump();
                text.push_str(&self.take_while(|c| c.is_ascii_digit()));
            }
            return text
                .parse::<std::net::Ipv4Addr>()
                .map(Tok::Ipv4)
                .map_err(|_| self.err(line, col, format!("bad IPv4 address {text}")));
        }
        let mut is_float = false;
        if self.peek(0) == Some('.') && self.peek(1).is_some_and(|c| c.is_ascii_digit()) {
            is_float = true;
            self.bump();
            text.push('.');
            text.push_str(&self.take_while(|c| c.is_ascii_digit()));
        }
        if self.peek(0).is_some_and(Self::is_word_char) {
            // A digits-and-letters run: a hex blob such as a cookie.
            if is_float || negative {
                return Err(self.err(line, col, "malformed number"));
            }
            text.push_str(&self.take_while(Self::is_word_char));
            return Ok(Tok::Word(text));
        }
        if is_float {
            if negative {
                return Err(self.err(line, col, "negative times are not allowed"));
            }
            return Ok(Tok::Float(text));
        }
        let v: i64 = text
            .parse()
            .map_err(|_| self.err(line, col, "integer out of range"))?;
        Ok(Tok::Int(if negative { -v } else { v }))
    }

    fn is_dotted_quad_ahead(&self) -> bool {
        // At the first '.' after the first group of digits: need `.d+.d+.d+`.
        let mut k = 0;
        for _ in 0..3 {
            if self.peek(k) != Some('.') {
                return false;
            }
            k += 1;
            let mut n = 0;
            while self.peek(k).is_some_and(|c| c.is_ascii_digit()) {
                k += 1;
                n += 1;
            }
            if n == 0 {
                return false;
            }
        }
        !self
            .peek(k)
            .is_some_and(|c| c == '.' || Self::is_word_char(c))
    }

    fn next(&mut self) -> Result<Option<Token>, ParseError> {
        self.skip_trivia()?;
        let (line, col, start) = (self.line, self.col, self.offset());
        let Some(c) = self.peek(0) else {
            return Ok(None);
        };
        let tok = match c {
            '`' => {
                self.bump();
                Tok::BackQuoted(self.delimited("`", line, col, "shell command")?)
            }
            '%' if self.peek(1) == Some('{') => {
                self.bump();
                self.bump();
                Tok::Code(self.delimited("}%", line, col, "code block")?)
            }
            '"' => Tok::Str(self.string(line, col)?),
            '-' if self.peek(1) == Some('-')
                && self
                    .peek(2)
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_') =>
            {
                self.bump();
                self.bump();
                let name = self.take_while(|c| Self::is_word_char(c) || c == '-');
                let value = if self.peek(0) == Some('=') {
                    self.bump();
                    Some(self.option_value(line, col)?)
                } else {
                    None
                };
                Tok::Option { name, value }
            }
            '-' if self.peek(1).is_some_and(|c| c.is_ascii_digit()) => {
                self.bump();
                self.number(line, col, true)?
            }
            '.' if self.starts_with("...") => {
                for _ in 0..3 {
                    self.bump();
                }
                Tok::Ellipsis
            }
            '.' if self.peek(1).is_some_and(|c| c.is_ascii_digit()) => {
                self.bump();
                let frac = self.take_while(|c| c.is_ascii_digit());
                if self.peek(0).is_some_and(Self::is_word_char) {
                    return Err(self.err(line, col, "malformed number"));
                }
                Tok::Float(format!(".{frac}"))
            }
            c if c.is_ascii_digit() => self.number(line, col, false)?,
            c if c.is_ascii_alphabetic() || c == '_' => {
                Tok::Word(self.take_while(Self::is_word_char))
            }
            _ => {
                self.bump();
                match c {
                    '.' => Tok::Dot,
                    '-' => Tok::Minus,
                    '+' => Tok::Plus,
                    '*' => Tok::Star,
                    '~' => Tok::Tilde,
                    '(' => Tok::LParen,
                    ')' => Tok::RParen,
                    '[' => Tok::LBracket,
                    ']' => Tok::RBracket,
                    '{' => Tok::LBrace,
                    '}' => Tok::RBrace,
                    '<' => Tok::Lt,
                    '>' => Tok::Gt,
                    ',' => Tok::Comma,
                    ':' => Tok::Colon,
                    '=' => Tok::Eq,
                    '|' => Tok::Pipe,
                    other => Tok::Other(other),
                }
            }
        };
        Ok(Some(Token {
            tok,
            line,
            col,
            start,
            end: self.offset(),
        }))
    }
}

/// Splits `src` into tokens.
pub fn tokenize(src: &str) -> Result<Vec<Token>, ParseError> {
    let mut lx = Lexer {
        src,
        chars: src.char_indices().collect(),
        i: 0,
        line: 1,
        col: 1,
    };
    let mut out = Vec::new();
    while let Some(t) = lx.next()? {
        out.push(t);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        tokenize(s).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn numbers_words_and_dots() {
        assert_eq!(
            toks("+.25...1.5 P. 7:9(2) -3 0x1f ab12 12ab"),
            vec![
                Tok::Plus,
                Tok::Float(".25".into()),
                Tok::Ellipsis,
                Tok::Float("1.5".into()),
                Tok::Word("P".into()),
                Tok::Dot,
                Tok::Int(7),
                Tok::Colon,
                Tok::Int(9),
                Tok::LParen,
                Tok::Int(2),
                Tok::RParen,
                Tok::Int(-3),
                Tok::Int(31),
                Tok::Word("ab12".into()),
                Tok::Word("12ab".into()),
            ]
        );
        assert_eq!(toks("0...2"), vec![Tok::Int(0), Tok::Ellipsis, Tok::Int(2)]);
        assert_eq!(toks("- 1"), vec![Tok::Minus, Tok::Int(1)]);
        assert_eq!(
            toks("10.1.2.3"),
            vec![Tok::Ipv4("10.1.2.3".parse().unwrap())]
        );
    }

    #[test]
    fn comments_strings_commands_code() {
        let t = tokenize("a // x\n/* y\n z */ \"q\\x41\\n\" `ls\n -l` %{ x = 1 }% b").unwrap();
        let kinds: Vec<Tok> = t.iter().map(|t| t.tok.clone()).collect();
        assert_eq!(
            kinds,
            vec![
                Tok::Word("a".into()),
                Tok::Str(b"qA\n".to_vec()),
                Tok::BackQuoted("ls\n -l".into()),
                Tok::Code(" x = 1 ".into()),
                Tok::Word("b".into()),
            ]
        );
        assert_eq!((t[1].line, t[1].col), (3, 7));
        assert_eq!(t[4].line, 4);
    }

    #[test]
    fn options_keep_raw_values() {
        assert_eq!(
            toks("--ip=fd::1 --flag // c\n--d=X=\"a b\""),
            vec![
                Tok::Option {
                    name: "ip".into(),
                    value: Some("fd::1".into())
                },
                Tok::Option {
                    name: "flag".into(),
                    value: None
                },
                Tok::Option {
                    name: "d".into(),
                    value: Some("X=\"a b\"".into())
                },
            ]
        );
    }

    #[test]
    fn unterminated_things_are_errors() {
        for s in [
            "`abc",
            "%{ x",
            "\"abc",
            "/* x",
            "\"\\q\"",
            "0x",
            "99999999999999999999",
        ] {
            assert!(tokenize(s).is_err(), "{s}");
        }
        let e = tokenize("a\n  `x").unwrap_err();
        assert_eq!((e.line, e.column), (2, 3));
    }
}
