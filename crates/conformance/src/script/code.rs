//! A best-effort parser for the simple statements inside `%{ ... }%` code blocks.
//!
//! Design. Code blocks are Python, run after the preceding event with the socket's
//! `tcp_info` fields bound to `tcpi_*` names. The interpreter will evaluate them
//! itself (no Python), so it needs them as a tree; but the block text stays the
//! authority, and anything outside the small subset used in practice is not an error:
//! [`parse_code`] just returns `None` and the caller keeps the text alone.
//!
//! The subset: statements separated by newlines or `;` (a `\` at the end of a line
//! joins it to the next), `#` comments, `assert test[, message]`, `name = expr`,
//! `name op= expr`, and bare expressions (`print(x)`).
//! Expressions: integers, names, '...' / "..." strings, calls, parentheses and tuples,
//! `or and not`, chained comparisons, `| ^ & << >> + - * / // %`, unary `- ~`. Python
//! precedence. Nesting is bounded by [`super::parser::MAX_DEPTH`].

use super::ast::{CodeBinOp, CodeCmpOp, CodeExpr, CodeStmt, CodeStmtKind};
use super::parser::MAX_DEPTH;

#[derive(Debug, Clone, PartialEq)]
enum T {
    Name(String),
    Int(i64),
    Str(String),
    Op(&'static str),
    /// End of a statement (newline outside brackets, or `;`).
    End,
}

const OPS: [&str; 33] = [
    "//=", "<<=", ">>=", "**", "//", "<<", ">>", "<=", ">=", "==", "!=", "+=", "-=", "*=", "/=",
    "%=", "&=", "|=", "^=", "<", ">", "+", "-", "*", "/", "%", "&", "|", "^", "~", "(", ")", ",",
];

/// Tokens with the line offset (from the block's first line) of each.
fn lex(text: &str) -> Option<Vec<(T, u32)>> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let mut line = 0u32;
    let mut depth = 0usize;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            if depth == 0 {
                out.push((T::End, line));
            }
            line += 1;
            i += 1;
        } else if c == '\\' && chars.get(i + 1) == Some(&'\n') {
            // Line continuation.
            line += 1;
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == ';' {
            out.push((T::End, line));
            i += 1;
        } else if c == '=' && chars.get(i + 1) != Some(&'=') {
            out.push((T::Op("="), line));
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let s: String = chars[start..i].iter().filter(|&&c| c != '_').collect();
            let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
                i64::from_str_radix(h, 16).ok()?
            } else {
                s.parse().ok()?
            };
            out.push((T::Int(v), line));
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((T::Name(chars[start..i].iter().collect()), line));
        } else if c == '\'' || c == '"' {
            let mut s = String::new();
            i += 1;
            loop {
                let d = *chars.get(i)?;
                i += 1;
                if d == c {
                    break;
                }
                if d == '\n' {
                    return None;
                }
                if d == '\\' {
                    let e = *chars.get(i)?;
                    i += 1;
                    s.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                } else {
                    s.push(d);
                }
            }
            out.push((T::Str(s), line));
        } else {
            let rest: String = chars[i..chars.len().min(i + 3)].iter().collect();
            let op = OPS.iter().find(|op| rest.starts_with(*op))?;
            match *op {
                "(" => depth += 1,
                ")" => depth = depth.checked_sub(1)?,
                _ => {}
            }
            out.push((T::Op(op), line));
            i += op.chars().count();
        }
    }
    out.push((T::End, line));
    Some(out)
}

struct P {
    toks: Vec<(T, u32)>,
    pos: usize,
}

impl P {
    fn peek(&self) -> Option<&T> {
        self.toks.get(self.pos).map(|t| &t.0)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        if matches!(self.peek(), Some(T::Op(o)) if *o == op) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn eat_name(&mut self, n: &str) -> bool {
        if matches!(self.peek(), Some(T::Name(x)) if x == n) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn stmt(&mut self) -> Option<CodeStmtKind> {
        if self.eat_name("assert") {
            let test = self.expr(0)?;
            let message = if self.eat_op(",") {
                Some(self.expr(0)?)
            } else {
                None
            };
            return Some(CodeStmtKind::Assert { test, message });
        }
        if let (Some(T::Name(target)), Some((T::Op(op), _))) =
            (self.peek(), self.toks.get(self.pos + 1))
        {
            let op = match *op {
                "=" => Some(None),
                "+=" => Some(Some(CodeBinOp::Add)),
                "-=" => Some(Some(CodeBinOp::Sub)),
                "*=" => Some(Some(CodeBinOp::Mul)),
                "/=" => Some(Some(CodeBinOp::Div)),
                "//=" => Some(Some(CodeBinOp::FloorDiv)),
                "%=" => Some(Some(CodeBinOp::Mod)),
                "&=" => Some(Some(CodeBinOp::BitAnd)),
                "|=" => Some(Some(CodeBinOp::BitOr)),
                "^=" => Some(Some(CodeBinOp::BitXor)),
                "<<=" => Some(Some(CodeBinOp::Shl)),
                ">>=" => Some(Some(CodeBinOp::Shr)),
                _ => None,
            };
            if let Some(op) = op {
                let target = target.clone();
                self.pos += 2;
                let value = self.expr(0)?;
                return Some(CodeStmtKind::Assign { target, op, value });
            }
        }
        Some(CodeStmtKind::Expr(self.expr(0)?))
    }

    fn expr(&mut self, depth: usize) -> Option<CodeExpr> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.or(depth + 1)
    }

    fn or(&mut self, d: usize) -> Option<CodeExpr> {
        let mut l = self.and(d)?;
        while self.eat_name("or") {
            let r = self.and(d)?;
            l = CodeExpr::Binary(CodeBinOp::Or, Box::new(l), Box::new(r));
        }
        Some(l)
    }

    fn and(&mut self, d: usize) -> Option<CodeExpr> {
        let mut l = self.not(d)?;
        while self.eat_name("and") {
            let r = self.not(d)?;
            l = CodeExpr::Binary(CodeBinOp::And, Box::new(l), Box::new(r));
        }
        Some(l)
    }

    fn not(&mut self, d: usize) -> Option<CodeExpr> {
        if self.eat_name("not") {
            if d > MAX_DEPTH {
                return None;
            }
            return Some(CodeExpr::Not(Box::new(self.not(d + 1)?)));
        }
        self.compare(d)
    }

    fn compare(&mut self, d: usize) -> Option<CodeExpr> {
        let first = self.binary(0, d)?;
        let mut rest = Vec::new();
        loop {
            let op = match self.peek() {
                Some(T::Op("==")) => CodeCmpOp::Eq,
                Some(T::Op("!=")) => CodeCmpOp::Ne,
                Some(T::Op("<")) => CodeCmpOp::Lt,
                Some(T::Op("<=")) => CodeCmpOp::Le,
                Some(T::Op(">")) => CodeCmpOp::Gt,
                Some(T::Op(">=")) => CodeCmpOp::Ge,
                _ => break,
            };
            self.pos += 1;
            rest.push((op, self.binary(0, d)?));
        }
        if rest.is_empty() {
            Some(first)
        } else {
            Some(CodeExpr::Compare(Box::new(first), rest))
        }
    }

    /// Binary operators by precedence level (0 = loosest).
    fn binary(&mut self, level: usize, d: usize) -> Option<CodeExpr> {
        const LEVELS: [&[(&str, CodeBinOp)]; 6] = [
            &[("|", CodeBinOp::BitOr)],
            &[("^", CodeBinOp::BitXor)],
            &[("&", CodeBinOp::BitAnd)],
            &[("<<", CodeBinOp::Shl), (">>", CodeBinOp::Shr)],
            &[("+", CodeBinOp::Add), ("-", CodeBinOp::Sub)],
            &[
                ("*", CodeBinOp::Mul),
                ("/", CodeBinOp::Div),
                ("//", CodeBinOp::FloorDiv),
                ("%", CodeBinOp::Mod),
            ],
        ];
        if level == LEVELS.len() {
            return self.unary(d);
        }
        let mut l = self.binary(level + 1, d)?;
        'outer: loop {
            for (op, b) in LEVELS[level] {
                if self.eat_op(op) {
                    let r = self.binary(level + 1, d)?;
                    l = CodeExpr::Binary(*b, Box::new(l), Box::new(r));
                    continue 'outer;
                }
            }
            return Some(l);
        }
    }

    fn unary(&mut self, d: usize) -> Option<CodeExpr> {
        if d > MAX_DEPTH {
            return None;
        }
        if self.eat_op("-") {
            return Some(CodeExpr::Neg(Box::new(self.unary(d + 1)?)));
        }
        if self.eat_op("+") {
            return self.unary(d + 1);
        }
        if self.eat_op("~") {
            return Some(CodeExpr::Invert(Box::new(self.unary(d + 1)?)));
        }
        self.atom(d)
    }

    fn atom(&mut self, d: usize) -> Option<CodeExpr> {
        let t = self.peek()?.clone();
        self.pos += 1;
        match t {
            T::Int(v) => Some(CodeExpr::Int(v)),
            T::Str(mut s) => {
                // Adjacent literals concatenate.
                while let Some(T::Str(more)) = self.peek() {
                    s.push_str(more);
                    self.pos += 1;
                }
                Some(CodeExpr::Str(s))
            }
            T::Name(n) => {
                if ["assert", "and", "or", "not"].contains(&n.as_str()) {
                    return None;
                }
                if self.eat_op("(") {
                    let args = self.items(d)?;
                    Some(CodeExpr::Call(n, args))
                } else {
                    Some(CodeExpr::Name(n))
                }
            }
            T::Op("(") => {
                let mut items = Vec::new();
                let mut trailing_comma = false;
                while !self.eat_op(")") {
                    items.push(self.expr(d + 1)?);
                    trailing_comma = self.eat_op(",");
                    if !trailing_comma && !matches!(self.peek(), Some(T::Op(")"))) {
                        return None;
                    }
                }
                if items.len() == 1 && !trailing_comma {
                    items.pop()
                } else {
                    Some(CodeExpr::Tuple(items))
                }
            }
            _ => None,
        }
    }

    /// Call arguments after `(`, through `)`.
    fn items(&mut self, d: usize) -> Option<Vec<CodeExpr>> {
        let mut items = Vec::new();
        while !self.eat_op(")") {
            items.push(self.expr(d + 1)?);
            if !self.eat_op(",") && !matches!(self.peek(), Some(T::Op(")"))) {
                return None;
            }
        }
        Some(items)
    }
}

/// Parses the text of a code block whose `%{` is on script line `first_line`.
/// `None` when the text is outside the subset.
pub fn parse_code(text: &str, first_line: u32) -> Option<Vec<CodeStmt>> {
    let toks = lex(text)?;
    let mut p = P { toks, pos: 0 };
    let mut out = Vec::new();
    loop {
        while p.peek() == Some(&T::End) {
            p.pos += 1;
        }
        let Some(&(_, off)) = p.toks.get(p.pos) else {
            return Some(out);
        };
        let kind = p.stmt()?;
        if p.peek() != Some(&T::End) {
            return None;
        }
        out.push(CodeStmt {
            line: first_line.saturating_add(off),
            kind,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CodeExpr::*;

    fn name(s: &str) -> CodeExpr {
        Name(s.to_string())
    }

    #[test]
    fn assert_with_message_and_comment() {
        let s = parse_code("\nassert x_y == 7, x_y  # why\n", 10).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].line, 11);
        assert_eq!(
            s[0].kind,
            CodeStmtKind::Assert {
                test: Compare(Box::new(name("x_y")), vec![(CodeCmpOp::Eq, Int(7))]),
                message: Some(name("x_y")),
            }
        );
    }

    #[test]
    fn chains_masks_formats_and_statements() {
        let s = parse_code(
            " assert 1 <= a <= 0x10, 'a=%d b=%d' % (a, b)\nq = 3; q += 1; show(q)\nassert (f & MASK) != 0",
            1,
        )
        .unwrap();
        assert_eq!(s.len(), 5);
        match &s[0].kind {
            CodeStmtKind::Assert {
                test: Compare(_, rest),
                message: Some(Binary(CodeBinOp::Mod, l, r)),
            } => {
                assert_eq!(rest.len(), 2);
                assert_eq!(**l, Str("a=%d b=%d".into()));
                assert_eq!(**r, Tuple(vec![name("a"), name("b")]));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            s[2].kind,
            CodeStmtKind::Assign {
                target: "q".into(),
                op: Some(CodeBinOp::Add),
                value: Int(1)
            }
        );
        assert_eq!(
            s[3].kind,
            CodeStmtKind::Expr(Call("show".into(), vec![name("q")]))
        );
        assert_eq!(s[4].line, 3);
        assert_eq!(
            s[4].kind,
            CodeStmtKind::Assert {
                test: Compare(
                    Box::new(Binary(
                        CodeBinOp::BitAnd,
                        Box::new(name("f")),
                        Box::new(name("MASK"))
                    )),
                    vec![(CodeCmpOp::Ne, Int(0))]
                ),
                message: None,
            }
        );
    }

    #[test]
    fn precedence() {
        let s = parse_code("x = 1 + 2 * 3 | 4", 1).unwrap();
        let CodeStmtKind::Assign { value, .. } = &s[0].kind else {
            panic!()
        };
        assert_eq!(
            *value,
            Binary(
                CodeBinOp::BitOr,
                Box::new(Binary(
                    CodeBinOp::Add,
                    Box::new(Int(1)),
                    Box::new(Binary(CodeBinOp::Mul, Box::new(Int(2)), Box::new(Int(3))))
                )),
                Box::new(Int(4))
            )
        );
    }

    #[test]
    fn outside_the_subset_is_none() {
        for s in [
            "for i in x:\n  pass",
            "assert",
            "x = = 1",
            "(((",
            "a[1]",
            "lambda: 1",
            "'open",
        ] {
            assert_eq!(parse_code(s, 1), None, "{s}");
        }
        let deep = format!("x = {}1{}", "(".repeat(10_000), ")".repeat(10_000));
        assert_eq!(parse_code(&deep, 1), None);
        let deep_unary = format!("x = {}1", "-".repeat(10_000));
        assert_eq!(parse_code(&deep_unary, 1), None);
        let deep_not = format!("x = {}1", "not ".repeat(10_000));
        assert_eq!(parse_code(&deep_not, 1), None);
        assert_eq!(parse_code("", 1), Some(vec![]));
    }
}
