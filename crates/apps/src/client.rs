//! The clients of `ember client`: an HTTP/1.1 GET ([`http_get`]) and bulk transfer
//! ([`send`], [`recv`]), over any [`Net`].
//!
//! [`http_get`] ends a response the way RFC 9112 §6.3 says: no body for 1xx/204/304; a
//! chunked body by its last chunk; a `Content-Length` body by its length; only a response
//! with neither is read until the server closes. It never waits for a FIN when the length
//! is known (a server may keep the connection open). Everything it reads from the network
//! is bounded: the response head ([`MAX_HEAD`] bytes, [`MAX_HEADERS`] fields), a chunk-size
//! line ([`MAX_CHUNK_LINE`]), the trailer section ([`MAX_HEAD`]), and the number of 1xx
//! interim responses skipped. The body goes to the caller's writer, counted and hashed
//! (SHA-256) as it passes, never held.
//!
//! URLs are `http://A.B.C.D[:port][/path]`: IPv4 literals only, as ember has no resolver;
//! a host name is an `InvalidInput` error that says so.
//!
//! [`send`] writes pseudo-random bytes ([`PseudoRandom`]), shuts its write side, and reads
//! what comes back until the server's end of stream, on two threads so that an echo
//! server's replies never block the sender; its report carries both digests, so a round
//! trip through echo is checked by comparing them. [`recv`] only reads.

use crate::http::{hex, PseudoRandom, CHUNK};
use crate::net::{Conn, Net};
use sha2::{Digest, Sha256};
use std::io::{self, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

/// Largest response head (and trailer section) accepted.
pub const MAX_HEAD: usize = 64 * 1024;

/// Most header fields in a response head.
pub const MAX_HEADERS: usize = 100;

/// Longest chunk-size line (size, extensions, CRLF).
pub const MAX_CHUNK_LINE: usize = 4096;

/// Most 1xx interim responses skipped before the final one.
const MAX_INTERIM: usize = 16;

/// How a response body was delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (1xx, 204, 304).
    None,
    /// `Content-Length`.
    Length,
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Neither: read until the server closed.
    Eof,
}

/// What [`http_get`] got.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The reason phrase.
    pub reason: String,
    /// Header fields in order (values lossily UTF-8).
    pub headers: Vec<(String, String)>,
    /// Body bytes written to the caller's writer (after chunked decoding).
    pub body_len: u64,
    /// Hex SHA-256 of the body.
    pub sha256: String,
    /// How the body was delimited.
    pub framing: Framing,
    /// From connect to the end of the body.
    pub seconds: f64,
}

impl HttpResponse {
    /// The first header field called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn invalid_input(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn invalid_data(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// Splits `http://A.B.C.D[:port][/path]` into the server's address and the
/// request target (`/` when the URL has no path).
pub fn parse_url(url: &str) -> io::Result<(SocketAddr, String)> {
    let rest = url
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("http://"))
        .map(|_| &url[7..])
        .ok_or_else(|| invalid_input(format!("{url}: only http:// URLs are supported")))?;
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let path = path.split('#').next().unwrap_or("");
    let path = if path.is_empty() {
        "/".to_string()
    } else if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_string()
    };
    if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(invalid_input(format!(
            "{url}: the path has spaces or control characters"
        )));
    }
    if authority.contains('@') {
        return Err(invalid_input(format!("{url}: user info is not supported")));
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => {
            let port: u16 = p
                .parse()
                .ok()
                .filter(|&p| p != 0)
                .ok_or_else(|| invalid_input(format!("{url}: bad port {p:?}")))?;
            (h, port)
        }
        None => (authority, 80),
    };
    if host.is_empty() {
        return Err(invalid_input(format!("{url}: no host")));
    }
    let ip: Ipv4Addr = host.parse().map_err(|_| {
        invalid_input(format!(
            "{url}: {host:?} is not an IPv4 address (A.B.C.D); host names are not resolved"
        ))
    })?;
    Ok((SocketAddr::V4(SocketAddrV4::new(ip, port)), path))
}

/// A read buffer over a connection, for heads, lines and bodies.
struct Reader<'a, C: Conn> {
    c: &'a C,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
}

impl<'a, C: Conn> Reader<'a, C> {
    fn new(c: &'a C) -> Self {
        Reader {
            c,
            buf: vec![0u8; MAX_HEAD.max(CHUNK)],
            pos: 0,
            end: 0,
        }
    }

    fn buffered(&self) -> &[u8] {
        &self.buf[self.pos..self.end]
    }

    /// Reads more after what is buffered; 0 at end of stream (or a full buffer).
    fn fill(&mut self) -> io::Result<usize> {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.end == self.buf.len() {
            return Ok(0);
        }
        loop {
            match self.c.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(timed_out(e)),
            }
        }
    }

    /// One line (without its LF or CRLF), at most `max` bytes with the terminator.
    fn line(&mut self, max: usize, what: &str) -> io::Result<Vec<u8>> {
        loop {
            if let Some(i) = self.buffered().iter().position(|&b| b == b'\n') {
                if i + 1 > max {
                    break;
                }
                let mut l = self.buffered()[..i].to_vec();
                if l.last() == Some(&b'\r') {
                    l.pop();
                }
                self.pos += i + 1;
                return Ok(l);
            }
            if self.end - self.pos >= max {
                break;
            }
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("connection closed inside the {what}"),
                ));
            }
        }
        Err(invalid_data(&format!("{what} longer than {max} bytes")))
    }

    /// Passes exactly `n` body bytes to `sink`.
    fn copy_exact(&mut self, mut n: u64, sink: &mut Sink<'_>) -> io::Result<()> {
        while n > 0 {
            if self.pos == self.end && self.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before the end of the body",
                ));
            }
            let k = (self.end - self.pos).min(n.min(usize::MAX as u64) as usize);
            sink.put(&self.buf[self.pos..self.pos + k])?;
            self.pos += k;
            n -= k as u64;
        }
        Ok(())
    }

    /// Passes everything until end of stream to `sink`.
    fn copy_to_eof(&mut self, sink: &mut Sink<'_>) -> io::Result<()> {
        loop {
            if self.pos < self.end {
                sink.put(&self.buf[self.pos..self.end])?;
                self.pos = self.end;
            }
            if self.fill()? == 0 {
                return Ok(());
            }
        }
    }
}

fn timed_out(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::WouldBlock {
        io::Error::new(io::ErrorKind::TimedOut, "timed out waiting for the peer")
    } else {
        e
    }
}

/// Where a body goes: the caller's writer, counted and hashed.
struct Sink<'a> {
    out: &'a mut dyn Write,
    len: u64,
    sha: Sha256,
}

impl Sink<'_> {
    fn put(&mut self, b: &[u8]) -> io::Result<()> {
        self.out.write_all(b)?;
        self.sha.update(b);
        self.len += b.len() as u64;
        Ok(())
    }
}

/// Fetches `url` with GET, writes the body to `out`, and reports status, header fields,
/// body length and SHA-256. `timeout` bounds the connect and each read and write.
pub fn http_get<N: Net>(
    net: &N,
    url: &str,
    out: &mut dyn Write,
    timeout: Duration,
) -> io::Result<HttpResponse> {
    let (addr, path) = parse_url(url)?;
    let start = Instant::now();
    let c = net.connect(addr, Some(timeout))?;
    c.set_read_timeout(Some(timeout))?;
    c.set_write_timeout(Some(timeout))?;
    let host = match addr.port() {
        80 => addr.ip().to_string(),
        _ => addr.to_string(),
    };
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: ember-client\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    c.write_all(req.as_bytes()).map_err(timed_out)?;

    let mut rd = Reader::new(&c);
    let mut interim = 0;
    let (status, reason, headers) = loop {
        let (status, reason, headers, used) = loop {
            let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut resp = httparse::Response::new(&mut fields);
            match resp.parse(rd.buffered()) {
                Ok(httparse::Status::Complete(n)) => {
                    let headers: Vec<(String, String)> = resp
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_string(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect();
                    break (
                        resp.code.unwrap_or(0),
                        resp.reason.unwrap_or("").to_string(),
                        headers,
                        n,
                    );
                }
                Ok(httparse::Status::Partial) => {}
                Err(httparse::Error::TooManyHeaders) => {
                    return Err(invalid_data("response has too many header fields"))
                }
                Err(e) => return Err(invalid_data(&format!("malformed response head: {e}"))),
            }
            if rd.end - rd.pos >= MAX_HEAD {
                return Err(invalid_data("response head too large"));
            }
            if rd.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before a complete response head",
                ));
            }
        };
        rd.pos += used;
        // RFC 9110 §15.2: interim responses precede the final one (101 would switch
        // protocols, which a GET without Upgrade never asks for).
        if (100..200).contains(&status) && status != 101 {
            interim += 1;
            if interim > MAX_INTERIM {
                return Err(invalid_data("too many interim (1xx) responses"));
            }
            continue;
        }
        break (status, reason, headers);
    };

    let mut sink = Sink {
        out,
        len: 0,
        sha: Sha256::new(),
    };
    let framing = framing(status, &headers)?;
    match framing {
        Framing::None => {}
        Framing::Length => {
            let n = content_length(&headers)?.unwrap_or(0);
            rd.copy_exact(n, &mut sink)?;
        }
        Framing::Chunked => read_chunked(&mut rd, &mut sink)?,
        Framing::Eof => rd.copy_to_eof(&mut sink)?,
    }
    sink.out.flush()?;
    Ok(HttpResponse {
        status,
        reason,
        headers,
        body_len: sink.len,
        sha256: hex(&sink.sha.finalize()),
        framing,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// RFC 9112 §6.3: how the body of a response to GET is delimited.
fn framing(status: u16, headers: &[(String, String)]) -> io::Result<Framing> {
    if (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(Framing::None);
    }
    let te: Vec<&str> = headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("transfer-encoding"))
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(last) = te.last() {
        // Chunked only when it is the final coding; otherwise the body runs to the close.
        return Ok(if last.eq_ignore_ascii_case("chunked") {
            Framing::Chunked
        } else {
            Framing::Eof
        });
    }
    Ok(match content_length(headers)? {
        Some(_) => Framing::Length,
        None => Framing::Eof,
    })
}

/// The `Content-Length`, if any; differing or malformed values are an error (RFC 9110
/// §8.6).
fn content_length(headers: &[(String, String)]) -> io::Result<Option<u64>> {
    let mut n: Option<u64> = None;
    for (_, v) in headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
    {
        for part in v.split(',') {
            let part = part.trim();
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid_data("malformed Content-Length"));
            }
            let m: u64 = part
                .parse()
                .map_err(|_| invalid_data("Content-Length out of range"))?;
            if n.is_some_and(|n| n != m) {
                return Err(invalid_data("conflicting Content-Length values"));
            }
            n = Some(m);
        }
    }
    Ok(n)
}

/// Decodes a chunked body (RFC 9112 §7.1): size lines in hex (extensions ignored), data,
/// CRLF, and after the last (zero) chunk a trailer section, read and dropped.
fn read_chunked<C: Conn>(rd: &mut Reader<'_, C>, sink: &mut Sink<'_>) -> io::Result<()> {
    loop {
        let line = rd.line(MAX_CHUNK_LINE, "chunk-size line")?;
        let digits_end = line
            .iter()
            .position(|b| !b.is_ascii_hexdigit())
            .unwrap_or(line.len());
        let (digits, rest) = line.split_at(digits_end);
        let rest = rest.trim_ascii_start();
        if digits.is_empty() || !(rest.is_empty() || rest[0] == b';') {
            return Err(invalid_data("malformed chunk-size line"));
        }
        let mut size: u64 = 0;
        for &d in digits {
            let v = (d as char).to_digit(16).unwrap_or(0) as u64;
            size = size
                .checked_mul(16)
                .and_then(|s| s.checked_add(v))
                .ok_or_else(|| invalid_data("chunk size overflows"))?;
        }
        if size == 0 {
            break;
        }
        rd.copy_exact(size, sink)?;
        if !rd.line(2, "chunk's CRLF")?.is_empty() {
            return Err(invalid_data("chunk data not followed by CRLF"));
        }
    }
    // The trailer section: fields until an empty line, bounded in all.
    let mut total = 0;
    loop {
        let l = rd.line(MAX_HEAD, "trailer section")?;
        if l.is_empty() {
            return Ok(());
        }
        total += l.len() + 2;
        if total > MAX_HEAD {
            return Err(invalid_data("trailer section too large"));
        }
    }
}

// ---------------------------------------------------------------------------------------
// Bulk transfer.

/// Settings of [`send`] and [`recv`].
#[derive(Debug, Clone)]
pub struct BulkOptions {
    /// Bounds the connect and each read and write.
    pub timeout: Duration,
    /// Seed of the [`PseudoRandom`] bytes [`send`] writes.
    pub seed: u64,
    /// Stop reading after this many bytes (e.g. against chargen).
    pub max_receive: Option<u64>,
    /// Stop reading after this long.
    pub max_duration: Option<Duration>,
}

impl Default for BulkOptions {
    fn default() -> Self {
        BulkOptions {
            timeout: Duration::from_secs(30),
            seed: 1,
            max_receive: None,
            max_duration: None,
        }
    }
}

/// What a bulk transfer did.
#[derive(Debug, Clone, PartialEq)]
pub struct BulkReport {
    /// Bytes written.
    pub sent: u64,
    /// Hex SHA-256 of the bytes written.
    pub sent_sha256: String,
    /// Bytes read.
    pub received: u64,
    /// Hex SHA-256 of the bytes read.
    pub received_sha256: String,
    /// Whether reading ended at the server's end of stream (not a limit).
    pub eof: bool,
    /// From connect to the end.
    pub seconds: f64,
}

impl BulkReport {
    /// Bits per second written.
    pub fn sent_bps(&self) -> f64 {
        self.sent as f64 * 8.0 / self.seconds.max(1e-9)
    }

    /// Bits per second read.
    pub fn received_bps(&self) -> f64 {
        self.received as f64 * 8.0 / self.seconds.max(1e-9)
    }

    /// True when what came back is exactly what was sent (an echo round trip).
    pub fn round_trip_ok(&self) -> bool {
        self.eof && self.received == self.sent && self.received_sha256 == self.sent_sha256
    }
}

/// Reads until end of stream or a limit; (bytes, digest, eof).
fn read_all<C: Conn>(c: &C, opts: &BulkOptions, start: Instant) -> io::Result<(u64, String, bool)> {
    let mut buf = vec![0u8; CHUNK];
    let mut sha = Sha256::new();
    let mut n = 0u64;
    loop {
        if opts.max_receive.is_some_and(|m| n >= m)
            || opts.max_duration.is_some_and(|d| start.elapsed() >= d)
        {
            return Ok((n, hex(&sha.finalize()), false));
        }
        match c.read(&mut buf) {
            Ok(0) => return Ok((n, hex(&sha.finalize()), true)),
            Ok(k) => {
                sha.update(&buf[..k]);
                n += k as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(timed_out(e)),
        }
    }
}

/// Connects to `addr`, writes `bytes` pseudo-random bytes, shuts its write side, and
/// reads whatever comes back until the server's end of stream (or a limit of `opts`).
/// Against echo, `round_trip_ok()` checks the round trip; against discard nothing comes
/// back.
pub fn send<N: Net>(
    net: &N,
    addr: SocketAddr,
    bytes: u64,
    opts: &BulkOptions,
) -> io::Result<BulkReport> {
    let start = Instant::now();
    let c = net.connect(addr, Some(opts.timeout))?;
    c.set_read_timeout(Some(opts.timeout))?;
    c.set_write_timeout(Some(opts.timeout))?;
    let c = &c;
    let (wrote, read) = std::thread::scope(|s| {
        let writer = s.spawn(move || {
            let mut g = PseudoRandom::new(opts.seed);
            let mut sha = Sha256::new();
            let mut buf = vec![0u8; CHUNK];
            let mut done = 0u64;
            let mut r = Ok(());
            while done < bytes {
                let n = (bytes - done).min(CHUNK as u64) as usize;
                g.fill(&mut buf[..n]);
                if let Err(e) = c.write_all(&buf[..n]) {
                    r = Err(timed_out(e));
                    break;
                }
                sha.update(&buf[..n]);
                done += n as u64;
            }
            if r.is_ok() {
                r = c.shutdown(Shutdown::Write);
            }
            if r.is_err() {
                // Unblock the reader.
                let _ = c.shutdown(Shutdown::Both);
            }
            (done, hex(&sha.finalize()), r)
        });
        let read = read_all(c, opts, start);
        if !matches!(read, Ok((_, _, true))) {
            // A read error or a limit: unblock the writer.
            let _ = c.shutdown(Shutdown::Both);
        }
        let wrote = writer.join().unwrap_or_else(|_| {
            (
                0,
                String::new(),
                Err(io::Error::other("writer thread panicked")),
            )
        });
        (wrote, read)
    });
    let (received, received_sha256, eof) = read?;
    let (sent, sent_sha256, wrote) = wrote;
    // When a limit cut the transfer short on purpose, the writer's error follows from it.
    if let Err(e) = wrote {
        if eof {
            return Err(e);
        }
    }
    Ok(BulkReport {
        sent,
        sent_sha256,
        received,
        received_sha256,
        eof,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Connects to `addr` and reads until the server's end of stream (or a limit of
/// `opts`), reporting bytes, SHA-256, time and so throughput. Sends nothing.
pub fn recv<N: Net>(net: &N, addr: SocketAddr, opts: &BulkOptions) -> io::Result<BulkReport> {
    let start = Instant::now();
    let c = net.connect(addr, Some(opts.timeout))?;
    c.set_read_timeout(Some(opts.timeout))?;
    let (received, received_sha256, eof) = read_all(&c, opts, start)?;
    Ok(BulkReport {
        sent: 0,
        sent_sha256: hex(&Sha256::new().finalize()),
        received,
        received_sha256,
        eof,
        seconds: start.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::tests::start_on;
    use crate::http::HttpConfig;
    use crate::net::{EmberNet, StdNet};
    use std::net::TcpListener;
    use std::sync::Arc;

    const T: Duration = Duration::from_secs(10);

    #[test]
    fn urls() {
        let (a, p) = parse_url("http://127.0.0.1:8080/bytes/10?x=1#frag").unwrap();
        assert_eq!(
            (a.to_string(), p.as_str()),
            ("127.0.0.1:8080".into(), "/bytes/10?x=1")
        );
        let (a, p) = parse_url("HTTP://10.0.0.1").unwrap();
        assert_eq!((a.to_string(), p.as_str()), ("10.0.0.1:80".into(), "/"));
        let (_, p) = parse_url("http://10.0.0.1?q").unwrap();
        assert_eq!(p, "/?q");
        let e = parse_url("http://example.com/").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("not an IPv4 address"), "{e}");
        for bad in [
            "https://1.2.3.4/",
            "ftp://1.2.3.4/",
            "1.2.3.4",
            "http://1.2.3.4:0/",
            "http://1.2.3.4:99999/",
            "http://1.2.3.4:x/",
            "http://[::1]/",
            "http:///x",
            "http://u@1.2.3.4/",
            "http://1.2.3.4/a b",
            "http://1.2.3.4.5/",
            "",
        ] {
            let e = parse_url(bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}");
        }
    }

    /// A one-shot server: answers the first request with `resp` and then keeps the
    /// connection open until the client closes (so a client that waits for a FIN would
    /// time out), or closes at once with `close`.
    fn tiny_server(resp: Vec<u8>, close: bool) -> (SocketAddr, std::thread::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let j = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(T)).unwrap();
            let mut head = Vec::new();
            let mut b = [0u8; 1024];
            while !head.ends_with(b"\r\n\r\n") {
                match Conn::read(&s, &mut b) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&b[..n]),
                }
            }
            assert!(head.starts_with(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1:"));
            // Slowly, in pieces, to exercise the buffering.
            for piece in resp.chunks(7) {
                if Conn::write_all(&s, piece).is_err() {
                    return;
                }
            }
            if !close {
                // Wait for the client's close (bounded by the read timeout).
                let _ = Conn::read(&s, &mut b);
            }
        });
        (addr, j)
    }

    fn fetch(resp: &[u8], close: bool) -> io::Result<(HttpResponse, Vec<u8>)> {
        let (addr, j) = tiny_server(resp.to_vec(), close);
        let mut out = Vec::new();
        let r = http_get(
            &StdNet,
            &format!("http://{addr}/x"),
            &mut out,
            Duration::from_secs(3),
        );
        j.join().unwrap();
        r.map(|r| (r, out))
    }

    #[test]
    fn chunked_decoding() {
        let t0 = Instant::now();
        let (r, body) = fetch(
            b"HTTP/1.1 100 Continue\r\n\r\n\
              HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: b\r\n\r\n\
              5\r\nhello\r\n\
              7;ext=\"1\"\r\n, world\r\n\
              1A\r\nabcdefghijklmnopqrstuvwxyz\r\n\
              0\r\nTrailer: yes\r\n\r\n",
            false,
        )
        .unwrap();
        assert!(t0.elapsed() < Duration::from_secs(2), "waited for the FIN");
        assert_eq!(r.status, 200);
        assert_eq!(r.framing, Framing::Chunked);
        assert_eq!(r.header("x-a"), Some("b"));
        assert_eq!(body, b"hello, worldabcdefghijklmnopqrstuvwxyz");
        assert_eq!(r.body_len, body.len() as u64);
        assert_eq!(r.sha256, hex(&Sha256::digest(&body)));
    }

    #[test]
    fn length_without_fin_and_eof_framing() {
        let t0 = Instant::now();
        let (r, body) = fetch(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcd", false).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(2), "waited for the FIN");
        assert_eq!((r.framing, &body[..]), (Framing::Length, &b"abcd"[..]));
        let (r, body) = fetch(b"HTTP/1.0 200 OK\r\n\r\nto the end", true).unwrap();
        assert_eq!((r.framing, &body[..]), (Framing::Eof, &b"to the end"[..]));
        let (r, body) = fetch(b"HTTP/1.1 204 No Content\r\n\r\n", false).unwrap();
        assert_eq!((r.status, r.framing, body.len()), (204, Framing::None, 0));
    }

    #[test]
    fn bad_responses() {
        let long_line = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1{}",
            "0".repeat(10_000)
        );
        for (resp, kind) in [
            (
                &b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"[..],
                io::ErrorKind::UnexpectedEof,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                io::ErrorKind::InvalidData,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                io::ErrorKind::InvalidData,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
                io::ErrorKind::InvalidData,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFF\r\n",
                io::ErrorKind::InvalidData,
            ),
            (long_line.as_bytes(), io::ErrorKind::InvalidData),
            (b"NOT HTTP\r\n\r\n", io::ErrorKind::InvalidData),
            (b"HTTP/1.1 200 OK\r\n", io::ErrorKind::UnexpectedEof),
        ] {
            let e = fetch(resp, true).unwrap_err();
            assert_eq!(
                e.kind(),
                kind,
                "{:?}: {e}",
                String::from_utf8_lossy(&resp[..resp.len().min(80)])
            );
        }
        // A server that never answers: the timeout ends it.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t0 = Instant::now();
        let e = http_get(
            &StdNet,
            &format!("http://{addr}/"),
            &mut io::sink(),
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn ten_and_hundred_megabytes_match_the_header() {
        let srv = start_on(&StdNet, HttpConfig::default());
        let mut sink = io::sink();
        let url = format!("http://{}/bytes/10000000", srv.addr);
        let r = http_get(&StdNet, &url, &mut sink, T).unwrap();
        assert_eq!(
            (r.status, r.framing, r.body_len),
            (200, Framing::Length, 10_000_000)
        );
        assert_eq!(r.header("X-SHA256"), Some(r.sha256.as_str()));
        // 100 MiB: the first-pass digest and the streamed body still agree.
        let url = format!("http://{}/bytes/104857600", srv.addr);
        let r = http_get(&StdNet, &url, &mut sink, T).unwrap();
        assert_eq!((r.status, r.body_len), (200, 104_857_600));
        assert_eq!(r.header("X-SHA256"), Some(r.sha256.as_str()));
        let r = http_get(&StdNet, &format!("http://{}/nope", srv.addr), &mut sink, T).unwrap();
        assert_eq!(r.status, 404);
    }

    #[test]
    fn http_on_ember() {
        let stack = Arc::new(ember_runtime::Stack::loopback(2).unwrap());
        let net = EmberNet(stack.clone());
        {
            let srv = start_on(&net, HttpConfig::default());
            let mut body = Vec::new();
            let url = format!("http://{}/bytes/2000000", srv.addr);
            let r = http_get(&net, &url, &mut body, T).unwrap();
            assert_eq!((r.status, r.body_len), (200, 2_000_000));
            assert_eq!(r.header("x-sha256"), Some(r.sha256.as_str()));
            assert_eq!(r.sha256, hex(&Sha256::digest(&body)));
            // Keep-alive on ember: the client's Connection: close is honoured too.
            let r = http_get(&net, &format!("http://{}/", srv.addr), &mut io::sink(), T).unwrap();
            assert_eq!(r.status, 200);
        }
        stack.shutdown();
    }

    #[test]
    fn recv_reads_to_eof() {
        let data: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let d2 = data.clone();
        let j = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            Conn::write_all(&s, &d2).unwrap();
        });
        let r = recv(
            &StdNet,
            addr,
            &BulkOptions {
                timeout: T,
                ..BulkOptions::default()
            },
        )
        .unwrap();
        j.join().unwrap();
        assert!(r.eof);
        assert_eq!(r.received, data.len() as u64);
        assert_eq!(r.received_sha256, hex(&Sha256::digest(&data)));
        assert!(r.received_bps() > 0.0);
    }
}
