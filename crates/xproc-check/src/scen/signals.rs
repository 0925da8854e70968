//! Signals against blocking socket calls.
//!
//! Design: the client blocks in `recv` and the server sends it a signal, but only once the
//! client is really asleep in the kernel (its `/proc` state is 'S' after it announced the call
//! over the link), so whether the call was interrupted is decided by the rules of signal(7) and
//! not by timing: without SA_RESTART → EINTR; with SA_RESTART → the call restarts and returns
//! the data sent after the handler ran (the handler reports over the link, async-signal-safe);
//! with SA_RESTART but SO_RCVTIMEO set → EINTR anyway. SO_RCVTIMEO alone → EAGAIN;
//! SO_SNDTIMEO with a peer that does not read → EAGAIN eventually. Last, a SIGUSR1 handler calls
//! send() on the socket while the main flow is blocked in recv on it.

use super::{connect_from, coord_pair, serve_one, unknown_role, Scenario, V4};
use crate::harness::{Args, LINK_BASE};
use crate::out;
use crate::sys::{self, QUIET};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// `signals`.
pub const SIGNALS: Scenario = Scenario {
    name: "signals",
    about: "EINTR vs SA_RESTART in a blocked recv, SO_RCVTIMEO/SO_SNDTIMEO → EAGAIN, a handler that sends on the socket",
    coord: coord_pair,
    role: role_signals,
};

static HANDLED: AtomicUsize = AtomicUsize::new(0);
static SOCK: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_alarm(_: i32) {
    HANDLED.fetch_add(1, Ordering::SeqCst);
    let m = b"handled";
    // SAFETY: send is async-signal-safe; the link fd is open for the life of the role.
    unsafe {
        libc::send(
            LINK_BASE,
            m.as_ptr() as *const libc::c_void,
            m.len(),
            libc::MSG_NOSIGNAL,
        )
    };
}

extern "C" fn on_usr1(_: i32) {
    HANDLED.fetch_add(1, Ordering::SeqCst);
    let m = b"from-handler";
    let fd = SOCK.load(Ordering::SeqCst);
    // SAFETY: send is async-signal-safe; fd is the connected socket.
    unsafe {
        libc::send(
            fd,
            m.as_ptr() as *const libc::c_void,
            m.len(),
            libc::MSG_NOSIGNAL,
        )
    };
}

fn show_recv(r: &sys::R<usize>, b: &[u8]) -> String {
    match r {
        Ok(0) => "EOF".into(),
        Ok(n) => format!("ok {:?}", String::from_utf8_lossy(&b[..*n])),
        Err(e) => sys::errname(*e),
    }
}

/// Waits until the client sleeps in its announced call, then signals it.
fn signal_when_asleep(pid: i32, sig: i32) {
    if !sys::wait_sleeping(pid, QUIET) {
        out!("client never slept in the call");
    }
    sys::kill(pid, sig);
}

fn role_signals(role: &str, a: &Args) {
    let link = a.link(0);
    match role {
        "server" => {
            let s = serve_one(&link, V4);
            let fd = s.raw();
            let pid = link.recv_num("pid") as i32;
            // 1: no SA_RESTART.
            link.expect("blocking1");
            signal_when_asleep(pid, libc::SIGALRM);
            link.expect("handled");
            // 2: SA_RESTART: data sent after the handler ran is what the restarted recv returns.
            link.expect("blocking2");
            signal_when_asleep(pid, libc::SIGALRM);
            link.expect("handled");
            let asleep = sys::wait_sleeping(pid, QUIET);
            out!("client asleep again after the handler: {asleep}");
            out!(
                "send \"after\": {}",
                sys::show(&sys::send(fd, b"after", libc::MSG_NOSIGNAL))
            );
            // 3b: SA_RESTART with SO_RCVTIMEO set.
            link.expect("blocking3");
            signal_when_asleep(pid, libc::SIGALRM);
            link.expect("handled");
            // 4: SO_SNDTIMEO; we do not read until told.
            let n = link.recv_num("sndtimeo") as usize;
            let (d, _) = sys::recv_exact(fd, n);
            out!(
                "drained what the client sent under SO_SNDTIMEO: {}",
                d.len() == n
            );
            link.send("drained");
            // 5: a handler that sends.
            link.expect("blocking5");
            signal_when_asleep(pid, libc::SIGUSR1);
            let (d, _) = sys::recv_exact(fd, 12);
            out!(
                "received from the handler: {:?}",
                String::from_utf8_lossy(&d)
            );
            out!(
                "send \"reply\": {}",
                sys::show(&sys::send(fd, b"reply", libc::MSG_NOSIGNAL))
            );
            let (d, end) = sys::recv_to_end(fd);
            out!("then {} more bytes and {}", d.len(), sys::show_read(&end));
        }
        "client" => {
            let c = connect_from(&link, V4);
            let fd = c.raw();
            link.send_num("pid", sys::getpid() as u64);
            let mut b = [0u8; 64];
            sys::sigaction(libc::SIGALRM, on_alarm, false);
            link.send("blocking1");
            let r = sys::recv(fd, &mut b, 0);
            out!(
                "1 no SA_RESTART: recv {}, handler ran {}",
                show_recv(&r, &b),
                HANDLED.swap(0, Ordering::SeqCst)
            );
            sys::sigaction(libc::SIGALRM, on_alarm, true);
            link.send("blocking2");
            let r = sys::recv(fd, &mut b, 0);
            out!(
                "2 SA_RESTART: recv {}, handler ran {}",
                show_recv(&r, &b),
                HANDLED.swap(0, Ordering::SeqCst)
            );
            let r = sys::set_timeo(fd, libc::SO_RCVTIMEO, Duration::from_millis(100));
            out!("3 SO_RCVTIMEO 100 ms: {}", sys::show_unit(&r));
            let r = sys::recv(fd, &mut b, 0);
            out!("3 recv on an idle socket: {}", show_recv(&r, &b));
            let _ = sys::set_timeo(fd, libc::SO_RCVTIMEO, Duration::from_secs(10));
            link.send("blocking3");
            let r = sys::recv(fd, &mut b, 0);
            out!(
                "3b SA_RESTART with SO_RCVTIMEO: recv {}, handler ran {}",
                show_recv(&r, &b),
                HANDLED.swap(0, Ordering::SeqCst)
            );
            let _ = sys::set_timeo(fd, libc::SO_RCVTIMEO, Duration::ZERO);
            // 4: fill with a send timeout until EAGAIN.
            let r = sys::set_timeo(fd, libc::SO_SNDTIMEO, Duration::from_millis(100));
            out!("4 SO_SNDTIMEO 100 ms: {}", sys::show_unit(&r));
            let chunk = vec![7u8; 1 << 20];
            let mut total = 0usize;
            let mut eagain = false;
            let end = Instant::now() + Duration::from_secs(8);
            while Instant::now() < end {
                match sys::send(fd, &chunk, libc::MSG_NOSIGNAL) {
                    Ok(k) => total += k,
                    Err(libc::EAGAIN) => {
                        eagain = true;
                        break;
                    }
                    Err(e) => {
                        out!("4 send: {}", sys::errname(e));
                        break;
                    }
                }
            }
            out!("4 send with SO_SNDTIMEO to a peer that does not read: EAGAIN reached {eagain}");
            let _ = sys::set_timeo(fd, libc::SO_SNDTIMEO, Duration::ZERO);
            link.send_num("sndtimeo", total as u64);
            link.expect("drained");
            SOCK.store(fd, Ordering::SeqCst);
            sys::sigaction(libc::SIGUSR1, on_usr1, true);
            link.send("blocking5");
            let r = sys::recv(fd, &mut b, 0);
            out!(
                "5 handler sent on the socket; recv {}, handler ran {}",
                show_recv(&r, &b),
                HANDLED.swap(0, Ordering::SeqCst)
            );
            out!(
                "shutdown(SHUT_WR): {}",
                sys::show_unit(&sys::shutdown(fd, libc::SHUT_WR))
            );
            let r = sys::recv(fd, &mut b, 0);
            out!("recv {}", show_recv(&r, &b));
        }
        _ => unknown_role(role),
    }
}
