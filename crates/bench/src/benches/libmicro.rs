//! `libmicro`: the FireEngine white paper's Table 5, the libMicro connection set-up and
//! tear-down micro-benchmarks by which the paper showed the merged TCP/IP stack's
//! gains (Solaris 10 build 24 → FireEngine: connect()/accept() 203 → 146, socket()
//! 33 → 25, close() 88 → 47, per call).
//!
//! One case per (variant, operation), the operation being the case's mode. Each is
//! defined as libMicro's own benchmark defines it (`connection`, `connection -c`,
//! `connection -a`, `socket`, `close_tcp`), on one listener of a fresh environment:
//!
//! * `connect+accept` (libMicro `connection`): timed, a connect carried to the
//!   established state (libMicro: a non-blocking `connect`, `poll` for writable, connect
//!   again) and then the `accept` of that connection on the listener. The client socket
//!   exists before the timed part where the variant can make one on its own (the
//!   kernel's `socket()` is untimed, as in libMicro).
//! * `connect` ("connect only", `connection -c`): timed, the `connect` call alone on a
//!   non-blocking socket; the connection completes into the listener's backlog, which
//!   absorbs the whole batch (64 connections, backlog 128); they are accepted untimed.
//! * `accept` ("accept only", `connection -a`): the batch's connections are made and
//!   queued untimed; timed, the `accept` of each already-queued connection.
//! * `socket` (libMicro `socket -f PF_INET` / `PF_UNIX`): timed, `socket()` alone;
//!   closed untimed.
//! * `close` (libMicro `close_tcp`): the batch's connections are established untimed;
//!   timed, the `close` of the accepted (server) end of each established connection
//!   while its client end stays open (the FIN is sent; nothing waits for its answer).
//!
//! As libMicro, operations run in batches (64 calls, one timed span each); `us_per_op`
//! is the median over a round's batches of the batch's time per call (one untimed
//! warm-up batch first), and `cpu_us_per_op` the process's CPU time over the timed
//! spans per call (for ember it includes the squeue workers' share).
//!
//! ember's API has no unconnected socket: a `TcpStream` comes into being by `connect`
//! or `accept`, and `TcpListener::bind` also binds and enters the classifier. Nothing
//! in ember is the honest equivalent of `socket()`, so ember's `socket` cases report an
//! `Unsupported` error saying so; ember's `connect` and `connect+accept` include the
//! creation of its socket, which the kernel variants' figures do not.

use super::ksock::{self, Target};
use crate::env::{Conn, Env, Listener, Variant};
use crate::measure::{cpu_time, median};
use crate::report::{alternate, Case, Outcome, Report};
use crate::Opts;
use ember_runtime::TcpStream;
use serde_json::{json, Map};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// The variants `libmicro` runs.
pub const VARIANTS: &[Variant] = &[
    Variant::EmberFused,
    Variant::EmberLoopback,
    Variant::KernelTcp,
    Variant::KernelUnix,
];

/// Calls per batch (one timed span): within the listener's backlog of 128.
pub const BATCH: usize = 64;

/// The longest any one connect or accept may wait.
const WAIT: Duration = Duration::from_secs(5);

/// The longest one round of one case may take.
const ROUND_LIMIT: Duration = Duration::from_secs(60);

/// A Table 5 operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    ConnectAccept,
    Connect,
    Accept,
    Socket,
    Close,
}

impl Op {
    /// Every operation, in report order.
    pub const ALL: [Op; 5] = [
        Op::ConnectAccept,
        Op::Connect,
        Op::Accept,
        Op::Socket,
        Op::Close,
    ];

    /// The operation's mode name.
    pub fn name(self) -> &'static str {
        match self {
            Op::ConnectAccept => "connect+accept",
            Op::Connect => "connect",
            Op::Accept => "accept",
            Op::Socket => "socket",
            Op::Close => "close",
        }
    }

    /// The operation of a mode name.
    pub fn parse(s: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|o| o.name() == s)
    }
}

/// Runs the bench.
pub fn run(o: &Opts) -> io::Result<Report> {
    let batches: usize = o.size(16, 64);
    let rounds = o.rounds(5, 9);
    let cfg = o.env();
    let mut cases = Vec::new();
    for op in Op::ALL {
        for v in VARIANTS.iter().filter(|v| o.wants(**v)) {
            cases.push(Case::mode(*v, op.name()));
        }
    }
    let runs = alternate("libmicro", cases, rounds, o.progress, |c, _| {
        let op = c.mode.as_deref().and_then(Op::parse).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "libmicro case without an op")
        })?;
        let mut env = Env::new(c.variant, &cfg)?;
        measure(&mut env, op, batches)
    });
    let mut params = Map::new();
    params.insert("rounds".into(), json!(rounds));
    params.insert("batch".into(), json!(BATCH));
    params.insert("batches".into(), json!(batches));
    let mut r = Report::new("libmicro", params, runs);
    r.check_ratio(
        "ember-fused[connect+accept]",
        "kernel-tcp[connect+accept]",
        "us_per_op",
        true,
        0.2,
    );
    r.notes.push(
        "us_per_op: median over batches of a batch's time per call (libMicro's usecs/call); \
         connect = the non-blocking connect call alone, accept = accept of a queued \
         connection, close = close of the accepted end of an established connection"
            .into(),
    );
    r.notes.push(
        "ember has no socket() (a TcpStream is made by connect or accept): its socket rows \
         are an error by design, and its connect and connect+accept include making the \
         socket, which the kernel's (socket() untimed, as libMicro) do not"
            .into(),
    );
    Ok(r)
}

/// The socket the kernel makes before the timed part; ember makes none.
enum Pre {
    Kernel(OwnedFd),
    Ember,
}

/// One environment's listener and what its clients connect to.
struct Bench<'a> {
    env: &'a Env,
    l: Listener,
    /// Where kernel clients connect (`None` for ember).
    to: Option<Target>,
}

impl<'a> Bench<'a> {
    fn new(env: &'a mut Env) -> io::Result<Bench<'a>> {
        let l = env.listen()?;
        let to = match &l {
            Listener::Tcp(t) => {
                t.set_nonblocking(true)?;
                Some(Target::Inet(env.addr()))
            }
            Listener::Unix(u) => {
                u.set_nonblocking(true)?;
                let p = env
                    .unix_path()
                    .ok_or_else(|| io::Error::other("no unix path"))?;
                Some(Target::Unix(p.to_path_buf()))
            }
            Listener::Ember(e) => {
                e.set_accept_timeout(Some(WAIT))?;
                None
            }
        };
        Ok(Bench { env, l, to })
    }

    fn domain(&self) -> libc::c_int {
        match self.to {
            Some(Target::Unix(_)) => libc::AF_UNIX,
            _ => libc::AF_INET,
        }
    }

    /// The client's socket before connect: a non-blocking kernel socket, or nothing.
    fn pre(&self) -> io::Result<Pre> {
        match self.to {
            Some(_) => Ok(Pre::Kernel(ksock::socket(self.domain(), true)?)),
            None => Ok(Pre::Ember),
        }
    }

    fn kernel_conn(&self, fd: OwnedFd) -> Conn {
        match self.to {
            Some(Target::Unix(_)) => Conn::Unix(std::os::unix::net::UnixStream::from(fd)),
            _ => Conn::Tcp(std::net::TcpStream::from(fd)),
        }
    }

    fn stack(&self) -> io::Result<&ember_runtime::Stack> {
        self.env
            .client
            .as_ref()
            .ok_or_else(|| io::Error::other("ember env without a stack"))
    }

    /// A connect carried to the established state.
    fn connect(&self, pre: Pre) -> io::Result<Conn> {
        match (pre, &self.to) {
            (Pre::Kernel(fd), Some(to)) => {
                ksock::connect_wait(fd.as_fd(), to, Instant::now() + WAIT)?;
                Ok(self.kernel_conn(fd))
            }
            _ => Ok(Conn::Ember(TcpStream::connect_timeout(
                self.stack()?,
                self.env.addr(),
                WAIT,
            )?)),
        }
    }

    /// The connect call alone, non-blocking.
    fn connect_call(&self, pre: Pre) -> io::Result<Conn> {
        match (pre, &self.to) {
            (Pre::Kernel(fd), Some(to)) => match ksock::connect(fd.as_fd(), to) {
                Ok(()) => Ok(self.kernel_conn(fd)),
                Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(self.kernel_conn(fd)),
                Err(e) => Err(e),
            },
            _ => Ok(Conn::Ember(TcpStream::connect_nonblocking(
                self.stack()?,
                self.env.addr(),
            )?)),
        }
    }

    /// Accepts one connection, waiting (poll, as libMicro) at most `WAIT`.
    fn accept(&self) -> io::Result<Conn> {
        ksock::accept_within(&self.l, WAIT)
    }

    /// `n` established connections `(client, server)`, untimed.
    fn pairs(&self, n: usize) -> io::Result<Vec<(Conn, Conn)>> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let c = self.connect(self.pre()?)?;
            let s = self.accept()?;
            v.push((c, s));
        }
        Ok(v)
    }

    /// One batch of `op`: the timed span's wall time and CPU time.
    fn batch(&self, op: Op) -> io::Result<(Duration, Duration)> {
        match op {
            Op::Socket => {
                if self.to.is_none() {
                    return Err(socket_unsupported());
                }
                let dom = self.domain();
                let mut fds = Vec::with_capacity(BATCH);
                let t = span(|| {
                    for _ in 0..BATCH {
                        fds.push(ksock::socket(dom, false)?);
                    }
                    Ok(())
                })?;
                drop(fds);
                Ok(t)
            }
            Op::ConnectAccept => {
                let mut pres = (0..BATCH)
                    .map(|_| self.pre())
                    .collect::<io::Result<Vec<_>>>()?;
                let mut pairs = Vec::with_capacity(BATCH);
                let t = span(|| {
                    for p in pres.drain(..) {
                        let c = self.connect(p)?;
                        let s = self.accept()?;
                        pairs.push((c, s));
                    }
                    Ok(())
                })?;
                reset(pairs.into_iter().flat_map(|(c, s)| [c, s]));
                Ok(t)
            }
            Op::Connect => {
                let mut pres = (0..BATCH)
                    .map(|_| self.pre())
                    .collect::<io::Result<Vec<_>>>()?;
                let mut clients = Vec::with_capacity(BATCH);
                let t = span(|| {
                    for p in pres.drain(..) {
                        clients.push(self.connect_call(p)?);
                    }
                    Ok(())
                })?;
                // The backlog absorbed them: each must now be acceptable.
                let servers = (0..BATCH)
                    .map(|_| self.accept())
                    .collect::<io::Result<Vec<_>>>()?;
                reset(clients.into_iter().chain(servers));
                Ok(t)
            }
            Op::Accept => {
                let mut clients = Vec::with_capacity(BATCH);
                for _ in 0..BATCH {
                    clients.push(self.connect(self.pre()?)?);
                }
                let mut servers = Vec::with_capacity(BATCH);
                let t = span(|| {
                    for _ in 0..BATCH {
                        servers.push(self.accept()?);
                    }
                    Ok(())
                })?;
                reset(clients.into_iter().chain(servers));
                Ok(t)
            }
            Op::Close => {
                let (clients, mut servers): (Vec<Conn>, Vec<Conn>) =
                    self.pairs(BATCH)?.into_iter().unzip();
                let t = span(|| {
                    for s in servers.drain(..) {
                        drop(s);
                    }
                    Ok(())
                })?;
                reset(clients);
                Ok(t)
            }
        }
    }
}

/// Untimed teardown: resets (`SO_LINGER` 0) and closes, so that thousands of
/// connections per run leave no TIME_WAIT behind, in the kernel or in ember.
fn reset<I: IntoIterator<Item = Conn>>(conns: I) {
    for c in conns {
        match &c {
            Conn::Tcp(t) => {
                let _ = ksock::set_linger_zero(t.as_fd());
            }
            Conn::Ember(e) => {
                let _ = e.set_linger(Some(Duration::ZERO));
            }
            Conn::Unix(_) => {}
        }
    }
}

/// Runs `f` as one timed span: its wall time and the process's CPU time.
fn span(f: impl FnOnce() -> io::Result<()>) -> io::Result<(Duration, Duration)> {
    let c0 = cpu_time();
    let t0 = Instant::now();
    f()?;
    let wall = t0.elapsed();
    Ok((wall, cpu_time().saturating_sub(c0)))
}

fn socket_unsupported() -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        "ember has no unconnected socket (a TcpStream is made by connect or accept; \
         TcpListener::bind also binds): nothing in ember is socket() alone",
    )
}

/// One round of `op`: a warm-up batch, then `batches` timed ones.
pub fn measure(env: &mut Env, op: Op, batches: usize) -> io::Result<Outcome> {
    if op == Op::Socket && env.variant.is_ember() {
        return Err(socket_unsupported());
    }
    let b = Bench::new(env)?;
    let limit = Instant::now() + ROUND_LIMIT;
    let mut per_op = Vec::with_capacity(batches);
    let mut cpu = Duration::ZERO;
    for i in 0..=batches {
        if Instant::now() > limit {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{} batches took over {ROUND_LIMIT:?}", op.name()),
            ));
        }
        let (wall, c) = b.batch(op)?;
        if i > 0 {
            per_op.push(wall.as_secs_f64() * 1e6 / BATCH as f64);
            cpu += c;
        }
    }
    let ops = (batches * BATCH).max(1) as f64;
    Ok(Outcome {
        metrics: vec![
            ("us_per_op", median(&per_op)),
            ("cpu_us_per_op", cpu.as_secs_f64() * 1e6 / ops),
        ],
        latency: None,
        series: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn op_names_round_trip() {
        for op in Op::ALL {
            assert_eq!(Op::parse(op.name()), Some(op));
        }
        assert_eq!(Op::parse("connect only"), None);
    }

    #[test]
    fn every_op_runs_on_ember_and_kernel_and_socket_is_refused_on_ember() {
        for v in VARIANTS {
            for op in Op::ALL {
                let mut env = Env::new(*v, &Default::default()).unwrap();
                let r = measure(&mut env, op, 1);
                if op == Op::Socket && v.is_ember() {
                    assert_eq!(r.err().unwrap().kind(), io::ErrorKind::Unsupported);
                    continue;
                }
                let o = r.unwrap_or_else(|e| panic!("{v:?} {op:?}: {e}"));
                assert_eq!(o.metrics[0].0, "us_per_op");
                assert!(o.metrics[0].1 > 0.0, "{v:?} {op:?}");
            }
        }
    }

    #[test]
    fn a_batch_of_connect_calls_is_absorbed_and_the_connections_are_real() {
        for v in VARIANTS {
            let mut env = Env::new(*v, &Default::default()).unwrap();
            let b = Bench::new(&mut env).unwrap();
            // connect only: the listener's backlog holds every connection of a batch.
            let mut clients = Vec::new();
            for _ in 0..BATCH {
                clients.push(b.connect_call(b.pre().unwrap()).unwrap());
            }
            let mut servers = Vec::new();
            for _ in 0..BATCH {
                servers.push(b.accept().unwrap());
            }
            // Every client reaches an accepted end: 64 bytes sent, 64 received.
            for c in clients.iter_mut() {
                c.set_nonblocking(false).unwrap();
                c.write_all(b"x").unwrap();
            }
            let mut got = 0;
            for s in servers.iter_mut() {
                s.set_nonblocking(false).unwrap();
                let mut x = [0u8];
                s.read_exact(&mut x).unwrap();
                got += usize::from(x[0] == b'x');
            }
            assert_eq!(got, BATCH, "{v:?}");
            // close: each client then reads the end of its stream.
            drop(servers);
            for c in clients.iter_mut() {
                let mut x = [0u8];
                assert!(matches!(c.read(&mut x), Ok(0) | Err(_)), "{v:?}");
            }
            assert_eq!(b.pairs(3).unwrap().len(), 3);
        }
    }
}
