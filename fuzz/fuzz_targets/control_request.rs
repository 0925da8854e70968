//! The control socket's request parser (`ember_runtime::control::parse_request`) fed
//! arbitrary bytes, as a client could send them.
//!
//! * nothing panics;
//! * a request line (the bytes before the first newline) of `MAX_REQUEST` bytes or more,
//!   or one that is not UTF-8, is an `InvalidInput` error; so is every other refusal;
//! * a parsed request's canonical text (`Display`) parses back to the same request, also
//!   surrounded by whitespace and ended by `\r\n` when that still fits the limit.
#![no_main]

use ember_runtime::control::{parse_request, MAX_REQUEST};
use libfuzzer_sys::fuzz_target;
use std::io::ErrorKind;

fuzz_target!(|data: &[u8]| {
    let line = match data.iter().position(|&b| b == b'\n') {
        Some(i) => &data[..i],
        None => data,
    };
    let framing_bad = line.len() >= MAX_REQUEST || std::str::from_utf8(line).is_err();
    match parse_request(data) {
        Ok(req) => {
            assert!(!framing_bad, "accepted a bad line: {req:?}");
            let text = req.to_string();
            assert!(text.len() < MAX_REQUEST);
            assert_eq!(parse_request(text.as_bytes()).expect("canonical text"), req);
            let framed = format!(" \t{text} \r\n");
            if framed.len() <= MAX_REQUEST {
                assert_eq!(parse_request(framed.as_bytes()).expect("framed text"), req);
            }
        }
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
            // The message is one line (the server sends it as `error KIND: MESSAGE`) and
            // bounded (the request is echoed cut to 80 characters).
            let msg = e.to_string();
            assert!(msg.len() < 1024, "{} bytes of message", msg.len());
        }
    }
});
