//! The packetdrill script language: lexer, syntax tree and parser.
//!
//! Design. Three stages with one error type: [`lexer`] turns text into positioned
//! tokens, [`parser`] builds the [`ast`] by recursive descent, and [`code`] parses the
//! simple Python statements of `%{ ... }%` blocks on a best-effort basis (the block
//! text is always kept). [`parse`] is the entry point. No input panics or loops:
//! nesting is bounded and every loop consumes input (see the property tests below).

pub mod ast;
pub mod code;
pub mod lexer;
pub mod parser;

pub use ast::*;
pub use parser::parse;

/// Why a script did not parse, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
    /// What was wrong.
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

impl std::error::Error for ParseError {}

#[cfg(test)]
mod tests;
