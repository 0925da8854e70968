//! The ember backend's system calls: the socket layer a kernel would put between a
//! script's calls and ember's TCP (fds, blocking, poll and epoll, socket options).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use ember_core::host::{ConnId, SocketEvent};
use ember_core::tcp::{State, Tcb};
use ember_core::Instant;

use super::{Attempt, Blocked, EpItem, Pending, Runner, Sock, SockKind, SockOpt};
use crate::runner::{
    check_ret, check_return_time, fail, unsup, Backend, Stop, DEFAULT_PORT, R, REMOTE_PORT,
};
use crate::script::{Expr, ExprKind, Syscall};
use crate::syscalls::*;

impl Runner {
    // ---------------------------------------------------------------------------------
    // Readiness: poll and epoll.

    /// A readiness event from the host: edge-triggered epoll items of that socket are
    /// woken (Linux queues an item on every wakeup of the socket's wait queue; ember's
    /// events are those wakeups).
    pub(super) fn wake(&mut self, ev: SocketEvent) {
        let fds: Vec<i64> = self
            .socks
            .iter()
            .filter(|(_, s)| match (s.kind, &ev) {
                (SockKind::Conn(a), SocketEvent::Tcp(b, _)) => a == *b,
                (SockKind::Listener(a), SocketEvent::Listener(b)) => a == *b,
                _ => false,
            })
            .map(|(fd, _)| *fd)
            .collect();
        for items in self.epolls.values_mut() {
            for it in items.iter_mut().filter(|i| fds.contains(&i.fd)) {
                it.woken = true;
            }
        }
    }

    /// The poll mask of `fd`, as Linux's `tcp_poll` computes it from the socket's
    /// state (POLLIN/RDNORM: data to read; RDHUP and IN: the peer's FIN or SHUT_RD;
    /// HUP: both directions shut or closed; OUT/WRNORM: room to write, or writing
    /// shut so a write fails at once; ERR: a pending error). `None`: not a socket.
    pub(super) fn readiness(&mut self, fd: i64) -> R<Option<i64>> {
        let Some(s) = self.sock(fd).cloned() else {
            return Ok(None);
        };
        let id = match s.kind {
            SockKind::Conn(id) => id,
            SockKind::Listener(_) => return unsup("poll/epoll on a listening socket"),
            SockKind::Fresh => return unsup("poll/epoll on an unconnected socket"),
        };
        let Ok((avail, fin, err, state, writable)) = self.host.tcp_with(self.now, id, |t| {
            (
                t.recv_available(),
                t.fin_received(),
                t.error().is_some(),
                t.state(),
                t.send_space() >= t.send_lowat(),
            )
        }) else {
            // The connection is gone (reset or timed out and reaped): closed.
            return Ok(Some(
                EPOLLIN | EPOLLRDNORM | EPOLLRDHUP | EPOLLHUP | EPOLLOUT | EPOLLWRNORM,
            ));
        };
        let mut m = 0;
        if err {
            m |= EPOLLERR;
        }
        let closed = state == State::Closed;
        let rcv_shut = fin || s.rd_shut || closed;
        let snd_shut = s.wr_shut
            || closed
            || matches!(
                state,
                State::FinWait1
                    | State::FinWait2
                    | State::Closing
                    | State::LastAck
                    | State::TimeWait
            );
        if rcv_shut && snd_shut {
            m |= EPOLLHUP;
        }
        if rcv_shut {
            m |= EPOLLIN | EPOLLRDNORM | EPOLLRDHUP;
        }
        if !matches!(state, State::SynSent | State::SynReceived) {
            if avail > 0 {
                m |= EPOLLIN | EPOLLRDNORM;
            }
            if snd_shut || writable {
                m |= EPOLLOUT | EPOLLWRNORM;
            }
        }
        Ok(Some(m))
    }

    /// epoll_ctl(epfd, EPOLL_CTL_ADD|MOD|DEL, fd, {events=..., fd=N | ptr=V}).
    pub(super) fn epoll_ctl(&mut self, sc: &Syscall) -> R<Attempt> {
        let epfd = self.fd_arg(sc)?;
        let op = sc.args.get(1).and_then(|a| a.as_word()).unwrap_or("?");
        let fd = arg_int(sc, 2)?.ok_or_else(|| Stop::Unsupported("epoll_ctl() fd ...".into()))?;
        if !self.epolls.contains_key(&epfd) {
            return Ok(Attempt::Done(Err(if self.socks.contains_key(&epfd) {
                "EINVAL"
            } else {
                "EBADF"
            })));
        }
        if !self.socks.contains_key(&fd) {
            return Ok(Attempt::Done(Err(if fd == epfd {
                "EINVAL"
            } else {
                "EBADF"
            })));
        }
        let (events, data) = match op {
            "EPOLL_CTL_DEL" => (0, (String::new(), 0)),
            _ => {
                let Some(ev) = sc.args.get(3).filter(|e| e.as_struct().is_some()) else {
                    return unsup("epoll_ctl() without a struct epoll_event");
                };
                let events = ev
                    .field("events")
                    .map(eval)
                    .transpose()?
                    .flatten()
                    .ok_or_else(|| Stop::Unsupported("epoll_event events ...".into()))?;
                let mut data = None;
                for name in ["fd", "ptr", "u32", "u64"] {
                    if let Some(v) = ev.field(name) {
                        data = Some((name.to_string(), eval(v)?.unwrap_or(0)));
                    }
                }
                let data = data.unwrap_or_else(|| ("fd".into(), fd));
                if events & !(0xffff | EPOLLRDHUP | EPOLLONESHOT | EPOLLET) != 0 {
                    return unsup(format!("epoll_ctl() events {events:#x}"));
                }
                (events, data)
            }
        };
        let ready = match op {
            "EPOLL_CTL_DEL" => None,
            _ => self.readiness(fd)?,
        };
        let items = self.epolls.get_mut(&epfd).expect("checked above");
        let pos = items.iter().position(|i| i.fd == fd);
        // Linux queues a new or modified item that is ready at once.
        let woken = ready.is_some_and(|m| m & (events | EPOLLERR | EPOLLHUP) != 0);
        Ok(Attempt::Done(match (op, pos) {
            ("EPOLL_CTL_ADD", Some(_)) => Err("EEXIST"),
            ("EPOLL_CTL_ADD", None) => {
                items.push(EpItem {
                    fd,
                    events,
                    data,
                    woken,
                    disabled: false,
                });
                Ok(0)
            }
            ("EPOLL_CTL_MOD" | "EPOLL_CTL_DEL", None) => Err("ENOENT"),
            ("EPOLL_CTL_MOD", Some(i)) => {
                items[i] = EpItem {
                    fd,
                    events,
                    data,
                    woken,
                    disabled: false,
                };
                Ok(0)
            }
            ("EPOLL_CTL_DEL", Some(i)) => {
                items.remove(i);
                Ok(0)
            }
            (other, _) => return unsup(format!("epoll_ctl({other})")),
        }))
    }

    /// poll(fds, n, timeout) and epoll_wait(epfd, events, max, timeout). With nothing
    /// ready and a timeout other than 0 the call blocks (if `may_block`) until
    /// something is, or until the timeout. On return, the script's expected `revents`
    /// (poll) or first event and its data (epoll) must match what was reported.
    pub(super) fn wait_attempt(&mut self, line: u32, sc: &Syscall, may_block: bool) -> R<Attempt> {
        let timeout_arg = if sc.name == "poll" { 2 } else { 3 };
        let timeout = arg_int(sc, timeout_arg)?.unwrap_or(0);
        let until = (timeout > 0).then(|| self.now + Duration::from_millis(timeout as u64));
        let mut reported: Vec<(i64, i64, Option<&Expr>)> = Vec::new();
        if sc.name == "poll" {
            let Some(fds) = sc.args.first().and_then(|a| a.as_array()) else {
                return unsup("poll() without an array of pollfd");
            };
            for pfd in fds {
                let fd = pfd
                    .field("fd")
                    .map(eval)
                    .transpose()?
                    .flatten()
                    .ok_or_else(|| Stop::Unsupported("pollfd without fd".into()))?;
                let events = pfd
                    .field("events")
                    .map(eval)
                    .transpose()?
                    .flatten()
                    .unwrap_or(0);
                let revents = match self.readiness(fd)? {
                    None => POLLNVAL,
                    Some(m) => m & (events | EPOLLERR | EPOLLHUP),
                };
                reported.push((revents, fd, pfd.field("revents")));
            }
            let n = reported.iter().filter(|r| r.0 != 0).count() as i64;
            if n == 0 && timeout != 0 && may_block {
                return Ok(Attempt::Block(Blocked::Wait { until }));
            }
            for (got, fd, want) in &reported {
                if let Some(w) = want.map(eval).transpose()?.flatten() {
                    if w != *got {
                        return fail(
                            line,
                            format!("revents {} for fd {fd}", poll_text(w)),
                            format!("revents {}", poll_text(*got)),
                        );
                    }
                }
            }
            return Ok(Attempt::Done(Ok(n)));
        }
        let epfd = self.fd_arg(sc)?;
        let Some(items) = self.epolls.get(&epfd).cloned() else {
            return Ok(Attempt::Done(Err(if self.socks.contains_key(&epfd) {
                "EINVAL"
            } else {
                "EBADF"
            })));
        };
        let max = arg_int(sc, 2)?.unwrap_or(1);
        if max <= 0 {
            return Ok(Attempt::Done(Err("EINVAL")));
        }
        let mut out: Vec<(i64, (String, i64))> = Vec::new();
        let mut next = items.clone();
        for it in next.iter_mut() {
            if out.len() as i64 >= max || it.disabled {
                continue;
            }
            let edge = it.events & EPOLLET != 0;
            if edge && !it.woken {
                continue;
            }
            let m = self.readiness(it.fd)?.unwrap_or(0)
                & (it.events | EPOLLERR | EPOLLHUP)
                & 0xffff_ffff
                & !(EPOLLET | EPOLLONESHOT);
            it.woken = false;
            if m != 0 {
                out.push((m, it.data.clone()));
                if it.events & EPOLLONESHOT != 0 {
                    it.disabled = true;
                }
            }
        }
        if out.is_empty() && timeout != 0 && may_block {
            return Ok(Attempt::Block(Blocked::Wait { until }));
        }
        self.epolls.insert(epfd, next);
        let want = sc.args.get(1);
        let want_first = match want.and_then(|w| w.as_array()) {
            Some(a) => a.first(),
            None => want,
        };
        if let (Some(w), Some((m, (dname, dval)))) = (want_first, out.first()) {
            if let Some(we) = w.field("events").map(eval).transpose()?.flatten() {
                if we != *m {
                    return fail(
                        line,
                        format!("events {}", poll_text(we)),
                        format!("events {}", poll_text(*m)),
                    );
                }
            }
            if let Some(wd) = w.field(dname).map(eval).transpose()?.flatten() {
                if wd != *dval {
                    return fail(line, format!("{dname}={wd}"), format!("{dname}={dval}"));
                }
            }
        }
        Ok(Attempt::Done(Ok(out.len() as i64)))
    }

    // ---------------------------------------------------------------------------------
    // System calls.

    pub(super) fn sock(&self, fd: i64) -> Option<&Sock> {
        self.socks.get(&fd)
    }

    /// `fd` is the socket code blocks read next, if it is one.
    pub(super) fn note_last_fd(&mut self, fd: i64) {
        let Some(s) = self.sock(fd) else { return };
        if let SockKind::Conn(id) = s.kind {
            self.last_conn = Some(id);
        }
        self.last_fd = Some(fd);
    }

    pub(super) fn new_fd(&self) -> i64 {
        let mut fd = 3;
        while self.socks.contains_key(&fd) || self.epolls.contains_key(&fd) {
            fd += 1;
        }
        fd
    }

    /// A system call (the loop has logged it): done now, or the pending call.
    pub(super) fn call(&mut self, line: u32, sc: &Syscall, end: Option<Instant>) -> R<()> {
        if self.pending.is_some() {
            return unsup(format!(
                "line {line}: {}() while another call is blocked",
                sc.name
            ));
        }
        let attempt = self.attempt(line, sc)?;
        // The socket this call used (for code blocks): its fd, or the fd it returned.
        if let Some(fd) = arg_int(sc, 0).ok().flatten() {
            self.note_last_fd(fd);
        }
        if let Attempt::Done(Ok(fd)) = attempt {
            if matches!(sc.name.as_str(), "socket" | "accept" | "accept4") {
                self.note_last_fd(fd);
            }
        }
        match attempt {
            Attempt::Done(got) => {
                if let Some(e) = end {
                    self.check_time(line, sc, e)?;
                }
                self.check_ret(line, sc, got)
            }
            Attempt::Block(what) => {
                self.pending = Some(Pending {
                    line,
                    call: sc.clone(),
                    end: end.unwrap_or(self.now),
                    what,
                });
                self.pump()
            }
        }
    }

    pub(super) fn check_time(&self, line: u32, sc: &Syscall, end: Instant) -> R<()> {
        check_return_time(line, sc, end, self.now, self.core.tol)
    }

    /// Retries the pending call; true if it completed.
    pub(super) fn retry_pending(&mut self) -> R<bool> {
        let Some(p) = self.pending.take() else {
            return Ok(false);
        };
        let a = match p.what {
            Blocked::Wait { until } => {
                if until.is_some_and(|u| self.now >= u) {
                    self.wait_attempt(p.line, &p.call, false)?
                } else {
                    match self.wait_attempt(p.line, &p.call, true)? {
                        Attempt::Block(_) => Attempt::Block(p.what),
                        a => a,
                    }
                }
            }
            what => self.attempt_blocked(what)?,
        };
        match a {
            Attempt::Block(what) => {
                self.pending = Some(Pending { what, ..p });
                Ok(false)
            }
            Attempt::Done(got) => {
                self.log(format!("{}() line {} returns", p.call.name, p.line));
                if let (Ok(fd), "accept" | "accept4") = (got, p.call.name.as_str()) {
                    self.note_last_fd(fd);
                }
                self.check_time(p.line, &p.call, p.end)?;
                self.check_ret(p.line, &p.call, got)?;
                Ok(true)
            }
        }
    }

    pub(super) fn check_ret(
        &self,
        line: u32,
        sc: &Syscall,
        got: Result<i64, &'static str>,
    ) -> R<()> {
        check_ret(line, sc, got)
    }

    pub(super) fn fd_arg(&self, sc: &Syscall) -> R<i64> {
        arg_int(sc, 0)?.ok_or_else(|| Stop::Unsupported(format!("{}() with fd ...", sc.name)))
    }

    pub(super) fn attempt(&mut self, line: u32, sc: &Syscall) -> R<Attempt> {
        let name = sc.name.as_str();
        Ok(match name {
            "socket" => {
                let domain = sc.args.first().map(|a| a.kind.clone());
                if !matches!(domain, Some(ExprKind::Ellipsis))
                    && sc.args.first().and_then(|a| a.as_word()) != Some("AF_INET")
                {
                    return unsup("socket() of a family other than AF_INET");
                }
                let ty = sc
                    .args
                    .get(1)
                    .and_then(|a| a.or_words())
                    .unwrap_or_default();
                if !ty.contains(&"SOCK_STREAM") {
                    return unsup(format!("socket() of type {ty:?}"));
                }
                let nonblock = ty.contains(&"SOCK_NONBLOCK");
                if ty
                    .iter()
                    .any(|w| !matches!(*w, "SOCK_STREAM" | "SOCK_NONBLOCK"))
                {
                    return unsup(format!("socket() flags {ty:?}"));
                }
                // The fd number is the harness's business, not the stack's: take the
                // one the script expects when it is a free number from 3.
                let fd = match eval(&sc.ret)? {
                    Some(want)
                        if want >= 3
                            && !self.socks.contains_key(&want)
                            && !self.epolls.contains_key(&want) =>
                    {
                        want
                    }
                    _ => self.new_fd(),
                };
                self.socks.insert(
                    fd,
                    Sock {
                        kind: SockKind::Fresh,
                        bound: None,
                        nonblock,
                        opts: Vec::new(),
                        rd_shut: false,
                        wr_shut: false,
                        more: false,
                        backlog: 0,
                    },
                );
                Attempt::Done(Ok(fd))
            }
            "setsockopt" => self.setsockopt(sc)?,
            "getsockopt" => self.getsockopt(line, sc)?,
            "fcntl" => {
                let fd = self.fd_arg(sc)?;
                let cmd = sc.args.get(1).and_then(|a| a.as_word()).unwrap_or("");
                let Some(s) = self.socks.get_mut(&fd) else {
                    return Ok(Attempt::Done(Err("EBADF")));
                };
                match cmd {
                    "F_GETFL" => Attempt::Done(Ok(2 | if s.nonblock { O_NONBLOCK } else { 0 })),
                    "F_SETFL" => {
                        let v = sc.args.get(2).map(eval).transpose()?.flatten().unwrap_or(0);
                        s.nonblock = v & O_NONBLOCK != 0;
                        Attempt::Done(Ok(0))
                    }
                    other => return unsup(format!("fcntl({other})")),
                }
            }
            "bind" => {
                let fd = self.fd_arg(sc)?;
                let addr = self.sockaddr(sc.args.get(1), self.local)?;
                let Some(s) = self.socks.get_mut(&fd) else {
                    return Ok(Attempt::Done(Err("EBADF")));
                };
                if s.bound.is_some() || !matches!(s.kind, SockKind::Fresh) {
                    return Ok(Attempt::Done(Err("EINVAL")));
                }
                s.bound = Some(addr);
                Attempt::Done(Ok(0))
            }
            "listen" => {
                let fd = self.fd_arg(sc)?;
                let backlog_arg = arg_int(sc, 1)?.unwrap_or(128);
                let backlog = backlog_arg.max(0) as u32;
                let Some(s) = self.socks.get_mut(&fd) else {
                    return Ok(Attempt::Done(Err("EBADF")));
                };
                if !matches!(s.kind, SockKind::Conn(_)) {
                    s.backlog = backlog_arg;
                }
                let s = s.clone();
                match s.kind {
                    SockKind::Listener(_) => Attempt::Done(Ok(0)),
                    SockKind::Conn(_) => Attempt::Done(Err("EINVAL")),
                    SockKind::Fresh => {
                        let addr = s
                            .bound
                            .unwrap_or(SocketAddrV4::new(self.local, DEFAULT_PORT));
                        match self.host.tcp_listen(addr, backlog) {
                            Ok(lid) => {
                                for o in &s.opts {
                                    if let SockOpt::MaxSeg(m) = o {
                                        let _ = self.host.tcp_listener_set_max_segment(lid, *m);
                                    }
                                }
                                self.core.flow.local_port = addr.port();
                                self.core.flow.remote_port = REMOTE_PORT;
                                self.socks.get_mut(&fd).expect("fd").kind = SockKind::Listener(lid);
                                Attempt::Done(Ok(0))
                            }
                            Err(e) => Attempt::Done(Err(errno_of(&e))),
                        }
                    }
                }
            }
            "accept" | "accept4" => {
                let mut nonblock = false;
                if name == "accept4" {
                    match sc.args.get(3) {
                        None => {}
                        Some(a) if a.as_int() == Some(0) => {}
                        Some(a) => match a.or_words().as_deref() {
                            Some(["SOCK_NONBLOCK"]) => nonblock = true,
                            _ => return unsup(format!("accept4() flags {:?}", a.kind)),
                        },
                    }
                }
                let fd = self.fd_arg(sc)?;
                self.attempt_blocked(Blocked::Accept { fd, nonblock })?
            }
            "connect" => {
                let fd = self.fd_arg(sc)?;
                let remote = self.sockaddr(sc.args.get(1), self.remote)?;
                let Some(s) = self.socks.get(&fd).cloned() else {
                    return Ok(Attempt::Done(Err("EBADF")));
                };
                match s.kind {
                    SockKind::Listener(_) => Attempt::Done(Err("EISCONN")),
                    SockKind::Conn(_) => self.attempt_blocked(Blocked::Connect { fd })?,
                    SockKind::Fresh => {
                        match self.host.tcp_connect_with(self.now, remote, s.bound, |t| {
                            // Options set before connect() shape the SYN.
                            for o in &s.opts {
                                apply_opt(t, self.now, *o);
                            }
                        }) {
                            Err(e) => Attempt::Done(Err(errno_of(&e))),
                            Ok(id) => {
                                let info = self.host.tcp_info(id).expect("new connection");
                                self.core.flow.local_port = info.local.port();
                                self.core.flow.remote_port = remote.port();
                                self.socks.get_mut(&fd).expect("fd").kind = SockKind::Conn(id);
                                if s.nonblock {
                                    Attempt::Done(Err("EINPROGRESS"))
                                } else {
                                    self.attempt_blocked(Blocked::Connect { fd })?
                                }
                            }
                        }
                    }
                }
            }
            "write" | "send" | "sendto" | "sendmsg" | "writev" => {
                let fd = self.fd_arg(sc)?;
                let (len, flags) = match name {
                    "sendmsg" => (msghdr_len(sc)?, sc.args.get(2)),
                    "writev" => (iovec_len(sc.args.get(1))?, None),
                    _ => {
                        if is_null(sc.args.get(1)) {
                            let len = arg_int(sc, 2)?.unwrap_or(1);
                            return self.null_buffer(fd, len, true);
                        }
                        buffer_is_ellipsis(sc)?;
                        let len = arg_int(sc, 2)?.ok_or_else(|| {
                            Stop::Unsupported(format!("{name}() with a length of ..."))
                        })?;
                        (
                            len.max(0) as usize,
                            if name == "write" {
                                None
                            } else {
                                sc.args.get(3)
                            },
                        )
                    }
                };
                let MsgFlags {
                    dontwait,
                    more,
                    peek,
                } = msg_flags(sc, flags)?;
                if peek {
                    return unsup(format!("{name}() flag MSG_PEEK"));
                }
                if name == "sendto"
                    && sc
                        .args
                        .get(4)
                        .is_some_and(|a| !matches!(a.kind, ExprKind::Ellipsis | ExprKind::Int(0)))
                {
                    return unsup("sendto() with an address");
                }
                if more {
                    self.begin_more(fd);
                }
                let a = if dontwait {
                    self.write_once(fd, len, 0, true)
                } else {
                    self.attempt_blocked(Blocked::Write { fd, len, done: 0 })?
                };
                if !more {
                    self.end_more(fd);
                }
                a
            }
            "read" | "recv" | "recvfrom" | "recvmsg" | "readv" => {
                let fd = self.fd_arg(sc)?;
                let (len, flags) = match name {
                    "recvmsg" => (msghdr_len(sc)?, sc.args.get(2)),
                    "readv" => (iovec_len(sc.args.get(1))?, None),
                    _ => {
                        if is_null(sc.args.get(1)) {
                            let len = arg_int(sc, 2)?.unwrap_or(1);
                            return self.null_buffer(fd, len, false);
                        }
                        buffer_is_ellipsis(sc)?;
                        let len = arg_int(sc, 2)?.unwrap_or(65_536).max(0) as usize;
                        (len, if name == "read" { None } else { sc.args.get(3) })
                    }
                };
                let MsgFlags {
                    dontwait,
                    more,
                    peek,
                } = msg_flags(sc, flags)?;
                if more {
                    return unsup(format!("{name}() with MSG_MORE"));
                }
                if dontwait {
                    return Ok(match self.read_once(fd, len, peek) {
                        Attempt::Block(_) => Attempt::Done(Err("EAGAIN")),
                        a => a,
                    });
                }
                self.attempt_blocked(Blocked::Read { fd, len, peek })?
            }
            "ioctl" => self.ioctl(line, sc)?,
            "epoll_create" | "epoll_create1" => {
                let arg = arg_int(sc, 0)?.unwrap_or(1);
                if (name == "epoll_create" && arg <= 0)
                    || (name == "epoll_create1" && arg & !EPOLL_CLOEXEC != 0)
                {
                    return Ok(Attempt::Done(Err("EINVAL")));
                }
                let fd = match eval(&sc.ret)? {
                    Some(want)
                        if want >= 3
                            && !self.socks.contains_key(&want)
                            && !self.epolls.contains_key(&want) =>
                    {
                        want
                    }
                    _ => self.new_fd(),
                };
                self.epolls.insert(fd, Vec::new());
                Attempt::Done(Ok(fd))
            }
            "epoll_ctl" => self.epoll_ctl(sc)?,
            "epoll_wait" | "poll" => self.wait_attempt(line, sc, true)?,
            "close" => {
                let fd = self.fd_arg(sc)?;
                if self.epolls.remove(&fd).is_some() {
                    return Ok(Attempt::Done(Ok(0)));
                }
                for items in self.epolls.values_mut() {
                    // Closing a file removes it from every epoll set.
                    items.retain(|i| i.fd != fd);
                }
                match self.socks.remove(&fd) {
                    None => Attempt::Done(Err("EBADF")),
                    Some(s) => {
                        match s.kind {
                            SockKind::Fresh => {}
                            SockKind::Listener(l) => self.host.tcp_close_listener(self.now, l),
                            SockKind::Conn(c) => self.host.tcp_close(self.now, c),
                        }
                        Attempt::Done(Ok(0))
                    }
                }
            }
            "shutdown" => {
                let fd = self.fd_arg(sc)?;
                let how = sc.args.get(1).and_then(|a| a.as_word()).unwrap_or("");
                let Some(s) = self.socks.get_mut(&fd) else {
                    return Ok(Attempt::Done(Err("EBADF")));
                };
                let SockKind::Conn(id) = s.kind else {
                    return Ok(Attempt::Done(Err("ENOTCONN")));
                };
                match how {
                    "SHUT_RD" => {
                        s.rd_shut = true;
                        Attempt::Done(Ok(0))
                    }
                    "SHUT_WR" | "SHUT_RDWR" => {
                        if how == "SHUT_RDWR" {
                            s.rd_shut = true;
                        }
                        s.wr_shut = true;
                        Attempt::Done(
                            self.host
                                .tcp_shutdown_write(self.now, id)
                                .map(|_| 0)
                                .map_err(|e| errno_of(&e)),
                        )
                    }
                    other => return unsup(format!("shutdown({other})")),
                }
            }
            other => return unsup(format!("line {line}: system call {other}()")),
        })
    }

    /// A sockaddr argument; a written address is honoured.
    pub(super) fn sockaddr(&self, e: Option<&Expr>, default_ip: Ipv4Addr) -> R<SocketAddrV4> {
        let (port, addr) = sockaddr_arg(e)?;
        let ip = match addr {
            Some(a) => inet_addr(a)?,
            None => default_ip,
        };
        Ok(SocketAddrV4::new(ip, port))
    }

    pub(super) fn setsockopt(&mut self, sc: &Syscall) -> R<Attempt> {
        let fd = self.fd_arg(sc)?;
        let opt = sc.args.get(2).and_then(|a| a.as_word()).unwrap_or("?");
        let val = match sc.args.get(3) {
            Some(a) => match a.as_array() {
                Some([x]) => eval(x)?,
                _ => eval(a)?,
            },
            None => None,
        };
        let v = val.unwrap_or(0);
        let o = match opt {
            "SO_REUSEADDR" => None,
            "TCP_NODELAY" => Some(SockOpt::NoDelay(v != 0)),
            "TCP_CORK" => Some(SockOpt::Cork(v != 0)),
            "SO_SNDBUF" => Some(SockOpt::SndBuf(v.max(0) as usize)),
            "SO_RCVBUF" => Some(SockOpt::RcvBuf(v.max(0) as usize)),
            "SO_KEEPALIVE" => Some(SockOpt::KeepAlive(v != 0)),
            "TCP_USER_TIMEOUT" => Some(SockOpt::UserTimeout(v.max(0) as u64)),
            // Linux's TCP_MAXSEG bounds (TCP_MIN_MSS .. MAX_TCP_WINDOW).
            "TCP_MAXSEG" if !(88..=32_767).contains(&v) => return Ok(Attempt::Done(Err("EINVAL"))),
            "TCP_MAXSEG" => Some(SockOpt::MaxSeg(v as u32)),
            // Linux's bounds (MAX_TCP_KEEPIDLE, MAX_TCP_KEEPINTVL, MAX_TCP_KEEPCNT).
            "TCP_KEEPIDLE" | "TCP_KEEPINTVL" if !(1..=32_767).contains(&v) => {
                return Ok(Attempt::Done(Err("EINVAL")))
            }
            "TCP_KEEPCNT" if !(1..=127).contains(&v) => return Ok(Attempt::Done(Err("EINVAL"))),
            "TCP_KEEPIDLE" => Some(SockOpt::KeepIdle(v as u32)),
            "TCP_KEEPINTVL" => Some(SockOpt::KeepIntvl(v as u32)),
            "TCP_KEEPCNT" => Some(SockOpt::KeepCnt(v as u32)),
            // For TCP the ECN field is the stack's, not the application's (RFC 3168
            // §6.1.1: ECT is set by TCP); with no ECN in ember it stays 0.
            "IP_TOS" => Some(SockOpt::Tos((v & 0xfc) as u8)),
            "TCP_NOTSENT_LOWAT" if matches!(v, 0 | -1 | 0xffff_ffff) => {
                Some(SockOpt::NotsentLowat(v as u32))
            }
            "TCP_NOTSENT_LOWAT" => {
                return unsup(format!(
                    "TCP_NOTSENT_LOWAT of {v}: ember has no unsent-bytes limit on writability"
                ))
            }
            other => return unsup(format!("setsockopt({other})")),
        };
        let Some(kind) = self.sock(fd).map(|s| s.kind) else {
            return Ok(Attempt::Done(Err("EBADF")));
        };
        if let (Some(SockOpt::MaxSeg(m)), SockKind::Listener(lid)) = (o, kind) {
            if let Err(e) = self.host.tcp_listener_set_max_segment(lid, m) {
                return Ok(Attempt::Done(Err(errno_of(&e))));
            }
        }
        let s = self.socks.get_mut(&fd).expect("checked above");
        if let Some(o) = o {
            s.opts.push(o);
            if let SockKind::Conn(id) = s.kind {
                self.apply_opts(id, &[o]);
            }
        }
        Ok(Attempt::Done(Ok(0)))
    }

    pub(super) fn apply_opts(&mut self, id: ConnId, opts: &[SockOpt]) {
        let now = self.now;
        let _ = self.host.tcp_with(now, id, |t| {
            for o in opts {
                apply_opt(t, now, *o);
            }
        });
    }

    pub(super) fn getsockopt(&mut self, line: u32, sc: &Syscall) -> R<Attempt> {
        let fd = self.fd_arg(sc)?;
        let opt = sc.args.get(2).and_then(|a| a.as_word()).unwrap_or("?");
        let Some(s) = self.sock(fd).cloned() else {
            return Ok(Attempt::Done(Err("EBADF")));
        };
        let conn = match s.kind {
            SockKind::Conn(id) => Some(id),
            _ => None,
        };
        let last = |f: &dyn Fn(&SockOpt) -> Option<i64>| s.opts.iter().rev().find_map(f);
        let mut err = None;
        let got: i64 = match opt {
            "SO_ERROR" => {
                err = conn
                    .and_then(|id| self.host.tcp_with(self.now, id, |t| t.take_error()).ok())
                    .flatten()
                    .map(|e| errno_of(&e.into()));
                err.map_or(0, errno_number)
            }
            // The MSS in use once connected; before that TCP_MAXSEG if set, else
            // Linux's default MSS (536, RFC 9293 §3.7.1).
            "TCP_MAXSEG" => match conn.and_then(|id| self.host.tcp_info(id)) {
                Some(i) => i64::from(i.snd_mss),
                None => last(&|o| match o {
                    SockOpt::MaxSeg(m) => Some(i64::from(*m)),
                    _ => None,
                })
                .unwrap_or(536),
            },
            "TCP_NOTSENT_LOWAT" => last(&|o| match o {
                SockOpt::NotsentLowat(v) => Some(i64::from(*v)),
                _ => None,
            })
            .unwrap_or(0),
            "IP_TOS" => last(&|o| match o {
                SockOpt::Tos(t) => Some(i64::from(*t)),
                _ => None,
            })
            .unwrap_or(0),
            "TCP_NODELAY" => last(&|o| match o {
                SockOpt::NoDelay(b) => Some(i64::from(*b)),
                _ => None,
            })
            .unwrap_or(0),
            "TCP_CORK" => last(&|o| match o {
                SockOpt::Cork(b) => Some(i64::from(*b)),
                _ => None,
            })
            .unwrap_or(0),
            "SO_KEEPALIVE" => last(&|o| match o {
                SockOpt::KeepAlive(b) => Some(i64::from(*b)),
                _ => None,
            })
            .unwrap_or(0),
            // The connection's value (set on it, or inherited from the tunables when it
            // was made); before there is one, the value set, else the tunable now, as
            // Linux reads the sysctl while the socket has none of its own.
            "TCP_KEEPIDLE" | "TCP_KEEPINTVL" | "TCP_KEEPCNT" => {
                let on_conn = conn.and_then(|id| {
                    self.host
                        .tcp_with(self.now, id, |t| t.keepalive_params())
                        .ok()
                });
                let p = self.host.params();
                let (idle, intvl, cnt) = match on_conn {
                    Some((i, v, c)) => (i.as_secs() as i64, v.as_secs() as i64, i64::from(c)),
                    None => (
                        last(&|o| match o {
                            SockOpt::KeepIdle(s) => Some(i64::from(*s)),
                            _ => None,
                        })
                        .unwrap_or(i64::from(p.tcp_keepalive_interval / 1000)),
                        last(&|o| match o {
                            SockOpt::KeepIntvl(s) => Some(i64::from(*s)),
                            _ => None,
                        })
                        .unwrap_or(i64::from(p.tcp_keepalive_intvl / 1000)),
                        last(&|o| match o {
                            SockOpt::KeepCnt(n) => Some(i64::from(*n)),
                            _ => None,
                        })
                        .unwrap_or(i64::from(p.tcp_keepalive_probes)),
                    ),
                };
                match opt {
                    "TCP_KEEPIDLE" => idle,
                    "TCP_KEEPINTVL" => intvl,
                    _ => cnt,
                }
            }
            // socket(7): the kernel doubles the value set (bookkeeping overhead) and
            // getsockopt returns the doubled value. Within 2304..=212992 neither the
            // minimum nor net.core.[rw]mem_max clamps it; outside, and when never set
            // (Linux then reports its autotuned size), the runner cannot answer.
            "SO_SNDBUF" | "SO_RCVBUF" => {
                let set = last(&|o| match (o, opt) {
                    (SockOpt::SndBuf(b), "SO_SNDBUF") | (SockOpt::RcvBuf(b), "SO_RCVBUF") => {
                        Some(*b as i64)
                    }
                    _ => None,
                });
                match set {
                    Some(v) if (2304..=212_992).contains(&v) => 2 * v,
                    Some(v) => {
                        return unsup(format!(
                            "getsockopt({opt}) after setting {v}: Linux clamps it"
                        ))
                    }
                    None => {
                        return unsup(format!(
                            "getsockopt({opt}) never set: Linux reports its autotuned size"
                        ))
                    }
                }
            }
            other => return unsup(format!("getsockopt({other})")),
        };
        if let Some(want) = sc.args.get(3) {
            let want = match want.as_array() {
                Some([x]) => x,
                _ => want,
            };
            let w = match want.as_word() {
                Some(name) if name.starts_with('E') => Some(errno_number(name)),
                _ => eval(want)?,
            };
            if let Some(w) = w {
                if w != got {
                    let errname = err.map(|e| format!(" ({e})")).unwrap_or_default();
                    return fail(line, format!("{opt} {w}"), format!("{opt} {got}{errname}"));
                }
            }
        }
        if let Some(len) = sc.args.get(4) {
            let len = match len.as_array() {
                Some([x]) => x,
                _ => len,
            };
            if let Some(l) = eval(len)? {
                if l != 4 {
                    return fail(line, format!("{opt} length {l}"), format!("{opt} length 4"));
                }
            }
        }
        Ok(Attempt::Done(Ok(0)))
    }

    /// ioctl(fd, SIOCINQ|FIONREAD|SIOCOUTQ|SIOCOUTQNSD, [n]): bytes readable, bytes
    /// written and not yet acknowledged, bytes written and not yet sent (Linux's
    /// answers; a listening socket is EINVAL).
    pub(super) fn ioctl(&mut self, line: u32, sc: &Syscall) -> R<Attempt> {
        let fd = self.fd_arg(sc)?;
        let req = sc.args.get(1).and_then(|a| a.as_word()).unwrap_or("?");
        let Some(s) = self.sock(fd).cloned() else {
            return Ok(Attempt::Done(Err("EBADF")));
        };
        let id = match s.kind {
            SockKind::Listener(_) => return Ok(Attempt::Done(Err("EINVAL"))),
            SockKind::Fresh => None,
            SockKind::Conn(id) => Some(id),
        };
        let now = self.now;
        let got = match id {
            None => 0,
            Some(id) => {
                let v = self.host.tcp_with(now, id, |t| match req {
                    "SIOCINQ" | "FIONREAD" => Some(t.recv_available()),
                    "SIOCOUTQ" | "TIOCOUTQ" => Some(t.send_queued()),
                    "SIOCOUTQNSD" => Some(t.send_unsent()),
                    _ => None,
                });
                match v {
                    Ok(Some(n)) => n as i64,
                    Ok(None) => return unsup(format!("ioctl({req})")),
                    Err(_) => 0,
                }
            }
        };
        if !matches!(
            req,
            "SIOCINQ" | "FIONREAD" | "SIOCOUTQ" | "TIOCOUTQ" | "SIOCOUTQNSD"
        ) {
            return unsup(format!("ioctl({req})"));
        }
        if let Some(want) = sc.args.get(2) {
            let want = match want.as_array() {
                Some([x]) => x,
                _ => want,
            };
            if let Some(w) = eval(want)? {
                if w != got {
                    return fail(line, format!("{req} {w}"), format!("{req} {got}"));
                }
            }
        }
        Ok(Attempt::Done(Ok(0)))
    }

    /// A write (`write == true`) or read whose buffer is `NULL`: EFAULT, as the kernel
    /// answers when it cannot copy from or to the address; a read with nothing to
    /// copy behaves as a read (blocks, or EAGAIN) and a socket that is not connected
    /// gives its usual error. ember is not called: the fault is the syscall layer's.
    pub(super) fn null_buffer(&mut self, fd: i64, len: i64, write: bool) -> R<Attempt> {
        let Some(s) = self.sock(fd).cloned() else {
            return Ok(Attempt::Done(Err("EBADF")));
        };
        let SockKind::Conn(id) = s.kind else {
            return Ok(Attempt::Done(Err(if write { "EPIPE" } else { "ENOTCONN" })));
        };
        if len == 0 {
            return Ok(Attempt::Done(Ok(0)));
        }
        if write {
            return Ok(Attempt::Done(Err("EFAULT")));
        }
        let avail = self
            .host
            .tcp_with(self.now, id, |t| t.recv_available())
            .unwrap_or(0);
        if avail > 0 {
            Ok(Attempt::Done(Err("EFAULT")))
        } else if s.nonblock {
            Ok(Attempt::Done(Err("EAGAIN")))
        } else {
            unsup("a blocking read into NULL with nothing to read yet")
        }
    }

    /// MSG_MORE on a send: ember's `set_more` for this call and the next ones with it.
    pub(super) fn begin_more(&mut self, fd: i64) {
        let now = self.now;
        if let Some(s) = self.socks.get_mut(&fd) {
            if let SockKind::Conn(id) = s.kind {
                s.more = true;
                let _ = self.host.tcp_with(now, id, |t| t.set_more(now, true));
            }
        }
    }

    /// A send without MSG_MORE after one with it: what was held goes out with this
    /// call's data.
    pub(super) fn end_more(&mut self, fd: i64) {
        let now = self.now;
        if let Some(s) = self.socks.get_mut(&fd) {
            if !s.more {
                return;
            }
            s.more = false;
            if let SockKind::Conn(id) = s.kind {
                let _ = self.host.tcp_with(now, id, |t| t.set_more(now, false));
            }
        }
    }

    pub(super) fn attempt_blocked(&mut self, what: Blocked) -> R<Attempt> {
        Ok(match what {
            Blocked::Accept { fd, nonblock } => {
                let Some(s) = self.sock(fd).cloned() else {
                    return Ok(Attempt::Done(Err("EBADF")));
                };
                let SockKind::Listener(lid) = s.kind else {
                    return Ok(Attempt::Done(Err("EINVAL")));
                };
                match self.host.tcp_accept(lid) {
                    Ok((id, _peer)) => {
                        let nfd = self.new_fd();
                        self.socks.insert(
                            nfd,
                            Sock {
                                kind: SockKind::Conn(id),
                                bound: None,
                                nonblock,
                                opts: s.opts.clone(),
                                rd_shut: false,
                                wr_shut: false,
                                more: false,
                                backlog: 0,
                            },
                        );
                        self.apply_opts(id, &s.opts);
                        Attempt::Done(Ok(nfd))
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && !s.nonblock => {
                        Attempt::Block(what)
                    }
                    Err(e) => Attempt::Done(Err(errno_of(&e))),
                }
            }
            Blocked::Connect { fd } => {
                let Some(SockKind::Conn(id)) = self.sock(fd).map(|s| s.kind) else {
                    return Ok(Attempt::Done(Err("EBADF")));
                };
                let state = self.host.tcp_info(id).map(|i| i.state);
                match state {
                    Some(State::SynSent | State::SynReceived) => {
                        if self.sock(fd).is_some_and(|s| s.nonblock) {
                            Attempt::Done(Err("EALREADY"))
                        } else {
                            Attempt::Block(what)
                        }
                    }
                    Some(State::Closed) | None => {
                        let e = self
                            .host
                            .tcp_with(self.now, id, |t| t.take_error())
                            .ok()
                            .flatten();
                        Attempt::Done(Err(e.map_or("ECONNABORTED", |e| errno_of(&e.into()))))
                    }
                    Some(_) => Attempt::Done(Ok(0)),
                }
            }
            Blocked::Read { fd, len, peek } => {
                let a = self.read_once(fd, len, peek);
                match a {
                    Attempt::Block(_) if self.sock(fd).is_some_and(|s| s.nonblock) => {
                        Attempt::Done(Err("EAGAIN"))
                    }
                    a => a,
                }
            }
            Blocked::Write { fd, len, done } => {
                let nonblock = self.sock(fd).is_some_and(|s| s.nonblock);
                self.write_once(fd, len, done, nonblock)
            }
            Blocked::Wait { .. } => Attempt::Block(what),
        })
    }

    /// One read (`peek`: MSG_PEEK, the data stays in the receive queue).
    pub(super) fn read_once(&mut self, fd: i64, len: usize, peek: bool) -> Attempt {
        let Some(s) = self.sock(fd).cloned() else {
            return Attempt::Done(Err("EBADF"));
        };
        let SockKind::Conn(id) = s.kind else {
            return Attempt::Done(Err("ENOTCONN"));
        };
        let mut buf = vec![0u8; len];
        let r = if peek {
            self.host
                .tcp_with(self.now, id, |t| t.peek(&mut buf))
                .and_then(|r| r.map_err(std::io::Error::from))
        } else {
            self.host.tcp_recv(self.now, id, &mut buf)
        };
        match r {
            Ok(n) => Attempt::Done(Ok(n as i64)),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && s.rd_shut => {
                Attempt::Done(Ok(0))
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                Attempt::Block(Blocked::Read { fd, len, peek })
            }
            Err(e) => Attempt::Done(Err(errno_of(&e))),
        }
    }

    pub(super) fn write_once(
        &mut self,
        fd: i64,
        len: usize,
        mut done: usize,
        nonblock: bool,
    ) -> Attempt {
        let Some(SockKind::Conn(id)) = self.sock(fd).map(|s| s.kind) else {
            return Attempt::Done(Err("EBADF"));
        };
        let zeros = vec![0u8; len - done];
        loop {
            if done == len {
                return Attempt::Done(Ok(len as i64));
            }
            match self.host.tcp_send(self.now, id, &zeros[..len - done]) {
                Ok(0) => {}
                Ok(n) => {
                    done += n;
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    return Attempt::Done(if done > 0 {
                        Ok(done as i64)
                    } else {
                        Err(errno_of(&e))
                    })
                }
            }
            // Nothing more fits now.
            return if nonblock {
                Attempt::Done(if done > 0 {
                    Ok(done as i64)
                } else {
                    Err("EAGAIN")
                })
            } else {
                Attempt::Block(Blocked::Write { fd, len, done })
            };
        }
    }
}

/// Applies one remembered socket option to a connection.
pub(crate) fn apply_opt(t: &mut Tcb, now: Instant, o: SockOpt) {
    match o {
        SockOpt::NoDelay(on) => t.set_nodelay(on),
        SockOpt::Cork(on) => t.set_cork(now, on),
        SockOpt::SndBuf(b) => t.set_send_buffer(b),
        SockOpt::RcvBuf(b) => t.set_recv_buffer(b),
        SockOpt::KeepAlive(on) => t.set_keepalive(now, on),
        SockOpt::UserTimeout(ms) => t.set_user_timeout((ms > 0).then(|| Duration::from_millis(ms))),
        SockOpt::MaxSeg(m) => {
            // The value was range-checked by setsockopt.
            let _ = t.set_user_mss(m);
        }
        SockOpt::NotsentLowat(_) => {}
        SockOpt::Tos(tos) => t.set_tos(tos),
        SockOpt::KeepIdle(s) => t.set_keepalive_idle(now, Duration::from_secs(u64::from(s))),
        SockOpt::KeepIntvl(s) => t.set_keepalive_intvl(Duration::from_secs(u64::from(s))),
        SockOpt::KeepCnt(n) => t.set_keepalive_probes(n),
    }
}
