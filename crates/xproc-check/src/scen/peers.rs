//! Peers that a preload library cannot see: a process without the library, and a client that
//! bypasses libc's socket functions.
//!
//! Design: `peer-not-ember` runs the random stream of `stream-random-v4` on two connections at
//! once, one whose server was started with `LD_PRELOAD` removed and one whose client was (the
//! role asserts that its environment really lacks it). `raw-syscall-client` talks to an
//! ordinary server twice: once through `libc::syscall(SYS_socket/connect/sendto/recvfrom/read/
//! write/shutdown/close)` (which the library interposes for socket numbers), once through the
//! `syscall` instruction itself (which nothing can interpose: to the library this client does
//! not exist). Both conversations must look exactly like plain kernel TCP.

use super::stream::stream_side;
use super::{serve_one, unknown_role, Scenario, V4};
use crate::harness::{Args, Coord, Env};
use crate::link::Link;
use crate::out;
use crate::sys::{self, Hash, Rng};

/// `peer-not-ember`.
pub const PEER_NOT_EMBER: Scenario = Scenario {
    name: "peer-not-ember",
    about: "random streams where the server, then the client, runs with LD_PRELOAD removed",
    coord: coord_not_ember,
    role: role_not_ember,
};
/// `stale-registry`.
pub const STALE_REGISTRY: Scenario = Scenario {
    name: "stale-registry",
    about: "a listening process is SIGKILLed with a live connection: the peer gets EOF, the port refuses, a new process reuses the port",
    coord: coord_stale,
    role: role_stale,
};
/// `raw-syscall-client`.
pub const RAW_SYSCALL_CLIENT: Scenario = Scenario {
    name: "raw-syscall-client",
    about: "a client using syscall(SYS_sendto/SYS_recvfrom/SYS_read/SYS_write), then bare syscall instructions",
    coord: coord_raw,
    role: role_raw,
};

fn coord_not_ember(c: &mut Coord) {
    let (a, b) = Link::pair();
    c.spawn(
        "server (no preload)",
        "server",
        &["plain=1".into()],
        vec![a.into_fd()],
        Env::NoPreload,
    );
    c.spawn("client", "client", &[], vec![b.into_fd()], Env::Inherit);
    let (a, b) = Link::pair();
    c.spawn("server", "server", &[], vec![a.into_fd()], Env::Inherit);
    c.spawn(
        "client (no preload)",
        "client",
        &["plain=1".into()],
        vec![b.into_fd()],
        Env::NoPreload,
    );
}

fn role_not_ember(role: &str, a: &Args) {
    if a.opt("plain").is_some() {
        assert!(
            std::env::var_os("LD_PRELOAD").is_none(),
            "LD_PRELOAD was not removed"
        );
    }
    let link = a.link(0);
    match role {
        "server" => {
            let s = serve_one(&link, V4);
            stream_side(s.raw(), a.seed(), false);
            link.send("done");
        }
        "client" => {
            let c = super::connect_from(&link, V4);
            stream_side(c.raw(), a.seed(), true);
            link.expect("done");
        }
        _ => unknown_role(role),
    }
}

fn coord_raw(c: &mut Coord) {
    c.server_client(&[], Env::Inherit, Env::Inherit);
}

/// A system call through libc's `syscall()` or the bare instruction.
#[derive(Clone, Copy)]
enum Via {
    Libc,
    Insn,
}

fn sc(via: Via, n: libc::c_long, a: [usize; 6]) -> Result<usize, i32> {
    match via {
        Via::Libc => {
            // SAFETY: the callers pass valid arguments for the call number.
            let r = unsafe { libc::syscall(n, a[0], a[1], a[2], a[3], a[4], a[5]) };
            if r < 0 {
                Err(sys::errno())
            } else {
                Ok(r as usize)
            }
        }
        Via::Insn => {
            let r = raw_syscall(n as usize, a);
            if (r as isize) < 0 && (r as isize) > -4096 {
                Err(-(r as isize) as i32)
            } else {
                Ok(r)
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn raw_syscall(n: usize, a: [usize; 6]) -> usize {
    let ret: usize;
    // SAFETY: a Linux system call; the callers pass valid arguments for the call number.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
            in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack)
        );
    }
    ret
}

#[cfg(target_arch = "aarch64")]
fn raw_syscall(n: usize, a: [usize; 6]) -> usize {
    let ret: usize;
    // SAFETY: a Linux system call; the callers pass valid arguments for the call number.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a[0] => ret,
            in("x1") a[1], in("x2") a[2], in("x3") a[3], in("x4") a[4], in("x5") a[5],
            options(nostack)
        );
    }
    ret
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn raw_syscall(n: usize, a: [usize; 6]) -> usize {
    // No inline assembly for this architecture: fall back to libc (same transcript).
    // SAFETY: as above.
    let r = unsafe { libc::syscall(n as libc::c_long, a[0], a[1], a[2], a[3], a[4], a[5]) };
    if r < 0 {
        (-(sys::errno() as isize)) as usize
    } else {
        r as usize
    }
}

const N: usize = 100_000;

/// The client's conversation, every call made through `via`.
fn raw_client(via: Via, port: u16, seed: u64, what: &str) {
    let p = |x: *const u8| x as usize;
    let fd = match sc(
        via,
        libc::SYS_socket,
        [
            libc::AF_INET as usize,
            (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as usize,
            0,
            0,
            0,
            0,
        ],
    ) {
        Ok(fd) => fd,
        Err(e) => {
            out!("{what}: socket {}", sys::errname(e));
            return;
        }
    };
    let (ss, len) = sys::sockaddr(std::net::SocketAddr::new(V4, port));
    let r = sc(
        via,
        libc::SYS_connect,
        [fd, &ss as *const _ as usize, len as usize, 0, 0, 0],
    );
    out!(
        "{what}: connect {}",
        sys::show(&r.map(|_| 0)).replace("ok 0", "ok")
    );
    let data = sys::pattern(seed, 1, N);
    let mut r = Rng::new(seed, 9);
    let mut off = 0;
    while off < N {
        let len = r.size(20_000).min(N - off);
        match sc(
            via,
            libc::SYS_sendto,
            [
                fd,
                p(data[off..].as_ptr()),
                len,
                libc::MSG_NOSIGNAL as usize,
                0,
                0,
            ],
        ) {
            Ok(k) => off += k,
            Err(e) => {
                out!("{what}: sendto {}", sys::errname(e));
                return;
            }
        }
    }
    out!("{what}: sent {N} with SYS_sendto");
    let mut got = Vec::new();
    let mut buf = vec![0u8; 30_000];
    let mut use_read = false;
    while got.len() < N {
        let want = r.size(buf.len()).min(N - got.len());
        let res = if use_read {
            sc(
                via,
                libc::SYS_read,
                [fd, buf.as_mut_ptr() as usize, want, 0, 0, 0],
            )
        } else {
            sc(
                via,
                libc::SYS_recvfrom,
                [fd, buf.as_mut_ptr() as usize, want, 0, 0, 0],
            )
        };
        use_read = !use_read;
        match res {
            Ok(0) => break,
            Ok(k) => got.extend_from_slice(&buf[..k]),
            Err(e) => {
                out!("{what}: recv {}", sys::errname(e));
                return;
            }
        }
    }
    let mut h = Hash::default();
    h.add(&got);
    out!(
        "{what}: received {} with SYS_recvfrom/SYS_read, equals pattern: {}",
        h.done(),
        got == sys::pattern(seed, 2, N)
    );
    let r = sc(
        via,
        libc::SYS_write,
        [fd, p(b"0123456789".as_ptr()), 10, 0, 0, 0],
    );
    out!("{what}: SYS_write {}", sys::show(&r));
    let r = sc(
        via,
        libc::SYS_shutdown,
        [fd, libc::SHUT_WR as usize, 0, 0, 0, 0],
    );
    out!(
        "{what}: SYS_shutdown {}",
        sys::show(&r.map(|_| 0)).replace("ok 0", "ok")
    );
    let mut tail = Vec::new();
    let end = loop {
        match sc(
            via,
            libc::SYS_read,
            [fd, buf.as_mut_ptr() as usize, buf.len(), 0, 0, 0],
        ) {
            Ok(0) => break "EOF".to_string(),
            Ok(k) => tail.extend_from_slice(&buf[..k]),
            Err(e) => break sys::errname(e),
        }
    };
    out!(
        "{what}: then {:?} and {end}",
        String::from_utf8_lossy(&tail)
    );
    let r = sc(via, libc::SYS_close, [fd, 0, 0, 0, 0, 0]);
    out!(
        "{what}: SYS_close {}",
        sys::show(&r.map(|_| 0)).replace("ok 0", "ok")
    );
}

fn role_raw(role: &str, a: &Args) {
    let link = a.link(0);
    let seed = a.seed();
    match role {
        "server" => {
            for what in ["libc syscall()", "syscall instruction"] {
                let s = serve_one(&link, V4);
                let fd = s.raw();
                let (d, _) = sys::recv_exact(fd, N);
                out!(
                    "{what}: received {N}, equals pattern: {}",
                    d == sys::pattern(seed, 1, N)
                );
                out!(
                    "{what}: send {N}: {}",
                    sys::show_unit(&sys::send_all(fd, &sys::pattern(seed, 2, N)))
                );
                let (d, end) = sys::recv_to_end(fd);
                out!(
                    "{what}: then {:?} and {}",
                    String::from_utf8_lossy(&d),
                    sys::show_read(&end)
                );
                out!(
                    "{what}: send bye: {}",
                    sys::show(&sys::send(fd, b"bye", libc::MSG_NOSIGNAL))
                );
                drop(s);
                link.expect("next");
            }
        }
        "client" => {
            for (via, what) in [
                (Via::Libc, "libc syscall()"),
                (Via::Insn, "syscall instruction"),
            ] {
                let port = link.recv_num("port") as u16;
                raw_client(via, port, seed, what);
                link.send("next");
            }
        }
        _ => unknown_role(role),
    }
}

fn coord_stale(c: &mut Coord) {
    let (kl, lk) = Link::pair();
    let (kc, ck) = Link::pair();
    let l = c.spawn(
        "listener",
        "listener",
        &[],
        vec![lk.into_fd()],
        Env::Inherit,
    );
    c.spawn("client", "client", &[], vec![ck.into_fd()], Env::Inherit);
    let port = kl.recv_num("port");
    kc.send_num("port", port);
    kl.expect("talked");
    c.signal(l, libc::SIGKILL);
    out!("listener killed: {}", c.wait(l));
    kc.send("killed");
    kc.expect("refused");
    let (kl2, l2k) = Link::pair();
    c.spawn(
        "new listener",
        "listener2",
        &[format!("port={port}")],
        vec![l2k.into_fd()],
        Env::Inherit,
    );
    kl2.expect("listening");
    kc.send("again");
}

fn role_stale(role: &str, a: &Args) {
    let coord = a.link(0);
    let seed = a.seed();
    match role {
        "listener" => {
            let (l, port) = sys::listen_reuse(V4, 0);
            coord.send_num("port", port as u64);
            let s = sys::accept_within(l.raw(), sys::QUIET);
            let (d, _) = sys::recv_exact(s.raw(), 5000);
            out!("recv 5000 equal: {}", d == sys::pattern(seed, 1, 5000));
            out!(
                "send 5000: {}",
                sys::show_unit(&sys::send_all(s.raw(), &sys::pattern(seed, 2, 5000)))
            );
            coord.send("talked");
            // Killed here, with the listener and the connection open.
            let _ = coord.recv_within(std::time::Duration::from_secs(30));
            out!("was not killed");
        }
        "listener2" => {
            let port = a.u64("port") as u16;
            let (l, _) = sys::listen_reuse(V4, port);
            out!("bound and listening on the same port");
            coord.send("listening");
            let s = sys::accept_within(l.raw(), sys::QUIET);
            let (d, _) = sys::recv_exact(s.raw(), 10000);
            out!("recv 10000 equal: {}", d == sys::pattern(seed, 3, 10000));
            out!(
                "send 10000: {}",
                sys::show_unit(&sys::send_all(s.raw(), &sys::pattern(seed, 4, 10000)))
            );
            let (d, end) = sys::recv_to_end(s.raw());
            out!("then {} bytes and {}", d.len(), sys::show_read(&end));
        }
        "client" => {
            let port = coord.recv_num("port") as u16;
            let c = sys::connect_to(V4, port).expect("connect");
            let fd = c.raw();
            out!(
                "send 5000: {}",
                sys::show_unit(&sys::send_all(fd, &sys::pattern(seed, 1, 5000)))
            );
            let (d, _) = sys::recv_exact(fd, 5000);
            out!("recv 5000 equal: {}", d == sys::pattern(seed, 2, 5000));
            coord.expect("killed");
            let rev = sys::wait_revents(fd, sys::ALL_EV, libc::POLLRDHUP, sys::QUIET);
            out!(
                "after the listener's death: ready {}",
                sys::evname(rev as u32)
            );
            let mut b = [0u8; 16];
            out!(
                "recv: {}",
                sys::show_read(&sys::recv(fd, &mut b, libc::MSG_DONTWAIT))
            );
            out!("close: {}", sys::show_unit(&c.close()));
            let r = sys::connect_to(V4, port).map(|_| ());
            out!(
                "connect to the dead listener's port: {}",
                sys::show_unit(&r)
            );
            coord.send("refused");
            coord.expect("again");
            let c = sys::connect_to(V4, port).expect("connect to the new listener");
            let fd = c.raw();
            out!("connect to the new listener: ok");
            out!(
                "send 10000: {}",
                sys::show_unit(&sys::send_all(fd, &sys::pattern(seed, 3, 10000)))
            );
            let (d, _) = sys::recv_exact(fd, 10000);
            out!("recv 10000 equal: {}", d == sys::pattern(seed, 4, 10000));
            out!(
                "shutdown(SHUT_WR): {}",
                sys::show_unit(&sys::shutdown(fd, libc::SHUT_WR))
            );
            let (d, end) = sys::recv_to_end(fd);
            out!("then {} bytes and {}", d.len(), sys::show_read(&end));
        }
        _ => unknown_role(role),
    }
}
