//! `ember ndd`, `ember kstat`, `ember netstat`, `ember ls`: the administrator's view of
//! running stacks, through their control sockets (`ember_runtime::control`).
//!
//! With one stack running, the commands talk to it without options; with several,
//! `--stack ID|PATH` chooses (IDs are what `ember ls` prints: `PID.N`). `ember ndd`
//! without a running stack lists the defaults, and `ember ndd NAME=VALUE ...` checks
//! settings without any stack (as before the control socket existed).

use clap::Args;
use ember_runtime::control::{self, find_stack, list_stacks, ndd_list, request, request_within};
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

/// `ember ndd` arguments.
#[derive(Args, Debug)]
pub struct NddArgs {
    /// The stack to talk to (an ID from `ember ls`, or a control socket path).
    #[arg(long)]
    stack: Option<String>,
    /// `-list` | `NAME` | `-set NAME VALUE` | `NAME=VALUE ...` (check only).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

/// `ember kstat` arguments.
#[derive(Args, Debug)]
pub struct KstatArgs {
    /// The stack to talk to (an ID from `ember ls`, or a control socket path).
    #[arg(long)]
    stack: Option<String>,
    /// Only this module (`tcp`, `fusion`, `squeue`, ...) or counter (`tcp:outSegs`).
    filter: Option<String>,
}

/// `ember netstat` arguments.
#[derive(Args, Debug)]
pub struct NetstatArgs {
    /// The stack to talk to (an ID from `ember ls`, or a control socket path).
    #[arg(long)]
    stack: Option<String>,
    /// Full: a second line per connection with `ss -ti`-style details.
    #[arg(short = 'f')]
    full: bool,
}

fn fail(cmd: &str, e: impl std::fmt::Display) -> ExitCode {
    eprintln!("ember {cmd}: {e}");
    ExitCode::from(2)
}

fn talk(which: Option<&str>, line: &str) -> io::Result<String> {
    let path = find_stack(which, None)?;
    request(&path, line)
}

enum Ndd {
    List,
    Get(Vec<String>),
    Set(String, String),
    Check(Vec<(String, String)>),
}

fn parse_ndd(args: &[String]) -> Result<Ndd, String> {
    let flag = |a: &str, f: &str| a == format!("-{f}") || a == format!("--{f}");
    match args {
        [] => Ok(Ndd::List),
        [a] if flag(a, "list") => Ok(Ndd::List),
        [a, name, value] if flag(a, "set") => Ok(Ndd::Set(name.clone(), value.clone())),
        [a, ..] if flag(a, "set") => Err("usage: ember ndd -set NAME VALUE".into()),
        [a, ..] if a.starts_with('-') => Err(format!(
            "unknown option {a}; usage: ember ndd [-list] | NAME... | -set NAME VALUE | NAME=VALUE..."
        )),
        _ if args.iter().all(|a| a.contains('=')) => Ok(Ndd::Check(
            args.iter()
                .filter_map(|a| a.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )),
        _ if args.iter().any(|a| a.contains('=')) => {
            Err("give either names to show or NAME=VALUE settings to check, not both".into())
        }
        _ => Ok(Ndd::Get(args.to_vec())),
    }
}

/// `ember ndd`.
pub fn ndd(a: NddArgs) -> ExitCode {
    let cmd = match parse_ndd(&a.args) {
        Ok(c) => c,
        Err(e) => return fail("ndd", e),
    };
    let which = a.stack.as_deref();
    // Without a running stack (and none asked for), show the defaults.
    let offline = |e: &io::Error| which.is_none() && e.kind() == io::ErrorKind::NotFound;
    match cmd {
        Ndd::Check(pairs) => {
            let mut p = ember_core::Params::default();
            if let Err(e) = p.set_many(&pairs) {
                return fail("ndd", e);
            }
            for (k, _) in &pairs {
                println!("{k} {} (valid)", p.get(k).unwrap_or_default());
            }
            ExitCode::SUCCESS
        }
        Ndd::List => match talk(which, "ndd list") {
            Ok(s) => {
                print!("{s}");
                ExitCode::SUCCESS
            }
            Err(e) if offline(&e) => {
                eprintln!("ember ndd: no ember stack is running; these are the defaults");
                print!("{}", ndd_list(&ember_core::Params::default()));
                ExitCode::SUCCESS
            }
            Err(e) => fail("ndd", e),
        },
        Ndd::Get(names) => {
            let mut code = ExitCode::SUCCESS;
            let path = find_stack(which, None);
            if let Err(e) = &path {
                if !offline(e) {
                    return fail("ndd", e);
                }
                eprintln!("ember ndd: no ember stack is running; these are the defaults");
            }
            for n in &names {
                let got = match &path {
                    Ok(p) => request(p, &format!("ndd get {n}")).map(|s| s.trim().to_string()),
                    Err(_) => ember_core::Params::default()
                        .get(n)
                        .ok_or_else(|| ember_core::params::ParamError::Unknown(n.clone()).into()),
                };
                match got {
                    Ok(v) if names.len() == 1 => println!("{v}"),
                    Ok(v) => println!("{n} {v}"),
                    Err(e) => {
                        eprintln!("ember ndd: {e}");
                        code = ExitCode::from(2);
                    }
                }
            }
            code
        }
        Ndd::Set(name, value) => {
            if value.contains(char::is_whitespace) || name.contains(char::is_whitespace) {
                return fail("ndd", "names and values have no spaces");
            }
            match talk(which, &format!("ndd set {name} {value}")) {
                Ok(s) => {
                    print!("{s}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail("ndd", e),
            }
        }
    }
}

/// `ember kstat`.
pub fn kstat(a: KstatArgs) -> ExitCode {
    let line = match &a.filter {
        Some(f) if f.contains(char::is_whitespace) => {
            return fail("kstat", "a filter is MODULE or MODULE:NAME")
        }
        Some(f) => format!("kstat {f}"),
        None => "kstat".to_string(),
    };
    match talk(a.stack.as_deref(), &line) {
        Ok(s) => {
            print!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => fail("kstat", e),
    }
}

/// `ember netstat`.
pub fn netstat(a: NetstatArgs) -> ExitCode {
    let line = if a.full { "netstat -f" } else { "netstat" };
    match talk(a.stack.as_deref(), line) {
        Ok(s) => {
            print!("{s}");
            ExitCode::SUCCESS
        }
        Err(e) => fail("netstat", e),
    }
}

/// `ember ls`: the running stacks.
pub fn ls() -> ExitCode {
    let dir = match control::control_dir() {
        Ok(d) => d,
        Err(e) => return fail("ls", e),
    };
    let stacks = match list_stacks(Some(&dir)) {
        Ok(s) => s,
        Err(e) => return fail("ls", e),
    };
    if stacks.is_empty() {
        eprintln!(
            "ember ls: no ember stack is running (control sockets live in {})",
            dir.display()
        );
        return ExitCode::SUCCESS;
    }
    println!(
        "{:<12} {:<16} {:>7} {:<20} {:>11} {:>9}  SOCKET",
        "ID", "COMMAND", "SQUEUES", "ADDRESSES", "CONNECTIONS", "UPTIME_S"
    );
    for s in stacks {
        match request_within(&s.path, "info", std::time::Duration::from_secs(2)) {
            Ok(body) => {
                let get = |k: &str| {
                    body.lines()
                        .find_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix(' ')))
                        .unwrap_or("-")
                        .to_string()
                };
                let state = get("state");
                println!(
                    "{:<12} {:<16} {:>7} {:<20} {:>11} {:>9}  {}{}",
                    s.id,
                    get("command"),
                    get("squeues"),
                    get("addrs"),
                    get("connections"),
                    get("uptime_s"),
                    PathBuf::from(&s.path).display(),
                    if state == "running" {
                        String::new()
                    } else {
                        format!(" ({state})")
                    }
                );
            }
            Err(e) => println!("{:<12} (not answering: {e})  {}", s.id, s.path.display()),
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn ndd_arguments() {
        assert!(matches!(parse_ndd(&[]), Ok(Ndd::List)));
        assert!(matches!(parse_ndd(&v(&["-list"])), Ok(Ndd::List)));
        assert!(matches!(parse_ndd(&v(&["--list"])), Ok(Ndd::List)));
        assert!(
            matches!(parse_ndd(&v(&["-set", "a", "1"])), Ok(Ndd::Set(n, x)) if n == "a" && x == "1")
        );
        assert!(parse_ndd(&v(&["-set", "a"])).is_err());
        assert!(parse_ndd(&v(&["-frob"])).is_err());
        assert!(matches!(parse_ndd(&v(&["a", "b"])), Ok(Ndd::Get(n)) if n.len() == 2));
        assert!(matches!(parse_ndd(&v(&["a=1", "b=2"])), Ok(Ndd::Check(p)) if p.len() == 2));
        assert!(parse_ndd(&v(&["a=1", "b"])).is_err());
    }
}
