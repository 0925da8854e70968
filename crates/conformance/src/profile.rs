//! The linux profile: ember tunables that make ember answer as Linux, the shell lines of
//! the corpus mapped onto them, and the features a script needs that ember lacks.
//!
//! Design. Three pieces, all pure functions over [`Params`] and the script AST:
//!
//! * [`linux_profile`] starts from ember's defaults, applies the corpus's `defaults.sh`
//!   (kept here as the table [`DEFAULTS_SH`]; a test checks it against the file when the
//!   corpus is present) and then the Linux constants the RFCs leave open (initial RTO
//!   1 s, minimum RTO 200 ms, maximum RTO 120 s, delayed ACK 40 ms, initial window 10,
//!   Nagle at the MSS, no loopback fusion, ...).
//! * [`apply_shell`] interprets one back-quoted command of a script. The text is split
//!   into simple statements (backslash-newline joined, `#` comments dropped, split at
//!   newlines, `;`, `&&` and `||`; a `|` pipeline stays one statement), each statement is
//!   tokenised with shell quoting, `$((...))` arithmetic is evaluated and redirections to
//!   `/dev/null` are dropped. Every statement gets a [`ShellOutcome`]: `Applied` (with the
//!   tunables it changed), `Ignored` (harmless for ember, with why) or `Unsupported` (it
//!   switches on something ember lacks, or a value ember cannot take). The outcome of a
//!   whole command is the worst of its statements. A sysctl is refused as a whole: on
//!   `Unsupported` nothing of that statement changes. Sysctls are looked up by their
//!   short name (`tcp_rmem`), whether written `net.ipv4.tcp_rmem`, `net/ipv4/tcp_rmem`
//!   or `/proc/sys/net/ipv4/tcp_rmem` (the last through `set_sysctls.py` or `echo >`).
//!   Unknown commands and sysctls are `Unsupported` with a reason starting `unknown`
//!   ([`ShellOutcome::is_unknown`]), so new corpus lines show up in the tests.
//! * [`unsupported_features`] walks a parsed script and lists, with line numbers, why it
//!   cannot run on ember at all: IPv6, TCP Fast Open, MSG_ZEROCOPY, SO_TIMESTAMPING,
//!   TCP_MD5SIG, socket options, flags, ioctls and system calls ember's socket API
//!   (`ember-runtime`'s `TcpStream`/`TcpListener`) does not have, ECN marks or flags
//!   expected from ember, and every `Unsupported` shell statement.
//!
//! The sysctl table (Linux name → ember tunable or outcome) is in [`apply_sysctl`]; the
//! Linux behaviour ember has no tunable for is listed on [`linux_profile`].

use ember_core::params::Params;

use crate::script::{Action, Direction, Ecn, Expr, ExprKind, PacketBody, Script, TcpOption};

/// The corpus's `common/defaults.sh`, as `(sysctl, value)` in file order (the values
/// with `$((...))` already evaluated). Besides these it flushes the TCP metrics cache
/// (`ip tcp_metrics flush all`) and installs a `pfifo` qdisc on `tun0`, both of which
/// are nothing to ember.
pub const DEFAULTS_SH: &[(&str, &str)] = &[
    ("tcp_rmem", "4096 540000 15728640"),
    ("tcp_wmem", "4096 262144 4194304"),
    ("tcp_timestamps", "1"),
    ("tcp_syn_retries", "5"),
    ("tcp_synack_retries", "5"),
    ("tcp_frto", "2"),
    ("tcp_sack", "1"),
    ("tcp_dsack", "1"),
    ("tcp_fack", "0"),
    ("tcp_reordering", "3"),
    ("tcp_congestion_control", "cubic"),
    ("tcp_slow_start_after_idle", "0"),
    ("tcp_early_retrans", "4"),
    ("tcp_recovery", "1"),
    ("tcp_tso_win_divisor", "3"),
    ("tcp_ecn", "0"),
    ("tcp_ecn_option", "2"),
    ("tcp_pacing_ss_ratio", "200"),
    ("tcp_pacing_ca_ratio", "120"),
    ("tcp_notsent_lowat", "4294967295"),
    ("tcp_fastopen", "0x70403"),
    ("tcp_fastopen_key", "a1a1a1a1-b2b2b2b2-c3c3c3c3-d4d4d4d4"),
    ("tcp_syncookies", "1"),
];

/// Linux's maximum retransmission timeout (`TCP_RTO_MAX`), in ms.
const LINUX_RTO_MAX_MS: u32 = 120_000;

/// The ember [`Params`] that make ember answer as Linux with the corpus's
/// `defaults.sh` applied, where the RFCs leave a choice.
///
/// Set here: initial window 10 segments; initial RTO 1 s, minimum 200 ms, maximum
/// 120 s; delayed ACK 40 ms (Linux's minimum ATO; ember's quick-ACK budget of 16
/// segments at start and after idle is built in); receive buffer 540000 and send buffer
/// 262144 bytes (`tcp_rmem`/`tcp_wmem` defaults) with a 15 MiB cap; timestamps, SACK
/// (offered on active opens) and window scaling on; cubic; no slow start after idle;
/// DupThresh 3 (`tcp_reordering`); SYN give-up after 63 s (`tcp_syn_retries=5` with a
/// 1 s RTO doubling), data give-up after 924.6 s (`tcp_retries2=15` with a 200 ms RTO
/// capped at 120 s); Nagle holds sub-MSS segments only (limit 65535, so min(limit,
/// MSS) is the MSS); minimum MSS 48 (`tcp_min_snd_mss`); accept queue cap 4096
/// (`somaxconn`); ephemeral ports 32768..60999 (`ip_local_port_range`); RSTs not rate
/// limited (Linux limits only ICMP); no loopback fusion (Linux has none).
///
/// Linux behaviour ember has no tunable for (left as ember does it):
/// * Linux's adaptive delayed-ACK timeout (ATO grows from 40 ms with the RTT; ember's
///   timer is fixed) and its pingpong (interactive) mode;
/// * `tcp_rmem`/`tcp_wmem` minimums and receive-buffer autotuning; Linux's initial
///   receive window sizing (`tcp_adv_win_scale`, the 10-MSS initial rwnd) and the window
///   scale it derives from the buffer;
/// * `tcp_synack_retries` (ember's passive side gives up after the same interval as the
///   active side) and F-RTO (`tcp_frto`): ember has neither (RACK and TLP,
///   `tcp_recovery` and `tcp_early_retrans`, map to ember's `tcp_recovery`/`tcp_tlp`);
/// * TSO sizing and deferral (`tcp_tso_win_divisor`, `tcp_min_tso_segs`, autosizing),
///   pacing (`tcp_pacing_*_ratio`, fq), TCP small queues;
/// * ECN and AccECN (`tcp_ecn`, `tcp_ecn_option`), TCP Fast Open (`tcp_fastopen*`),
///   SYN cookies (`tcp_syncookies`), `TCP_NOTSENT_LOWAT` (`tcp_notsent_lowat`), MTU
///   probing (`tcp_mtu_probing`), the TCP metrics cache;
/// * the ICMP rate limit's exact form (Linux: a global 1000/s bucket with burst 50 and a
///   per-destination 1 s limit for some types; ember: one token bucket).
pub fn linux_profile() -> Params {
    let mut p = Params::default();
    for (name, value) in DEFAULTS_SH {
        // Every entry is Applied or Ignored in a defaults context (tested).
        let _ = apply_sysctl(name, value, &mut p, Context::DefaultsSh);
    }
    p.set_many(&[
        ("do_tcp_fusion", "0"),
        ("tcp_init_cwnd", "10"),
        ("tcp_rexmit_interval_initial", "1000"),
        ("tcp_rexmit_interval_min", "200"),
        ("tcp_rexmit_interval_max", "120000"),
        ("tcp_rexmit_min_on_variance", "1"),
        ("tcp_deferred_ack_interval", "40"),
        ("tcp_ip_abort_interval", "924600"),
        ("tcp_naglim_def", "65535"),
        ("tcp_push_segs", "2"),
        ("tcp_mss_min", "48"),
        ("tcp_mss_def_ipv4", "536"),
        ("tcp_conn_req_max_q", "4096"),
        ("tcp_smallest_anon_port", "32768"),
        ("tcp_largest_anon_port", "60999"),
        ("tcp_rst_sent_rate", "0"),
        ("tcp_sack_permitted", "2"),
        ("tcp_wscale_always", "2"),
        ("tcp_tstamp_always", "2"),
        ("tcp_time_wait_interval", "60000"),
        ("tcp_fin_wait_2_flush_interval", "60000"),
        ("tcp_cork_interval", "200"),
        ("tcp_invalid_ratelimit", "500"),
        ("ip_def_ttl", "64"),
    ])
    .expect("the linux profile is within ember's ranges");
    // tcp_syn_retries=5 from defaults.sh, computed against the RTO set above.
    p.tcp_ip_abort_cinterval = retries_timeout_ms(5, p.tcp_rexmit_interval_initial);
    p
}

/// Linux's time until `retries` retransmissions have timed out, starting from an RTO
/// of `base_ms` that doubles up to 120 s.
fn retries_timeout_ms(retries: u32, base_ms: u32) -> u32 {
    let mut total: u64 = 0;
    let mut rto = u64::from(base_ms.max(1));
    for _ in 0..=retries {
        total += rto;
        rto = (rto * 2).min(u64::from(LINUX_RTO_MAX_MS));
    }
    total.min(u64::from(u32::MAX)) as u32
}

/// One tunable a shell statement changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The ember tunable.
    pub tunable: &'static str,
    /// Its new value, as text.
    pub value: String,
    /// What set it (`net.ipv4.tcp_rmem`, `ethtool`, ...) and, where the mapping is not
    /// exact, how it differs.
    pub source: String,
}

/// What a shell command or statement means for ember.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShellOutcome {
    /// Ember tunables were set (to the listed values; a value may equal the old one).
    Applied(Vec<Change>),
    /// Harmless for ember; the string says why.
    Ignored(String),
    /// It needs something ember lacks; the string says what.
    Unsupported(String),
}

impl ShellOutcome {
    /// An `Unsupported` outcome for a command or sysctl this module does not know (a
    /// gap in this module, not a verdict on ember).
    pub fn is_unknown(&self) -> bool {
        matches!(self, ShellOutcome::Unsupported(r) if r.starts_with("unknown"))
    }

    fn rank(&self) -> u8 {
        match self {
            ShellOutcome::Ignored(_) => 0,
            ShellOutcome::Applied(_) => 1,
            ShellOutcome::Unsupported(_) => 2,
        }
    }
}

fn ignored(why: impl Into<String>) -> ShellOutcome {
    ShellOutcome::Ignored(why.into())
}

fn unsupported(why: impl Into<String>) -> ShellOutcome {
    ShellOutcome::Unsupported(why.into())
}

/// Where a sysctl is being set: the corpus defaults, or a script's own line (which
/// switches a feature on deliberately).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    DefaultsSh,
    Script,
}

/// Interprets one back-quoted shell command (possibly several lines) against `params`.
/// Statements are applied in order; the result is the worst outcome (Unsupported, then
/// Applied with every change, then Ignored with every reason).
pub fn apply_shell(cmd: &str, params: &mut Params) -> ShellOutcome {
    combine(apply_shell_each(cmd, params).into_iter().map(|(_, o)| o))
}

/// Like [`apply_shell`], with the outcome of each simple statement.
pub fn apply_shell_each(cmd: &str, params: &mut Params) -> Vec<(String, ShellOutcome)> {
    shell_statements(cmd)
        .into_iter()
        .map(|s| {
            let o = apply_statement(&s, params);
            (s, o)
        })
        .collect()
}

fn combine(outcomes: impl Iterator<Item = ShellOutcome>) -> ShellOutcome {
    let mut changes = Vec::new();
    let mut reasons: Vec<String> = Vec::new();
    let mut worst: Option<ShellOutcome> = None;
    for o in outcomes {
        match &o {
            ShellOutcome::Applied(c) => changes.extend(c.iter().cloned()),
            ShellOutcome::Ignored(r) => {
                if !reasons.contains(r) {
                    reasons.push(r.clone());
                }
            }
            ShellOutcome::Unsupported(_) => {}
        }
        if worst.as_ref().is_none_or(|w| o.rank() > w.rank()) {
            worst = Some(o);
        }
    }
    match worst {
        None => ignored("empty command"),
        Some(ShellOutcome::Unsupported(r)) => ShellOutcome::Unsupported(r),
        Some(ShellOutcome::Applied(_)) => ShellOutcome::Applied(changes),
        Some(ShellOutcome::Ignored(_)) => ShellOutcome::Ignored(reasons.join("; ")),
    }
}

/// Splits a command's text into simple statements: backslash-newline continuations
/// joined, `#` comments dropped, split at newlines, `;`, `&&` and `||` outside quotes.
pub fn shell_statements(cmd: &str) -> Vec<String> {
    let joined = cmd.replace("\\\r\n", " ").replace("\\\n", " ");
    let mut out = Vec::new();
    for line in joined.lines() {
        let mut cur = String::new();
        let mut quote: Option<char> = None;
        let mut chars = line.chars().peekable();
        let mut prev_space = true;
        while let Some(c) = chars.next() {
            if let Some(q) = quote {
                cur.push(c);
                if c == q {
                    quote = None;
                }
                prev_space = false;
                continue;
            }
            match c {
                '"' | '\'' => {
                    quote = Some(c);
                    cur.push(c);
                }
                '#' if prev_space => break,
                ';' => push_stmt(&mut out, &mut cur),
                '&' if chars.peek() == Some(&'&') => {
                    chars.next();
                    push_stmt(&mut out, &mut cur);
                }
                '|' if chars.peek() == Some(&'|') => {
                    chars.next();
                    push_stmt(&mut out, &mut cur);
                }
                _ => cur.push(c),
            }
            prev_space = c.is_whitespace();
        }
        push_stmt(&mut out, &mut cur);
    }
    out
}

fn push_stmt(out: &mut Vec<String>, cur: &mut String) {
    let s = cur.trim();
    if !s.is_empty() {
        out.push(s.to_string());
    }
    cur.clear();
}

/// Shell words of one statement: quotes removed, `$((...))` evaluated.
fn words(stmt: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = stmt.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '$') | (None, '$') if chars.peek() == Some(&'(') => {
                // $(( expr ))
                let mut depth = 0usize;
                let mut expr = String::new();
                for d in chars.by_ref() {
                    match d {
                        '(' => {
                            depth += 1;
                            if depth > 2 {
                                expr.push(d);
                            }
                        }
                        ')' => {
                            depth -= 1;
                            if depth >= 2 {
                                expr.push(d);
                            }
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => expr.push(d),
                    }
                }
                let v = eval_arith(&expr).ok_or_else(|| format!("bad arithmetic $(({expr}))"))?;
                cur.push_str(&v.to_string());
                in_word = true;
            }
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err("unterminated quote".into());
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

/// Evaluates shell arithmetic: integers, `+ - * / %`, unary minus, parentheses.
fn eval_arith(s: &str) -> Option<i64> {
    struct P<'a> {
        b: &'a [u8],
        i: usize,
    }
    impl P<'_> {
        fn ws(&mut self) {
            while self.b.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
                self.i += 1;
            }
        }
        fn expr(&mut self, depth: u32) -> Option<i64> {
            let mut v = self.term(depth)?;
            loop {
                self.ws();
                match self.b.get(self.i) {
                    Some(b'+') => {
                        self.i += 1;
                        v = v.checked_add(self.term(depth)?)?;
                    }
                    Some(b'-') => {
                        self.i += 1;
                        v = v.checked_sub(self.term(depth)?)?;
                    }
                    _ => return Some(v),
                }
            }
        }
        fn term(&mut self, depth: u32) -> Option<i64> {
            let mut v = self.atom(depth)?;
            loop {
                self.ws();
                match self.b.get(self.i) {
                    Some(b'*') => {
                        self.i += 1;
                        v = v.checked_mul(self.atom(depth)?)?;
                    }
                    Some(b'/') => {
                        self.i += 1;
                        v = v.checked_div(self.atom(depth)?)?;
                    }
                    Some(b'%') => {
                        self.i += 1;
                        v = v.checked_rem(self.atom(depth)?)?;
                    }
                    _ => return Some(v),
                }
            }
        }
        fn atom(&mut self, depth: u32) -> Option<i64> {
            if depth > 64 {
                return None;
            }
            self.ws();
            match self.b.get(self.i)? {
                b'(' => {
                    self.i += 1;
                    let v = self.expr(depth + 1)?;
                    self.ws();
                    (self.b.get(self.i) == Some(&b')')).then(|| self.i += 1)?;
                    Some(v)
                }
                b'-' => {
                    self.i += 1;
                    self.atom(depth + 1)?.checked_neg()
                }
                b'0'..=b'9' => {
                    let start = self.i;
                    while self
                        .b
                        .get(self.i)
                        .is_some_and(|c| c.is_ascii_alphanumeric())
                    {
                        self.i += 1;
                    }
                    parse_int(std::str::from_utf8(&self.b[start..self.i]).ok()?)
                }
                _ => None,
            }
        }
    }
    let mut p = P {
        b: s.as_bytes(),
        i: 0,
    };
    let v = p.expr(0)?;
    p.ws();
    (p.i == s.len()).then_some(v)
}

/// A decimal or `0x` hexadecimal integer.
fn parse_int(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// Drops redirections (`> /dev/null`, `2>&1`, `&> /dev/null`, ...) and returns the
/// remaining words with the target of a `>` that is not `/dev/null`, if any.
fn strip_redirections(ws: Vec<String>) -> (Vec<String>, Option<String>) {
    let mut out = Vec::new();
    let mut target = None;
    let mut it = ws.into_iter();
    while let Some(w) = it.next() {
        let rest = w
            .strip_prefix("&>")
            .or_else(|| w.strip_prefix("2>"))
            .or_else(|| w.strip_prefix("1>"))
            .or_else(|| w.strip_prefix(">>"))
            .or_else(|| w.strip_prefix('>'));
        match rest {
            Some(r) => {
                let t = if r.is_empty() {
                    it.next().unwrap_or_default()
                } else {
                    r.to_string()
                };
                if t != "/dev/null" && !t.starts_with('&') {
                    target = Some(t);
                }
            }
            None => out.push(w),
        }
    }
    (out, target)
}

fn basename(w: &str) -> &str {
    w.rsplit('/').next().unwrap_or(w)
}

/// One simple statement (a pipeline counts as one).
fn apply_statement(stmt: &str, params: &mut Params) -> ShellOutcome {
    let pipeline: Vec<&str> = stmt.split('|').map(str::trim).collect();
    if pipeline.len() > 1 {
        return apply_pipeline(stmt, &pipeline);
    }
    let ws = match words(stmt) {
        Ok(w) => w,
        Err(e) => return unsupported(format!("unknown shell syntax ({e}): {stmt}")),
    };
    let (ws, target) = strip_redirections(ws);
    let Some(first) = ws.first() else {
        return ignored("empty statement");
    };
    let args = &ws[1..];
    match basename(first) {
        "defaults.sh" => apply_defaults_sh(params),
        "sysctl" => apply_sysctl_args(args, params, |a| {
            let (n, v) = a.split_once('=')?;
            Some((n.to_string(), v.to_string()))
        }),
        "set_sysctls.py" => apply_sysctl_args(args, params, |a| {
            let (n, v) = a.split_once('=')?;
            Some((n.to_string(), v.to_string()))
        }),
        b if b.starts_with("sysctl_restore") => ignored(
            "restores the sysctls set_sysctls.py changed; each script starts from a fresh linux profile",
        ),
        "echo" => match target {
            Some(t) => apply_write(&t, &args.join(" "), params),
            None => ignored("echo prints only"),
        },
        "ip" => apply_ip(args, params),
        "tc" => apply_tc(args),
        "ethtool" => apply_ethtool(args, params),
        "nstat" => ignored("nstat with no check only updates its counter history"),
        "sleep" => ignored("sleep only waits"),
        "cat" => ignored("cat only reads"),
        "true" | ":" => ignored("no-op"),
        "rm" | "dd" | "touch" | "mkdir" | "cp" => ignored(
            "a file operation on the host (test data for sendfile and the like), not stack configuration",
        ),
        other => unsupported(format!("unknown command `{other}`: {stmt}")),
    }
}

fn apply_pipeline(stmt: &str, stages: &[&str]) -> ShellOutcome {
    let first = stages[0].split_whitespace().next().map(basename);
    let later_grep = stages[1..].iter().any(|s| s.starts_with("grep"));
    match first {
        Some("nstat") if later_grep => {
            let counter = stages[1..]
                .iter()
                .flat_map(|s| s.split_whitespace())
                .find(|w| w.starts_with("Tcp") || w.starts_with("Ip"))
                .unwrap_or("a counter");
            unsupported(format!(
                "asserts that Linux's SNMP/netstat counter {counter} is nonzero (nstat); ember has no such counters"
            ))
        }
        Some("grep") if stmt.contains("/proc/net/tcp") => {
            unsupported("inspects Linux's socket table in /proc/net/tcp; ember has no such table")
        }
        _ => unsupported(format!("unknown pipeline: {stmt}")),
    }
}

fn apply_defaults_sh(params: &mut Params) -> ShellOutcome {
    let mut changes = Vec::new();
    for (name, value) in DEFAULTS_SH {
        if let ShellOutcome::Applied(c) = apply_sysctl(name, value, params, Context::DefaultsSh) {
            changes.extend(c);
        }
    }
    ShellOutcome::Applied(changes)
}

fn apply_sysctl_args(
    args: &[String],
    params: &mut Params,
    split: impl Fn(&str) -> Option<(String, String)>,
) -> ShellOutcome {
    let mut outcomes = Vec::new();
    for a in args {
        if a.starts_with('-') {
            continue; // -q, -e, -w
        }
        match split(a) {
            Some((n, v)) => outcomes.push(apply_sysctl_path(&n, &v, params)),
            None => outcomes.push(ignored(format!("reads {a}"))),
        }
    }
    combine(outcomes.into_iter())
}

/// `echo value > path`.
fn apply_write(path: &str, value: &str, params: &mut Params) -> ShellOutcome {
    if path.starts_with("/proc/sys/") {
        return apply_sysctl_path(path, value, params);
    }
    if let Some(p) = path.strip_prefix("/sys/module/tcp_cubic/parameters/") {
        return match (p, value.trim()) {
            ("hystart_detect", "3") => ignored(
                "hystart_detect=3 (ACK train and delay) is Linux's default; ember's cubic runs HyStart++ with the ACK-train extension",
            ),
            _ => unsupported(format!(
                "tcp_cubic module parameter {p}={value}: ember's cubic has no such knob"
            )),
        };
    }
    unsupported(format!("unknown write to {path}"))
}

/// A sysctl given by path or dotted name; only `net.ipv4.*` is known.
fn apply_sysctl_path(name: &str, value: &str, params: &mut Params) -> ShellOutcome {
    let n = name.trim_start_matches("/proc/sys/").replace('/', ".");
    match n.strip_prefix("net.ipv4.") {
        Some(short) => apply_sysctl(short, value, params, Context::Script),
        None => unsupported(format!("unknown sysctl {n}={value}")),
    }
}

fn change(tunable: &'static str, value: impl ToString, source: impl Into<String>) -> Change {
    Change {
        tunable,
        value: value.to_string(),
        source: source.into(),
    }
}

/// Sets `changes` on `params` together; a value out of ember's range is Unsupported.
fn set_all(params: &mut Params, changes: Vec<Change>) -> ShellOutcome {
    let pairs: Vec<(&str, &str)> = changes
        .iter()
        .map(|c| (c.tunable, c.value.as_str()))
        .collect();
    match params.set_many(&pairs) {
        Ok(()) => ShellOutcome::Applied(changes),
        Err(e) => unsupported(format!("ember cannot take it: {e}")),
    }
}

/// One `net.ipv4` sysctl by its short name. The table:
///
/// | sysctl | ember |
/// |---|---|
/// | `tcp_rmem` "min def max" | `tcp_recv_hiwat`=def, `tcp_max_buf` raised to max (min: no knob) |
/// | `tcp_wmem` "min def max" | `tcp_xmit_hiwat`=def, `tcp_max_buf` raised to max |
/// | `tcp_timestamps` 0/1/2 | `tcp_tstamp_always` 0/2/2 (0: neither offered nor accepted, as Linux) |
/// | `tcp_sack` 0/1 | `tcp_sack_permitted` 0/2 |
/// | `tcp_window_scaling` 0/1 | `tcp_wscale_always` 0/2 (0: neither offered nor accepted, as Linux) |
/// | `tcp_syn_retries` N | `tcp_ip_abort_cinterval` = Linux's give-up time for N |
/// | `tcp_retries2` N | `tcp_ip_abort_interval` = Linux's give-up time for N |
/// | `tcp_reordering` N | `tcp_dupack_fast_retransmit` |
/// | `tcp_congestion_control` cubic/reno | `tcp_congestion_control` cubic/newreno; others Unsupported |
/// | `tcp_slow_start_after_idle` | `tcp_slow_start_after_idle` |
/// | `tcp_keepalive_time`/`_intvl`/`_probes` | `tcp_keepalive_interval`/`_intvl` (ms)/`_probes` |
/// | `tcp_fin_timeout` | `tcp_fin_wait_2_flush_interval` (ms) |
/// | `tcp_max_syn_backlog` | `tcp_conn_req_max_q0` |
/// | `ip_default_ttl` | `ip_def_ttl` |
/// | `ip_local_port_range` "lo hi" | `tcp_smallest_anon_port`/`tcp_largest_anon_port` |
/// | `tcp_dsack` 1 | Ignored (ember always sends D-SACK); 0 Unsupported |
/// | `tcp_fack` 0 | Ignored (ember has no FACK); else Unsupported |
/// | `tcp_frto` | 0 Ignored (ember has no F-RTO); defaults.sh's value Ignored (listed as a difference); other Unsupported |
/// | `tcp_recovery` 0/1 | `tcp_recovery` (RACK, RFC 8985 §6); the variant bits 0x2, 0x4 Unsupported |
/// | `tcp_early_retrans` 0-4 | `tcp_tlp` (TLP, RFC 8985 §7): 3, 4 on; 0-2 off (Linux's values without TLP); other Unsupported |
/// | `tcp_synack_retries` 5 | Ignored (no knob); other Unsupported |
/// | `tcp_tso_win_divisor` | Ignored (ember never defers to build TSO frames) |
/// | `tcp_min_tso_segs` | Ignored (ember has no TSO autosizing: bursts are as large as the windows allow) |
/// | `tcp_ecn` 0 | Ignored (ember has no ECN); 1, 2 Unsupported |
/// | `tcp_ecn_option` | Ignored (AccECN option only once ECN is negotiated) |
/// | `tcp_pacing_ss_ratio`/`_ca_ratio` | Ignored (pacing rates; installing fq is what is Unsupported) |
/// | `tcp_notsent_lowat` 4294967295 | Ignored (no limit, as ember); other Unsupported |
/// | `tcp_fastopen` 0 | Ignored; defaults.sh's value Ignored (TFO use is flagged by [`unsupported_features`]); other Unsupported |
/// | `tcp_fastopen_key`/`_cookies`/`_blackhole_timeout_sec` | Ignored (TFO state) |
/// | `tcp_syncookies` 0/1 | Ignored (cookies only on SYN-queue overflow); 2 Unsupported |
/// | `tcp_mtu_probing` 0 | Ignored; else Unsupported |
/// | `tcp_base_mss` | Ignored (used only by MTU probing) |
/// | `tcp_no_metrics_save` | Ignored (ember has no metrics cache) |
/// | anything else | Unsupported ("unknown sysctl") |
fn apply_sysctl(name: &str, value: &str, params: &mut Params, ctx: Context) -> ShellOutcome {
    let src = format!("net.ipv4.{name}={value}");
    let v = value.trim();
    let int = parse_int(v);
    let bad_value = || unsupported(format!("{src}: not a value ember can take"));
    // A sysctl ember has no knob for: `same` values behave as ember does.
    let no_knob = |same: &[i64], default_ok: bool, what: &str| -> ShellOutcome {
        match int {
            Some(n) if same.contains(&n) => ignored(format!("{src}: {what}")),
            Some(_) if default_ok && ctx == Context::DefaultsSh => ignored(format!(
                "{src}: corpus default; {what} (a behaviour difference ember has no knob for)"
            )),
            _ => unsupported(format!("{src}: {what}, so this value cannot be honoured")),
        }
    };
    match name {
        "tcp_rmem" | "tcp_wmem" => {
            let nums: Vec<Option<i64>> = v.split_whitespace().map(parse_int).collect();
            let [Some(_min), Some(def), Some(max)] = nums[..] else {
                return bad_value();
            };
            let (Ok(def), Ok(max)) = (u32::try_from(def), u32::try_from(max)) else {
                return bad_value();
            };
            let buf = if name == "tcp_rmem" {
                "tcp_recv_hiwat"
            } else {
                "tcp_xmit_hiwat"
            };
            let cap = max
                .max(def)
                .max(params.tcp_max_buf)
                .max(params.tcp_recv_hiwat)
                .max(params.tcp_xmit_hiwat);
            let mut cs = vec![change(buf, def, src.clone())];
            if cap != params.tcp_max_buf {
                cs.push(change("tcp_max_buf", cap, format!("{src} (max)")));
            }
            set_all(params, cs)
        }
        // Linux's 0 neither offers the option nor takes it from a peer's SYN
        // (tcp_parse_options reads it on a SYN only while the sysctl is on): ember's 0.
        // 2 (Linux: timestamps without the random per-connection offset) is taken as
        // 1, as before: ember keeps its offset.
        "tcp_timestamps" => match int {
            Some(0) => set_all(params, vec![change("tcp_tstamp_always", 0, src)]),
            Some(1 | 2) => set_all(params, vec![change("tcp_tstamp_always", 2, src)]),
            _ => bad_value(),
        },
        "tcp_sack" => match int {
            Some(0) => set_all(params, vec![change("tcp_sack_permitted", 0, src)]),
            Some(1) => set_all(params, vec![change("tcp_sack_permitted", 2, src)]),
            _ => bad_value(),
        },
        "tcp_window_scaling" => match int {
            Some(0) => set_all(params, vec![change("tcp_wscale_always", 0, src)]),
            Some(1) => set_all(params, vec![change("tcp_wscale_always", 2, src)]),
            _ => bad_value(),
        },
        "tcp_syn_retries" | "tcp_retries2" => {
            let Some(n) = int.and_then(|n| u32::try_from(n).ok()).filter(|&n| n <= 255) else {
                return bad_value();
            };
            let (tunable, base) = if name == "tcp_syn_retries" {
                ("tcp_ip_abort_cinterval", params.tcp_rexmit_interval_initial)
            } else {
                ("tcp_ip_abort_interval", params.tcp_rexmit_interval_min)
            };
            let ms = retries_timeout_ms(n, base);
            set_all(
                params,
                vec![change(
                    tunable,
                    ms,
                    format!("{src} (Linux's give-up time: {n} retransmissions, RTO from {base} ms doubling to 120 s)"),
                )],
            )
        }
        "tcp_reordering" => set_all(params, vec![change("tcp_dupack_fast_retransmit", v, src)]),
        "tcp_congestion_control" => match v {
            "cubic" => set_all(params, vec![change("tcp_congestion_control", "cubic", src)]),
            "reno" => set_all(
                params,
                vec![change("tcp_congestion_control", "newreno", src)],
            ),
            _ => unsupported(format!(
                "{src}: ember has only cubic and newreno congestion control"
            )),
        },
        "tcp_slow_start_after_idle" => {
            set_all(params, vec![change("tcp_slow_start_after_idle", v, src)])
        }
        "tcp_keepalive_time" | "tcp_keepalive_intvl" | "tcp_fin_timeout" => {
            let Some(s) = int.and_then(|n| u32::try_from(n).ok()) else {
                return bad_value();
            };
            let tunable = match name {
                "tcp_keepalive_time" => "tcp_keepalive_interval",
                "tcp_keepalive_intvl" => "tcp_keepalive_intvl",
                _ => "tcp_fin_wait_2_flush_interval",
            };
            set_all(
                params,
                vec![change(tunable, u64::from(s) * 1000, src)],
            )
        }
        "tcp_keepalive_probes" => set_all(params, vec![change("tcp_keepalive_probes", v, src)]),
        "tcp_max_syn_backlog" => set_all(params, vec![change("tcp_conn_req_max_q0", v, src)]),
        "ip_default_ttl" => set_all(params, vec![change("ip_def_ttl", v, src)]),
        "ip_local_port_range" => {
            let nums: Vec<&str> = v.split_whitespace().collect();
            let [lo, hi] = nums[..] else {
                return bad_value();
            };
            set_all(
                params,
                vec![
                    change("tcp_smallest_anon_port", lo, src.clone()),
                    change("tcp_largest_anon_port", hi, src),
                ],
            )
        }
        "tcp_dsack" => no_knob(&[1], false, "ember always sends D-SACK (RFC 2883)"),
        "tcp_fack" => no_knob(&[0], false, "ember has no FACK"),
        "tcp_frto" => no_knob(&[0], true, "ember has no F-RTO (RFC 5682)"),
        "tcp_early_retrans" => match int {
            Some(0..=2) => set_all(params, vec![change("tcp_tlp", 0, src)]),
            Some(3 | 4) => set_all(params, vec![change("tcp_tlp", 1, src)]),
            _ => bad_value(),
        },
        "tcp_recovery" => match int {
            Some(n @ (0 | 1)) => set_all(params, vec![change("tcp_recovery", n, src)]),
            Some(_) => unsupported(format!(
                "{src}: the RACK variants of bits 0x2 (static reordering window) and 0x4 (no DupThresh) are not in ember"
            )),
            None => bad_value(),
        },
        "tcp_synack_retries" => no_knob(
            &[5],
            false,
            "ember has no SYN-ACK retry count (Linux's default 5 is assumed)",
        ),
        "tcp_tso_win_divisor" => ignored(format!(
            "{src}: TSO deferral; ember never defers sending to build larger TSO frames"
        )),
        "tcp_min_tso_segs" => ignored(format!(
            "{src}: the least TSO burst Linux's autosizing may build; ember has no autosizing \
             (it sends what the windows allow at once, and the runner merges same-instant \
             segments into the bursts a script expects)"
        )),
        "tcp_ecn" => no_knob(&[0], false, "ember has no ECN (RFC 3168)"),
        "tcp_ecn_option" => ignored(format!(
            "{src}: the AccECN option is used only once ECN is negotiated (tcp_ecn decides)"
        )),
        "tcp_pacing_ss_ratio" | "tcp_pacing_ca_ratio" => ignored(format!(
            "{src}: pacing rates; Linux paces only under fq or on request, and a script installing fq is flagged"
        )),
        "tcp_notsent_lowat" => no_knob(
            &[4_294_967_295, -1],
            false,
            "ember has no TCP_NOTSENT_LOWAT (no limit, like this value)",
        ),
        "tcp_fastopen" => no_knob(&[0], true, "ember has no TCP Fast Open"),
        "tcp_fastopen_key" | "tcp_fastopen_cookies" | "tcp_fastopen_blackhole_timeout_sec" => {
            ignored(format!(
                "{src}: TCP Fast Open state; scripts that use Fast Open are flagged on their own"
            ))
        }
        "tcp_syncookies" => no_knob(
            &[0, 1],
            false,
            "Linux sends SYN cookies only when the SYN queue overflows; ember has none",
        ),
        "tcp_mtu_probing" => no_knob(&[0], false, "ember has no packetization-layer MTU probing"),
        "tcp_base_mss" => ignored(format!(
            "{src}: the starting MSS of MTU probing, unused while it is off"
        )),
        "tcp_no_metrics_save" => ignored(format!("{src}: ember has no TCP metrics cache")),
        _ => unsupported(format!("unknown sysctl {src}")),
    }
}

fn apply_ip(args: &[String], params: &mut Params) -> ShellOutcome {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["tcp_metrics", ..] => ignored("ember has no TCP metrics cache to flush"),
        ["-6", ..] => {
            ignored("an IPv6 route; ember is IPv4-only and IPv6 scripts are flagged on their own")
        }
        ["route", "change" | "replace" | "add", ..] => {
            let get = |key: &str| {
                a.iter()
                    .position(|w| *w == key)
                    .and_then(|i| a.get(i + 1))
                    .and_then(|w| parse_int(w))
            };
            let mtu = a
                .iter()
                .position(|w| *w == "mtu")
                .and_then(|i| a.get(i + 1..))
                .and_then(|r| r.iter().find(|w| **w != "lock"))
                .and_then(|w| parse_int(w));
            match (get("advmss"), mtu) {
                (None | Some(1460), None | Some(1500)) => {}
                (adv, mtu) => {
                    return unsupported(format!(
                    "a route with advmss {adv:?} / mtu {mtu:?}: ember has no per-route MSS or MTU"
                ))
                }
            }
            match get("initcwnd") {
                Some(n) => set_all(
                    params,
                    vec![change("tcp_init_cwnd", n, "ip route initcwnd")],
                ),
                None => ignored("a route with the tun device's standard MSS and MTU"),
            }
        }
        _ => unsupported(format!("unknown ip command: ip {}", a.join(" "))),
    }
}

fn apply_tc(args: &[String]) -> ShellOutcome {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["qdisc", "del" | "delete", ..] => ignored("removes a qdisc; ember has none"),
        ["qdisc", "add" | "replace" | "change", rest @ ..] => {
            let kind = rest
                .iter()
                .position(|w| *w == "root")
                .and_then(|i| rest.get(i + 1))
                .copied()
                .unwrap_or("");
            let limit = rest
                .iter()
                .position(|w| *w == "limit")
                .and_then(|i| rest.get(i + 1))
                .and_then(|w| parse_int(w));
            match (kind, limit) {
                ("pfifo" | "pfifo_fast", Some(0)) => unsupported(
                    "a zero-length qdisc drops every outgoing packet (local congestion); ember's backend has no device queue",
                ),
                ("pfifo" | "pfifo_fast", _) => {
                    ignored("a FIFO qdisc neither paces nor drops; ember sends straight out")
                }
                ("fq", _) => unsupported(
                    "the fq qdisc paces flows (and the scripts' timing expects it); ember does not pace",
                ),
                _ => unsupported(format!("unknown qdisc `{kind}`")),
            }
        }
        _ => unsupported(format!("unknown tc command: tc {}", a.join(" "))),
    }
}

fn apply_ethtool(args: &[String], params: &mut Params) -> ShellOutcome {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let ["-K", _dev, feats @ ..] = a.as_slice() else {
        return unsupported(format!("unknown ethtool command: ethtool {}", a.join(" ")));
    };
    let mut lso = None;
    for pair in feats.chunks(2) {
        match pair {
            ["tso" | "gso", v @ ("on" | "off")] => {
                let on = *v == "on";
                lso = Some(lso.unwrap_or(on) && on);
            }
            _ => {
                return unsupported(format!(
                    "unknown ethtool feature setting: {}",
                    pair.join(" ")
                ))
            }
        }
    }
    match lso {
        Some(on) => set_all(
            params,
            vec![change(
                "ip_lso_outbound",
                u8::from(on),
                "ethtool -K tso/gso",
            )],
        ),
        None => ignored("ethtool with nothing to set"),
    }
}

// ---------------------------------------------------------------------------------
// Feature classification.
// ---------------------------------------------------------------------------------

/// System calls the interpreter can map onto ember's socket API.
const SUPPORTED_SYSCALLS: &[&str] = &[
    "socket",
    "bind",
    "listen",
    "accept",
    "accept4",
    "connect",
    "read",
    "readv",
    "write",
    "writev",
    "send",
    "sendto",
    "sendmsg",
    "recv",
    "recvfrom",
    "recvmsg",
    "close",
    "shutdown",
    "setsockopt",
    "getsockopt",
    "getsockname",
    "getpeername",
    "fcntl",
    "ioctl",
    "poll",
    "select",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "sendfile",
    "open",
];

/// Socket options ember's `TcpStream`/`TcpListener` can set.
const SUPPORTED_SETSOCKOPT: &[&str] = &[
    "SO_REUSEADDR",
    "SO_KEEPALIVE",
    "SO_LINGER",
    "SO_SNDBUF",
    "SO_RCVBUF",
    "SO_RCVTIMEO",
    "SO_SNDTIMEO",
    "SO_BUSY_POLL",
    "TCP_NODELAY",
    "TCP_CORK",
    "TCP_KEEPIDLE",
    "TCP_KEEPINTVL",
    "TCP_KEEPCNT",
    "TCP_USER_TIMEOUT",
    "TCP_CONGESTION",
    "TCP_MAXSEG",
    "TCP_NOTSENT_LOWAT",
    "IP_TOS",
];

/// Socket options ember can report (besides every settable one).
const SUPPORTED_GETSOCKOPT: &[&str] = &["SO_ERROR", "SO_TYPE", "TCP_MAXSEG", "TCP_INFO"];

/// Flags of send/recv calls ember can honour (MSG_DONTWAIT through non-blocking mode,
/// MSG_NOSIGNAL trivially: ember raises no signals).
const SUPPORTED_MSG_FLAGS: &[&str] = &[
    "MSG_DONTWAIT",
    "MSG_NOSIGNAL",
    "MSG_PEEK",
    "MSG_OOB",
    "MSG_WAITALL",
    "MSG_MORE",
];

/// ioctls ember can answer.
const SUPPORTED_IOCTLS: &[&str] = &[
    "SIOCINQ",
    "FIONREAD",
    "FIONBIO",
    "SIOCATMARK",
    "SIOCOUTQ",
    "TIOCOUTQ",
    "SIOCOUTQNSD",
];

/// Words that name a feature ember lacks wherever they appear in a syscall.
fn feature_word(w: &str) -> Option<&'static str> {
    Some(match w {
        _ if w.contains("FASTOPEN") => "TCP Fast Open",
        _ if w.contains("ZEROCOPY") => "MSG_ZEROCOPY / SO_ZEROCOPY",
        _ if w.contains("TIMESTAMPING") || w.starts_with("SCM_TSTAMP") => "SO_TIMESTAMPING",
        _ if w.starts_with("TCP_MD5SIG") => "TCP_MD5SIG",
        "AF_INET6" | "PF_INET6" => "IPv6 sockets (ember is IPv4-only)",
        "MSG_ERRQUEUE" => "the socket error queue (MSG_ERRQUEUE)",
        "TCP_INQ" | "TCP_CM_INQ" => "TCP_INQ",
        "MSG_EOR" => "MSG_EOR",
        "TCP_REPAIR" | "TCP_SAVE_SYN" | "TCP_SAVED_SYN" => "TCP_REPAIR / TCP_SAVE_SYN",
        _ => return None,
    })
}

/// Why `script` cannot run on ember, each reason as `line N: ...`, in line order
/// without duplicates. Empty when ember can run it (as far as the syntax shows).
pub fn unsupported_features(script: &Script) -> Vec<String> {
    let mut out: Vec<(u32, String)> = Vec::new();
    let mut push = |line: u32, why: String| {
        if !out.iter().any(|(l, w)| *l == line && *w == why) {
            out.push((line, why));
        }
    };
    for o in &script.options {
        let v = o.value.as_deref().unwrap_or("");
        let v6 = match o.name.as_str() {
            "ip_version" => v != "ipv4",
            "local_ip" | "remote_ip" | "gateway_ip" => v.contains(':'),
            _ => false,
        };
        if v6 {
            push(
                o.line,
                format!("IPv6 (--{}={v}): ember is IPv4-only", o.name),
            );
        }
    }
    let mut params = linux_profile();
    let commands = script
        .init_command
        .iter()
        .chain(script.events.iter().filter_map(|e| match &e.action {
            Action::Command(c) => Some(c),
            _ => None,
        }))
        .chain(script.cleanup_command.iter());
    for c in commands {
        for (stmt, o) in apply_shell_each(&c.text, &mut params) {
            if let ShellOutcome::Unsupported(r) = o {
                push(c.line, format!("shell `{stmt}`: {r}"));
            }
        }
    }
    for e in &script.events {
        match &e.action {
            Action::Packet(p) => {
                if !p.encapsulation.is_empty() {
                    push(p.line, "IP-in-IP encapsulation".into());
                }
                let ecn_out = p.direction == Direction::Outbound
                    && p.ip.and_then(|i| i.ecn).is_some_and(|e| e != Ecn::NoEcn);
                if let PacketBody::Tcp(t) = &p.body {
                    if ecn_out
                        || (p.direction == Direction::Outbound && (t.flags.ece || t.flags.cwr))
                    {
                        push(p.line, "ECN expected from ember (ember has no ECN)".into());
                    }
                    if let Some(crate::script::TcpOptions::List(opts)) = &t.options {
                        for o in opts {
                            match o {
                                TcpOption::FastOpen(_) | TcpOption::FastOpenExp(_) => {
                                    push(p.line, "TCP Fast Open option (FO)".into())
                                }
                                TcpOption::Md5(_) => {
                                    push(p.line, "TCP MD5 signature option (md5)".into())
                                }
                                _ => {}
                            }
                        }
                    }
                } else if ecn_out {
                    push(p.line, "ECN expected from ember (ember has no ECN)".into());
                }
            }
            Action::Syscall(sc) => {
                let line = e.line;
                if !SUPPORTED_SYSCALLS.contains(&sc.name.as_str()) {
                    push(line, format!("system call {}() (ember has none)", sc.name));
                }
                let mut ws = Vec::new();
                for a in &sc.args {
                    collect_words(a, &mut ws);
                }
                for w in &ws {
                    if let Some(f) = feature_word(w) {
                        let why = if f == *w {
                            f.to_string()
                        } else {
                            format!("{f} ({w})")
                        };
                        push(line, why);
                    }
                }
                let word_at = |i: usize| sc.args.get(i).and_then(Expr::as_word);
                match sc.name.as_str() {
                    "setsockopt" | "getsockopt" => {
                        if let Some(opt) = word_at(2) {
                            let ok = SUPPORTED_SETSOCKOPT.contains(&opt)
                                || (sc.name == "getsockopt" && SUPPORTED_GETSOCKOPT.contains(&opt));
                            if !ok && feature_word(opt).is_none() {
                                push(line, format!("socket option {opt} ({}())", sc.name));
                            }
                        }
                    }
                    "ioctl" => {
                        if let Some(req) = word_at(1) {
                            if !SUPPORTED_IOCTLS.contains(&req) && feature_word(req).is_none() {
                                push(line, format!("ioctl {req}"));
                            }
                        }
                    }
                    "socket" => {
                        if let Some(t) = sc.args.get(1).and_then(Expr::or_words) {
                            if t.iter().any(|w| *w == "SOCK_RAW" || *w == "SOCK_SEQPACKET") {
                                push(line, format!("socket type {}", t.join("|")));
                            }
                        }
                    }
                    _ => {}
                }
                let flags_arg = match sc.name.as_str() {
                    "send" | "sendto" | "recv" | "recvfrom" => Some(3),
                    "sendmsg" | "recvmsg" => Some(2),
                    _ => None,
                };
                if let Some(flags) = flags_arg
                    .and_then(|i| sc.args.get(i))
                    .and_then(Expr::or_words)
                {
                    for f in flags {
                        if f.starts_with("MSG_")
                            && !SUPPORTED_MSG_FLAGS.contains(&f)
                            && feature_word(f).is_none()
                        {
                            push(line, format!("send/recv flag {f}"));
                        }
                    }
                }
            }
            Action::Code(b) => {
                if b.text.contains("TCP_OPTI_SYN_DATA") || b.text.contains("tcpi_fastopen") {
                    push(b.line, "TCP Fast Open (checked in tcp_info)".into());
                }
            }
            Action::Command(_) => {}
        }
    }
    out.sort_by_key(|(l, _)| *l);
    out.into_iter()
        .map(|(l, w)| format!("line {l}: {w}"))
        .collect()
}

fn collect_words<'a>(e: &'a Expr, out: &mut Vec<&'a str>) {
    match &e.kind {
        ExprKind::Word(w) => out.push(w),
        ExprKind::BitOr(a, b) | ExprKind::Assign(a, b) => {
            collect_words(a, out);
            collect_words(b, out);
        }
        ExprKind::Array(v) | ExprKind::Struct(v) => {
            for x in v {
                collect_words(x, out);
            }
        }
        ExprKind::Call(_, v) => {
            for x in v {
                collect_words(x, out);
            }
        }
        ExprKind::Ellipsis | ExprKind::Int(_) | ExprKind::Str(_) | ExprKind::StrPrefix(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::parse;
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    fn applied(o: &ShellOutcome) -> Vec<(&'static str, String)> {
        match o {
            ShellOutcome::Applied(c) => c.iter().map(|c| (c.tunable, c.value.clone())).collect(),
            other => panic!("not applied: {other:?}"),
        }
    }

    #[test]
    fn the_linux_profile() {
        let p = linux_profile();
        assert_eq!(p.tcp_init_cwnd, 10);
        assert_eq!(
            (
                p.tcp_rexmit_interval_initial,
                p.tcp_rexmit_interval_min,
                p.tcp_rexmit_interval_max
            ),
            (1000, 200, 120_000)
        );
        assert_eq!(p.tcp_deferred_ack_interval, 40);
        assert_eq!(p.tcp_recv_hiwat, 540_000);
        assert_eq!(p.tcp_xmit_hiwat, 262_144);
        assert_eq!(p.tcp_max_buf, 15 * 1024 * 1024);
        assert_eq!((p.tcp_tstamp_always, p.tcp_wscale_always), (2, 2));
        assert_eq!(p.tcp_sack_permitted, 2);
        assert_eq!(p.tcp_congestion_control.to_string(), "cubic");
        assert!(!p.tcp_slow_start_after_idle);
        assert!(!p.do_tcp_fusion);
        assert_eq!(p.tcp_dupack_fast_retransmit, 3);
        assert!(
            p.tcp_recovery && p.tcp_tlp,
            "RACK and TLP, as defaults.sh sets"
        );
        assert_eq!(p.tcp_ip_abort_cinterval, 63_000);
        assert_eq!(p.tcp_ip_abort_interval, 924_600);
        assert_eq!(retries_timeout_ms(15, 200), 924_600);
        // defaults.sh applied to ember's defaults gives the same buffers.
        let mut q = Params::default();
        let o = apply_shell("../common/defaults.sh", &mut q);
        let ch = applied(&o);
        assert!(ch.contains(&("tcp_recv_hiwat", "540000".into())), "{ch:?}");
        assert!(ch.contains(&("tcp_max_buf", "15728640".into())), "{ch:?}");
        assert_eq!(
            (q.tcp_recv_hiwat, q.tcp_xmit_hiwat, q.tcp_max_buf),
            (p.tcp_recv_hiwat, p.tcp_xmit_hiwat, p.tcp_max_buf)
        );
        // Every defaults.sh entry is Applied or Ignored, never Unsupported.
        for (n, v) in DEFAULTS_SH {
            let o = apply_sysctl(n, v, &mut q, Context::DefaultsSh);
            assert!(!matches!(o, ShellOutcome::Unsupported(_)), "{n}={v}: {o:?}");
        }
    }

    #[test]
    fn rack_and_tlp_sysctls() {
        let mut p = linux_profile();
        let o = apply_shell(
            "sysctl -q net.ipv4.tcp_recovery=0 net.ipv4.tcp_early_retrans=0",
            &mut p,
        );
        assert_eq!(
            applied(&o),
            vec![("tcp_recovery", "0".into()), ("tcp_tlp", "0".into())]
        );
        assert!(!p.tcp_recovery && !p.tcp_tlp);
        apply_shell("sysctl -q net.ipv4.tcp_early_retrans=3", &mut p);
        assert!(p.tcp_tlp);
        for bad in ["net.ipv4.tcp_recovery=4", "net.ipv4.tcp_early_retrans=5"] {
            let o = apply_shell(&format!("sysctl -q {bad}"), &mut p);
            assert!(matches!(o, ShellOutcome::Unsupported(_)), "{bad}: {o:?}");
        }
    }

    /// Linux's `tcp_window_scaling=0` and `tcp_timestamps=0` neither offer the option
    /// nor accept it from a peer's SYN: ember's level 0 of `tcp_wscale_always` and
    /// `tcp_tstamp_always`; 1 (and timestamps' 2) offer and accept: level 2.
    #[test]
    fn window_scaling_and_timestamps_sysctls() {
        let mut p = linux_profile();
        for (cmd, tunable, want) in [
            (
                "sysctl -q net.ipv4.tcp_window_scaling=0",
                "tcp_wscale_always",
                "0",
            ),
            (
                "sysctl -q net.ipv4.tcp_window_scaling=1",
                "tcp_wscale_always",
                "2",
            ),
            (
                "sysctl -q net.ipv4.tcp_timestamps=0",
                "tcp_tstamp_always",
                "0",
            ),
            (
                "sysctl -q net.ipv4.tcp_timestamps=1",
                "tcp_tstamp_always",
                "2",
            ),
            (
                "sysctl -q net.ipv4.tcp_timestamps=2",
                "tcp_tstamp_always",
                "2",
            ),
            (
                "../common/set_sysctls.py /proc/sys/net/ipv4/tcp_window_scaling=0",
                "tcp_wscale_always",
                "0",
            ),
        ] {
            let o = apply_shell(cmd, &mut p);
            assert_eq!(
                applied(&o),
                vec![(tunable, want.to_string())],
                "{cmd}: {o:?}"
            );
            assert_eq!(p.get(tunable).as_deref(), Some(want), "{cmd}");
        }
        for bad in [
            "sysctl -q net.ipv4.tcp_window_scaling=2",
            "sysctl -q net.ipv4.tcp_timestamps=3",
        ] {
            let before = p.clone();
            let o = apply_shell(bad, &mut p);
            assert!(matches!(o, ShellOutcome::Unsupported(_)), "{bad}: {o:?}");
            assert_eq!(p, before, "{bad} changed nothing");
        }
    }

    #[test]
    fn sysctl_lines() {
        let mut p = linux_profile();
        // Several assignments, flags, arithmetic inside quotes, a trailing comment.
        let o = apply_shell(
            "sysctl -q -e net.ipv4.tcp_wmem=\"4096 $((50*1000)) $((4*(1024*1024)))\" net.ipv4.tcp_reordering=5 # x",
            &mut p,
        );
        assert_eq!(
            applied(&o),
            vec![
                ("tcp_xmit_hiwat", "50000".into()),
                ("tcp_dupack_fast_retransmit", "5".into())
            ]
        );
        assert_eq!(p.tcp_xmit_hiwat, 50_000);
        // set_sysctls.py with continuation lines and a /proc path; echo > /proc.
        let o = apply_shell(
            "../common/set_sysctls.py /proc/sys/net/ipv4/tcp_timestamps=0 \\\n\t/proc/sys/net/ipv4/tcp_slow_start_after_idle=1",
            &mut p,
        );
        assert_eq!(applied(&o).len(), 2);
        assert!(p.tcp_tstamp_always == 0 && p.tcp_slow_start_after_idle);
        apply_shell("echo 0 > /proc/sys/net/ipv4/tcp_sack", &mut p);
        assert_eq!(p.tcp_sack_permitted, 0);
        apply_shell("sysctl -q net/ipv4/tcp_congestion_control=reno", &mut p);
        assert_eq!(p.tcp_congestion_control.to_string(), "newreno");
        // Unsupported: features ember lacks, values it cannot take, unknown sysctls.
        let before = p.clone();
        for cmd in [
            "sysctl -q net.ipv4.tcp_fastopen=0x30403",
            "sysctl -q net.ipv4.tcp_ecn=1  # fully enabled",
            "sysctl -q net.ipv4.tcp_notsent_lowat=4000",
            "sysctl -q net.ipv4.tcp_congestion_control=bbr",
            "sysctl -q net.ipv4.tcp_reordering=0",
            "sysctl -q net.ipv4.tcp_wmem=\"4096 100 4194304\"",
        ] {
            let o = apply_shell(cmd, &mut p);
            assert!(
                matches!(o, ShellOutcome::Unsupported(_)) && !o.is_unknown(),
                "{cmd}: {o:?}"
            );
        }
        let o = apply_shell("sysctl -q net.ipv4.tcp_no_such_thing=1", &mut p);
        assert!(o.is_unknown(), "{o:?}");
        assert!(apply_shell("frobnicate --all", &mut p).is_unknown());
        assert_eq!(p, before, "refused lines change nothing");
        // Ignored lines.
        for cmd in [
            "sysctl -q net.ipv4.tcp_fastopen=0",
            "ip tcp_metrics flush all > /dev/null 2>&1",
            "tc qdisc delete dev tun0 root 2>/dev/null ; tc qdisc add dev tun0 root pfifo",
            "/tmp/sysctl_restore_${PPID}.sh",
            "sleep 1",
            "nstat > /dev/null",
        ] {
            assert!(
                matches!(apply_shell(cmd, &mut p), ShellOutcome::Ignored(_)),
                "{cmd}"
            );
        }
        // A compound line is as bad as its worst statement.
        let o = apply_shell(
            "../common/defaults.sh\ntc qdisc replace dev tun0 root fq\nsysctl -q net.ipv4.tcp_early_retrans=0",
            &mut p,
        );
        assert!(
            matches!(&o, ShellOutcome::Unsupported(r) if r.contains("fq")),
            "{o:?}"
        );
        // ip route initcwnd and ethtool.
        let mut q = linux_profile();
        let o = apply_shell(
            "ip route change 192.0.2.1 via 192.168.0.2 dev tun0 advmss 1460 mtu lock 1500 initcwnd 11",
            &mut q,
        );
        assert_eq!(applied(&o), vec![("tcp_init_cwnd", "11".into())]);
        apply_shell("ethtool -K tun0 gso off tso off", &mut q);
        assert!(!q.ip_lso_outbound);
    }

    #[test]
    fn arithmetic_and_words() {
        assert_eq!(eval_arith("15*1024*1024"), Some(15 * 1024 * 1024));
        assert_eq!(eval_arith("(2+3)*4-10/5"), Some(18));
        assert_eq!(eval_arith("-0x10 % 7"), Some(-2));
        assert_eq!(eval_arith("1/0"), None);
        assert_eq!(eval_arith("2+"), None);
        assert_eq!(
            words("a \"b c $((1+1))\" 'd e'").unwrap(),
            vec!["a", "b c 2", "d e"]
        );
        assert!(words("\"open").is_err());
        assert_eq!(
            shell_statements("a; b && c || d # e\n# f\n g \\\n h"),
            vec!["a", "b", "c", "d", "g   h"]
        );
    }

    fn corpus_net() -> Option<PathBuf> {
        let root = crate::corpus::default_root();
        let net = root.join("gtests/net");
        if net.is_dir() {
            Some(net)
        } else {
            println!("skipped: corpus not found at {}", root.display());
            None
        }
    }

    fn corpus_scripts(net: &Path) -> Vec<(PathBuf, Script)> {
        crate::corpus::scripts_under(net)
            .unwrap()
            .into_iter()
            .map(|(rel, full)| {
                let text = std::fs::read_to_string(&full).unwrap();
                let s = parse(&text).unwrap_or_else(|e| panic!("{}: {e}", full.display()));
                (rel, s)
            })
            .collect()
    }

    /// The table matches the corpus's defaults.sh: every sysctl it sets, in order.
    #[test]
    fn defaults_table_matches_the_file() {
        let Some(net) = corpus_net() else { return };
        let text = std::fs::read_to_string(net.join("common/defaults.sh")).unwrap();
        let mut found = Vec::new();
        let mut others = Vec::new();
        for stmt in shell_statements(&text) {
            let (ws, _) = strip_redirections(words(&stmt).unwrap());
            if ws[0] == "sysctl" {
                for a in ws[1..].iter().filter(|a| !a.starts_with('-')) {
                    let (n, v) = a.split_once('=').unwrap();
                    found.push((n.trim_start_matches("net.ipv4.").to_string(), v.to_string()));
                }
            } else {
                others.push(stmt);
            }
        }
        let table: Vec<(String, String)> = DEFAULTS_SH
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(found, table);
        assert_eq!(
            others,
            vec![
                "ip tcp_metrics flush all > /dev/null 2>&1",
                "tc qdisc add dev tun0 root pfifo"
            ]
        );
        // tcp/common/defaults.sh only calls the common one, and so applies the table.
        let tcp = std::fs::read_to_string(net.join("tcp/common/defaults.sh")).unwrap();
        let mut r = Params::default();
        let o = apply_shell(&tcp, &mut r);
        assert!(matches!(o, ShellOutcome::Applied(_)), "{o:?}");
        let mut q = Params::default();
        apply_shell("../../common/defaults.sh", &mut q);
        assert_eq!(r, q);
    }

    #[test]
    fn every_corpus_shell_line_is_classified() {
        let Some(net) = corpus_net() else { return };
        let scripts = corpus_scripts(&net);
        let (mut applied_n, mut ignored_n, mut unsupported_n) = (0, 0, 0);
        let mut unknown = Vec::new();
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        for (path, s) in &scripts {
            let mut p = linux_profile();
            let cmds = s
                .init_command
                .iter()
                .chain(s.events.iter().filter_map(|e| match &e.action {
                    Action::Command(c) => Some(c),
                    _ => None,
                }))
                .chain(s.cleanup_command.iter());
            for c in cmds {
                for (stmt, o) in apply_shell_each(&c.text, &mut p) {
                    match &o {
                        ShellOutcome::Applied(_) => applied_n += 1,
                        ShellOutcome::Ignored(_) => ignored_n += 1,
                        ShellOutcome::Unsupported(r) => {
                            unsupported_n += 1;
                            *reasons.entry(r.clone()).or_default() += 1;
                        }
                    }
                    if o.is_unknown() {
                        unknown.push(format!("{}:{}: {stmt}: {o:?}", path.display(), c.line));
                    }
                }
            }
        }
        println!(
            "shell statements: {applied_n} applied, {ignored_n} ignored, {unsupported_n} unsupported"
        );
        for (r, n) in &reasons {
            println!("{n:4} {r}");
        }
        assert!(unknown.is_empty(), "unknown:\n{}", unknown.join("\n"));
        assert!(applied_n >= 162, "every script runs defaults.sh or similar");
        assert!(unsupported_n > 0 && ignored_n > 0);
    }

    #[test]
    fn corpus_feature_classification() {
        let Some(net) = corpus_net() else { return };
        let scripts = corpus_scripts(&net);
        let mut per_dir: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        let mut by_top: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for (path, s) in &scripts {
            let dir = path.parent().unwrap().display().to_string();
            let top = dir.split('/').take(2).collect::<Vec<_>>().join("/");
            let reasons = unsupported_features(s);
            for r in &reasons {
                assert!(r.starts_with("line "), "{r}");
            }
            let flagged = usize::from(!reasons.is_empty());
            let e = per_dir.entry(dir).or_default();
            e.0 += 1;
            e.1 += flagged;
            let e = by_top.entry(top.clone()).or_default();
            e.0 += 1;
            e.1 += flagged;
            if [
                "tcp/fastopen",
                "tcp/zerocopy",
                "tcp/timestamping",
                "tcp/md5",
            ]
            .contains(&top.as_str())
            {
                assert!(!reasons.is_empty(), "{} not flagged", path.display());
            }
            if std::env::var_os("EMBER_PROFILE_VERBOSE").is_some() {
                println!("{}: {reasons:?}", path.display());
            }
        }
        println!("scripts with an unsupported feature / scripts, per directory:");
        for (dir, (n, f)) in &per_dir {
            println!("{f:4} /{n:4}  {dir}");
        }
        let total: usize = per_dir.values().map(|v| v.1).sum();
        println!("{total} of {} scripts flagged", scripts.len());
        for d in [
            "tcp/shutdown",
            "tcp/close",
            "tcp/fast_recovery",
            "tcp/fast_retransmit",
        ] {
            assert_eq!(by_top[d].1, 0, "{d}: none flagged");
        }
        for d in [
            "tcp/sack",
            "tcp/slow_start",
            "tcp/ts_recent",
            "tcp/tcp_info",
        ] {
            let (n, f) = by_top[d];
            assert!(2 * f < n, "{d}: {f} of {n} flagged");
        }
        // nagle: MSG_MORE is supported.
        assert_eq!(by_top["tcp/nagle"], (3, 0));
        let (n, f) = by_top["tcp/fastopen"];
        assert_eq!(f, n);
    }

    #[test]
    fn feature_classification_of_small_scripts() {
        let s = parse(
            "--ip_version=ipv6\n\
             0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n\
             +0 setsockopt(3, SOL_TCP, TCP_NODELAY, [1], 4) = 0\n\
             +0 setsockopt(3, SOL_TCP, TCP_SYNCNT, [3], 4) = 0\n\
             +0 sendto(3, ..., 1000, MSG_FASTOPEN, ..., ...) = 1000\n\
             +0 send(3, ..., 1000, MSG_EOR|MSG_DONTWAIT) = 1000\n\
             +0 > S 0:0(0) <mss 1460,FO,nop,nop>\n\
             +0 splice(4, NULL, 6, NULL, 1, 0) = 0\n\
             +0 `sysctl -q net.ipv4.tcp_ecn=1`\n",
        )
        .unwrap();
        let r = unsupported_features(&s);
        let want = [
            "line 1: IPv6",
            "line 4: socket option TCP_SYNCNT",
            "line 5: TCP Fast Open (MSG_FASTOPEN)",
            "line 6: MSG_EOR",
            "line 7: TCP Fast Open option",
            "line 8: system call splice()",
            "line 9: shell `sysctl -q net.ipv4.tcp_ecn=1`",
        ];
        assert_eq!(r.len(), want.len(), "{r:#?}");
        for (got, want) in r.iter().zip(want) {
            assert!(got.starts_with(want), "{got} vs {want}");
        }
        let ok = parse(
            "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n\
             +0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0\n\
             +0 getsockopt(3, SOL_TCP, TCP_MAXSEG, [1100], [4]) = 0\n\
             +0 ioctl(3, SIOCINQ, [0]) = 0\n\
             +0 < S 0:0(0) win 1000 <mss 1000>\n",
        )
        .unwrap();
        assert_eq!(unsupported_features(&ok), Vec::<String>::new());
    }
}
