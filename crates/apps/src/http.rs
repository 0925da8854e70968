//! A small HTTP/1.1 origin server (RFC 9110 semantics, RFC 9112 message syntax) for
//! `ember serve`: a test target that curl, wrk and browsers can talk to.
//!
//! What it serves:
//! * `GET /` a text page listing the endpoints (or `index.html` of the root, if any);
//! * `GET /bytes/N` N pseudo-random bytes from [`PseudoRandom`] seeded by N, with the hex
//!   SHA-256 of the body in `X-SHA256`, so a client can check what crossed the network;
//! * with [`HttpConfig::root`], the regular files below that directory.
//!
//! Why this shape: one blocking thread per connection (the [`crate::server`] accept loop),
//! a fixed head buffer parsed with `httparse`, and bodies streamed in [`CHUNK`]-sized
//! pieces, so a connection's memory is bounded whatever the peer sends or asks for.
//!
//! Invariants:
//! * every response has `Content-Length` (no chunked responses), so keep-alive and
//!   pipelining (RFC 9112 §9.3) work: requests are answered in order, one at a time, and
//!   bytes after one request's head stay in the buffer for the next;
//! * the request head is at most [`HttpConfig::max_head`] bytes and
//!   [`HttpConfig::max_headers`] fields (431 beyond); a malformed head gets 400 and the
//!   connection closes (a lingering close: our write side shuts, the rest is drained
//!   briefly, so the reply is not lost to a reset);
//! * request bodies are framed by `Content-Length` only; up to
//!   [`HttpConfig::max_discard_body`] bytes are read and dropped, more gets 413 and close;
//!   `Transfer-Encoding` on a request gets 501 and close (RFC 9112 §6.1), both framings
//!   at once 400 (request smuggling, RFC 9112 §6.3);
//! * `/bytes/N` holds at most one chunk in memory: the digest comes before the body, so it
//!   is computed in a first pass over the generator (cached for recent N), and the body is
//!   generated again while sending. Above [`HttpConfig::digest_limit`] the header is left
//!   out rather than make the client wait for a long first pass;
//! * files: the path is percent-decoded segment by segment, a `..` segment or an encoded
//!   `/`, `\` or NUL is refused (403), and the canonical path must lie below the canonical
//!   root (a symlink out of the root: 403); only regular files are opened (`O_NONBLOCK`,
//!   so a FIFO swapped in cannot block the thread); directories give their `index.html`
//!   or 404.
//! * an idle keep-alive connection ends after [`HttpConfig::idle_timeout`] (a partly
//!   received request then gets 408).

use crate::net::Conn;
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read};
use std::net::Shutdown;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Size of the pieces bodies are generated, read and written in.
pub const CHUNK: usize = 64 * 1024;

/// How many `/bytes/N` digests are remembered.
const DIGEST_CACHE: usize = 64;

/// The most a lingering close reads before giving up.
const LINGER_BYTES: usize = 256 * 1024;

/// How long a lingering close waits for the peer.
const LINGER_TIME: Duration = Duration::from_millis(500);

// ---------------------------------------------------------------------------------------
// The byte generator shared with the clients.

/// A fast deterministic byte stream: splitmix64 words, little-endian. The same seed gives
/// the same bytes however the output is cut into `fill` calls.
#[derive(Debug, Clone)]
pub struct PseudoRandom {
    state: u64,
    word: [u8; 8],
    used: usize,
}

impl PseudoRandom {
    /// A generator for `seed` (`/bytes/N` uses N).
    pub fn new(seed: u64) -> PseudoRandom {
        PseudoRandom {
            state: seed ^ 0x6a09_e667_f3bc_c908,
            word: [0; 8],
            used: 8,
        }
    }

    fn next_word(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Fills `buf` with the next bytes of the stream.
    pub fn fill(&mut self, mut buf: &mut [u8]) {
        while self.used < 8 && !buf.is_empty() {
            buf[0] = self.word[self.used];
            self.used += 1;
            buf = &mut buf[1..];
        }
        let mut words = buf.chunks_exact_mut(8);
        for w in &mut words {
            w.copy_from_slice(&self.next_word().to_le_bytes());
        }
        let rest = words.into_remainder();
        if !rest.is_empty() {
            self.word = self.next_word().to_le_bytes();
            rest.copy_from_slice(&self.word[..rest.len()]);
            self.used = rest.len();
        }
    }

    /// The SHA-256 of the first `len` bytes of the stream for `seed`.
    pub fn sha256(seed: u64, len: u64) -> [u8; 32] {
        let mut g = PseudoRandom::new(seed);
        let mut h = Sha256::new();
        let mut buf = vec![0u8; CHUNK];
        let mut left = len;
        while left > 0 {
            let n = left.min(CHUNK as u64) as usize;
            g.fill(&mut buf[..n]);
            h.update(&buf[..n]);
            left -= n as u64;
        }
        h.finalize().into()
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(D[(b >> 4) as usize] as char);
        s.push(D[(b & 15) as usize] as char);
    }
    s
}

// ---------------------------------------------------------------------------------------
// Configuration and the server.

/// The HTTP service's settings.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Serve the regular files below this directory (`--root DIR`).
    pub root: Option<PathBuf>,
    /// Largest request head (request line and fields), bytes.
    pub max_head: usize,
    /// Most header fields in one request.
    pub max_headers: usize,
    /// Largest request body read and discarded; larger gets 413.
    pub max_discard_body: u64,
    /// An idle connection (no request arriving) ends after this; also the write timeout.
    pub idle_timeout: Duration,
    /// Largest N of `/bytes/N`.
    pub max_bytes: u64,
    /// `/bytes/N` carries `X-SHA256` only for N up to this (the digest is a first pass).
    pub digest_limit: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            root: None,
            max_head: 16 * 1024,
            max_headers: 64,
            max_discard_body: 1 << 20,
            idle_timeout: Duration::from_secs(60),
            max_bytes: 64 << 30,
            // A digest is a first pass over the body before the header goes: bounded so
            // that a request cannot buy seconds of CPU (256 MiB is about half a second).
            digest_limit: 256 << 20,
        }
    }
}

/// The HTTP service: configuration plus the digest cache, shared by its connections.
#[derive(Debug)]
pub struct HttpServer {
    cfg: HttpConfig,
    /// The root, canonical.
    root: Option<PathBuf>,
    digests: Mutex<VecDeque<(u64, [u8; 32])>>,
}

/// The parts of a request head the server acts on.
struct Head {
    method: Method,
    target: String,
    http10: bool,
    keep_alive: bool,
    content_length: u64,
    transfer_encoding: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Head,
    Other,
}

enum Body {
    Bytes(Vec<u8>),
    Random { seed: u64 },
    File(File),
}

struct Response {
    status: u16,
    content_type: &'static str,
    len: u64,
    extra: Vec<(&'static str, String)>,
    body: Body,
}

impl Response {
    fn text(status: u16, msg: &str) -> Response {
        let mut b = msg.as_bytes().to_vec();
        b.push(b'\n');
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            len: b.len() as u64,
            extra: Vec::new(),
            body: Body::Bytes(b),
        }
    }
    fn error(status: u16) -> Response {
        Response::text(status, &format!("{} {}", status, reason(status)))
    }
}

/// How a connection goes on after a response.
#[derive(PartialEq, Eq)]
enum Next {
    KeepAlive,
    Close,
    /// Close with a lingering drain (unread input may follow).
    Linger,
}

impl HttpServer {
    /// A server for `cfg`; fails if the root is not a directory.
    pub fn new(cfg: HttpConfig) -> io::Result<Arc<HttpServer>> {
        let root = match &cfg.root {
            Some(r) => {
                let c = r.canonicalize()?;
                if !c.is_dir() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{}: not a directory", r.display()),
                    ));
                }
                Some(c)
            }
            None => None,
        };
        Ok(Arc::new(HttpServer {
            cfg,
            root,
            digests: Mutex::new(VecDeque::new()),
        }))
    }

    /// The configuration.
    pub fn config(&self) -> &HttpConfig {
        &self.cfg
    }

    /// A connection handler for [`crate::server::spawn_service`].
    pub fn handler<C: Conn>(
        self: &Arc<Self>,
    ) -> impl Fn(Arc<C>) -> io::Result<()> + Send + Sync + 'static {
        let s = self.clone();
        move |c: Arc<C>| s.serve(&*c)
    }

    /// Serves one connection until it closes, idles out, or errs.
    pub fn serve<C: Conn>(&self, c: &C) -> io::Result<()> {
        c.set_nodelay(true)?;
        c.set_read_timeout(Some(self.cfg.idle_timeout))?;
        c.set_write_timeout(Some(self.cfg.idle_timeout))?;
        let mut buf = vec![0u8; self.cfg.max_head.max(64)];
        let mut len = 0usize;
        let mut out = Vec::with_capacity(CHUNK);
        loop {
            let parsed = self.parse(&buf[..len]);
            let (head, used) = match parsed {
                Ok(Some(x)) => x,
                Ok(None) => {
                    if len == buf.len() {
                        return self.finish(c, &mut out, Response::error(431), Next::Linger);
                    }
                    match c.read(&mut buf[len..]) {
                        Ok(0) => return Ok(()),
                        Ok(n) => {
                            len += n;
                            continue;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) if is_timeout(&e) => {
                            if len == 0 {
                                tracing::debug!("http: idle connection timed out");
                                return Ok(());
                            }
                            return self.finish(c, &mut out, Response::error(408), Next::Close);
                        }
                        Err(e) => return Err(e),
                    }
                }
                Err(status) => {
                    return self.finish(c, &mut out, Response::error(status), Next::Linger)
                }
            };
            buf.copy_within(used..len, 0);
            len -= used;

            // The body (RFC 9112 §6): Content-Length only.
            if head.transfer_encoding {
                return self.finish(c, &mut out, Response::error(501), Next::Linger);
            }
            if head.content_length > self.cfg.max_discard_body {
                return self.finish(c, &mut out, Response::error(413), Next::Linger);
            }
            let mut body_left = head.content_length;
            let from_buf = body_left.min(len as u64) as usize;
            buf.copy_within(from_buf..len, 0);
            len -= from_buf;
            body_left -= from_buf as u64;
            while body_left > 0 {
                let n = body_left.min(buf.len() as u64) as usize;
                match c.read(&mut buf[..n]) {
                    Ok(0) => return Ok(()),
                    Ok(k) => body_left -= k as u64,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if is_timeout(&e) => {
                        return self.finish(c, &mut out, Response::error(408), Next::Close)
                    }
                    Err(e) => return Err(e),
                }
            }

            let resp = self.route(&head);
            let next = if head.keep_alive {
                Next::KeepAlive
            } else {
                Next::Close
            };
            self.respond(c, &mut out, resp, &head, next == Next::KeepAlive)?;
            if next != Next::KeepAlive {
                // Pipelined requests after a close would reset the connection if left
                // unread: linger then.
                return close(c, len > 0);
            }
        }
    }

    /// Parses one request head from `b`: `Ok(None)` when more bytes are needed, the
    /// status to answer with when it is bad.
    fn parse(&self, b: &[u8]) -> Result<Option<(Head, usize)>, u16> {
        if b.is_empty() {
            return Ok(None);
        }
        let mut fields = vec![httparse::EMPTY_HEADER; self.cfg.max_headers];
        let mut req = httparse::Request::new(&mut fields);
        let used = match req.parse(b) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => return Err(431),
            Err(_) => return Err(400),
        };
        let (Some(method), Some(path), Some(version)) = (req.method, req.path, req.version) else {
            return Err(400);
        };
        let method = match method {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            _ => Method::Other,
        };
        let http10 = version == 0;
        let mut content_length: Option<u64> = None;
        let mut transfer_encoding = false;
        let mut host = 0;
        let mut close = false;
        let mut keep = false;
        for f in req.headers.iter() {
            let name = f.name;
            if name.eq_ignore_ascii_case("content-length") {
                // RFC 9110 §8.6: digits only; several fields must agree.
                let v = std::str::from_utf8(f.value).map_err(|_| 400u16)?.trim();
                for part in v.split(',') {
                    let part = part.trim();
                    if part.is_empty() || !part.bytes().all(|d| d.is_ascii_digit()) {
                        return Err(400);
                    }
                    let n: u64 = part.parse().map_err(|_| 400u16)?;
                    if content_length.is_some_and(|m| m != n) {
                        return Err(400);
                    }
                    content_length = Some(n);
                }
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                transfer_encoding = true;
            } else if name.eq_ignore_ascii_case("host") {
                host += 1;
            } else if name.eq_ignore_ascii_case("connection") {
                for tok in f.value.split(|&ch| ch == b',') {
                    let tok = tok.trim_ascii();
                    close |= tok.eq_ignore_ascii_case(b"close");
                    keep |= tok.eq_ignore_ascii_case(b"keep-alive");
                }
            }
        }
        // RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host.
        if (!http10 && host != 1) || host > 1 {
            return Err(400);
        }
        // RFC 9112 §6.3: both framings at once is a smuggling attempt.
        if transfer_encoding && content_length.is_some() {
            return Err(400);
        }
        // RFC 9112 §9.3: 1.1 persists unless "close"; 1.0 only with "keep-alive".
        let keep_alive = if http10 { keep && !close } else { !close };
        Ok(Some((
            Head {
                method,
                target: path.to_string(),
                http10,
                keep_alive,
                content_length: content_length.unwrap_or(0),
                transfer_encoding,
            },
            used,
        )))
    }

    fn route(&self, head: &Head) -> Response {
        if head.method == Method::Other {
            let mut r = Response::error(405);
            r.extra.push(("Allow", "GET, HEAD".into()));
            return r;
        }
        // RFC 9112 §3.2: origin-form, or absolute-form (which servers must accept).
        let mut t = head.target.as_str();
        for scheme in ["http://", "https://"] {
            if t.get(..scheme.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(scheme))
            {
                t = t[scheme.len()..]
                    .find('/')
                    .map_or("/", |i| &t[scheme.len() + i..]);
            }
        }
        if !t.starts_with('/') {
            return Response::error(400);
        }
        let path = t.split(['?', '#']).next().unwrap_or("/");
        if let Some(n) = path.strip_prefix("/bytes/") {
            return self.bytes(n);
        }
        if path == "/" {
            if let Some(root) = &self.root {
                if root.join("index.html").is_file() {
                    return self.file(root, "/index.html");
                }
            }
            return self.index();
        }
        match &self.root {
            Some(root) => self.file(root, path),
            None => Response::error(404),
        }
    }

    fn index(&self) -> Response {
        let mut s = String::from(
            "ember HTTP/1.1 server\n\n\
             GET /            this page\n\
             GET /bytes/N     N pseudo-random bytes (seeded by N); X-SHA256: hex SHA-256 of the body\n",
        );
        s.push_str(&format!(
            "                 N <= {}; X-SHA256 for N <= {}\n",
            self.cfg.max_bytes, self.cfg.digest_limit
        ));
        if self.root.is_some() {
            s.push_str("GET /PATH        files below the served root\n");
        }
        s.push_str("\nHEAD works wherever GET does; keep-alive and pipelining are supported.");
        Response::text(200, &s)
    }

    fn bytes(&self, n: &str) -> Response {
        if n.is_empty() || n.len() > 20 || !n.bytes().all(|d| d.is_ascii_digit()) {
            return Response::text(400, "400 Bad Request: /bytes/N wants a decimal N");
        }
        let n: u64 = match n.parse() {
            Ok(n) if n <= self.cfg.max_bytes => n,
            _ => {
                return Response::text(
                    400,
                    &format!("400 Bad Request: N must be at most {}", self.cfg.max_bytes),
                )
            }
        };
        let mut extra = Vec::new();
        if let Some(d) = self.digest(n) {
            extra.push(("X-SHA256", hex(&d)));
        }
        Response {
            status: 200,
            content_type: "application/octet-stream",
            len: n,
            extra,
            body: Body::Random { seed: n },
        }
    }

    /// The digest of `/bytes/n`, from the cache or a first pass.
    fn digest(&self, n: u64) -> Option<[u8; 32]> {
        if n > self.cfg.digest_limit {
            return None;
        }
        let lock = || self.digests.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(_, d)) = lock().iter().find(|(k, _)| *k == n) {
            return Some(d);
        }
        let d = PseudoRandom::sha256(n, n);
        let mut c = lock();
        if !c.iter().any(|(k, _)| *k == n) {
            if c.len() >= DIGEST_CACHE {
                c.pop_front();
            }
            c.push_back((n, d));
        }
        Some(d)
    }

    fn file(&self, root: &Path, path: &str) -> Response {
        match resolve(root, path) {
            Ok(p) => {
                let f = match open_regular(&p) {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                        return Response::error(403)
                    }
                    Err(_) => return Response::error(404),
                };
                let len = match f.metadata() {
                    Ok(m) => m.len(),
                    Err(_) => return Response::error(404),
                };
                Response {
                    status: 200,
                    content_type: content_type(&p),
                    len,
                    extra: Vec::new(),
                    body: Body::File(f),
                }
            }
            Err(status) => Response::error(status),
        }
    }

    /// Writes `resp` (its body too unless HEAD); `keep` says whether the connection goes
    /// on.
    fn respond<C: Conn>(
        &self,
        c: &C,
        out: &mut Vec<u8>,
        resp: Response,
        head: &Head,
        keep: bool,
    ) -> io::Result<()> {
        out.clear();
        write_head(out, &resp, keep, head.http10);
        let send_body = head.method != Method::Head;
        let mut left = if send_body { resp.len } else { 0 };
        match resp.body {
            Body::Bytes(b) => {
                if send_body {
                    out.extend_from_slice(&b);
                }
                left = 0;
            }
            Body::Random { seed } => {
                let mut g = PseudoRandom::new(seed);
                while left > 0 {
                    let at = out.len();
                    let n = left.min((CHUNK.max(at + 1) - at) as u64) as usize;
                    out.resize(at + n, 0);
                    g.fill(&mut out[at..]);
                    c.write_all(out)?;
                    out.clear();
                    left -= n as u64;
                }
            }
            Body::File(mut f) => {
                while left > 0 {
                    let at = out.len();
                    let n = left.min((CHUNK.max(at + 1) - at) as u64) as usize;
                    out.resize(at + n, 0);
                    let k = match f.read(&mut out[at..]) {
                        Ok(0) => {
                            // The file shrank under us: the promised length cannot be
                            // kept, so the connection must end.
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "file shrank while being sent",
                            ));
                        }
                        Ok(k) => k,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                        Err(e) => return Err(e),
                    };
                    out.truncate(at + k);
                    c.write_all(out)?;
                    out.clear();
                    left -= k as u64;
                }
            }
        }
        if !out.is_empty() {
            c.write_all(out)?;
            out.clear();
        }
        debug_assert_eq!(left, 0);
        Ok(())
    }

    /// Sends a final error response and closes.
    fn finish<C: Conn>(
        &self,
        c: &C,
        out: &mut Vec<u8>,
        resp: Response,
        next: Next,
    ) -> io::Result<()> {
        tracing::debug!(
            status = resp.status,
            "http: closing after an error response"
        );
        let head = Head {
            method: Method::Get,
            target: String::new(),
            http10: false,
            keep_alive: false,
            content_length: 0,
            transfer_encoding: false,
        };
        // The peer may be gone already; closing is what matters.
        let _ = self.respond(c, out, resp, &head, false);
        close(c, next == Next::Linger)
    }
}

/// Closes our side; with `linger`, drains what the peer still sends for a moment so the
/// reply is not destroyed by a reset (RFC 9112 §9.6).
fn close<C: Conn>(c: &C, linger: bool) -> io::Result<()> {
    let _ = c.shutdown(Shutdown::Write);
    if linger {
        let _ = c.set_read_timeout(Some(LINGER_TIME));
        let mut b = [0u8; 4096];
        let mut total = 0;
        let start = std::time::Instant::now();
        while total < LINGER_BYTES && start.elapsed() < LINGER_TIME {
            match c.read(&mut b) {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    }
    Ok(())
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn write_head(out: &mut Vec<u8>, r: &Response, keep: bool, http10: bool) {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(256);
    let _ = write!(
        s,
        "HTTP/1.1 {} {}\r\nServer: ember\r\nDate: {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n",
        r.status,
        reason(r.status),
        http_date(SystemTime::now()),
        r.content_type,
        r.len
    );
    for (k, v) in &r.extra {
        let _ = write!(s, "{k}: {v}\r\n");
    }
    if !keep {
        s.push_str("Connection: close\r\n");
    } else if http10 {
        s.push_str("Connection: keep-alive\r\n");
    }
    s.push_str("\r\n");
    out.extend_from_slice(s.as_bytes());
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        _ => "Unknown",
    }
}

/// An IMF-fixdate (RFC 9110 §5.6.7), e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
pub fn http_date(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Civil from days (proleptic Gregorian), after Howard Hinnant's derivation.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    const WD: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MON: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        WD[days.rem_euclid(7) as usize],
        d,
        MON[(m - 1) as usize],
        y,
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

/// Maps a request path to a file below `root` (canonical), or the status to refuse with.
fn resolve(root: &Path, path: &str) -> Result<PathBuf, u16> {
    use std::os::unix::ffi::OsStrExt;
    let mut p = root.to_path_buf();
    for seg in path.split('/') {
        let seg = percent_decode(seg).ok_or(400u16)?;
        if seg.is_empty() || seg == b"." {
            continue;
        }
        if seg == b".." || seg.iter().any(|&b| b == b'/' || b == b'\\' || b == 0) {
            return Err(403);
        }
        p.push(std::ffi::OsStr::from_bytes(&seg));
    }
    let mut canon = p.canonicalize().map_err(|_| 404u16)?;
    if !canon.starts_with(root) {
        return Err(403);
    }
    if canon.is_dir() {
        canon = canon
            .join("index.html")
            .canonicalize()
            .map_err(|_| 404u16)?;
        if !canon.starts_with(root) {
            return Err(403);
        }
    }
    if !canon.is_file() {
        return Err(404);
    }
    Ok(canon)
}

/// Opens `p` without blocking and only if it is a regular file.
fn open_regular(p: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(p)?;
    if !f.metadata()?.is_file() {
        return Err(io::ErrorKind::NotFound.into());
    }
    Ok(f)
}

/// RFC 3986 §2.1 percent-decoding; `None` on a bad escape.
fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = b.get(i + 1..i + 3)?;
            let v = (hex_val(h[0])? << 4) | hex_val(h[1])?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// `Content-Type` by file extension, for the common types.
fn content_type(p: &Path) -> &'static str {
    let ext = p
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    match ext.as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "txt" | "text" | "md" | "log" => "text/plain; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "xml" => "application/xml",
        "csv" => "text/csv; charset=utf-8",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "ico" => "image/x-icon",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "wasm" => "application/wasm",
        "zip" => "application/zip",
        "gz" => "application/gzip",
        "tar" => "application/x-tar",
        "mp4" => "video/mp4",
        "mp3" => "audio/mpeg",
        "woff2" => "font/woff2",
        "pcap" => "application/vnd.tcpdump.pcap",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::net::{Listen, Net, StdNet};
    use crate::server::{spawn_service, ServiceStats, Stop};
    use std::net::{SocketAddr, TcpStream};
    use std::process::Command;

    const T: Duration = Duration::from_secs(10);

    pub(crate) struct Running {
        pub addr: SocketAddr,
        pub stop: Arc<Stop>,
        join: Option<std::thread::JoinHandle<()>>,
    }

    impl Drop for Running {
        fn drop(&mut self) {
            self.stop.stop();
            if let Some(j) = self.join.take() {
                let _ = j.join();
            }
        }
    }

    pub(crate) fn start_on<N: Net>(net: &N, cfg: HttpConfig) -> Running {
        let l = net.listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        let stop = Stop::new();
        let srv = HttpServer::new(cfg).unwrap();
        let join = spawn_service(
            "http",
            l,
            stop.clone(),
            128,
            Arc::new(ServiceStats::default()),
            srv.handler(),
        )
        .unwrap();
        Running {
            addr,
            stop,
            join: Some(join),
        }
    }

    fn start(cfg: HttpConfig) -> Running {
        start_on(&StdNet, cfg)
    }

    /// A raw test client: writes bytes, reads Content-Length responses.
    struct Raw {
        s: TcpStream,
        buf: Vec<u8>,
    }

    struct Resp {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    }

    impl Resp {
        fn header(&self, n: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(n))
                .map(|(_, v)| v.as_str())
        }
    }

    impl Raw {
        fn new(addr: SocketAddr) -> Raw {
            let s = TcpStream::connect_timeout(&addr, T).unwrap();
            s.set_read_timeout(Some(T)).unwrap();
            s.set_write_timeout(Some(T)).unwrap();
            Raw { s, buf: Vec::new() }
        }
        fn send(&mut self, b: &[u8]) {
            self.s.write_all(b).unwrap();
        }
        fn more(&mut self) -> usize {
            let mut b = [0u8; 65536];
            let n = Conn::read(&self.s, &mut b).unwrap_or(0);
            self.buf.extend_from_slice(&b[..n]);
            n
        }
        /// One response; `head` says whether it answers a HEAD (no body).
        fn resp(&mut self, head: bool) -> Resp {
            loop {
                let mut f = [httparse::EMPTY_HEADER; 32];
                let mut r = httparse::Response::new(&mut f);
                if let httparse::Status::Complete(n) = r.parse(&self.buf).unwrap() {
                    let headers: Vec<(String, String)> = r
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_string(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect();
                    let status = r.code.unwrap();
                    let cl: usize = headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                        .expect("Content-Length on every response")
                        .1
                        .parse()
                        .unwrap();
                    let blen = if head { 0 } else { cl };
                    while self.buf.len() < n + blen {
                        assert!(self.more() > 0, "EOF inside a body");
                    }
                    let body = self.buf[n..n + blen].to_vec();
                    self.buf.drain(..n + blen);
                    return Resp {
                        status,
                        headers,
                        body,
                    };
                }
                assert!(self.more() > 0, "EOF before a response head");
            }
        }
        /// True when the server closed (after what is buffered).
        fn closed(&mut self) -> bool {
            self.buf.is_empty() && self.more() == 0
        }
    }

    fn get(addr: SocketAddr, req: &str) -> Resp {
        let mut r = Raw::new(addr);
        r.send(req.as_bytes());
        r.resp(req.starts_with("HEAD"))
    }

    fn tool(name: &str) -> bool {
        let ok = Command::new(name).arg("--version").output().is_ok();
        if !ok {
            println!("skipped: {name} is not installed");
        }
        ok
    }

    #[test]
    fn generator_is_cut_independent() {
        let mut a = vec![0u8; 1000];
        PseudoRandom::new(5).fill(&mut a);
        let mut b = vec![0u8; 1000];
        let mut g = PseudoRandom::new(5);
        let mut at = 0;
        for cut in [1, 3, 7, 8, 9, 100, 13, 500] {
            g.fill(&mut b[at..at + cut]);
            at += cut;
        }
        g.fill(&mut b[at..]);
        assert_eq!(a, b);
        assert_eq!(
            hex(&PseudoRandom::sha256(5, 1000)),
            hex(&Sha256::digest(&a))
        );
        assert_ne!(a[..8], a[8..16]);
    }

    #[test]
    fn date_format() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(http_date(t), "Sun, 06 Nov 1994 08:49:37 GMT");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(http_date(t), "Tue, 29 Feb 2000 00:00:00 GMT");
    }

    #[test]
    fn curl_bytes_digest() {
        if !tool("curl") {
            return;
        }
        let srv = start(HttpConfig::default());
        let dir = tmpdir("curl");
        let (h, b) = (dir.join("headers"), dir.join("body"));
        let out = Command::new("curl")
            .args(["-s", "--max-time", "20", "-D"])
            .arg(&h)
            .arg("-o")
            .arg(&b)
            .arg(format!("http://{}/bytes/1000000", srv.addr))
            .output()
            .unwrap();
        assert!(out.status.success(), "curl: {:?}", out);
        let headers = std::fs::read_to_string(&h).unwrap();
        let body = std::fs::read(&b).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(headers.starts_with("HTTP/1.1 200"), "{headers}");
        let want = headers
            .lines()
            .find_map(|l| l.strip_prefix("X-SHA256: "))
            .expect("X-SHA256")
            .trim();
        assert_eq!(body.len(), 1_000_000);
        assert_eq!(hex(&Sha256::digest(&body)), want);
        assert_eq!(want, hex(&PseudoRandom::sha256(1_000_000, 1_000_000)));
    }

    #[test]
    fn wrk_no_errors() {
        if !tool("wrk") {
            return;
        }
        let srv = start(HttpConfig::default());
        let out = Command::new("timeout")
            .args(["20", "wrk", "-t2", "-c50", "-d2s"])
            .arg(format!("http://{}/bytes/1024", srv.addr))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "wrk: {text} {:?}", out);
        assert!(!text.contains("Socket errors"), "{text}");
        assert!(!text.contains("Non-2xx"), "{text}");
        let n: u64 = text
            .lines()
            .find_map(|l| l.trim().split_once(" requests in "))
            .expect("a requests line")
            .0
            .parse()
            .unwrap();
        assert!(n > 100, "{text}");
    }

    #[test]
    fn keep_alive_and_pipelining() {
        let srv = start(HttpConfig::default());
        let mut c = Raw::new(srv.addr);
        // Sequential requests on one connection.
        for n in [10u64, 0, 70_000] {
            c.send(format!("GET /bytes/{n} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
            let r = c.resp(false);
            assert_eq!(r.status, 200);
            assert_eq!(r.body.len() as u64, n);
            assert_eq!(r.header("x-sha256").unwrap(), hex(&Sha256::digest(&r.body)));
        }
        // Pipelined in one write, the last with a (discarded) body, then a close.
        c.send(
            b"GET /bytes/5 HTTP/1.1\r\nHost: x\r\n\r\n\
              HEAD /bytes/100000 HTTP/1.1\r\nHost: x\r\n\r\n\
              POST /bytes/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nabcd\
              GET / HTTP/1.1\r\nHost: x\r\n\r\n\
              GET /bytes/3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        let r = c.resp(false);
        assert_eq!((r.status, r.body.len()), (200, 5));
        let r = c.resp(true);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-length"), Some("100000"));
        assert_eq!(
            r.header("x-sha256").unwrap(),
            hex(&PseudoRandom::sha256(100_000, 100_000))
        );
        let r = c.resp(false);
        assert_eq!(r.status, 405);
        assert_eq!(r.header("allow"), Some("GET, HEAD"));
        let r = c.resp(false);
        assert_eq!(r.status, 200);
        assert!(String::from_utf8_lossy(&r.body).contains("/bytes/N"));
        let r = c.resp(false);
        assert_eq!((r.status, r.body.len()), (200, 3));
        assert_eq!(r.header("connection"), Some("close"));
        assert!(c.closed());

        // HTTP/1.0: closes unless keep-alive is asked for.
        let mut c = Raw::new(srv.addr);
        c.send(b"GET /bytes/2 HTTP/1.0\r\n\r\n");
        assert_eq!(c.resp(false).status, 200);
        assert!(c.closed());
        let mut c = Raw::new(srv.addr);
        c.send(b"GET /bytes/2 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        let r = c.resp(false);
        assert_eq!(r.header("connection"), Some("keep-alive"));
        c.send(b"GET /bytes/2 HTTP/1.0\r\n\r\n");
        assert_eq!(c.resp(false).status, 200);
        assert!(c.closed());
    }

    #[test]
    fn bad_requests() {
        let srv = start(HttpConfig::default());
        for req in [
            "GARBAGE\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
            "GET / HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "GET / HTTP/2.0\r\nHost: x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 2\r\n\r\n",
            "GET /bytes/12ab HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /bytes/99999999999999999999999 HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET nope HTTP/1.1\r\nHost: x\r\n\r\n",
        ] {
            let mut c = Raw::new(srv.addr);
            c.send(req.as_bytes());
            let r = c.resp(false);
            assert_eq!(r.status, 400, "{req:?}");
            if !req.contains("/bytes/") && !req.contains("nope") {
                assert!(c.closed(), "{req:?} left the connection open");
            }
        }
        // Over N's bound.
        let r = get(
            srv.addr,
            "GET /bytes/68719476737 HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        assert_eq!(r.status, 400);
        // Too many headers, too large a head.
        let mut req = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
        for i in 0..100 {
            req.push_str(&format!("X-{i}: y\r\n"));
        }
        req.push_str("\r\n");
        assert_eq!(get(srv.addr, &req).status, 431);
        let req = format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX: {}\r\n\r\n",
            "a".repeat(20_000)
        );
        assert_eq!(get(srv.addr, &req).status, 431);
        // Bodies: too large, chunked.
        let r = get(
            srv.addr,
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n",
        );
        assert_eq!(r.status, 413);
        let r = get(
            srv.addr,
            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
        assert_eq!(r.status, 501);
        // Other methods, unknown paths.
        assert_eq!(
            get(srv.addr, "DELETE / HTTP/1.1\r\nHost: x\r\n\r\n").status,
            405
        );
        assert_eq!(
            get(srv.addr, "GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n").status,
            404
        );
        // Absolute-form.
        let r = get(
            srv.addr,
            "GET http://x/bytes/7?q=1 HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        assert_eq!((r.status, r.body.len()), (200, 7));
    }

    #[test]
    fn idle_timeout_and_partial_request() {
        let srv = start(HttpConfig {
            idle_timeout: Duration::from_millis(300),
            ..HttpConfig::default()
        });
        let t0 = std::time::Instant::now();
        let mut c = Raw::new(srv.addr);
        assert!(c.closed());
        assert!(t0.elapsed() < Duration::from_secs(5));
        let mut c = Raw::new(srv.addr);
        c.send(b"GET / HTTP/1.1\r\nHo");
        assert_eq!(c.resp(false).status, 408);
        assert!(c.closed());
    }

    pub(crate) fn tmpdir(tag: &str) -> PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "ember-http-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn files_and_traversal() {
        let base = tmpdir("root");
        let root = base.join("www");
        std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::write(base.join("secret.txt"), "secret").unwrap();
        std::fs::write(root.join("a.txt"), "hello").unwrap();
        std::fs::write(root.join("sub/index.html"), "<p>sub</p>").unwrap();
        std::fs::write(root.join("sub/x y.json"), "{}").unwrap();
        std::os::unix::fs::symlink(base.join("secret.txt"), root.join("out.txt")).unwrap();
        std::os::unix::fs::symlink(&base, root.join("updir")).unwrap();
        std::os::unix::fs::symlink(root.join("a.txt"), root.join("in.txt")).unwrap();
        let srv = start(HttpConfig {
            root: Some(root.clone()),
            ..HttpConfig::default()
        });
        let g = |p: &str| get(srv.addr, &format!("GET {p} HTTP/1.1\r\nHost: x\r\n\r\n"));
        let r = g("/a.txt");
        assert_eq!((r.status, &r.body[..]), (200, &b"hello"[..]));
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        let r = g("/sub/");
        assert_eq!((r.status, &r.body[..]), (200, &b"<p>sub</p>"[..]));
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
        let r = g("/sub/x%20y.json?v=1");
        assert_eq!(
            (r.status, r.header("content-type")),
            (200, Some("application/json"))
        );
        assert_eq!(g("/in.txt").status, 200);
        assert_eq!(g("/empty").status, 404);
        assert_eq!(g("/missing").status, 404);
        assert_eq!(g("/").status, 200); // the endpoint page: no index.html at the root
        for bad in [
            "/../secret.txt",
            "/sub/../../secret.txt",
            "/%2e%2e/secret.txt",
            "/sub/%2E%2E/%2e%2e/secret.txt",
            "/..%2fsecret.txt",
            "/out.txt",
            "/updir/secret.txt",
            "/a.txt%00",
        ] {
            let r = g(bad);
            assert!(
                r.status == 403 || r.status == 404,
                "{bad}: {} {:?}",
                r.status,
                String::from_utf8_lossy(&r.body)
            );
            assert!(!r.body.starts_with(b"secret"), "{bad} leaked");
        }
        assert_eq!(g("/%zz").status, 400);
        let r = get(srv.addr, "HEAD /a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!((r.status, r.header("content-length")), (200, Some("5")));
        drop(srv);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
