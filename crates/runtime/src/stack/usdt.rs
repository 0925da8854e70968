//! USDT probes: the stack's probe points as statically defined tracing probes that
//! bpftrace, `perf`, SystemTap or DTrace attach to in a running process.
//!
//! # Design
//! Every probe point of [`super::Probe`] is also a USDT probe, through Oxide's `usdt`
//! crate: on Linux a SystemTap (`stapsdt`, version 3) ELF note naming the provider, the
//! probe, the location of a `nop` and a 16-bit *semaphore* that the kernel increments
//! while a tracer is attached to that probe in this process. On other systems the crate
//! provides DTrace's own mechanisms (or nothing), and the semaphore read below is
//! replaced by "always ask the probe macro".
//!
//! The cost when nobody listens must be one predictable branch. A probe site
//! ([`super::StackInner::probe`], the squeue hooks in `perimeter/mod.rs`) therefore reads the
//! in-process flag (`probes_on`) and this probe's semaphore ([`semaphore`]), ORs them and
//! branches once; everything else (the argument packing, the `usdt` macro with its own
//! semaphore check, the in-process subscribers) is in a cold, out-of-line function.
//!
//! The argument lists are stable (documented in docs/PROBES.md): for the `tcp`, `ip` and
//! `fusion` providers (local address, local port, remote address, remote port, length,
//! squeue index); addresses are IPv4 addresses as a `u32` whose bytes in memory are the
//! address's octets (network order: bpftrace's `ntop(arg0)` prints it), ports in host
//! order; for `tcp:state-change` the length is the new state with the old one in the
//! next byte. `squeue:enter` is (squeue, how: 0 inline, 1 queued, 2 worker) and
//! `squeue:drain` is (squeue, entries run, nanoseconds).
//!
//! A Rust probe name with a double underscore is the probe name with a dash
//! (`connect__request` is `tcp:connect-request`), the DTrace convention the crate follows.

use super::{Probe, ProbeEvent};
#[cfg(target_os = "linux")]
use std::sync::atomic::{AtomicU16, Ordering};

#[usdt::provider]
mod tcp {
    fn send(laddr: u32, lport: u16, raddr: u32, rport: u16, len: u64, squeue: u32) {}
    fn receive(laddr: u32, lport: u16, raddr: u32, rport: u16, len: u64, squeue: u32) {}
    fn state__change(laddr: u32, lport: u16, raddr: u32, rport: u16, len: u64, squeue: u32) {}
    fn connect__request(laddr: u32, lport: u16, raddr: u32, rport: u16, len: u64, squeue: u32) {}
    fn connect__established(laddr: u32, lport: u16, raddr: u32, rport: u16, len: u64, squeue: u32) {
    }
    fn accept__established(laddr: u32, lport: u16, raddr: u32, rport: u16, len: u64, squeue: u32) {}
    fn accept__pending(laddr: u32, lport: u16, raddr: u32, rport: u16, len: u64, squeue: u32) {}
    fn connect__refused(laddr: u32, lport: u16, raddr: u32, rport: u16, len: u64, squeue: u32) {}
    fn accept__refused(laddr: u32, lport: u16, raddr: u32, rport: u16, len: u64, squeue: u32) {}
}

#[usdt::provider]
mod ip {
    fn send(laddr: u32, lport: u16, raddr: u32, rport: u16, len: u64, squeue: u32) {}
    fn receive(laddr: u32, lport: u16, raddr: u32, rport: u16, len: u64, squeue: u32) {}
}

#[usdt::provider]
mod fusion {
    fn fuse(laddr: u32, lport: u16, raddr: u32, rport: u16, len: u64, squeue: u32) {}
    fn unfuse(laddr: u32, lport: u16, raddr: u32, rport: u16, len: u64, squeue: u32) {}
    fn flowctl(laddr: u32, lport: u16, raddr: u32, rport: u16, len: u64, squeue: u32) {}
}

#[usdt::provider]
mod squeue {
    fn enter(squeue: u32, how: u32) {}
    fn drain(squeue: u32, entries: u64, ns: u64) {}
}

/// Makes the probes known to the tracing system, once per process (needed where probes are
/// registered at run time, as on illumos and macOS; nothing to do on Linux, where the ELF
/// notes describe them). A failure only means that tracers cannot attach: it is reported,
/// never fatal.
pub(crate) fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Err(e) = usdt::register_probes() {
            eprintln!("ember: USDT probes not registered ({e}); tracers cannot attach");
        }
    });
}

// The semaphores the `usdt` crate's `stapsdt` backend defines for each probe (named
// `__usdt_sema_<provider>_<probe>`, the probe as written in Rust), in the probe macros'
// own assembly. Declaring them here reads the same 16-bit counter the macro reads; a
// different naming in another version of the crate is a link error, not a silent miss.
#[cfg(target_os = "linux")]
#[allow(non_upper_case_globals)]
extern "C" {
    static __usdt_sema_tcp_send: AtomicU16;
    static __usdt_sema_tcp_receive: AtomicU16;
    static __usdt_sema_tcp_state__change: AtomicU16;
    static __usdt_sema_tcp_connect__request: AtomicU16;
    static __usdt_sema_tcp_connect__established: AtomicU16;
    static __usdt_sema_tcp_accept__established: AtomicU16;
    static __usdt_sema_tcp_accept__pending: AtomicU16;
    static __usdt_sema_tcp_connect__refused: AtomicU16;
    static __usdt_sema_tcp_accept__refused: AtomicU16;
    static __usdt_sema_ip_send: AtomicU16;
    static __usdt_sema_ip_receive: AtomicU16;
    static __usdt_sema_fusion_fuse: AtomicU16;
    static __usdt_sema_fusion_unfuse: AtomicU16;
    static __usdt_sema_fusion_flowctl: AtomicU16;
    static __usdt_sema_squeue_enter: AtomicU16;
    static __usdt_sema_squeue_drain: AtomicU16;
}

/// Non-zero while a tracer is attached to probe `p`'s USDT probe in this process (one
/// load; `p` is a constant at every probe site, so the match folds away).
#[cfg(target_os = "linux")]
#[inline(always)]
pub(crate) fn semaphore(p: Probe) -> u16 {
    // SAFETY: each static is a 2-byte, 2-aligned counter defined (weak, hidden, in the
    // writable `.probes` section) by the assembly of the `usdt` probe macro of the same
    // probe, which `fire` below expands for every probe, so the symbol exists in every
    // binary that links this code. It is declared an `AtomicU16` (same size and
    // alignment as the macro's u16) because the kernel writes it while we run (when a
    // tracer attaches or detaches); a relaxed load is all the probe macro itself does.
    unsafe {
        match p {
            Probe::TcpSend => __usdt_sema_tcp_send.load(Ordering::Relaxed),
            Probe::TcpReceive => __usdt_sema_tcp_receive.load(Ordering::Relaxed),
            Probe::StateChange => __usdt_sema_tcp_state__change.load(Ordering::Relaxed),
            Probe::ConnectRequest => __usdt_sema_tcp_connect__request.load(Ordering::Relaxed),
            Probe::ConnectEstablished => {
                __usdt_sema_tcp_connect__established.load(Ordering::Relaxed)
            }
            Probe::AcceptEstablished => __usdt_sema_tcp_accept__established.load(Ordering::Relaxed),
            Probe::AcceptEstablishedPending => {
                __usdt_sema_tcp_accept__pending.load(Ordering::Relaxed)
            }
            Probe::ConnectRefused => __usdt_sema_tcp_connect__refused.load(Ordering::Relaxed),
            Probe::AcceptRefused => __usdt_sema_tcp_accept__refused.load(Ordering::Relaxed),
            Probe::IpSend => __usdt_sema_ip_send.load(Ordering::Relaxed),
            Probe::IpReceive => __usdt_sema_ip_receive.load(Ordering::Relaxed),
            Probe::Fuse => __usdt_sema_fusion_fuse.load(Ordering::Relaxed),
            Probe::Unfuse => __usdt_sema_fusion_unfuse.load(Ordering::Relaxed),
            Probe::FlowCtl => __usdt_sema_fusion_flowctl.load(Ordering::Relaxed),
            Probe::SqueueEnter => __usdt_sema_squeue_enter.load(Ordering::Relaxed),
            Probe::SqueueDrain => __usdt_sema_squeue_drain.load(Ordering::Relaxed),
        }
    }
}

/// Elsewhere the probe macros check for a tracer themselves: always go to [`fire`].
#[cfg(not(target_os = "linux"))]
#[inline(always)]
pub(crate) fn semaphore(_p: Probe) -> u16 {
    1
}

/// An IPv4 address as the probes pass it: its octets in memory order.
fn addr(a: &std::net::SocketAddrV4) -> u32 {
    u32::from_ne_bytes(a.ip().octets())
}

/// Fires `ev`'s USDT probe (each probe macro checks its own semaphore again: this runs
/// when any listener, in-process or not, is on).
#[cold]
pub(crate) fn fire(ev: &ProbeEvent) {
    let sq = u32::try_from(ev.squeue).unwrap_or(u32::MAX);
    let (la, lp, ra, rp) = (
        addr(&ev.local),
        ev.local.port(),
        addr(&ev.remote),
        ev.remote.port(),
    );
    let len = ev.len as u64;
    let a = (la, lp, ra, rp, len, sq);
    match ev.probe {
        Probe::TcpSend => tcp::send!(|| a),
        Probe::TcpReceive => tcp::receive!(|| a),
        // arg4: the new state, and the old one in the next byte.
        Probe::StateChange => tcp::state__change!(|| (la, lp, ra, rp, len | ev.arg << 8, sq)),
        Probe::ConnectRefused => tcp::connect__refused!(|| a),
        Probe::AcceptRefused => tcp::accept__refused!(|| a),
        Probe::ConnectRequest => tcp::connect__request!(|| a),
        Probe::ConnectEstablished => tcp::connect__established!(|| a),
        Probe::AcceptEstablished => tcp::accept__established!(|| a),
        Probe::AcceptEstablishedPending => tcp::accept__pending!(|| a),
        Probe::IpSend => ip::send!(|| a),
        Probe::IpReceive => ip::receive!(|| a),
        Probe::Fuse => fusion::fuse!(|| a),
        Probe::Unfuse => fusion::unfuse!(|| a),
        Probe::FlowCtl => fusion::flowctl!(|| a),
        Probe::SqueueEnter => squeue::enter!(|| (sq, ev.arg as u32)),
        Probe::SqueueDrain => squeue::drain!(|| (sq, len, ev.arg)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With no tracer attached (as in a test run) every semaphore reads zero: the probe
    /// sites take their one branch and nothing else. (The privileged test
    /// `tests/usdt.rs` shows a semaphore going up when bpftrace attaches.)
    #[test]
    #[cfg(target_os = "linux")]
    fn semaphores_read_zero_without_a_tracer() {
        for p in Probe::ALL {
            assert_eq!(semaphore(p), 0, "{}", p.name());
        }
    }

    /// Firing every probe with nobody attached does nothing observable and does not fault
    /// (the macros' own semaphore check, argument packing for each provider).
    #[test]
    fn firing_without_a_tracer_is_harmless() {
        let l = "127.0.0.1:80".parse().unwrap();
        let r = "10.0.0.2:40000".parse().unwrap();
        for p in Probe::ALL {
            fire(&ProbeEvent::new(p, 1, l, r, 1500, 7));
        }
        assert_eq!(addr(&l).to_ne_bytes(), [127, 0, 0, 1]);
    }
}
