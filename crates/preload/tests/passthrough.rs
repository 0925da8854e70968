//! Stage A of cross-process fusion: the preload library passes every call through and
//! does no harm. Each test re-runs this test binary as a child with `LD_PRELOAD` set to
//! the library (checking in the child that the library really is loaded), and the
//! child exercises the interposed calls: the outcome must be what the kernel gives.

use std::ffi::CString;
use std::path::PathBuf;
use std::process::Command;

const CHILD: &str = "EMBER_PRELOAD_TEST_CHILD";

/// The library cargo built for this test run.
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps folder");
    for cand in [
        deps.join("libember_preload.so"),
        deps.join("../libember_preload.so"),
    ] {
        if cand.is_file() {
            return cand;
        }
    }
    panic!("libember_preload.so not found beside {}", deps.display());
}

/// Runs test `name` of this binary in a child with the library preloaded; the child
/// runs the body because `CHILD` is set. Returns the child's stdout.
fn in_child(name: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("LD_PRELOAD", library())
        // Stage A: the library passes every call through (fusion is tested elsewhere).
        .env("EMBER_DO_TCP_FUSION", "0")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child {name} failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("child ok"),
        "child {name} did not finish:\n{stdout}\n{stderr}"
    );
    stdout
}

fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

fn library_loaded() -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .contains("libember_preload.so")
}

fn check(r: libc::c_int, what: &str) -> libc::c_int {
    if r < 0 {
        panic!("{what}: {}", std::io::Error::last_os_error());
    }
    r
}

/// A connected TCP pair over loopback, IPv4 or IPv6: (client, server side).
fn tcp_pair(v6: bool) -> (libc::c_int, libc::c_int) {
    // SAFETY: plain socket calls on descriptors this function owns, with correctly
    // sized address structures.
    unsafe {
        let fam = if v6 { libc::AF_INET6 } else { libc::AF_INET };
        let l = check(libc::socket(fam, libc::SOCK_STREAM, 0), "socket");
        let mut ss: libc::sockaddr_storage = std::mem::zeroed();
        let len = if v6 {
            let a = &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6);
            a.sin6_family = libc::AF_INET6 as u16;
            a.sin6_addr.s6_addr[15] = 1;
            std::mem::size_of::<libc::sockaddr_in6>()
        } else {
            let a = &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in);
            a.sin_family = libc::AF_INET as u16;
            a.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
            std::mem::size_of::<libc::sockaddr_in>()
        } as libc::socklen_t;
        check(
            libc::bind(l, &ss as *const _ as *const libc::sockaddr, len),
            "bind",
        );
        check(libc::listen(l, 8), "listen");
        let mut got = len;
        check(
            libc::getsockname(l, &mut ss as *mut _ as *mut libc::sockaddr, &mut got),
            "getsockname",
        );
        let c = check(
            libc::socket(fam, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0),
            "socket",
        );
        check(
            libc::connect(c, &ss as *const _ as *const libc::sockaddr, len),
            "connect",
        );
        let s = check(
            libc::accept4(
                l,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            ),
            "accept4",
        );
        libc::close(l);
        (c, s)
    }
}

fn send_all(fd: libc::c_int, mut b: &[u8]) {
    while !b.is_empty() {
        // SAFETY: `b` is valid for its length.
        let n = unsafe { libc::send(fd, b.as_ptr().cast(), b.len(), 0) };
        assert!(n > 0, "send: {}", std::io::Error::last_os_error());
        b = &b[n as usize..];
    }
}

fn recv_exact(fd: libc::c_int, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    let mut got = 0;
    while got < n {
        // SAFETY: the rest of `v` is writable.
        let r = unsafe { libc::recv(fd, v[got..].as_mut_ptr().cast(), n - got, 0) };
        assert!(r > 0, "recv: {}", std::io::Error::last_os_error());
        got += r as usize;
    }
    v
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn data_calls_pass_through_over_ipv4_and_ipv6() {
    if !is_child() {
        in_child("data_calls_pass_through_over_ipv4_and_ipv6");
        return;
    }
    assert!(library_loaded());
    for v6 in [false, true] {
        let (c, s) = tcp_pair(v6);
        // send/recv, both ways, more than a socket buffer's worth in one direction.
        let big = pattern(3 << 20, 7);
        let reader = std::thread::spawn(move || recv_exact(s, 3 << 20));
        send_all(c, &big);
        assert_eq!(reader.join().unwrap(), big);
        // SAFETY (whole block): the descriptors are this test's; every buffer and
        // structure passed is valid for the sizes given.
        unsafe {
            // write/read, writev/readv, sendmsg/recvmsg, sendto/recvfrom, sendmmsg.
            assert_eq!(libc::write(c, b"abc".as_ptr().cast(), 3), 3);
            let mut b = [0u8; 3];
            assert_eq!(libc::read(s, b.as_mut_ptr().cast(), 3), 3);
            assert_eq!(&b, b"abc");
            let parts = [b"de".as_slice(), b"fgh".as_slice()];
            let iov: Vec<libc::iovec> = parts
                .iter()
                .map(|p| libc::iovec {
                    iov_base: p.as_ptr() as *mut _,
                    iov_len: p.len(),
                })
                .collect();
            assert_eq!(libc::writev(c, iov.as_ptr(), 2), 5);
            let (mut x, mut y) = ([0u8; 1], [0u8; 4]);
            let riov = [
                libc::iovec {
                    iov_base: x.as_mut_ptr().cast(),
                    iov_len: 1,
                },
                libc::iovec {
                    iov_base: y.as_mut_ptr().cast(),
                    iov_len: 4,
                },
            ];
            // The five bytes may arrive in pieces: wait for all of them.
            let mut pfd = libc::pollfd {
                fd: s,
                events: libc::POLLIN,
                revents: 0,
            };
            assert_eq!(libc::poll(&mut pfd, 1, 5000), 1);
            let mut avail: libc::c_int = 0;
            for _ in 0..1000 {
                check(libc::ioctl(s, libc::FIONREAD, &mut avail), "FIONREAD");
                if avail == 5 {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            assert_eq!(avail, 5);
            assert_eq!(libc::readv(s, riov.as_ptr(), 2), 5);
            assert_eq!((&x, &y), (b"d", b"efgh"));
            let mut m: libc::msghdr = std::mem::zeroed();
            m.msg_iov = iov.as_ptr() as *mut _;
            m.msg_iovlen = 2;
            assert_eq!(libc::sendmsg(c, &m, 0), 5);
            let mut got = recv_exact(s, 5);
            got.sort();
            assert_eq!(got, b"defgh");
            assert_eq!(
                libc::sendto(c, b"z".as_ptr().cast(), 1, 0, std::ptr::null(), 0),
                1
            );
            let mut z = [0u8; 1];
            assert_eq!(
                libc::recvfrom(
                    s,
                    z.as_mut_ptr().cast(),
                    1,
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut()
                ),
                1
            );
            // MSG_PEEK then the read; MSG_DONTWAIT on nothing gives EAGAIN.
            send_all(c, b"pq");
            let mut p = [0u8; 2];
            assert_eq!(libc::poll(&mut pfd, 1, 5000), 1);
            let n = libc::recv(
                s,
                p.as_mut_ptr().cast(),
                2,
                libc::MSG_PEEK | libc::MSG_WAITALL,
            );
            assert_eq!((n, &p), (2, b"pq"));
            assert_eq!(recv_exact(s, 2), b"pq");
            let r = libc::recv(s, p.as_mut_ptr().cast(), 2, libc::MSG_DONTWAIT);
            assert_eq!(
                (r, std::io::Error::last_os_error().raw_os_error()),
                (-1, Some(libc::EAGAIN))
            );
            // Through syscall(): the same calls by number.
            assert_eq!(
                libc::syscall(
                    libc::SYS_sendto,
                    c,
                    b"w".as_ptr(),
                    1usize,
                    0,
                    0usize,
                    0usize
                ),
                1
            );
            let mut w = [0u8; 1];
            assert_eq!(
                libc::syscall(
                    libc::SYS_recvfrom,
                    s,
                    w.as_mut_ptr(),
                    1usize,
                    0,
                    0usize,
                    0usize
                ),
                1
            );
            assert_eq!(&w, b"w");
            assert_eq!(libc::syscall(libc::SYS_getpid) as i32, libc::getpid());
            // shutdown: the peer reads EOF.
            check(libc::shutdown(c, libc::SHUT_WR), "shutdown");
            assert_eq!(libc::recv(s, w.as_mut_ptr().cast(), 1, 0), 0);
            libc::close(c);
            libc::close(s);
        }
    }
    println!("child ok");
}

#[test]
fn descriptor_calls_keep_their_meaning() {
    if !is_child() {
        in_child("descriptor_calls_keep_their_meaning");
        return;
    }
    assert!(library_loaded());
    let (c, s) = tcp_pair(false);
    // SAFETY (whole block): the descriptors are this test's.
    unsafe {
        // fcntl, the variadic entry point: flags, O_NONBLOCK, F_DUPFD_CLOEXEC.
        let fl = check(libc::fcntl(c, libc::F_GETFL), "F_GETFL");
        check(
            libc::fcntl(c, libc::F_SETFL, fl | libc::O_NONBLOCK),
            "F_SETFL",
        );
        assert_ne!(libc::fcntl(c, libc::F_GETFL) & libc::O_NONBLOCK, 0);
        let d = check(
            libc::fcntl(c, libc::F_DUPFD_CLOEXEC, 200),
            "F_DUPFD_CLOEXEC",
        );
        assert!(d >= 200);
        assert_ne!(libc::fcntl(d, libc::F_GETFD) & libc::FD_CLOEXEC, 0);
        // dup, dup2, dup3 copies work as the original.
        let d2 = check(libc::dup(d), "dup");
        check(libc::dup2(d2, 300), "dup2");
        check(libc::dup3(300, 301, libc::O_CLOEXEC), "dup3");
        send_all(301, b"x");
        assert_eq!(recv_exact(s, 1), b"x");
        // close_range closes a range; closing twice gives EBADF.
        check(libc::close_range(300, 301, 0), "close_range");
        assert_eq!(libc::close(300), -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EBADF)
        );
        // ioctl FIONBIO through the variadic entry point.
        let mut on: libc::c_int = 0;
        check(libc::ioctl(d, libc::FIONBIO, &mut on), "FIONBIO");
        assert_eq!(libc::fcntl(c, libc::F_GETFL) & libc::O_NONBLOCK, 0);
        // getsockopt/setsockopt.
        let one: libc::c_int = 1;
        check(
            libc::setsockopt(
                c,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&one as *const libc::c_int).cast(),
                4,
            ),
            "setsockopt",
        );
        let mut v: libc::c_int = 0;
        let mut l: libc::socklen_t = 4;
        check(
            libc::getsockopt(
                c,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&mut v as *mut libc::c_int).cast(),
                &mut l,
            ),
            "getsockopt",
        );
        assert_eq!(v, 1);
        // epoll, poll, select, pselect on the socket.
        let ep = check(libc::epoll_create1(libc::EPOLL_CLOEXEC), "epoll_create1");
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 42,
        };
        check(
            libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, s, &mut ev),
            "epoll_ctl",
        );
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
        assert_eq!(libc::epoll_wait(ep, out.as_mut_ptr(), 4, 0), 0);
        send_all(c, b"e");
        assert_eq!(libc::epoll_wait(ep, out.as_mut_ptr(), 4, 5000), 1);
        let data = out[0].u64;
        assert_eq!(data, 42);
        let ts = libc::timespec {
            tv_sec: 5,
            tv_nsec: 0,
        };
        assert_eq!(
            libc::epoll_pwait(ep, out.as_mut_ptr(), 4, 5000, std::ptr::null()),
            1
        );
        let mut set: libc::fd_set = std::mem::zeroed();
        libc::FD_SET(s, &mut set);
        assert_eq!(
            libc::pselect(
                s + 1,
                &mut set,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &ts,
                std::ptr::null()
            ),
            1
        );
        let mut tv = libc::timeval {
            tv_sec: 5,
            tv_usec: 0,
        };
        assert_eq!(
            libc::select(
                s + 1,
                &mut set,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut tv
            ),
            1
        );
        let mut pfd = libc::pollfd {
            fd: s,
            events: libc::POLLIN,
            revents: 0,
        };
        assert_eq!(libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()), 1);
        assert_eq!(recv_exact(s, 1), b"e");
        libc::close(ep);
        // sendfile from a file, splice from the socket into a pipe.
        let path = CString::new(format!("/tmp/ember-preload-test-{}", libc::getpid())).unwrap();
        let f = check(
            libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
                0o600,
            ),
            "open",
        );
        libc::unlink(path.as_ptr());
        let body = pattern(10000, 3);
        assert_eq!(
            libc::write(f, body.as_ptr().cast(), body.len()),
            body.len() as isize
        );
        let mut off: libc::off_t = 0;
        let mut sent = 0;
        while sent < body.len() {
            let n = libc::sendfile(c, f, &mut off, body.len() - sent);
            assert!(n > 0, "sendfile: {}", std::io::Error::last_os_error());
            sent += n as usize;
        }
        let mut p = [0 as libc::c_int; 2];
        check(libc::pipe(p.as_mut_ptr()), "pipe");
        let mut moved = 0;
        while moved < body.len() {
            let n = libc::splice(
                s,
                std::ptr::null_mut(),
                p[1],
                std::ptr::null_mut(),
                body.len() - moved,
                0,
            );
            assert!(n > 0, "splice: {}", std::io::Error::last_os_error());
            let mut buf = vec![0u8; n as usize];
            assert_eq!(libc::read(p[0], buf.as_mut_ptr().cast(), n as usize), n);
            assert_eq!(&buf[..], &body[moved..moved + n as usize]);
            moved += n as usize;
        }
        for fd in [c, s, d, d2, f, p[0], p[1]] {
            libc::close(fd);
        }
    }
    println!("child ok");
}

/// Exit status of `pid`, waiting for it.
fn wait_status(pid: libc::pid_t) -> i32 {
    let mut st = 0;
    // SAFETY: `st` is a valid out-parameter.
    let r = unsafe { libc::waitpid(pid, &mut st, 0) };
    assert_eq!(r, pid, "waitpid: {}", std::io::Error::last_os_error());
    assert!(libc::WIFEXITED(st), "status {st:#x}");
    libc::WEXITSTATUS(st)
}

#[test]
fn processes_fork_vfork_exec_and_spawn() {
    if !is_child() {
        in_child("processes_fork_vfork_exec_and_spawn");
        return;
    }
    assert!(library_loaded());
    let sh = CString::new("/bin/sh").unwrap();
    let dash_c = CString::new("-c").unwrap();
    let argv0 = CString::new("sh").unwrap();
    // SAFETY (whole block): fork/vfork children only call async-signal-safe functions
    // (exec, _exit) before exec; every string is NUL-terminated and every list
    // NULL-terminated.
    unsafe {
        // fork: the child exits with a status the parent sees.
        let pid = libc::fork();
        if pid == 0 {
            libc::_exit(5);
        }
        assert_eq!(wait_status(pid), 5);
        // execl (the variadic entry point) in a fork child.
        let script = CString::new("exit 7").unwrap();
        let pid = libc::fork();
        if pid == 0 {
            libc::execl(
                sh.as_ptr(),
                argv0.as_ptr(),
                dash_c.as_ptr(),
                script.as_ptr(),
                std::ptr::null::<libc::c_char>(),
            );
            libc::_exit(127);
        }
        assert_eq!(wait_status(pid), 7);
        // execle passes the environment; execlp searches PATH.
        let script = CString::new("test \"$EMBER_T\" = yes && exit 8; exit 9").unwrap();
        let env_t = CString::new("EMBER_T=yes").unwrap();
        let envp = [env_t.as_ptr(), std::ptr::null()];
        let pid = libc::fork();
        if pid == 0 {
            libc::execle(
                sh.as_ptr(),
                argv0.as_ptr(),
                dash_c.as_ptr(),
                script.as_ptr(),
                std::ptr::null::<libc::c_char>(),
                envp.as_ptr(),
            );
            libc::_exit(127);
        }
        assert_eq!(wait_status(pid), 8);
        let name = CString::new("sh").unwrap();
        let script = CString::new("exit 10").unwrap();
        let pid = libc::fork();
        if pid == 0 {
            libc::execlp(
                name.as_ptr(),
                argv0.as_ptr(),
                dash_c.as_ptr(),
                script.as_ptr(),
                std::ptr::null::<libc::c_char>(),
            );
            libc::_exit(127);
        }
        assert_eq!(wait_status(pid), 10);
        // posix_spawnp and system(); the library is inherited (the child checks).
        let script =
            CString::new("grep -q libember_preload.so /proc/$$/maps && exit 11; exit 12").unwrap();
        let argv = [
            argv0.as_ptr() as *mut libc::c_char,
            dash_c.as_ptr() as *mut _,
            script.as_ptr() as *mut _,
            std::ptr::null_mut(),
        ];
        extern "C" {
            static environ: *const *mut libc::c_char;
        }
        let mut pid = 0;
        assert_eq!(
            libc::posix_spawnp(
                &mut pid,
                name.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                argv.as_ptr(),
                environ
            ),
            0
        );
        assert_eq!(wait_status(pid), 11);
        let st = libc::system(script.as_ptr());
        assert!(
            libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 11,
            "system: {st:#x}"
        );
        // vfork as fork (what the library uses when a child must go through its fork
        // handling): the parent waits until the child has exec'd or exited.
        let sym = CString::new("ember_vfork_as_fork").unwrap();
        let f = libc::dlsym(libc::RTLD_DEFAULT, sym.as_ptr());
        assert!(!f.is_null());
        let vfork_as_fork: extern "C" fn() -> libc::pid_t = std::mem::transmute(f);
        let flag = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        ) as *mut u32;
        assert_ne!(flag as *mut libc::c_void, libc::MAP_FAILED);
        let pid = vfork_as_fork();
        if pid == 0 {
            std::thread::sleep(std::time::Duration::from_millis(50));
            std::ptr::write_volatile(flag, 1);
            libc::_exit(13);
        }
        // The parent ran only after the child had exited.
        assert_eq!(std::ptr::read_volatile(flag), 1);
        assert_eq!(wait_status(pid), 13);
    }
    println!("child ok");
}

#[test]
fn vfork_jumps_to_the_c_library_and_the_parent_resumes_intact() {
    // A C program (calling vfork from Rust is not sound), built by build.rs.
    let out = Command::new(env!("EMBER_VFORK_PROBE"))
        .env("LD_PRELOAD", library())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.trim(), "vfork ok, library loaded");
}

#[test]
fn nothing_before_the_first_inet_socket() {
    if !is_child() {
        let out = in_child("nothing_before_the_first_inet_socket");
        // The same threads and handlers as without the library.
        let plain = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "nothing_before_the_first_inet_socket",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "plain")
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap();
        let plain = String::from_utf8_lossy(&plain.stdout).into_owned();
        // The harness may print its "test ... " prefix on the same line.
        let field = |o: &str, k: &str| o.lines().find_map(|l| l.find(k).map(|i| l[i..].to_owned()));
        let handlers = |o: &str| field(o, "handlers ");
        assert!(handlers(&plain).is_some(), "{plain}");
        assert_eq!(handlers(&out), handlers(&plain));
        let threads = |o: &str| field(o, "threads ");
        assert!(threads(&plain).is_some(), "{plain}");
        assert_eq!(threads(&out), threads(&plain));
        return;
    }
    assert_eq!(library_loaded(), std::env::var(CHILD).unwrap() != "plain");
    // The handlers installed: compared by the parent with a run without the library
    // (Rust's runtime installs some of its own, in both runs).
    let mut handled = Vec::new();
    for sig in 1..65 {
        // SAFETY: a query (null new action) into a zeroed struct.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0
            && old.sa_sigaction != libc::SIG_DFL
        {
            handled.push(sig);
        }
    }
    println!("handlers {handled:?}");
    let maps = || -> Vec<String> {
        let m = std::fs::read_to_string("/proc/self/maps").unwrap();
        // Only the mappings of files and anonymous ones the library could make; the
        // heap and stacks move with the test's own allocations.
        m.lines()
            .filter(|l| !l.contains("[heap]") && !l.contains("[stack"))
            .map(|l| l.split_whitespace().skip(5).collect::<Vec<_>>().join(" "))
            .collect()
    };
    let before = maps();
    // Non-socket calls through the interposed functions: a pipe, reads and writes,
    // fcntl, dup, close, a unix socket pair, poll.
    // SAFETY: descriptors this test owns, valid buffers.
    unsafe {
        let mut p = [0 as libc::c_int; 2];
        check(libc::pipe(p.as_mut_ptr()), "pipe");
        for _ in 0..100 {
            assert_eq!(libc::write(p[1], b"x".as_ptr().cast(), 1), 1);
            let mut b = [0u8; 1];
            assert_eq!(libc::read(p[0], b.as_mut_ptr().cast(), 1), 1);
        }
        let d = libc::dup(p[0]);
        libc::fcntl(d, libc::F_SETFD, libc::FD_CLOEXEC);
        let mut sv = [0 as libc::c_int; 2];
        check(
            libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()),
            "socketpair",
        );
        let u = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        let mut pfd = libc::pollfd {
            fd: p[0],
            events: libc::POLLIN,
            revents: 0,
        };
        libc::poll(&mut pfd, 1, 0);
        for fd in [p[0], p[1], d, sv[0], sv[1], u] {
            libc::close(fd);
        }
    }
    let after = maps();
    assert_eq!(
        after.len(),
        before.len(),
        "the library mapped memory before any inet stream socket:\n{before:#?}\n{after:#?}"
    );
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let threads = status.lines().find(|l| l.starts_with("Threads:")).unwrap();
    println!("threads {}", threads.split_whitespace().nth(1).unwrap());
    println!("child ok");
}
