//! Socket queries and the less common data calls on a connection: FIONREAD/SIOCINQ/SIOCOUTQ,
//! MSG_PEEK/MSG_WAITALL/MSG_TRUNC/MSG_DONTWAIT, SO_ERROR, TCP_INFO's state; sendfile and
//! splice; readv/writev/sendmsg/recvmsg/sendmmsg/recvmmsg.
//!
//! Design: queue sizes are read at quiet points (the reader waits until FIONREAD shows all the
//! bytes the peer reported sending; the writer waits until SIOCOUTQ drains, i.e. the peer's
//! kernel acknowledged everything), TCP states after the packet that causes them arrived. For
//! MSG_WAITALL the writer sends its chunks only once the reader is asleep in the call, so the
//! call really has to wait across chunks. Transfers are checked by SHA-256 and equality with
//! the seeded pattern.

use super::{connect_from, coord_pair, serve_one, unknown_role, Scenario, V4};
use crate::harness::Args;
use crate::out;
use crate::sys::{self, Fd, Hash, Rng, QUIET};
use std::os::unix::io::RawFd;

/// `ioctls`.
pub const IOCTLS: Scenario = Scenario {
    name: "ioctls",
    about: "FIONREAD, SIOCINQ, SIOCOUTQ(NSD), MSG_PEEK, MSG_WAITALL (across chunks and cut by EOF), MSG_TRUNC, SO_ERROR, TCP_INFO state",
    coord: coord_pair,
    role: role_ioctls,
};
/// `sendfile-splice`.
pub const SENDFILE_SPLICE: Scenario = Scenario {
    name: "sendfile-splice",
    about: "sendfile from a temp file (with offset and from the file position), splice socket→pipe, and pipe→socket echo",
    coord: coord_pair,
    role: role_sendfile,
};
/// `readv-writev`.
pub const READV_WRITEV: Scenario = Scenario {
    name: "readv-writev",
    about:
        "writev/readv and sendmsg/recvmsg with random iovecs, sendmmsg, recvmmsg at a quiet point",
    coord: coord_pair,
    role: role_readv,
};

fn q(fd: RawFd, req: libc::Ioctl) -> String {
    sys::ioctl_int(fd, req)
        .map(|v| v.to_string())
        .unwrap_or_else(sys::errname)
}

fn role_ioctls(role: &str, a: &Args) {
    let link = a.link(0);
    let seed = a.seed();
    let data = sys::pattern(seed, 1, 1000);
    match role {
        "server" => {
            let s = serve_one(&link, V4);
            let fd = s.raw();
            out!(
                "state {}, SO_ERROR {}, FIONREAD {}",
                sys::tcp_state(fd),
                sys::so_error(fd),
                q(fd, libc::FIONREAD)
            );
            let mut b = vec![0u8; 4096];
            out!(
                "recv MSG_DONTWAIT on an empty socket: {}",
                sys::show(&sys::recv(fd, &mut b, libc::MSG_DONTWAIT))
            );
            link.send("go");
            link.expect("sent 1000");
            let inq = sys::wait_inq(fd, 1000, QUIET);
            out!("all arrived: {}", inq == 1000);
            out!(
                "FIONREAD {} SIOCINQ {}",
                q(fd, libc::FIONREAD),
                q(fd, sys::SIOCINQ)
            );
            let r = sys::recv(fd, &mut b[..100], libc::MSG_PEEK);
            out!(
                "MSG_PEEK 100: {} equal: {}",
                sys::show(&r),
                b[..100] == data[..100]
            );
            let r = sys::recv(fd, &mut b[..2000], libc::MSG_PEEK);
            out!(
                "MSG_PEEK 2000: {} equal: {}",
                sys::show(&r),
                b[..1000] == data[..]
            );
            out!("FIONREAD after peeking {}", q(fd, libc::FIONREAD));
            // SAFETY: MSG_TRUNC on TCP discards without copying; a null buffer is allowed.
            let r = unsafe { libc::recv(fd, std::ptr::null_mut(), 400, libc::MSG_TRUNC) };
            out!(
                "MSG_TRUNC 400 (discard): {}",
                if r < 0 {
                    sys::errname(sys::errno())
                } else {
                    format!("ok {r}")
                }
            );
            out!("FIONREAD {}", q(fd, libc::FIONREAD));
            let r = sys::recv(fd, &mut b[..1000], 0);
            out!(
                "recv: {} equal: {}",
                sys::show(&r),
                r == Ok(600) && b[..600] == data[400..]
            );
            out!("FIONREAD {}", q(fd, libc::FIONREAD));
            // MSG_WAITALL across three chunks sent while we sleep in the call.
            link.send_num("pid", sys::getpid() as u64);
            let r = sys::recv(fd, &mut b[..300], libc::MSG_WAITALL);
            out!(
                "MSG_WAITALL 300 across 3 chunks: {} equal: {}",
                sys::show(&r),
                b[..300] == data[..300]
            );
            // Our sending side.
            let r = sys::send_all(fd, &data);
            out!("send 1000: {}", sys::show_unit(&r));
            let mut outq = String::new();
            sys::wait_until(QUIET, || {
                outq = q(fd, sys::SIOCOUTQ);
                outq == "0"
            });
            out!(
                "SIOCOUTQ once acknowledged {outq}, SIOCOUTQNSD {}",
                q(fd, sys::SIOCOUTQNSD)
            );
            link.send("sent 1000");
            link.expect("read 1000");
            out!("SIOCOUTQ after the peer read {}", q(fd, sys::SIOCOUTQ));
            // MSG_WAITALL cut short by EOF.
            link.expect("sent 50 and shut");
            let r = sys::recv(fd, &mut b[..100], libc::MSG_WAITALL);
            out!("MSG_WAITALL 100 with 50 then FIN: {}", sys::show_read(&r));
            out!(
                "recv again: {}",
                sys::show_read(&sys::recv(fd, &mut b[..100], 0))
            );
            out!("state {} (after the peer's FIN)", sys::tcp_state(fd));
            out!(
                "shutdown(SHUT_WR): {}",
                sys::show_unit(&sys::shutdown(fd, libc::SHUT_WR))
            );
            let mut st = String::new();
            sys::wait_until(QUIET, || {
                st = sys::tcp_state(fd);
                st == "CLOSE"
            });
            out!("state once the peer acknowledged our FIN: {st}");
            out!("SO_ERROR {}", sys::so_error(fd));
            link.send("done");
        }
        "client" => {
            let c = connect_from(&link, V4);
            let fd = c.raw();
            out!("state {}", sys::tcp_state(fd));
            link.expect("go");
            out!("send 1000: {}", sys::show_unit(&sys::send_all(fd, &data)));
            link.send("sent 1000");
            let pid = link.recv_num("pid") as i32;
            for k in 0..3 {
                if !sys::wait_sleeping(pid, QUIET) {
                    out!("reader never slept in MSG_WAITALL");
                }
                let r = sys::send_all(fd, &data[k * 100..(k + 1) * 100]);
                out!("chunk {k}: {}", sys::show_unit(&r));
                // Let the reader take the chunk and go back to sleep before the next one.
                sys::wait_until(QUIET, || sys::ioctl_int(fd, sys::SIOCOUTQ) == Ok(0));
            }
            link.expect("sent 1000");
            let inq = sys::wait_inq(fd, 1000, QUIET);
            out!(
                "all arrived: {}, FIONREAD {}",
                inq == 1000,
                q(fd, libc::FIONREAD)
            );
            let (d, _) = sys::recv_exact(fd, 1000);
            out!("recv 1000 equal: {}", d == data);
            link.send("read 1000");
            out!(
                "send 50: {}",
                sys::show_unit(&sys::send_all(fd, &data[..50]))
            );
            out!(
                "shutdown(SHUT_WR): {}",
                sys::show_unit(&sys::shutdown(fd, libc::SHUT_WR))
            );
            let mut st = String::new();
            sys::wait_until(QUIET, || {
                st = sys::tcp_state(fd);
                st != "FIN_WAIT1"
            });
            out!("state once our FIN was acknowledged: {st}");
            link.send("sent 50 and shut");
            link.expect("done");
            let rev = sys::wait_revents(fd, sys::ALL_EV, libc::POLLRDHUP, QUIET);
            out!("peer's FIN: ready {}", sys::evname(rev as u32));
            let mut b = [0u8; 8];
            out!("recv: {}", sys::show_read(&sys::recv(fd, &mut b, 0)));
            out!("state {} (TIME_WAIT shows as CLOSE)", sys::tcp_state(fd));
            // SO_ERROR of a refused non-blocking connect.
            let (hold, port) = sys::listen_on_bound_only(V4);
            let s = sys::tcp_socket(V4).expect("socket");
            sys::set_nonblock(s.raw(), true);
            let (ss, len) = sys::sockaddr(std::net::SocketAddr::new(V4, port));
            // SAFETY: ss/len describe a valid address.
            let r =
                unsafe { libc::connect(s.raw(), &ss as *const _ as *const libc::sockaddr, len) };
            let e = if r < 0 {
                sys::errname(sys::errno())
            } else {
                "ok".into()
            };
            let rev = sys::wait_revents(s.raw(), libc::POLLOUT, libc::POLLOUT, QUIET);
            out!(
                "non-blocking connect to a closed port: {e}, then ready {}",
                sys::evname(rev as u32)
            );
            out!(
                "SO_ERROR {}, then {}",
                sys::so_error(s.raw()),
                sys::so_error(s.raw())
            );
            drop(hold);
        }
        _ => unknown_role(role),
    }
}

const FILE_N: usize = 300_000;
const POS_N: usize = 50_000;
const ECHO_N: usize = 100_000;

/// An anonymous temp file (O_TMPFILE in /tmp, else a memfd) holding `data`.
fn temp_file(data: &[u8]) -> Fd {
    let dir = sys::cstr("/tmp");
    // SAFETY: plain open.
    let fd = unsafe {
        libc::open(
            dir.as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        )
    };
    let f = if fd >= 0 {
        Fd::own(fd)
    } else {
        sys::memfd_page()
    };
    let mut off = 0;
    while off < data.len() {
        match sys::write(f.raw(), &data[off..]) {
            Ok(k) => off += k,
            Err(e) => panic!("temp file write: {}", sys::errname(e)),
        }
    }
    f
}

fn splice(from: RawFd, to: RawFd, n: usize) -> sys::R<usize> {
    // SAFETY: plain splice between fds we hold.
    let r = unsafe { libc::splice(from, std::ptr::null_mut(), to, std::ptr::null_mut(), n, 0) };
    if r < 0 {
        Err(sys::errno())
    } else {
        Ok(r as usize)
    }
}

fn role_sendfile(role: &str, a: &Args) {
    let link = a.link(0);
    let seed = a.seed();
    let file = sys::pattern(seed, 1, FILE_N);
    match role {
        "server" => {
            let s = serve_one(&link, V4);
            let fd = s.raw();
            // Receive FILE_N + POS_N through splice into a pipe.
            let (pr, pw) = sys::pipe();
            let mut got = Vec::new();
            let mut buf = vec![0u8; 65536];
            let want = FILE_N + POS_N;
            let end = loop {
                if got.len() >= want {
                    break Ok(want);
                }
                match splice(fd, pw.raw(), (want - got.len()).min(65536)) {
                    Ok(0) => break Ok(0),
                    Ok(k) => {
                        let mut left = k;
                        while left > 0 {
                            let r = sys::read(pr.raw(), &mut buf[..left.min(65536)])
                                .expect("pipe read");
                            got.extend_from_slice(&buf[..r]);
                            left -= r;
                        }
                    }
                    Err(e) => break Err(e),
                }
            };
            let mut expect = file.clone();
            expect.extend_from_slice(&file[100_000..100_000 + POS_N]);
            let mut h = Hash::default();
            h.add(&got);
            out!(
                "spliced from the socket: {} ({}), equals the file then its slice: {}",
                h.done(),
                sys::show(&end),
                got == expect
            );
            // Send ECHO_N for the client to echo through splice.
            let echo = sys::pattern(seed, 2, ECHO_N);
            out!(
                "send {ECHO_N}: {}",
                sys::show_unit(&sys::send_all(fd, &echo))
            );
            let (d, _) = sys::recv_exact(fd, ECHO_N);
            out!("echo via splice equals: {}", d == echo);
            let (d, end) = sys::recv_to_end(fd);
            out!("then {} bytes and {}", d.len(), sys::show_read(&end));
        }
        "client" => {
            let c = connect_from(&link, V4);
            let fd = c.raw();
            let f = temp_file(&file);
            let mut off: libc::off_t = 0;
            let mut sent = 0;
            while sent < FILE_N {
                // SAFETY: off is a valid offset pointer.
                let r = unsafe { libc::sendfile(fd, f.raw(), &mut off, FILE_N - sent) };
                if r <= 0 {
                    out!(
                        "sendfile: {}",
                        if r < 0 {
                            sys::errname(sys::errno())
                        } else {
                            "0".into()
                        }
                    );
                    return;
                }
                sent += r as usize;
            }
            // SAFETY: querying the file position.
            let pos = unsafe { libc::lseek(f.raw(), 0, libc::SEEK_CUR) };
            out!("sendfile with an offset: {sent} bytes, offset now {off}, file position still {pos}");
            // SAFETY: plain lseek.
            unsafe { libc::lseek(f.raw(), 100_000, libc::SEEK_SET) };
            let mut sent = 0;
            while sent < POS_N {
                // SAFETY: a null offset means the file position.
                let r = unsafe { libc::sendfile(fd, f.raw(), std::ptr::null_mut(), POS_N - sent) };
                if r <= 0 {
                    out!(
                        "sendfile: {}",
                        if r < 0 {
                            sys::errname(sys::errno())
                        } else {
                            "0".into()
                        }
                    );
                    return;
                }
                sent += r as usize;
            }
            // SAFETY: querying the file position.
            let pos = unsafe { libc::lseek(f.raw(), 0, libc::SEEK_CUR) };
            out!("sendfile from the file position: {sent} bytes, position now {pos}");
            // Echo ECHO_N bytes socket → pipe → socket.
            let (pr, pw) = sys::pipe();
            let mut moved = 0;
            while moved < ECHO_N {
                let k = match splice(fd, pw.raw(), (ECHO_N - moved).min(65536)) {
                    Ok(0) => break,
                    Ok(k) => k,
                    Err(e) => {
                        out!("splice in: {}", sys::errname(e));
                        return;
                    }
                };
                let mut left = k;
                while left > 0 {
                    match splice(pr.raw(), fd, left) {
                        Ok(j) => left -= j,
                        Err(e) => {
                            out!("splice out: {}", sys::errname(e));
                            return;
                        }
                    }
                }
                moved += k;
            }
            out!("echoed {moved} bytes socket→pipe→socket");
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

const V_N: usize = 200_000;

/// Up to 16 iovecs of random lengths covering `len` bytes at `base`.
fn iovecs(base: *mut u8, len: usize, r: &mut Rng) -> Vec<libc::iovec> {
    let k = r.range(1, 16) as usize;
    let mut cuts: Vec<usize> = (0..k - 1)
        .map(|_| r.range(0, len as u64) as usize)
        .collect();
    cuts.push(0);
    cuts.push(len);
    cuts.sort();
    cuts.windows(2)
        .map(|w| libc::iovec {
            iov_base: base.wrapping_add(w[0]) as *mut libc::c_void,
            iov_len: w[1] - w[0],
        })
        .collect()
}

fn role_readv(role: &str, a: &Args) {
    let link = a.link(0);
    let seed = a.seed();
    let data = sys::pattern(seed, 1, V_N);
    match role {
        "server" => {
            let s = serve_one(&link, V4);
            let fd = s.raw();
            let mut r = Rng::new(seed, 31);
            let mut got = vec![0u8; V_N];
            let mut off = 0;
            let mut use_msg = false;
            while off < V_N {
                let want = r.size(40_000).min(V_N - off);
                let iov = iovecs(got[off..].as_mut_ptr(), want, &mut r);
                let n = if use_msg {
                    // SAFETY: a zeroed msghdr pointed at live iovecs.
                    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
                    m.msg_iov = iov.as_ptr() as *mut libc::iovec;
                    m.msg_iovlen = iov.len();
                    // SAFETY: m is valid.
                    unsafe { libc::recvmsg(fd, &mut m, 0) }
                } else {
                    // SAFETY: iov points into `got`.
                    unsafe { libc::readv(fd, iov.as_ptr(), iov.len() as i32) }
                };
                use_msg = !use_msg;
                if n <= 0 {
                    out!(
                        "readv/recvmsg stopped at {off}: {}",
                        if n < 0 {
                            sys::errname(sys::errno())
                        } else {
                            "EOF".into()
                        }
                    );
                    return;
                }
                off += n as usize;
            }
            let mut h = Hash::default();
            h.add(&got);
            out!("readv/recvmsg: {}, equals: {}", h.done(), got == data);
            // sendmmsg from the client: three messages.
            let (d, _) = sys::recv_exact(fd, 30);
            out!("sendmmsg bytes in order: {:?}", String::from_utf8_lossy(&d));
            // recvmmsg at a quiet point: all 200 bytes queued.
            link.send("send 200");
            link.expect("sent");
            out!("all 200 arrived: {}", sys::wait_inq(fd, 200, QUIET) == 200);
            let mut b1 = [0u8; 100];
            let mut b2 = [0u8; 100];
            let iov1 = libc::iovec {
                iov_base: b1.as_mut_ptr() as *mut libc::c_void,
                iov_len: 100,
            };
            let iov2 = libc::iovec {
                iov_base: b2.as_mut_ptr() as *mut libc::c_void,
                iov_len: 100,
            };
            // SAFETY: zeroed mmsghdrs pointed at live iovecs.
            let mut mm: [libc::mmsghdr; 2] = unsafe { std::mem::zeroed() };
            mm[0].msg_hdr.msg_iov = &iov1 as *const _ as *mut libc::iovec;
            mm[0].msg_hdr.msg_iovlen = 1;
            mm[1].msg_hdr.msg_iov = &iov2 as *const _ as *mut libc::iovec;
            mm[1].msg_hdr.msg_iovlen = 1;
            // SAFETY: mm is valid for two messages; no timeout.
            let n = unsafe {
                libc::recvmmsg(
                    fd,
                    mm.as_mut_ptr(),
                    2,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            let tail = sys::pattern(seed, 2, 200);
            out!(
                "recvmmsg: {n} messages of {} and {} bytes, equal: {}",
                mm[0].msg_len,
                mm[1].msg_len,
                b1[..] == tail[..100] && b2[..] == tail[100..]
            );
            let (d, end) = sys::recv_to_end(fd);
            out!("then {} bytes and {}", d.len(), sys::show_read(&end));
        }
        "client" => {
            let c = connect_from(&link, V4);
            let fd = c.raw();
            let mut r = Rng::new(seed, 32);
            let mut off = 0;
            let mut use_msg = false;
            while off < V_N {
                let want = r.size(40_000).min(V_N - off);
                let iov = iovecs(data[off..].as_ptr() as *mut u8, want, &mut r);
                let n = if use_msg {
                    // SAFETY: a zeroed msghdr pointed at live iovecs.
                    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
                    m.msg_iov = iov.as_ptr() as *mut libc::iovec;
                    m.msg_iovlen = iov.len();
                    // SAFETY: m is valid.
                    unsafe { libc::sendmsg(fd, &m, libc::MSG_NOSIGNAL) }
                } else {
                    // SAFETY: iov points into `data`.
                    unsafe { libc::writev(fd, iov.as_ptr(), iov.len() as i32) }
                };
                use_msg = !use_msg;
                if n < 0 {
                    out!("writev/sendmsg: {}", sys::errname(sys::errno()));
                    return;
                }
                off += n as usize;
            }
            out!("writev/sendmsg: {V_N} bytes");
            let parts: [&[u8]; 3] = [b"first-msg;", b"second-ms;", b"third-msg;"];
            let iovs: Vec<libc::iovec> = parts
                .iter()
                .map(|p| libc::iovec {
                    iov_base: p.as_ptr() as *mut libc::c_void,
                    iov_len: p.len(),
                })
                .collect();
            // SAFETY: zeroed mmsghdrs pointed at live iovecs.
            let mut mm: [libc::mmsghdr; 3] = unsafe { std::mem::zeroed() };
            for (m, iov) in mm.iter_mut().zip(iovs.iter()) {
                m.msg_hdr.msg_iov = iov as *const _ as *mut libc::iovec;
                m.msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: mm is valid for three messages.
            let n = unsafe { libc::sendmmsg(fd, mm.as_mut_ptr(), 3, libc::MSG_NOSIGNAL) };
            out!(
                "sendmmsg: {n} messages of {} {} {} bytes",
                mm[0].msg_len,
                mm[1].msg_len,
                mm[2].msg_len
            );
            link.expect("send 200");
            out!(
                "send 200: {}",
                sys::show_unit(&sys::send_all(fd, &sys::pattern(seed, 2, 200)))
            );
            link.send("sent");
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
