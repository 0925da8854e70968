//! System-call argument decoding shared by the backends: integer expressions and
//! constants, send/receive flags, iovecs and msghdrs, errno names, poll masks.

use std::net::Ipv4Addr;

use crate::runner::{unsup, Stop, DEFAULT_PORT, R};
use crate::script::{Expr, ExprKind, Syscall};

/// A `struct sockaddr_in` argument: `...` (or none) is port [`DEFAULT_PORT`];
/// `sin_port=htons(N)` is port N. The `sin_addr` expression, when written, is handed
/// back for the backend to read ([`inet_addr`]) or refuse.
pub(crate) fn sockaddr_arg(e: Option<&Expr>) -> R<(u16, Option<&Expr>)> {
    let Some(e) = e else {
        return Ok((DEFAULT_PORT, None));
    };
    if matches!(e.kind, ExprKind::Ellipsis) {
        return Ok((DEFAULT_PORT, None));
    }
    let port = match e.field("sin_port").map(|p| &p.kind) {
        Some(ExprKind::Call(f, a)) if f == "htons" && a.len() == 1 => a[0]
            .as_int()
            .and_then(|v| u16::try_from(v).ok())
            .ok_or_else(|| Stop::Unsupported("sin_port value".into()))?,
        None => DEFAULT_PORT,
        _ => return unsup("sockaddr port form"),
    };
    Ok((port, e.field("sin_addr")))
}

/// A written `sin_addr`: `inet_addr("a.b.c.d")`.
pub(crate) fn inet_addr(e: &Expr) -> R<Ipv4Addr> {
    match &e.kind {
        ExprKind::Call(f, a) if f == "inet_addr" && a.len() == 1 => match &a[0].kind {
            ExprKind::Str(s) => std::str::from_utf8(s)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Stop::Unsupported("inet_addr value".into())),
            _ => unsup("inet_addr form"),
        },
        _ => unsup("sockaddr address form"),
    }
}

pub(crate) const EPOLLIN: i64 = 0x1;
pub(crate) const EPOLLOUT: i64 = 0x4;
pub(crate) const EPOLLERR: i64 = 0x8;
pub(crate) const EPOLLHUP: i64 = 0x10;
pub(crate) const EPOLLRDNORM: i64 = 0x40;
pub(crate) const EPOLLWRNORM: i64 = 0x100;
pub(crate) const EPOLLRDHUP: i64 = 0x2000;
pub(crate) const EPOLLONESHOT: i64 = 1 << 30;
pub(crate) const EPOLLET: i64 = 1 << 31;
pub(crate) const EPOLL_CLOEXEC: i64 = 0o2000000;
pub(crate) const POLLNVAL: i64 = 0x20;

pub(crate) const O_NONBLOCK: i64 = 0o4000;

/// A poll/epoll mask as `IN|OUT` (the poll and epoll bits share values), `0` for none.
/// The Linux backend prints it after the mask in hex (`0x5 (IN|OUT)`).
pub(crate) fn poll_text(m: i64) -> String {
    let names = [
        (EPOLLIN, "IN"),
        (0x2, "PRI"),
        (EPOLLOUT, "OUT"),
        (EPOLLERR, "ERR"),
        (EPOLLHUP, "HUP"),
        (POLLNVAL, "NVAL"),
        (EPOLLRDNORM, "RDNORM"),
        (0x80, "RDBAND"),
        (EPOLLWRNORM, "WRNORM"),
        (0x200, "WRBAND"),
        (EPOLLRDHUP, "RDHUP"),
    ];
    let v: Vec<&str> = names
        .iter()
        .filter(|(b, _)| m & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if v.is_empty() {
        "0".into()
    } else {
        v.join("|")
    }
}

/// The send/receive flags the runner honours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MsgFlags {
    pub(crate) dontwait: bool,
    pub(crate) more: bool,
    pub(crate) peek: bool,
}

/// Send/receive flags: MSG_DONTWAIT, MSG_MORE, MSG_PEEK (and MSG_NOSIGNAL, which
/// changes nothing); 0 or `...` is none, anything else is unsupported.
pub(crate) fn msg_flags(sc: &Syscall, a: Option<&Expr>) -> R<MsgFlags> {
    let mut out = MsgFlags::default();
    let Some(a) = a else {
        return Ok(out);
    };
    if a.as_int() == Some(0) || matches!(a.kind, ExprKind::Ellipsis) {
        return Ok(out);
    }
    let words = a
        .or_words()
        .ok_or_else(|| Stop::Unsupported(format!("{}() flags {:?}", sc.name, a.kind)))?;
    for w in words {
        match w {
            "MSG_DONTWAIT" => out.dontwait = true,
            "MSG_MORE" => out.more = true,
            "MSG_PEEK" => out.peek = true,
            // ember raises no signals: MSG_NOSIGNAL changes nothing.
            "MSG_NOSIGNAL" => {}
            other => return unsup(format!("{}() flag {other}", sc.name)),
        }
    }
    Ok(out)
}

/// Is this argument `NULL` (or 0 where a buffer goes)?
pub(crate) fn is_null(a: Option<&Expr>) -> bool {
    a.is_some_and(|a| a.as_word() == Some("NULL"))
}

/// The total length of an iovec array `[{..., n}, ...]` (or `[{iov_base=...,
/// iov_len=n}]`); the buffers must be `...`.
pub(crate) fn iovec_len(a: Option<&Expr>) -> R<usize> {
    let Some(items) = a.and_then(|a| a.as_array()) else {
        return unsup("an iovec that is not an array");
    };
    let mut total = 0usize;
    for it in items {
        let Some(parts) = it.as_struct() else {
            return unsup("an iovec entry that is not a struct");
        };
        let (base, len) = match parts {
            [b, l] if b.assign_name().is_none() => (b, l),
            _ => match (it.field("iov_base"), it.field("iov_len")) {
                (Some(b), Some(l)) => (b, l),
                _ => return unsup("an iovec entry of another form"),
            },
        };
        if !matches!(base.kind, ExprKind::Ellipsis) {
            return unsup(format!("an iovec buffer {:?}", base.kind));
        }
        let n = eval(len)?.ok_or_else(|| Stop::Unsupported("an iovec length of ...".into()))?;
        total = total.saturating_add(n.max(0) as usize);
    }
    Ok(total)
}

/// The data length of a `struct msghdr` argument (argument 1 of sendmsg/recvmsg):
/// `msg_name` must be `...`, `msg_iov` gives the buffers, `msg_flags` must be 0 or
/// `...`; control data is beyond the runner.
pub(crate) fn msghdr_len(sc: &Syscall) -> R<usize> {
    let Some(m) = sc.args.get(1).filter(|m| m.as_struct().is_some()) else {
        return unsup(format!("{}() without a msghdr", sc.name));
    };
    for item in m.as_struct().unwrap_or_default() {
        match item.assign_name() {
            Some("msg_name" | "msg_iov") => {}
            Some("msg_flags") => {
                let v = m.field("msg_flags").map(eval).transpose()?.flatten();
                if v.is_some_and(|v| v != 0) {
                    return unsup(format!("{}() msg_flags {v:?}", sc.name));
                }
            }
            other => return unsup(format!("{}() msghdr field {other:?}", sc.name)),
        }
    }
    if m.field("msg_name")
        .is_some_and(|n| !matches!(n.kind, ExprKind::Ellipsis))
    {
        return unsup(format!("{}() with a msg_name", sc.name));
    }
    iovec_len(m.field("msg_iov"))
}

/// Buffers are `...` (zeros written, contents read not checked); a written buffer
/// (`NULL` for EFAULT, a string) is beyond this runner.
pub(crate) fn buffer_is_ellipsis(sc: &Syscall) -> R<()> {
    match sc.args.get(1).map(|a| &a.kind) {
        None | Some(ExprKind::Ellipsis) => Ok(()),
        Some(k) => unsup(format!("{}() with a buffer argument {k:?}", sc.name)),
    }
}

pub(crate) fn arg_int(sc: &Syscall, i: usize) -> R<Option<i64>> {
    match sc.args.get(i) {
        None => Ok(None),
        Some(e) => eval(e),
    }
}

/// The value of an integer expression; `None` for `...`.
pub(crate) fn eval(e: &Expr) -> R<Option<i64>> {
    Ok(match &e.kind {
        ExprKind::Ellipsis => None,
        ExprKind::Int(v) => Some(*v),
        ExprKind::Word(w) => Some(constant(w)?),
        ExprKind::BitOr(a, b) => match (eval(a)?, eval(b)?) {
            (Some(a), Some(b)) => Some(a | b),
            _ => None,
        },
        other => return unsup(format!("expression {other:?}")),
    })
}

pub(crate) fn constant(w: &str) -> R<i64> {
    Ok(match w {
        "O_RDONLY" => 0,
        "O_WRONLY" => 1,
        "O_RDWR" => 2,
        "O_NONBLOCK" => O_NONBLOCK,
        "F_GETFL" => 3,
        "F_SETFL" => 4,
        "SOL_SOCKET" => 1,
        "SOL_IP" | "IPPROTO_IP" => 0,
        "IPPROTO_TCP" | "SOL_TCP" => 6,
        "AF_INET" => 2,
        "SOCK_STREAM" => 1,
        "SHUT_RD" => 0,
        "SHUT_WR" => 1,
        "SHUT_RDWR" => 2,
        "MSG_DONTWAIT" => 0x40,
        "MSG_MORE" => 0x8000,
        "MSG_NOSIGNAL" => 0x4000,
        "SOCK_NONBLOCK" => O_NONBLOCK,
        "NULL" => 0,
        "EPOLLIN" | "POLLIN" => EPOLLIN,
        "EPOLLPRI" | "POLLPRI" => 0x2,
        "EPOLLOUT" | "POLLOUT" => EPOLLOUT,
        "EPOLLERR" | "POLLERR" => EPOLLERR,
        "EPOLLHUP" | "POLLHUP" => EPOLLHUP,
        "POLLNVAL" => POLLNVAL,
        "EPOLLRDNORM" | "POLLRDNORM" => EPOLLRDNORM,
        "EPOLLWRNORM" | "POLLWRNORM" => EPOLLWRNORM,
        "EPOLLRDHUP" | "POLLRDHUP" => EPOLLRDHUP,
        "EPOLLONESHOT" => EPOLLONESHOT,
        "EPOLLET" => EPOLLET,
        "EPOLLEXCLUSIVE" => 1 << 28,
        "EPOLL_CLOEXEC" => EPOLL_CLOEXEC,
        "EPOLL_CTL_ADD" => 1,
        "EPOLL_CTL_DEL" => 2,
        "EPOLL_CTL_MOD" => 3,
        "SIOCINQ" | "FIONREAD" => 0x541b,
        "SIOCOUTQ" | "TIOCOUTQ" => 0x5411,
        "SIOCOUTQNSD" => 0x894b,
        _ => return unsup(format!("constant {w}")),
    })
}

pub(crate) fn errno_of(e: &std::io::Error) -> &'static str {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::WouldBlock => "EAGAIN",
        K::ConnectionRefused => "ECONNREFUSED",
        K::ConnectionReset => "ECONNRESET",
        K::TimedOut => "ETIMEDOUT",
        K::ConnectionAborted => "ECONNABORTED",
        K::HostUnreachable => "EHOSTUNREACH",
        K::NotConnected => "ENOTCONN",
        K::BrokenPipe => "EPIPE",
        K::InvalidInput => "EINVAL",
        K::AddrInUse => "EADDRINUSE",
        K::AddrNotAvailable => "EADDRNOTAVAIL",
        K::NetworkUnreachable => "ENETUNREACH",
        _ => "EIO",
    }
}

/// The name Linux's errno has when it has two: EWOULDBLOCK is EAGAIN (11),
/// EDEADLOCK is EDEADLK (35), ENOTSUP is EOPNOTSUPP (95) (asm-generic/errno*.h);
/// scripts write either.
pub(crate) fn errno_canonical(name: &str) -> &str {
    match name {
        "EWOULDBLOCK" => "EAGAIN",
        "EDEADLOCK" => "EDEADLK",
        "ENOTSUP" => "EOPNOTSUPP",
        other => other,
    }
}

pub(crate) fn errno_number(name: &str) -> i64 {
    match errno_canonical(name) {
        "EIO" => 5,
        "EBADF" => 9,
        "EAGAIN" => 11,
        "EDEADLK" => 35,
        "EOPNOTSUPP" => 95,
        "EINVAL" => 22,
        "EPIPE" => 32,
        "EFAULT" => 14,
        "EEXIST" => 17,
        "ENOENT" => 2,
        "EADDRINUSE" => 98,
        "EADDRNOTAVAIL" => 99,
        "ENETUNREACH" => 101,
        "ECONNABORTED" => 103,
        "ECONNRESET" => 104,
        "EISCONN" => 106,
        "ENOTCONN" => 107,
        "ETIMEDOUT" => 110,
        "ECONNREFUSED" => 111,
        "EHOSTUNREACH" => 113,
        "EALREADY" => 114,
        "EINPROGRESS" => 115,
        _ => -1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::check_ret;
    use crate::script::Action;

    fn syscall(line: &str) -> Syscall {
        let s = crate::script::parse(line).expect("parses");
        match &s.events[0].action {
            Action::Syscall(sc) => sc.clone(),
            a => panic!("{a:?}"),
        }
    }

    /// EWOULDBLOCK, EDEADLOCK and ENOTSUP are other names of EAGAIN, EDEADLK and
    /// EOPNOTSUPP: a script writing either matches.
    #[test]
    fn errno_aliases_match() {
        for (alias, name, n) in [
            ("EWOULDBLOCK", "EAGAIN", 11),
            ("EDEADLOCK", "EDEADLK", 35),
            ("ENOTSUP", "EOPNOTSUPP", 95),
        ] {
            assert_eq!(errno_canonical(alias), name);
            assert_eq!((errno_number(alias), errno_number(name)), (n, n));
        }
        let sc = syscall("0 read(3, ..., 1) = -1 EWOULDBLOCK (Resource temporarily unavailable)\n");
        assert!(check_ret(1, &sc, Err("EAGAIN")).is_ok());
        assert!(check_ret(1, &sc, Err("EINVAL")).is_err());
        assert!(check_ret(1, &sc, Ok(0)).is_err());
        let sc = syscall("0 read(3, ..., 1) = -1 EAGAIN (Resource temporarily unavailable)\n");
        assert!(check_ret(1, &sc, Err("EAGAIN")).is_ok());
    }

    /// MSG_PEEK is a receive flag the runner honours, alone or with others.
    #[test]
    fn msg_peek_flag() {
        let sc = syscall("0 recv(4, ..., 10, MSG_PEEK|MSG_DONTWAIT) = 1\n");
        let f = msg_flags(&sc, sc.args.get(3)).expect("supported");
        assert_eq!(
            f,
            MsgFlags {
                dontwait: true,
                more: false,
                peek: true
            }
        );
        let sc = syscall("0 recv(4, ..., 10, MSG_PEEK) = 1\n");
        assert!(msg_flags(&sc, sc.args.get(3)).expect("supported").peek);
        let sc = syscall("0 recv(4, ..., 10, MSG_TRUNC) = 1\n");
        assert!(msg_flags(&sc, sc.args.get(3)).is_err());
    }
}
