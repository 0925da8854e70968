//! Cross-process TCP fusion (crossproc.md): recognition, set-up and the fused data
//! path, on top of the kernel connection (the *shadow*), which stays.
//!
//! # Set-up (late fusion)
//! 1. `listen` on an inet stream socket records the listener in the registry
//!    (`ember_xproc::registry`, one per user and namespace).
//! 2. After its kernel `connect` to a local address where the registry shows an ember
//!    listener, the client publishes a *candidate*: its 4-tuple, its pid and a random
//!    nonce. It goes on using the kernel connection meanwhile.
//! 3. The process whose kernel `accept` returned the reversed tuple claims it (the
//!    kernel, not the registry, decided who accepted), takes a slot in the arena it
//!    shares with the client's process (making the arena at their first contact), and
//!    sends the client the slot (and the arena's memfd, the first time) over the
//!    client's control socket (`ctl.rs`). The client's service thread checks the
//!    message and attaches.
//! 4. Each direction switches to its ring when its writer next writes after both ends
//!    have attached: the writer publishes k, the bytes it sent by kernel, then writes
//!    into the ring; the reader takes exactly k kernel bytes, then the ring
//!    (`conn.rs`). Anything that does not happen (no claim, no message, a full arena)
//!    leaves the connection on the kernel, correct.
//!
//! # State
//! [`Proc`] is the process's fusion state, made at the first inet stream socket
//! ([`proc`]); a [`conn::Conn`] per fusable connection, found from the descriptor table
//! (`fdtab`'s entry holds its index in [`Proc::conns`]).

pub mod conn;
pub mod ctl;
pub mod epoll;
pub mod ready;
pub mod sys;
pub mod wake;

use crate::fdtab;
use conn::Conn;
use ember_core::params::Params;
use ember_xproc::arena::{Arena, Side};
use ember_xproc::registry::{Owner, Registry};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Settings, from the `EMBER_<NAME>` variables `ember run` sets.
#[derive(Debug, Clone)]
pub struct Config {
    /// `do_tcp_fusion`: the kill switch.
    pub fuse: bool,
    /// `tcp_fusion_rcv_unread_min`.
    pub unread_min: u32,
    /// `tcp_recv_hiwat`: a reader's default receive buffer (the ring holds at least
    /// this much, rounded up to a power of two).
    pub recv_hiwat: usize,
    /// `tcp_xmit_lowat`: the low-water mark's writer half.
    pub xmit_lowat: usize,
    /// How long a thread spins before it sleeps (`EMBER_XPROC_SPIN_US`, default 0).
    pub spin_us: u64,
    /// Where the registry lives (`EMBER_XPROC_DIR`, default `/dev/shm`).
    pub dir: std::path::PathBuf,
}

impl Config {
    fn from_env() -> Config {
        let mut p = Params::default();
        let set = Params::env_settings(std::env::vars());
        // A bad value was refused by `ember run` already; if one gets here anyway the
        // defaults stand.
        let _ = p.set_many(&set);
        let get = |n: &str| p.get(n).unwrap_or_default();
        Config {
            fuse: get("do_tcp_fusion") != "0",
            unread_min: get("tcp_fusion_rcv_unread_min").parse().unwrap_or(8),
            recv_hiwat: get("tcp_recv_hiwat").parse().unwrap_or(1 << 20),
            xmit_lowat: get("tcp_xmit_lowat").parse().unwrap_or(4096),
            spin_us: std::env::var("EMBER_XPROC_SPIN_US")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0)
                .min(1_000_000),
            dir: std::env::var_os("EMBER_XPROC_DIR")
                .map(Into::into)
                .unwrap_or_else(|| "/dev/shm".into()),
        }
    }

    /// Ring capacity for this configuration.
    pub fn ring_capacity(&self) -> usize {
        self.recv_hiwat
            .next_power_of_two()
            .clamp(ember_xproc::ring::MIN_CAPACITY, 4 << 20)
    }
}

/// Counters (`fusion:xproc_*`).
#[derive(Debug, Default)]
pub struct Stats {
    pub fused: AtomicU64,
    pub declined_no_listener: AtomicU64,
    pub declined_registry: AtomicU64,
    pub declined_arena: AtomicU64,
    pub declined_ctl: AtomicU64,
    pub bytes_out: AtomicU64,
    pub bytes_in: AtomicU64,
    pub flow_stops: AtomicU64,
    pub unfused_oob: AtomicU64,
    pub unfused_peer_closed: AtomicU64,
}

impl Stats {
    /// The counters as `name value` pairs on one line.
    pub fn line(&self) -> String {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "fused {} declined_no_listener {} declined_registry {} declined_arena {} declined_ctl {} bytes_out {} bytes_in {} flow_stops {} unfused_oob {} unfused_peer_closed {}",
            l(&self.fused),
            l(&self.declined_no_listener),
            l(&self.declined_registry),
            l(&self.declined_arena),
            l(&self.declined_ctl),
            l(&self.bytes_out),
            l(&self.bytes_in),
            l(&self.flow_stops),
            l(&self.unfused_oob),
            l(&self.unfused_peer_closed),
        )
    }
}

/// The arenas this process shares with one other process.
struct Peer {
    pid: u32,
    arenas: Vec<Arc<Arena>>,
}

/// The arenas shared with process `pid`, made empty if there are none yet.
fn peer_of(peers: &mut Vec<Peer>, pid: u32) -> &mut Peer {
    let i = match peers.iter().position(|p| p.pid == pid) {
        Some(i) => i,
        None => {
            peers.push(Peer {
                pid,
                arenas: Vec::new(),
            });
            peers.len() - 1
        }
    };
    &mut peers[i]
}

/// The process's fusion state.
pub struct Proc {
    pub pid: u32,
    pub owner: Owner,
    pub uid: u32,
    pub cfg: Config,
    pub reg: Registry,
    ctl_fd: libc::c_int,
    peers: Mutex<Vec<Peer>>,
    conns: Mutex<Vec<Option<Arc<Conn>>>>,
    /// Connecting-side connections waiting for their slot, by nonce.
    waiting: Mutex<HashMap<u64, Weak<Conn>>>,
    pub stats: Stats,
}

static PROC: OnceLock<Option<Proc>> = OnceLock::new();

/// This process has forked since it started fusing: its epoll sets and descriptors
/// may be shared with a child that knows nothing of connections fused later, so it
/// fuses no new connection (until the process model keeps fused state across fork).
pub static FORKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Most arenas a process shares with one peer.
const MAX_ARENAS_PER_PEER: usize = 16;
/// Slots per arena.
const SLOTS: usize = 64;
/// How long after `accept` a connection keeps looking for its client's candidate.
pub const CLAIM_WINDOW: std::time::Duration = std::time::Duration::from_millis(200);

/// The process's fusion state, made on first use; `None` when fusion is off (the kill
/// switch, no registry, no control socket) or in a child of the process that made it
/// (a child of `fork` does not fuse new connections).
pub fn proc() -> Option<&'static Proc> {
    if FORKED.load(Ordering::Relaxed) {
        return None;
    }
    let p = PROC.get_or_init(start).as_ref()?;
    // SAFETY: getpid has no preconditions.
    (unsafe { libc::getpid() } as u32 == p.pid).then_some(p)
}

/// The fusion state if it was made already (no activation).
pub fn proc_if_active() -> Option<&'static Proc> {
    PROC.get()?.as_ref()
}

fn start() -> Option<Proc> {
    let cfg = Config::from_env();
    if !cfg.fuse {
        return None;
    }
    let owner = Owner::current().ok()?;
    let reg = Registry::open_in(&cfg.dir).ok()?;
    let (ctl_fd, name) = ctl::bind().ok()?;
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    reg.register_process(owner, uid, &name).ok()?;
    let p = Proc {
        pid: owner.pid,
        owner,
        uid,
        cfg,
        reg,
        ctl_fd,
        peers: Mutex::new(Vec::new()),
        conns: Mutex::new(Vec::new()),
        waiting: Mutex::new(HashMap::new()),
        stats: Stats::default(),
    };
    if std::env::var_os("EMBER_XPROC_DEBUG").is_some() {
        extern "C" fn report() {
            if let Some(p) = proc_if_active() {
                let sigs: Vec<String> = SIG_RESTART
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| v.load(Ordering::Relaxed) != 0)
                    .map(|(i, v)| format!("{i}:{}", v.load(Ordering::Relaxed)))
                    .collect();
                eprintln!(
                    "ember-xproc[{}]: {} handlers {}",
                    p.pid,
                    p.stats.line(),
                    sigs.join(",")
                );
            }
        }
        // SAFETY: registers a plain function to run at exit.
        unsafe { libc::atexit(report) };
    }
    // From now on a vfork child must go through fork's hand-over (varargs.c).
    extern "C" {
        static mut ember_vfork_needs_fork: libc::c_int;
    }
    // SAFETY: a plain int the vfork trampoline reads; written once here, before any
    // connection is fused.
    unsafe { std::ptr::addr_of_mut!(ember_vfork_needs_fork).write_volatile(1) };
    // The service thread: it starts here, at the first inet stream socket, not before.
    std::thread::Builder::new()
        .name("ember-xproc".into())
        .spawn(move || serve(ctl_fd))
        .ok()?;
    Some(p)
}

/// The service thread: receives control messages until the process ends. It blocks
/// every signal, so that a signal meant for the program goes to one of the program's
/// threads (which, without the library, would be the only ones).
fn serve(fd: libc::c_int) {
    // SAFETY: a full signal set, applied to this thread only.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
    loop {
        match ctl::recv(fd) {
            Ok(Some(m)) => {
                if let Some(p) = proc_if_active() {
                    p.on_message(m);
                }
            }
            Ok(None) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

impl Proc {
    /// The connection of `fd`, if it has one.
    #[inline]
    pub fn conn(&self, fd: libc::c_int) -> Option<Arc<Conn>> {
        let i = fdtab::conn_index(fd)?;
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(i)?
            .clone()
    }

    fn insert(&self, c: Arc<Conn>) -> usize {
        let mut v = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = v.iter().position(Option::is_none) {
            v[i] = Some(c);
            i
        } else {
            v.push(Some(c));
            v.len() - 1
        }
    }

    /// Forgets connection `i` (its last descriptor in this process closed).
    pub fn remove(&self, i: usize) -> Option<Arc<Conn>> {
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(i)?
            .take()
    }

    /// A client's kernel `connect` of `fd` from `local` to `remote` succeeded or is in
    /// progress: publish a candidate if an ember listener is there.
    pub fn connected(
        &self,
        fd: libc::c_int,
        local: SocketAddr,
        remote: SocketAddr,
        listener: bool,
    ) {
        if !is_local(local, remote) || !listener {
            self.stats
                .declined_no_listener
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        let nonce = sys::random_u64();
        let Ok(cand) = self
            .reg
            .publish_candidate(local, remote, self.owner, nonce, &[])
        else {
            self.stats.declined_registry.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let c = Arc::new(Conn::new(Side::Connected, nonce, self.pid, nonblocking(fd)));
        c.load_timeouts(fd);
        *c.candidate.lock().unwrap_or_else(|e| e.into_inner()) = Some(cand);
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(nonce, Arc::downgrade(&c));
        c.fds.lock().unwrap_or_else(|e| e.into_inner()).push(fd);
        let i = self.insert(c);
        fdtab::set_conn(fd, i);
    }

    /// A server's kernel `accept` returned `fd`, connected from `remote` to `local`:
    /// a connection that claims the client's candidate now or, if the client has not
    /// published it yet (its `connect` may return after our `accept`), at the next
    /// calls on it within [`CLAIM_WINDOW`].
    pub fn accepted(&self, fd: libc::c_int, local: SocketAddr, remote: SocketAddr) {
        if !is_local(local, remote) {
            return;
        }
        let c = Arc::new(Conn::new(Side::Accepted, 0, self.pid, nonblocking(fd)));
        c.load_timeouts(fd);
        *c.claim.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((local, remote, std::time::Instant::now() + CLAIM_WINDOW));
        c.fds.lock().unwrap_or_else(|e| e.into_inner()).push(fd);
        let i = self.insert(c.clone());
        fdtab::set_conn(fd, i);
        c.poke();
    }

    /// Claims the client's candidate of the connection from `remote` to `local` for
    /// `c`, takes a slot and tells the client. False if there is no candidate (yet).
    pub fn claim(&self, c: &Conn, local: SocketAddr, remote: SocketAddr) -> bool {
        if c.handed_over.load(Ordering::Acquire) {
            return true;
        }
        let Some(claim) = self.reg.claim_candidate(remote, local, self.pid) else {
            return false;
        };
        let Some(info) = self.reg.lookup_process(claim.client.pid) else {
            self.stats.declined_registry.fetch_add(1, Ordering::Relaxed);
            return true;
        };
        let Some((arena, slot, new_fd)) = self.slot_for(claim.client.pid, claim.nonce) else {
            self.stats.declined_arena.fetch_add(1, Ordering::Relaxed);
            return true;
        };
        let msg = [ctl::FUSE, claim.nonce, arena.id(), slot as u64];
        let Some(s) = arena.slot(slot, claim.nonce) else {
            return true;
        };
        // Attached (and the slot known to this connection) before the client hears of
        // it, so a client that writes at once finds us ready to read.
        s.attach(Side::Accepted);
        let _ = c.fused.set(conn::Fused {
            arena: arena.clone(),
            slot,
            nonce: claim.nonce,
            peer_pid: claim.client.pid,
        });
        let sent = ctl::send(
            self.ctl_fd,
            info.name(),
            &msg,
            new_fd.as_ref().map(std::os::fd::AsRawFd::as_raw_fd),
        );
        // The memfd is the peer's now (or never will be): closed raw, not through the
        // interposed close, which may take locks this call's caller holds.
        if let Some(f) = new_fd {
            sys::close(std::os::fd::IntoRawFd::into_raw_fd(f));
        }
        if sent.is_err() {
            // The client will never attach: the connection stays on the kernel, and
            // the slot goes back when it closes.
            self.stats.declined_ctl.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        self.stats.fused.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Asks process `pid` to take back the ring toward us of connection `nonce`.
    pub fn send_take_back(&self, pid: u32, nonce: u64) {
        if let Some(info) = self.reg.lookup_process(pid) {
            let _ = ctl::send(
                self.ctl_fd,
                info.name(),
                &[ctl::TAKE_BACK, nonce, 0, 0],
                None,
            );
        }
    }

    /// Every connection of this process.
    pub fn all(&self) -> Vec<Arc<Conn>> {
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// A slot for a connection with the process `pid`: in an arena the two share, or a
    /// new arena (then returned with its descriptor, to pass to the peer).
    fn slot_for(
        &self,
        pid: u32,
        nonce: u64,
    ) -> Option<(Arc<Arena>, usize, Option<std::os::fd::OwnedFd>)> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let peer = peer_of(&mut peers, pid);
        for a in &peer.arenas {
            if let Some(s) = a.alloc(nonce) {
                return Some((a.clone(), s, None));
            }
        }
        if peer.arenas.len() >= MAX_ARENAS_PER_PEER {
            return None;
        }
        let (a, fd) = Arena::create(SLOTS, self.cfg.ring_capacity(), sys::random_u64()).ok()?;
        let a = Arc::new(a);
        let s = a.alloc(nonce)?;
        peer.arenas.push(a.clone());
        Some((a, s, Some(fd)))
    }

    /// A control message from another process.
    fn on_message(&self, m: ctl::Received) {
        if m.uid != self.uid {
            return;
        }
        if m.msg[0] == ctl::TAKE_BACK {
            // From our peer only: the connection whose slot has this nonce and whose
            // other end is the sender.
            let nonce = m.msg[1];
            let c = self
                .conns
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .flatten()
                .find(|c| {
                    c.fused
                        .get()
                        .is_some_and(|f| f.nonce == nonce && f.peer_pid == m.pid)
                })
                .cloned();
            if let Some(c) = c {
                c.take_back();
            }
            return;
        }
        if m.msg[0] != ctl::FUSE {
            return;
        }
        let [_, nonce, arena_id, slot] = m.msg;
        let Some(c) = self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&nonce)
            .and_then(|w| w.upgrade())
        else {
            return;
        };
        // The registry must show this connection claimed by the sender.
        let cand = *c.candidate.lock().unwrap_or_else(|e| e.into_inner());
        let Some(cand) = cand else { return };
        match self.reg.candidate_state(cand) {
            ember_xproc::registry::CandidateState::Claimed { by } if by == m.pid => {}
            _ => return,
        }
        self.reg.release_candidate(cand);
        let arena = {
            let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
            let peer = peer_of(&mut peers, m.pid);
            match peer.arenas.iter().find(|a| a.id() == arena_id) {
                Some(a) => a.clone(),
                None => {
                    let Some(fd) = m.fd else { return };
                    let Ok(a) = Arena::attach(&fd) else { return };
                    if a.id() != arena_id || peer.arenas.len() >= MAX_ARENAS_PER_PEER {
                        return;
                    }
                    let a = Arc::new(a);
                    peer.arenas.push(a.clone());
                    a
                }
            }
        };
        let slot = slot as usize;
        let Some(s) = arena.slot(slot, nonce) else {
            return;
        };
        if s.ring(ember_xproc::arena::Dir::Up).is_err()
            || s.ring(ember_xproc::arena::Dir::Down).is_err()
        {
            return;
        }
        // Handed over to the kernel already (it forked or exec'd before its slot came):
        // it never attaches, so the server never writes into the ring.
        if c.handed_over.load(Ordering::Acquire) {
            return;
        }
        if c.fused
            .set(conn::Fused {
                arena: arena.clone(),
                slot,
                nonce,
                peer_pid: m.pid,
            })
            .is_err()
        {
            return;
        }
        s.attach(Side::Connected);
        self.stats.fused.fetch_add(1, Ordering::Relaxed);
        c.wake_local();
    }
}

/// Whether a connection from `local` to `remote` stays on this host: to a loopback
/// address, or to the host's own address (the kernel gave the same address to both
/// ends).
fn is_local(local: SocketAddr, remote: SocketAddr) -> bool {
    let canon = |a: SocketAddr| match a.ip() {
        std::net::IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(std::net::IpAddr::V4)
            .unwrap_or(a.ip()),
        ip => ip,
    };
    let r = canon(remote);
    r.is_loopback() || r == canon(local)
}

/// Whether `fd`'s file is non-blocking.
pub fn nonblocking(fd: libc::c_int) -> bool {
    let fl = sys::getfl(fd);
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// How each signal's handler wants interrupted calls: 0 no handler (default or
/// ignored), 1 restarted (`SA_RESTART`), 2 interrupted. Kept by the `sigaction`,
/// `signal` and `siginterrupt` interposers.
pub static SIG_RESTART: [std::sync::atomic::AtomicU8; 65] =
    [const { std::sync::atomic::AtomicU8::new(0) }; 65];

/// Whether a fused call that a signal interrupted restarts, as signal(7) says of
/// `recv`, `send` and `accept`: never with a timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO`);
/// otherwise if the handlers ask for it. The library cannot tell which signal came, so
/// it restarts only if every installed handler has `SA_RESTART`.
/// Synchronous faults (`SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`, `SIGTRAP`) never
/// interrupt a system call and are left out (Rust's own runtime catches two of them).
pub fn restarts(timeout: bool) -> bool {
    const SYNC: [libc::c_int; 5] = [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
    ];
    !timeout
        && SIG_RESTART
            .iter()
            .enumerate()
            .all(|(i, s)| SYNC.contains(&(i as libc::c_int)) || s.load(Ordering::Relaxed) != 2)
}

/// The fusable connection of `fd`, if it has one (one table lookup when it has not).
#[inline]
pub fn conn_of(fd: libc::c_int) -> Option<Arc<Conn>> {
    fdtab::conn_index(fd)?;
    proc_if_active()?.conn(fd)
}

/// A call's result as C returns it: the count, or -1 with `errno` set.
pub fn c_ret(r: std::io::Result<usize>) -> libc::ssize_t {
    match r {
        Ok(n) => n as libc::ssize_t,
        Err(e) => {
            crate::errno::set(e.raw_os_error().unwrap_or(libc::EIO));
            -1
        }
    }
}

/// Runs `f` keeping the caller's `errno` (the library's own calls after an interposed
/// call must not change what the program sees).
pub fn keep_errno<T>(f: impl FnOnce() -> T) -> T {
    let e = crate::errno::get();
    let r = f();
    crate::errno::set(e);
    r
}

/// `listen` succeeded on inet stream socket `fd`: record the listener.
pub fn listening(fd: libc::c_int) {
    let Some(p) = proc() else { return };
    let Some(local) = sys::sock_addr(fd, false) else {
        return;
    };
    let v6only = local.is_ipv6()
        && sys::sockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY).is_some_and(|v| v != 0);
    match p.reg.add_listener(local, v6only, p.owner) {
        Ok(id) => lock(&LISTENERS).push((local, id)),
        Err(_) => {
            p.stats.declined_registry.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Listener `fd` is being closed: drop its registry record.
pub fn listener_closing(fd: libc::c_int) {
    let Some(p) = proc() else { return };
    let Some(local) = sys::sock_addr(fd, false) else {
        return;
    };
    let mut l = lock(&LISTENERS);
    if let Some(i) = l.iter().position(|(a, _)| *a == local) {
        let (_, id) = l.swap_remove(i);
        p.reg.remove_listener(id);
    }
}

static LISTENERS: Mutex<Vec<(SocketAddr, ember_xproc::registry::ListenerId)>> =
    Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The last descriptor of connection number `i` in this process is being closed
/// (`fd`, before the kernel's close).
pub fn closing(fd: libc::c_int, i: usize) {
    let Some(p) = proc_if_active() else { return };
    let Some(c) = p.conn(fd) else { return };
    c.fds
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|&f| f != fd);
    if c.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
        c.closing(fd);
        p.remove(i);
    }
}

/// `fd` became another descriptor of its connection (`dup*`).
pub fn duplicated(fd: libc::c_int) {
    if let Some(c) = conn_of(fd) {
        c.refs.fetch_add(1, Ordering::AcqRel);
        c.fds.lock().unwrap_or_else(|e| e.into_inner()).push(fd);
    }
}

/// Before `fork`, `exec`, `posix_spawn` or `system`: every fused connection of this
/// process is handed over to the kernel ([`Conn::hand_over`]), so that whichever
/// process or image holds a descriptor afterwards reads and writes every byte by
/// kernel, in order. (Keeping them fused across these is the process model's work
/// still to do; until then they stay correct, unfused.)
pub fn hand_over_all() {
    if let Some(p) = proc_if_active() {
        for c in p.all() {
            c.hand_over();
        }
    }
}
