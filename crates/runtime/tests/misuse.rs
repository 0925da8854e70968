//! API misuse: every call of ember-runtime's socket API, in every state a socket can be
//! in, returns what Linux's socket API returns for the same sequence of calls, and never
//! panics or hangs.
//!
//! Design: the matrix is a table. Each row is one call, each column one state; the cell
//! holds Linux's answer (`Out`: `Ok(n)`, a partial count, a pending SO_ERROR, or an
//! `io::ErrorKind`). Every cell is played on a fresh socket, brought to its state from
//! scratch, three times: on the kernel's own TCP (a `std::net` socket on 127.0.0.1,
//! which calibrates the table: a wrong Linux column fails the test), on ember with TCP
//! Fusion on, and on ember with it off. Where ember knowingly differs from Linux the
//! difference is listed in `EMBER_DIFFERS` with its reason; everything else must match.
//! Calls `std::net` cannot make (SO_LINGER, SO_SNDBUF/SO_RCVBUF, sendfile) and the
//! connecting state (std has no non-blocking connect) are not calibrated: their Linux
//! column is what the kernel sources and man pages say (socket(7), tcp(7), send(2)),
//! written down in the table, and ember is held to it.
//!
//! The socket under test is non-blocking when the call is made (so that a call Linux
//! would block in returns `WouldBlock` instead of hanging the test); every state is
//! reached with blocking calls bounded by timeouts, and waits use blocking calls or the
//! `Poller`, never sleeps or spinning, except the kernel's RST arrival, which std
//! cannot wait for without consuming it (1 ms sleeps on `peer_addr`, bounded).
//!
//! Also here: the listener and UDP matrices (same scheme), use after `Stack::shutdown`
//! (ember only: every call that needs the stack fails with `NotConnected`, the others
//! work), double close, and the poller after its sockets are gone.

use ember_runtime::socket::{ready, Event, Poller};
use ember_runtime::{Stack, TcpListener, TcpStream, UdpSocket};
use std::any::Any;
use std::fs::File;
use std::io::{self, ErrorKind, IoSlice, IoSliceMut, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The bound on every blocking call that brings a socket to its state.
const T: Duration = Duration::from_secs(10);

/// A huge write (64 MiB): more than any send buffer takes at once.
const HUGE: usize = 64 << 20;

fn huge_buf() -> &'static [u8] {
    static B: OnceLock<Vec<u8>> = OnceLock::new();
    B.get_or_init(|| vec![0x5a; HUGE])
}

/// An 8-byte file for `sendfile` (unlinked at once; the open file stays usable).
fn file8() -> &'static File {
    static F: OnceLock<File> = OnceLock::new();
    F.get_or_init(|| {
        let p = std::env::temp_dir().join(format!("ember-misuse-{}", std::process::id()));
        std::fs::write(&p, b"sendfile").expect("temp file");
        let f = File::open(&p).expect("open temp file");
        let _ = std::fs::remove_file(&p);
        f
    })
}

// ---------------------------------------------------------------------------------------
// Outcomes.
// ---------------------------------------------------------------------------------------

/// What a call returned, as far as the matrix cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    /// `Ok(())`, or `Ok(value)` where the value is not the point (addresses).
    Ok,
    /// `Ok(n)` bytes.
    N(usize),
    /// `Ok(n)` with 0 < n < the bytes offered (a huge non-blocking write).
    Partial,
    /// `take_error`: `Ok(Some(e))` with `e` of this kind.
    Pending(ErrorKind),
    E(ErrorKind),
    /// A Linux errno std has no stable `ErrorKind` for (`EDESTADDRREQ`, `EMSGSIZE`).
    Errno(i32),
}

use Out::*;
const WB: Out = E(ErrorKind::WouldBlock);
const NC: Out = E(ErrorKind::NotConnected);
const EP: Out = E(ErrorKind::BrokenPipe);
const RST: Out = E(ErrorKind::ConnectionReset);
const REF: Out = E(ErrorKind::ConnectionRefused);
const INV: Out = E(ErrorKind::InvalidInput);
const INUSE: Out = E(ErrorKind::AddrInUse);

fn err(e: &io::Error) -> Out {
    match e.raw_os_error() {
        Some(c) if c == libc::EDESTADDRREQ || c == libc::EMSGSIZE => Errno(c),
        _ => E(e.kind()),
    }
}

fn unit<T>(r: io::Result<T>) -> Out {
    r.map_or_else(|e| err(&e), |_| Ok)
}

fn n(r: io::Result<usize>) -> Out {
    r.map_or_else(|e| err(&e), N)
}

fn huge(r: io::Result<usize>) -> Out {
    match r {
        Result::Ok(k) if k > 0 && k < HUGE => Partial,
        r => n(r),
    }
}

fn pending(r: io::Result<Option<io::Error>>) -> Out {
    match r {
        Result::Ok(None) => Ok,
        Result::Ok(Some(e)) => Pending(e.kind()),
        Err(e) => err(&e),
    }
}

// ---------------------------------------------------------------------------------------
// TCP stream calls.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Read,
    /// read() into an empty buffer.
    Read0,
    Peek,
    ReadV,
    Write,
    /// write() of nothing.
    Write0,
    WriteV,
    /// A 64 MiB write.
    WriteHuge,
    ShutRd,
    ShutWr,
    ShutBoth,
    Nodelay,
    ReadTimeout,
    /// set_read_timeout(Some(0)).
    ReadTimeout0,
    /// set_write_timeout(Some(0)).
    WriteTimeout0,
    Nonblocking,
    TakeError,
    LocalAddr,
    PeerAddr,
    /// SO_LINGER {on, 0}.
    Linger0,
    SndBuf0,
    SndBufMax,
    RcvBuf0,
    RcvBufMax,
    /// sendfile() of 8 bytes.
    Sendfile,
}

/// A TCP stream API: the kernel's (`std::net`) or ember's.
trait Stream {
    /// Makes call `c`; `None` if this API cannot express it.
    fn call(&self, c: Call) -> Option<Out>;
}

impl Stream for std::net::TcpStream {
    fn call(&self, c: Call) -> Option<Out> {
        let mut s = self;
        let (mut a, mut b) = ([0u8; 4], [0u8; 4]);
        Some(match c {
            Call::Read => n(s.read(&mut [0u8; 8])),
            Call::Read0 => n(s.read(&mut [])),
            Call::Peek => n(self.peek(&mut [0u8; 8])),
            Call::ReadV => {
                n(s.read_vectored(&mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)]))
            }
            Call::Write => n(s.write(b"12345678")),
            Call::Write0 => n(s.write(&[])),
            Call::WriteV => n(s.write_vectored(&[IoSlice::new(b"1234"), IoSlice::new(b"5678")])),
            Call::WriteHuge => huge(s.write(huge_buf())),
            Call::ShutRd => unit(self.shutdown(Shutdown::Read)),
            Call::ShutWr => unit(self.shutdown(Shutdown::Write)),
            Call::ShutBoth => unit(self.shutdown(Shutdown::Both)),
            Call::Nodelay => unit(self.set_nodelay(true)),
            Call::ReadTimeout => unit(self.set_read_timeout(Some(Duration::from_secs(1)))),
            Call::ReadTimeout0 => unit(self.set_read_timeout(Some(Duration::ZERO))),
            Call::WriteTimeout0 => unit(self.set_write_timeout(Some(Duration::ZERO))),
            Call::Nonblocking => unit(self.set_nonblocking(true)),
            Call::TakeError => pending(self.take_error()),
            Call::LocalAddr => unit(self.local_addr()),
            Call::PeerAddr => unit(self.peer_addr()),
            Call::Linger0
            | Call::SndBuf0
            | Call::SndBufMax
            | Call::RcvBuf0
            | Call::RcvBufMax
            | Call::Sendfile => return None,
        })
    }
}

impl Stream for TcpStream {
    fn call(&self, c: Call) -> Option<Out> {
        let mut s = self;
        let (mut a, mut b) = ([0u8; 4], [0u8; 4]);
        Some(match c {
            Call::Read => n(s.read(&mut [0u8; 8])),
            Call::Read0 => n(s.read(&mut [])),
            Call::Peek => n(self.peek(&mut [0u8; 8])),
            Call::ReadV => {
                n(s.read_vectored(&mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)]))
            }
            Call::Write => n(s.write(b"12345678")),
            Call::Write0 => n(s.write(&[])),
            Call::WriteV => n(s.write_vectored(&[IoSlice::new(b"1234"), IoSlice::new(b"5678")])),
            Call::WriteHuge => huge(s.write(huge_buf())),
            Call::ShutRd => unit(self.shutdown(Shutdown::Read)),
            Call::ShutWr => unit(self.shutdown(Shutdown::Write)),
            Call::ShutBoth => unit(self.shutdown(Shutdown::Both)),
            Call::Nodelay => unit(self.set_nodelay(true)),
            Call::ReadTimeout => unit(self.set_read_timeout(Some(Duration::from_secs(1)))),
            Call::ReadTimeout0 => unit(self.set_read_timeout(Some(Duration::ZERO))),
            Call::WriteTimeout0 => unit(self.set_write_timeout(Some(Duration::ZERO))),
            Call::Nonblocking => unit(self.set_nonblocking(true)),
            Call::TakeError => pending(self.take_error()),
            Call::LocalAddr => unit(self.local_addr()),
            Call::PeerAddr => unit(self.peer_addr()),
            Call::Linger0 => unit(self.set_linger(Some(Duration::ZERO))),
            Call::SndBuf0 => unit(self.set_send_buffer_size(0)),
            Call::SndBufMax => unit(self.set_send_buffer_size(usize::MAX)),
            Call::RcvBuf0 => unit(self.set_recv_buffer_size(0)),
            Call::RcvBufMax => unit(self.set_recv_buffer_size(usize::MAX)),
            Call::Sendfile => n(self.sendfile(file8(), 0, 8)),
        })
    }
}

/// The states of a TCP stream (the columns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum St {
    /// A non-blocking connect in progress (SYN-SENT: the listener's queue is full).
    Connecting,
    /// Established, nothing to read.
    Connected,
    /// After shutdown(Write) (FIN sent).
    ShutWr,
    /// After shutdown(Read).
    ShutRd,
    /// After shutdown(Both).
    ShutBoth,
    /// The peer closed (its FIN arrived: CLOSE-WAIT).
    PeerClosed,
    /// The peer reset the connection (it closed with unread data, RFC 2525 §2.17).
    PeerReset,
    /// The accepted end, after its listener was closed.
    ListenerGone,
}

const STATES: [St; 8] = [
    St::Connecting,
    St::Connected,
    St::ShutWr,
    St::ShutRd,
    St::ShutBoth,
    St::PeerClosed,
    St::PeerReset,
    St::ListenerGone,
];

/// One row of the matrix: Linux's answer in each state of `STATES`, and ember's after
/// `Stack::shutdown` (no kernel equivalent).
struct Row {
    call: Call,
    linux: [Out; 8],
    stack_down: Out,
}

const fn row(call: Call, linux: [Out; 8], stack_down: Out) -> Row {
    Row {
        call,
        linux,
        stack_down,
    }
}

/// The TCP stream matrix. Columns: Connecting, Connected, ShutWr, ShutRd, ShutBoth,
/// PeerClosed, PeerReset, ListenerGone; then after `Stack::shutdown`.
#[rustfmt::skip]
const TCP: &[Row] = &[
    //                       Conn.   Conn'd  ShutWr  ShutRd  ShutBo  PeerCl  PeerRst        LisGone   StackDown
    row(Call::Read,         [WB,     WB,     WB,     N(0),   N(0),   N(0),   RST,           WB],      NC),
    row(Call::Read0,        [WB,     WB,     WB,     N(0),   N(0),   N(0),   RST,           WB],      N(0)),
    row(Call::Peek,         [WB,     WB,     WB,     N(0),   N(0),   N(0),   RST,           WB],      NC),
    row(Call::ReadV,        [WB,     WB,     WB,     N(0),   N(0),   N(0),   RST,           WB],      NC),
    row(Call::Write,        [WB,     N(8),   EP,     N(8),   EP,     N(8),   RST,           N(8)],    NC),
    row(Call::Write0,       [WB,     N(0),   EP,     N(0),   EP,     N(0),   RST,           N(0)],    NC),
    row(Call::WriteV,       [WB,     N(8),   EP,     N(8),   EP,     N(8),   RST,           N(8)],    NC),
    row(Call::WriteHuge,    [WB,     Partial,EP,     Partial,EP,     Partial,RST,           Partial], NC),
    row(Call::ShutRd,       [Ok,     Ok,     Ok,     Ok,     Ok,     Ok,     NC,            Ok],      NC),
    row(Call::ShutWr,       [Ok,     Ok,     Ok,     Ok,     Ok,     Ok,     NC,            Ok],      NC),
    row(Call::ShutBoth,     [Ok,     Ok,     Ok,     Ok,     Ok,     Ok,     NC,            Ok],      NC),
    row(Call::Nodelay,      [Ok,     Ok,     Ok,     Ok,     Ok,     Ok,     Ok,            Ok],      NC),
    row(Call::ReadTimeout,  [Ok,     Ok,     Ok,     Ok,     Ok,     Ok,     Ok,            Ok],      Ok),
    row(Call::ReadTimeout0, [INV,    INV,    INV,    INV,    INV,    INV,    INV,           INV],     INV),
    row(Call::WriteTimeout0,[INV,    INV,    INV,    INV,    INV,    INV,    INV,           INV],     INV),
    row(Call::Nonblocking,  [Ok,     Ok,     Ok,     Ok,     Ok,     Ok,     Ok,            Ok],      Ok),
    row(Call::TakeError,    [Ok,     Ok,     Ok,     Ok,     Ok,     Ok,     Pending(ErrorKind::ConnectionReset), Ok], NC),
    row(Call::LocalAddr,    [Ok,     Ok,     Ok,     Ok,     Ok,     Ok,     Ok,            Ok],      Ok),
    row(Call::PeerAddr,     [NC,     Ok,     Ok,     Ok,     Ok,     Ok,     NC,            Ok],      NC),
    row(Call::Linger0,      [Ok,     Ok,     Ok,     Ok,     Ok,     Ok,     Ok,            Ok],      Ok),
    row(Call::SndBuf0,      [Ok,     Ok,     Ok,     Ok,     Ok,     Ok,     Ok,            Ok],      NC),
    row(Call::SndBufMax,    [Ok,     Ok,     Ok,     Ok,     Ok,     Ok,     Ok,            Ok],      NC),
    row(Call::RcvBuf0,      [Ok,     Ok,     Ok,     Ok,     Ok,     Ok,     Ok,            Ok],      NC),
    row(Call::RcvBufMax,    [Ok,     Ok,     Ok,     Ok,     Ok,     Ok,     Ok,            Ok],      NC),
    row(Call::Sendfile,     [WB,     N(8),   EP,     N(8),   EP,     N(8),   RST,           N(8)],    NC),
];

/// Where ember knowingly answers otherwise than Linux: (call, state, ember's answer,
/// why). `None` as the state means every state.
const EMBER_DIFFERS: &[(Call, Option<St>, Out, &str)] = &[(
    Call::Read0,
    None,
    N(0),
    "a read into an empty buffer returns Ok(0) at once in every state (Rust's Read \
     contract; Linux's recv(len 0) reports EAGAIN or the pending error, or blocks)",
)];

fn ember_expect(call: Call, st: St, linux: Out) -> Out {
    EMBER_DIFFERS
        .iter()
        .find(|d| d.0 == call && d.1.is_none_or(|s| s == st))
        .map_or(linux, |d| d.2)
}

/// Things a state keeps alive besides the socket under test.
type Keep = Vec<Box<dyn Any>>;

// ---------------------------------------------------------------------------------------
// The kernel's sockets.
// ---------------------------------------------------------------------------------------

fn kaddr(l: &std::net::TcpListener) -> SocketAddr {
    l.local_addr().expect("kernel listener address")
}

/// A kernel pair (client, accepted) through `l`, blocking with timeouts.
fn kpair(l: &std::net::TcpListener) -> (std::net::TcpStream, std::net::TcpStream) {
    let c = std::net::TcpStream::connect_timeout(&kaddr(l), T).expect("kernel connect");
    let (s, _) = l.accept().expect("kernel accept");
    for x in [&c, &s] {
        x.set_read_timeout(Some(T)).unwrap();
        x.set_write_timeout(Some(T)).unwrap();
    }
    (c, s)
}

/// A kernel socket in state `st` (non-blocking), or `None` where std cannot make it.
fn kernel(st: St, l: &std::net::TcpListener) -> Option<(std::net::TcpStream, Keep)> {
    let mut keep: Keep = Vec::new();
    let sock = match st {
        St::Connecting => return None,
        St::ListenerGone => {
            let l2 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let (c, s) = kpair(&l2);
            drop(l2);
            keep.push(Box::new(c));
            s
        }
        _ => {
            let (c, mut s) = kpair(l);
            match st {
                St::ShutWr => c.shutdown(Shutdown::Write).unwrap(),
                St::ShutRd => c.shutdown(Shutdown::Read).unwrap(),
                St::ShutBoth => c.shutdown(Shutdown::Both).unwrap(),
                St::PeerClosed => {
                    drop(s);
                    // Blocks until the FIN is in.
                    assert_eq!(c.peek(&mut [0u8; 1]).unwrap(), 0, "kernel FIN");
                    return Some((nonblocking_k(c), keep));
                }
                St::PeerReset => {
                    (&c).write_all(b"x").unwrap();
                    let mut b = [0u8; 1];
                    assert_eq!(s.peek(&mut b).unwrap(), 1, "kernel data arrival");
                    drop(s);
                    // The RST makes the socket unconnected; std cannot wait for it
                    // without consuming SO_ERROR, so look (bounded) at getpeername.
                    let t0 = Instant::now();
                    while c.peer_addr().is_ok() {
                        assert!(t0.elapsed() < T, "kernel RST never arrived");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    return Some((nonblocking_k(c), keep));
                }
                _ => {}
            }
            s.flush().unwrap();
            keep.push(Box::new(s));
            c
        }
    };
    Some((nonblocking_k(sock), keep))
}

fn nonblocking_k(s: std::net::TcpStream) -> std::net::TcpStream {
    s.set_nonblocking(true).unwrap();
    s
}

// ---------------------------------------------------------------------------------------
// ember's sockets.
// ---------------------------------------------------------------------------------------

fn lo(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)
}

fn v4(a: SocketAddr) -> SocketAddrV4 {
    match a {
        SocketAddr::V4(a) => a,
        SocketAddr::V6(_) => panic!("ember speaks IPv4"),
    }
}

/// A loopback-only stack, fusion on or off.
fn stack(fusion: bool) -> Stack {
    Stack::builder()
        .squeues(2)
        .param("do_tcp_fusion", if fusion { "1" } else { "0" })
        .unwrap()
        .build()
        .unwrap()
}

/// One ember stack with a listener (`l`) and a listener whose accept queue is full
/// (`full`: connects to it stay in SYN-SENT).
struct EmberWorld {
    fusion: bool,
    st: Stack,
    l: TcpListener,
    full: TcpListener,
    _filler: TcpStream,
}

impl EmberWorld {
    fn new(fusion: bool) -> EmberWorld {
        let st = stack(fusion);
        let l = TcpListener::bind(&st, lo(0)).unwrap();
        l.set_accept_timeout(Some(T)).unwrap();
        let full = TcpListener::bind_with(&st, lo(0), 1, true).unwrap();
        let full_addr = v4(full.local_addr().unwrap());
        let filler = TcpStream::connect_timeout(&st, full_addr, T).unwrap();
        assert_eq!(full.pending(), 1);
        EmberWorld {
            fusion,
            st,
            l,
            full,
            _filler: filler,
        }
    }

    fn pair_on(&self, st: &Stack, l: &TcpListener) -> (TcpStream, TcpStream) {
        let c = TcpStream::connect_timeout(st, v4(l.local_addr().unwrap()), T).unwrap();
        let (s, _) = l.accept().unwrap();
        for x in [&c, &s] {
            x.set_read_timeout(Some(T)).unwrap();
            x.set_write_timeout(Some(T)).unwrap();
        }
        assert_eq!(c.is_fused().unwrap(), self.fusion, "fusion");
        (c, s)
    }

    /// An ember stream in state `st` (non-blocking).
    fn make(&self, st: St) -> (TcpStream, Keep) {
        let mut keep: Keep = Vec::new();
        let sock = match st {
            St::Connecting => {
                let to = v4(self.full.local_addr().unwrap());
                let c = TcpStream::connect_nonblocking(&self.st, to).unwrap();
                assert_eq!(
                    c.state().unwrap(),
                    ember_core::tcp::State::SynSent,
                    "not connecting"
                );
                c
            }
            St::ListenerGone => {
                let l2 = TcpListener::bind(&self.st, lo(0)).unwrap();
                l2.set_accept_timeout(Some(T)).unwrap();
                let (c, s) = self.pair_on(&self.st, &l2);
                drop(l2);
                keep.push(Box::new(c));
                s
            }
            _ => {
                let (c, s) = self.pair_on(&self.st, &self.l);
                match st {
                    St::ShutWr => c.shutdown(Shutdown::Write).unwrap(),
                    St::ShutRd => c.shutdown(Shutdown::Read).unwrap(),
                    St::ShutBoth => c.shutdown(Shutdown::Both).unwrap(),
                    St::PeerClosed => {
                        drop(s);
                        assert_eq!(c.peek(&mut [0u8; 1]).unwrap(), 0, "ember FIN");
                        c.set_nonblocking(true).unwrap();
                        return (c, keep);
                    }
                    St::PeerReset => {
                        (&c).write_all(b"x").unwrap();
                        assert_eq!(s.peek(&mut [0u8; 1]).unwrap(), 1, "ember data arrival");
                        drop(s);
                        wait_for(&c, ready::ERROR);
                        c.set_nonblocking(true).unwrap();
                        return (c, keep);
                    }
                    _ => {}
                }
                keep.push(Box::new(s));
                c
            }
        };
        sock.set_nonblocking(true).unwrap();
        (sock, keep)
    }
}

/// Parks (Poller) until `s` reports one of `bits`.
fn wait_for(s: &TcpStream, bits: u32) {
    let p = Poller::new();
    p.add_stream(s, 1, bits).unwrap();
    let mut ev: Vec<Event> = Vec::new();
    assert_eq!(
        p.wait(&mut ev, Some(T)).unwrap(),
        1,
        "readiness {bits:#x} never came"
    );
}

// ---------------------------------------------------------------------------------------
// The TCP stream matrix.
// ---------------------------------------------------------------------------------------

/// Plays the TCP stream matrix: every call in every state, on the kernel (where std can
/// make the call and the state: the calibration), on ember fused and unfused, and on
/// ember after `Stack::shutdown`. All differences are collected and reported together.
///
/// Size: 25 calls x 8 states x 3 sockets (kernel, ember fused, ember unfused) + 25
/// calls x 2 (stack down, fused and unfused).
#[test]
fn tcp_stream_matrix() {
    let kl = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let worlds = [EmberWorld::new(true), EmberWorld::new(false)];
    let mut bad = Vec::new();
    let mut cells = 0usize;
    let mut calibrated = 0usize;
    for r in TCP {
        for (i, &st) in STATES.iter().enumerate() {
            let linux = r.linux[i];
            if let Some((s, keep)) = kernel(st, &kl) {
                if let Some(got) = s.call(r.call) {
                    calibrated += 1;
                    if got != linux {
                        bad.push(format!(
                            "kernel   {:?} in {st:?}: {got:?}, table says {linux:?}",
                            r.call
                        ));
                    }
                }
                drop((s, keep));
            }
            let want = ember_expect(r.call, st, linux);
            for w in &worlds {
                let t0 = Instant::now();
                let (s, keep) = w.make(st);
                let got = s.call(r.call).expect("ember has every call");
                cells += 1;
                if got != want {
                    bad.push(format!(
                        "ember{} {:?} in {st:?}: {got:?}, Linux {linux:?}, want {want:?}",
                        if w.fusion { "/f" } else { "/u" },
                        r.call
                    ));
                }
                drop((s, keep));
                assert!(
                    t0.elapsed() < T,
                    "{:?} in {st:?} took {:?}",
                    r.call,
                    t0.elapsed()
                );
            }
        }
        // After Stack::shutdown (a stack of its own each time).
        for fusion in [true, false] {
            let w = EmberWorld::new(fusion);
            let (c, keep) = w.make(St::Connected);
            w.st.shutdown();
            let t0 = Instant::now();
            let got = c.call(r.call).expect("ember has every call");
            cells += 1;
            assert!(t0.elapsed() < T, "{:?} after shutdown hung", r.call);
            if got != r.stack_down {
                bad.push(format!(
                    "ember{} {:?} after Stack::shutdown: {got:?}, want {:?}",
                    if fusion { "/f" } else { "/u" },
                    r.call,
                    r.stack_down
                ));
            }
            // Double close: the handles go after the stack did.
            drop((c, keep, w));
        }
    }
    eprintln!(
        "TCP matrix: {} calls x {} states, {cells} ember cells, {calibrated} kernel cells",
        TCP.len(),
        STATES.len() + 1
    );
    for w in &worlds {
        w.st.shutdown();
    }
    assert!(
        bad.is_empty(),
        "{} cells differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Linux (sk_stream_wait_connect): a blocking write on a connection still opening
/// waits for the handshake, bounded by SO_SNDTIMEO (then EAGAIN), and goes through once
/// the connection is established; nothing is queued before.
#[test]
fn blocking_write_waits_for_the_handshake() {
    for fusion in [true, false] {
        let w = EmberWorld::new(fusion);
        let (c, _keep) = w.make(St::Connecting);
        c.set_nonblocking(false).unwrap();
        let short = Duration::from_millis(200);
        c.set_write_timeout(Some(short)).unwrap();
        let t0 = Instant::now();
        assert_eq!(n((&c).write(b"early")), WB, "fusion={fusion}");
        assert!(t0.elapsed() >= short, "timed out early: {:?}", t0.elapsed());
        assert_eq!(
            c.tcp_info().unwrap().send_queued,
            0,
            "data queued while connecting"
        );
        // Room in the accept queue: the SYN's retransmission gets through, the write
        // (now with a long timeout) waits for it and is sent.
        let (_filler_end, _) = w.full.accept().unwrap();
        c.set_write_timeout(Some(T)).unwrap();
        assert_eq!(n((&c).write(b"late")), N(4), "fusion={fusion}");
        w.full.set_accept_timeout(Some(T)).unwrap();
        let (mut s, _) = w.full.accept().unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        let mut b = [0u8; 4];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"late");
        w.st.shutdown();
    }
}

// ---------------------------------------------------------------------------------------
// Listeners and connect.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LCall {
    /// Non-blocking accept().
    Accept,
    LocalAddr,
    Nonblocking,
    /// set_accept_timeout(Some(0)) (ember's SO_RCVTIMEO on a listener).
    AcceptTimeout0,
    /// Another listener on the same address.
    BindSame,
    /// A connect to the listener's address.
    ConnectTo,
    /// connect_timeout(addr, 0).
    ConnectTimeout0,
}

/// Listener states: listening with an empty accept queue, with one connection queued,
/// and closed (then only `BindSame` and the connects apply: `None` elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LSt {
    Empty,
    Queued,
    Closed,
}

const LSTATES: [LSt; 3] = [LSt::Empty, LSt::Queued, LSt::Closed];

/// The listener matrix: Linux's answers per state, then ember's after
/// `Stack::shutdown`.
#[rustfmt::skip]
const LISTENER: &[(LCall, [Option<Out>; 3], Out)] = &[
    //                      Empty        Queued       Closed           StackDown
    (LCall::Accept,         [Some(WB),   Some(Ok),    None],           NC),
    (LCall::LocalAddr,      [Some(Ok),   Some(Ok),    None],           Ok),
    (LCall::Nonblocking,    [Some(Ok),   Some(Ok),    None],           Ok),
    (LCall::AcceptTimeout0, [Some(INV),  Some(INV),   None],           INV),
    (LCall::BindSame,       [Some(INUSE),Some(INUSE), Some(Ok)],       NC),
    (LCall::ConnectTo,      [Some(Ok),   Some(Ok),    Some(REF)],      NC),
    (LCall::ConnectTimeout0,[Some(INV),  Some(INV),   Some(INV)],      INV),
];

fn kernel_listener_call(
    c: LCall,
    l: Option<&std::net::TcpListener>,
    addr: SocketAddr,
) -> Option<Out> {
    Some(match (c, l) {
        (LCall::Accept, Some(l)) => unit(l.accept()),
        (LCall::LocalAddr, Some(l)) => unit(l.local_addr()),
        (LCall::Nonblocking, Some(l)) => unit(l.set_nonblocking(true)),
        (LCall::BindSame, _) => unit(std::net::TcpListener::bind(addr)),
        (LCall::ConnectTo, _) => unit(std::net::TcpStream::connect_timeout(&addr, T)),
        (LCall::ConnectTimeout0, _) => {
            unit(std::net::TcpStream::connect_timeout(&addr, Duration::ZERO))
        }
        _ => return None,
    })
}

fn ember_listener_call(
    c: LCall,
    st: &Stack,
    l: Option<&TcpListener>,
    addr: SocketAddrV4,
) -> Option<Out> {
    Some(match (c, l) {
        (LCall::Accept, Some(l)) => unit(l.accept()),
        (LCall::LocalAddr, Some(l)) => unit(l.local_addr()),
        (LCall::Nonblocking, Some(l)) => unit(l.set_nonblocking(true)),
        (LCall::AcceptTimeout0, Some(l)) => unit(l.set_accept_timeout(Some(Duration::ZERO))),
        (LCall::BindSame, _) => unit(TcpListener::bind(st, addr)),
        (LCall::ConnectTo, _) => unit(TcpStream::connect_timeout(st, addr, T)),
        (LCall::ConnectTimeout0, _) => unit(TcpStream::connect_timeout(st, addr, Duration::ZERO)),
        _ => return None,
    })
}

/// The listener matrix on the kernel (calibration) and on ember fused and unfused,
/// and after `Stack::shutdown`: 7 calls x 3 states (+ stack down).
#[test]
fn listener_matrix() {
    let mut bad = Vec::new();
    let mut cells = 0;
    for &(call, linux, down) in LISTENER {
        for (i, &ls) in LSTATES.iter().enumerate() {
            let Some(want) = linux[i] else { continue };
            // The kernel.
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = kaddr(&l);
            let mut keep: Keep = Vec::new();
            if ls == LSt::Queued {
                keep.push(Box::new(
                    std::net::TcpStream::connect_timeout(&addr, T).unwrap(),
                ));
            }
            l.set_nonblocking(true).unwrap();
            let l = if ls == LSt::Closed {
                drop(l);
                None
            } else {
                Some(l)
            };
            if let Some(got) = kernel_listener_call(call, l.as_ref(), addr) {
                if got != want {
                    bad.push(format!(
                        "kernel   {call:?} on {ls:?}: {got:?}, table says {want:?}"
                    ));
                }
            }
            drop((l, keep));
            // ember.
            for fusion in [true, false] {
                let st = stack(fusion);
                let l = TcpListener::bind(&st, lo(0)).unwrap();
                let addr = v4(l.local_addr().unwrap());
                let mut keep: Keep = Vec::new();
                if ls == LSt::Queued {
                    keep.push(Box::new(TcpStream::connect_timeout(&st, addr, T).unwrap()));
                    assert_eq!(l.pending(), 1);
                }
                l.set_nonblocking(true).unwrap();
                let l = if ls == LSt::Closed {
                    drop(l);
                    None
                } else {
                    Some(l)
                };
                let got = ember_listener_call(call, &st, l.as_ref(), addr).expect("ember call");
                cells += 1;
                if got != want {
                    bad.push(format!(
                        "ember/{fusion} {call:?} on {ls:?}: {got:?}, want {want:?}"
                    ));
                }
                drop((l, keep));
                st.shutdown();
            }
        }
        // After Stack::shutdown.
        let st = stack(true);
        let l = TcpListener::bind(&st, lo(0)).unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = v4(l.local_addr().unwrap());
        st.shutdown();
        let got = ember_listener_call(call, &st, Some(&l), addr).expect("ember call");
        cells += 1;
        if got != down {
            bad.push(format!(
                "ember {call:?} after Stack::shutdown: {got:?}, want {down:?}"
            ));
        }
        drop(l);
    }
    eprintln!(
        "listener matrix: {} calls x {} states, {cells} ember cells",
        LISTENER.len(),
        LSTATES.len() + 1
    );
    assert!(
        bad.is_empty(),
        "{} cells differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

// ---------------------------------------------------------------------------------------
// UDP.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UCall {
    Send,
    SendTo,
    SendTo0,
    /// One byte more than an IPv4 UDP datagram can carry (65,508 bytes).
    SendToHuge,
    Recv,
    RecvFrom,
    /// recv() into an empty buffer.
    Recv0,
    Connect,
    ReadTimeout0,
    Nonblocking,
    LocalAddr,
}

/// UDP states: bound and never connected; connected to a live peer; connected to a
/// port nobody has, after one datagram went there (the ICMP port unreachable is in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum USt {
    Unconnected,
    Connected,
    ConnectedDead,
}

const USTATES: [USt; 3] = [USt::Unconnected, USt::Connected, USt::ConnectedDead];

const DESTREQ: Out = Errno(libc::EDESTADDRREQ);
const MSGSIZE: Out = Errno(libc::EMSGSIZE);

/// The UDP matrix: Linux's answers, then ember's after `Stack::shutdown`.
#[rustfmt::skip]
const UDP: &[(UCall, [Out; 3], Out)] = &[
    //                  Unconn.   Conn'd    Dead      StackDown
    (UCall::Send,       [DESTREQ, N(8),     REF],     NC),
    (UCall::SendTo,     [N(8),    N(8),     REF],     NC),
    (UCall::SendTo0,    [N(0),    N(0),     REF],     NC),
    (UCall::SendToHuge, [MSGSIZE, MSGSIZE,  MSGSIZE], NC),
    (UCall::Recv,       [WB,      WB,       REF],     NC),
    (UCall::RecvFrom,   [WB,      WB,       REF],     NC),
    (UCall::Recv0,      [WB,      WB,       REF],     NC),
    (UCall::Connect,    [Ok,      Ok,       Ok],      Ok),
    (UCall::ReadTimeout0,[INV,    INV,      INV],     INV),
    (UCall::Nonblocking,[Ok,      Ok,       Ok],      Ok),
    (UCall::LocalAddr,  [Ok,      Ok,       Ok],      Ok),
];

/// Where ember's UDP knowingly differs from Linux: (call, state or all, ember, why).
const EMBER_UDP_DIFFERS: &[(UCall, Option<USt>, Out, &str)] = &[
    (
        UCall::Send,
        Some(USt::Unconnected),
        NC,
        "EDESTADDRREQ has no stable io::ErrorKind; ember says NotConnected (ENOTCONN)",
    ),
    (
        UCall::SendToHuge,
        None,
        INV,
        "EMSGSIZE has no stable io::ErrorKind; ember says InvalidInput",
    ),
    (
        UCall::Send,
        Some(USt::ConnectedDead),
        N(8),
        "ember does not hand ICMP errors to UDP sockets (no SO_ERROR for UDP; RFC 1122 \
      §4.1.3.3 gap, left for the core's UDP)",
    ),
    (
        UCall::SendTo,
        Some(USt::ConnectedDead),
        N(8),
        "same: no ICMP errors for UDP",
    ),
    (
        UCall::SendTo0,
        Some(USt::ConnectedDead),
        N(0),
        "same: no ICMP errors for UDP",
    ),
    (
        UCall::Recv,
        Some(USt::ConnectedDead),
        WB,
        "same: no ICMP errors for UDP",
    ),
    (
        UCall::RecvFrom,
        Some(USt::ConnectedDead),
        WB,
        "same: no ICMP errors for UDP",
    ),
    (
        UCall::Recv0,
        Some(USt::ConnectedDead),
        WB,
        "same: no ICMP errors for UDP",
    ),
];

/// The UDP matrix on the kernel (calibration) and on ember, and after
/// `Stack::shutdown`: 11 calls x 3 states (+ stack down).
#[test]
fn udp_matrix() {
    let mut bad = Vec::new();
    let mut cells = 0;
    let big = vec![0u8; 65_509];
    for &(call, linux, down) in UDP {
        for (i, &us) in USTATES.iter().enumerate() {
            let want = linux[i];
            // The kernel: a peer, and a port nobody has.
            let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let dead = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let dead_addr = dead.local_addr().unwrap();
            drop(dead);
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_nonblocking(true).unwrap();
            let to = peer.local_addr().unwrap();
            match us {
                USt::Unconnected => {}
                USt::Connected => s.connect(to).unwrap(),
                USt::ConnectedDead => {
                    s.connect(dead_addr).unwrap();
                    s.send(b"x").unwrap();
                }
            }
            let got = match call {
                UCall::Send => n(s.send(b"12345678")),
                UCall::SendTo => n(s.send_to(b"12345678", to)),
                UCall::SendTo0 => n(s.send_to(&[], to)),
                UCall::SendToHuge => n(s.send_to(&big, to)),
                UCall::Recv => n(s.recv(&mut [0u8; 8])),
                UCall::RecvFrom => n(s.recv_from(&mut [0u8; 8]).map(|x| x.0)),
                UCall::Recv0 => n(s.recv(&mut [])),
                UCall::Connect => unit(s.connect(to)),
                UCall::ReadTimeout0 => unit(s.set_read_timeout(Some(Duration::ZERO))),
                UCall::Nonblocking => unit(s.set_nonblocking(true)),
                UCall::LocalAddr => unit(s.local_addr()),
            };
            if got != want {
                bad.push(format!(
                    "kernel {call:?} {us:?}: {got:?}, table says {want:?}"
                ));
            }
            // ember.
            let ewant = EMBER_UDP_DIFFERS
                .iter()
                .find(|d| d.0 == call && d.1.is_none_or(|x| x == us))
                .map_or(want, |d| d.2);
            let st = stack(true);
            let got = ember_udp_call(&st, call, us, &big, false);
            cells += 1;
            if got != ewant {
                bad.push(format!(
                    "ember {call:?} {us:?}: {got:?}, Linux {want:?}, want {ewant:?}"
                ));
            }
            st.shutdown();
        }
        let st = stack(true);
        let got = ember_udp_call(&st, call, USt::Connected, &big, true);
        cells += 1;
        if got != down {
            bad.push(format!(
                "ember {call:?} after Stack::shutdown: {got:?}, want {down:?}"
            ));
        }
    }
    eprintln!(
        "UDP matrix: {} calls x {} states, {cells} ember cells",
        UDP.len(),
        USTATES.len() + 1
    );
    assert!(
        bad.is_empty(),
        "{} cells differ:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Makes `call` on an ember UDP socket in state `us` (the stack shut down first if
/// `down`).
fn ember_udp_call(st: &Stack, call: UCall, us: USt, big: &[u8], down: bool) -> Out {
    let peer = UdpSocket::bind(st, lo(0)).unwrap();
    let dead = UdpSocket::bind(st, lo(0)).unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let s = UdpSocket::bind(st, lo(0)).unwrap();
    s.set_nonblocking(true).unwrap();
    let to = peer.local_addr().unwrap();
    match us {
        USt::Unconnected => {}
        USt::Connected => s.connect(to).unwrap(),
        USt::ConnectedDead => {
            s.connect(dead_addr).unwrap();
            s.send(b"x").unwrap();
        }
    }
    if down {
        st.shutdown();
    }
    let t0 = Instant::now();
    let out = match call {
        UCall::Send => n(s.send(b"12345678")),
        UCall::SendTo => n(s.send_to(b"12345678", to)),
        UCall::SendTo0 => n(s.send_to(&[], to)),
        UCall::SendToHuge => n(s.send_to(big, to)),
        UCall::Recv => n(s.recv(&mut [0u8; 8])),
        UCall::RecvFrom => n(s.recv_from(&mut [0u8; 8]).map(|x| x.0)),
        UCall::Recv0 => n(s.recv(&mut [])),
        UCall::Connect => unit(s.connect(to)),
        UCall::ReadTimeout0 => unit(s.set_read_timeout(Some(Duration::ZERO))),
        UCall::Nonblocking => unit(s.set_nonblocking(true)),
        UCall::LocalAddr => unit(s.local_addr()),
    };
    assert!(t0.elapsed() < T, "{call:?} hung");
    out
}

// ---------------------------------------------------------------------------------------
// Double close, huge and zero-length buffers, the poller after its sockets.
// ---------------------------------------------------------------------------------------

/// Double close and every order of dropping: shutdown(Both) twice then drop; the last
/// of several `Arc` clones dropped on two threads at once; a stream dropped after its
/// listener, its peer, and its `Stack` handle; a UDP socket and a listener dropped
/// after `Stack::shutdown`, and `Stack::shutdown` twice. Nothing panics; the stack
/// stays usable until it is shut down.
#[test]
fn double_close_and_drop_orders() {
    for fusion in [true, false] {
        let w = EmberWorld::new(fusion);
        let (c, s) = w.pair_on(&w.st, &w.l);
        c.shutdown(Shutdown::Both).unwrap();
        c.shutdown(Shutdown::Both).unwrap();
        drop(c);
        // The peer sees EOF, then its own double shutdown and close: once its FIN is
        // acknowledged (LAST-ACK -> CLOSED) a second shutdown is ENOTCONN, as on the
        // kernel (checked on a kernel pair in the same sequence).
        assert_eq!((&s).read(&mut [0u8; 8]).unwrap(), 0);
        s.shutdown(Shutdown::Write).unwrap();
        wait_for(&s, ready::HUP);
        assert_eq!(unit(s.shutdown(Shutdown::Write)), NC, "fusion={fusion}");
        drop(s);
        if fusion {
            let kl = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let (kc, ks) = kpair(&kl);
            kc.shutdown(Shutdown::Both).unwrap();
            kc.shutdown(Shutdown::Both).unwrap();
            drop(kc);
            assert_eq!((&ks).read(&mut [0u8; 8]).unwrap(), 0);
            ks.shutdown(Shutdown::Write).unwrap();
            let t0 = Instant::now();
            while ks.peer_addr().is_ok() {
                assert!(t0.elapsed() < T, "kernel LAST-ACK never completed");
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(unit(ks.shutdown(Shutdown::Write)), NC, "kernel");
        }
        // Clones on two threads.
        let (c, s) = w.pair_on(&w.st, &w.l);
        let c = std::sync::Arc::new(c);
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || drop(c))
            })
            .collect();
        drop(c);
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(
            (&s).read(&mut [0u8; 8]).unwrap(),
            0,
            "one FIN for the clones"
        );
        // A stream outliving its listener, its peer and the Stack handle it came from.
        let st2 = stack(fusion);
        let l2 = TcpListener::bind(&st2, lo(0)).unwrap();
        l2.set_accept_timeout(Some(T)).unwrap();
        let (c2, s2) = w.pair_on(&st2, &l2);
        drop(l2);
        drop(s2);
        let st2b = st2.clone();
        drop(st2);
        assert_eq!((&c2).read(&mut [0u8; 8]).unwrap(), 0);
        drop(c2);
        st2b.shutdown();
        // Sockets dropped after the stack shut down, and a second shutdown.
        let u = UdpSocket::bind(&w.st, lo(0)).unwrap();
        let l3 = TcpListener::bind(&w.st, lo(0)).unwrap();
        let (c3, s3) = w.pair_on(&w.st, &w.l);
        w.st.shutdown();
        drop((u, l3, c3, s3));
        w.st.shutdown();
    }
}

/// Huge and zero-length buffers on a connected stream: a read into a 64 MiB buffer
/// returns what is there; a 64 MiB non-blocking write returns a partial count (then
/// WouldBlock once full); a blocking 64 MiB write with a write timeout returns a
/// partial count or WouldBlock, never more than it was given; 0-byte reads and writes
/// return Ok(0) at once, blocking or not.
#[test]
fn huge_and_zero_length_buffers() {
    for fusion in [true, false] {
        let w = EmberWorld::new(fusion);
        let (c, s) = w.pair_on(&w.st, &w.l);
        (&c).write_all(b"8 bytes!").unwrap();
        let mut big = vec![0u8; HUGE];
        assert_eq!((&s).read(&mut big).unwrap(), 8);
        assert_eq!(&big[..8], b"8 bytes!");
        // Blocking, nothing to read: still Ok(0) at once.
        let t0 = Instant::now();
        assert_eq!((&s).read(&mut []).unwrap(), 0);
        assert_eq!((&c).write(&[]).unwrap(), 0);
        assert!(t0.elapsed() < Duration::from_secs(1));
        c.set_nonblocking(true).unwrap();
        let mut total = 0usize;
        loop {
            match (&c).write(huge_buf()) {
                Result::Ok(k) => {
                    assert!(k > 0 && k < HUGE, "fusion={fusion}: wrote {k}");
                    total += k;
                    assert!(total < HUGE, "never full");
                }
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::WouldBlock, "fusion={fusion}");
                    break;
                }
            }
        }
        assert_eq!((&c).write(&[]).unwrap(), 0, "0-byte write on a full buffer");
        c.set_nonblocking(false).unwrap();
        c.set_write_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        match (&c).write(huge_buf()) {
            Result::Ok(k) => assert!(k < HUGE),
            Err(e) => assert_eq!(e.kind(), ErrorKind::WouldBlock),
        }
        w.st.shutdown();
    }
}

/// The poller after misuse: a token registered twice is `AlreadyExists` (epoll's
/// EEXIST); deleting an unknown token twice is `NotFound` (ENOENT); a registered stream,
/// listener and UDP socket dropped (and their stack shut down) leave a poller whose
/// wait returns, with a timeout of zero too, and which drops cleanly.
#[test]
fn poller_outlives_its_sockets() {
    let w = EmberWorld::new(true);
    let (c, s) = w.pair_on(&w.st, &w.l);
    let u = UdpSocket::bind(&w.st, lo(0)).unwrap();
    let p = Poller::new();
    p.add_stream(&c, 1, ready::READ).unwrap();
    assert_eq!(
        p.add_stream(&s, 1, ready::READ).unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    p.add_stream(&s, 2, ready::READ | ready::WRITE).unwrap();
    p.add_listener(&w.l, 3, ready::ACCEPT).unwrap();
    p.add_udp(&u, 4, ready::READ).unwrap();
    assert_eq!(p.delete(9).unwrap_err().kind(), ErrorKind::NotFound);
    p.delete(2).unwrap();
    assert_eq!(p.delete(2).unwrap_err().kind(), ErrorKind::NotFound);
    drop((c, s, u));
    let mut ev = Vec::new();
    let t0 = Instant::now();
    // The stream's peer closed: READ (EOF) for token 1, nothing for the others.
    let k = p.wait(&mut ev, Some(Duration::from_millis(50))).unwrap();
    assert!(k <= 3);
    w.st.shutdown();
    p.wait(&mut ev, Some(Duration::ZERO)).unwrap();
    p.wait(&mut ev, Some(Duration::from_millis(20))).unwrap();
    assert!(t0.elapsed() < T);
    drop(p);
}

/// After the peer's reset the error is reported once, by whichever call comes first
/// (read, peek, write or SO_ERROR), then reads see end of file and writes EPIPE, as on
/// Linux (sock_error clears sk_err): each order below is played on a kernel pair (the
/// calibration) and on ember, fused and unfused.
#[test]
fn reset_is_reported_once_in_any_order() {
    let orders: [&[Call]; 5] = [
        &[
            Call::Write,
            Call::Read,
            Call::TakeError,
            Call::Write,
            Call::PeerAddr,
        ],
        &[Call::Read, Call::Write, Call::TakeError, Call::Read],
        &[Call::TakeError, Call::TakeError, Call::Read, Call::Write],
        &[Call::Peek, Call::Read, Call::Peek, Call::Write],
        &[Call::Write0, Call::Read0, Call::Write, Call::TakeError],
    ];
    let kl = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let worlds = [EmberWorld::new(true), EmberWorld::new(false)];
    let mut bad = Vec::new();
    for order in orders {
        let (k, _keep) = kernel(St::PeerReset, &kl).expect("kernel state");
        let linux: Vec<Out> = order
            .iter()
            .map(|&c| k.call(c).expect("std call"))
            .collect();
        for w in &worlds {
            let (s, _keep) = w.make(St::PeerReset);
            let got: Vec<Out> = order
                .iter()
                .map(|&c| s.call(c).expect("ember call"))
                .zip(order)
                .zip(&linux)
                .map(|((g, &c), &l)| if c == Call::Read0 { l } else { g })
                .collect();
            if got != linux {
                bad.push(format!(
                    "fusion={} {order:?}: ember {got:?}, Linux {linux:?}",
                    w.fusion
                ));
            }
        }
    }
    for w in &worlds {
        w.st.shutdown();
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
