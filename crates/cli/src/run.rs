//! `ember run [--param NAME=VALUE]... [--config F.toml] -- PROGRAM [ARGS...]`: runs an
//! unmodified program with ember's preload library (crossproc.md).
//!
//! # What it does
//! 1. Finds the library: `$EMBER_PRELOAD` if set, else `libember_preload.so` next to
//!    the `ember` binary (where `cargo build` puts both) or in its `deps/` folder
//!    (where a test build leaves it).
//! 2. Checks the settings: the `[params]` of `--config` and then the `--param`s (the
//!    command line wins), all through the tunables' own checks, so a bad value stops
//!    here with the tunable's message instead of being ignored by every process.
//! 3. Passes them on as `EMBER_<NAME>=VALUE` variables (the form `ember serve` reads
//!    too), puts the library first in `LD_PRELOAD` (keeping what was there) and
//!    `exec`s the program, which keeps `ember run`'s pid, so a supervisor or a shell's
//!    job control sees the program itself.
//!
//! A program the library cannot enter still runs, unfused, with a warning: a static
//! binary (no ELF interpreter), a Go program (raw system calls, `.go.buildinfo`), a
//! set-user-ID or set-group-ID program (the dynamic linker ignores `LD_PRELOAD` for
//! it) and one with file capabilities (likewise).

use clap::Args;
use ember_core::params::Params;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The library's file name.
pub const LIBRARY: &str = "libember_preload.so";

/// `ember run` arguments.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// A tunable for every process of the program (repeatable), e.g.
    /// `--param tcp_fusion_rcv_unread_min=0` or the kill switch `--param do_tcp_fusion=0`.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    params: Vec<String>,
    /// A TOML file whose `[params]` table sets tunables (`--param` wins).
    #[arg(long, value_name = "F.toml")]
    config: Option<PathBuf>,
    /// Say which library and settings are used, on stderr.
    #[arg(short, long)]
    verbose: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "PROGRAM [ARGS]...")]
    command: Vec<OsString>,
}

pub fn main(a: RunArgs) -> ExitCode {
    match prepare(&a) {
        Ok(p) => {
            for w in &p.warnings {
                eprintln!("ember run: warning: {w}");
            }
            if a.verbose {
                eprintln!("ember run: library {}", p.library.display());
                for (k, v) in &p.env {
                    eprintln!("ember run: {k}={v}");
                }
            }
            let mut cmd = std::process::Command::new(&a.command[0]);
            cmd.args(&a.command[1..]);
            for (k, v) in &p.env {
                cmd.env(k, v);
            }
            cmd.env("LD_PRELOAD", &p.ld_preload);
            let e = cmd.exec();
            eprintln!("ember run: {}: {e}", a.command[0].to_string_lossy());
            // As a shell says: 127 not found, 126 found but not runnable.
            ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            })
        }
        Err(e) => {
            eprintln!("ember run: {e}");
            ExitCode::from(2)
        }
    }
}

/// What `ember run` sets up before the `exec`.
#[derive(Debug)]
pub struct Prepared {
    pub library: PathBuf,
    pub ld_preload: OsString,
    /// `EMBER_<NAME>` variables, in name order.
    pub env: Vec<(String, String)>,
    pub warnings: Vec<String>,
}

fn prepare(a: &RunArgs) -> Result<Prepared, String> {
    let env = settings(&a.params, a.config.as_deref())?;
    let library = find_library(
        std::env::var_os("EMBER_PRELOAD"),
        std::env::current_exe().ok(),
    )?;
    let ld_preload = ld_preload(&library, std::env::var_os("LD_PRELOAD"));
    let warnings = match resolve_program(&a.command[0]) {
        Some(p) => check_program(&p),
        None => Vec::new(), // exec reports it
    };
    Ok(Prepared {
        library,
        ld_preload,
        env,
        warnings,
    })
}

/// The tunables from `config`'s `[params]` and then `params` (`NAME=VALUE` each),
/// checked together, as `EMBER_<NAME>` variables.
pub fn settings(params: &[String], config: Option<&Path>) -> Result<Vec<(String, String)>, String> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    if let Some(p) = config {
        let meta = std::fs::metadata(p).map_err(|e| format!("--config {}: {e}", p.display()))?;
        if meta.len() > ember_config::MAX_SIZE as u64 {
            return Err(format!("--config {}: larger than 1 MiB", p.display()));
        }
        let text =
            std::fs::read_to_string(p).map_err(|e| format!("--config {}: {e}", p.display()))?;
        let file =
            ember_config::parse(&text).map_err(|e| format!("--config {}: {e}", p.display()))?;
        let only_params = ember_config::FileConfig {
            params: file.params.clone(),
            ..Default::default()
        };
        if file != only_params {
            return Err(format!(
                "--config {}: only the [params] table applies to ember run",
                p.display()
            ));
        }
        pairs.extend(file.param_pairs());
    }
    for s in params {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| format!("--param {s}: expected NAME=VALUE"))?;
        pairs.push((k.trim().to_string(), v.trim().to_string()));
    }
    let mut p = Params::default();
    p.set_many(&pairs).map_err(|e| e.to_string())?;
    // The last setting of a name wins, as in set_many.
    let mut out: std::collections::BTreeMap<String, String> = Default::default();
    for (k, v) in pairs {
        let canonical = Params::NAMES
            .iter()
            .find(|n| n.eq_ignore_ascii_case(&k))
            .ok_or_else(|| format!("unknown tunable {k}"))?;
        out.insert(format!("EMBER_{}", canonical.to_ascii_uppercase()), v);
    }
    Ok(out.into_iter().collect())
}

/// The library: `env` (`$EMBER_PRELOAD`) if given, else next to `exe` or in its
/// `deps/`.
pub fn find_library(env: Option<OsString>, exe: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(p) = env.filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            std::fs::canonicalize(&p).map_err(|e| format!("EMBER_PRELOAD={}: {e}", p.display()))
        } else {
            Err(format!("EMBER_PRELOAD={}: no such file", p.display()))
        };
    }
    let dir = exe
        .as_deref()
        .and_then(|e| std::fs::canonicalize(e).ok())
        .and_then(|e| e.parent().map(Path::to_path_buf))
        .ok_or("cannot tell where the ember binary is; set EMBER_PRELOAD")?;
    for cand in [dir.join(LIBRARY), dir.join("deps").join(LIBRARY)] {
        if cand.is_file() {
            return Ok(cand);
        }
    }
    Err(format!(
        "no {LIBRARY} next to {} (build the workspace: cargo build --release), \
         and EMBER_PRELOAD is not set",
        dir.display()
    ))
}

/// `LD_PRELOAD` with `lib` first, the rest of `old` after it (without another copy of
/// `lib`). The dynamic linker splits the list at spaces and colons, so a library path
/// containing either could not be preloaded.
pub fn ld_preload(lib: &Path, old: Option<OsString>) -> OsString {
    let mut v = OsString::from(lib.as_os_str());
    if let Some(old) = old {
        for part in old.as_bytes().split(|&b| b == b' ' || b == b':') {
            if !part.is_empty() && part != lib.as_os_str().as_bytes() {
                v.push(" ");
                v.push(OsStr::from_bytes(part));
            }
        }
    }
    v
}

/// `prog` as `execvp` finds it: itself if it contains a slash, else the first
/// executable file of that name in `$PATH`.
fn resolve_program(prog: &OsStr) -> Option<PathBuf> {
    if prog.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(prog));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| {
            p.metadata()
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// Why the library cannot enter `prog` (empty: it can, as far as can be told).
pub fn check_program(prog: &Path) -> Vec<String> {
    let mut w = Vec::new();
    let name = prog.display();
    let Ok(meta) = std::fs::metadata(prog) else {
        return w;
    };
    let mode = meta.permissions().mode();
    if mode & 0o4000 != 0 {
        w.push(format!("{name} is set-user-ID: the dynamic linker ignores LD_PRELOAD for it, so it runs without ember"));
    } else if mode & 0o2000 != 0 {
        w.push(format!("{name} is set-group-ID: the dynamic linker ignores LD_PRELOAD for it, so it runs without ember"));
    } else if has_file_capabilities(prog) {
        w.push(format!("{name} has file capabilities: the dynamic linker ignores LD_PRELOAD for it, so it runs without ember"));
    }
    let Ok(bytes) = read_head(prog) else {
        return w;
    };
    if bytes.starts_with(b"#!") {
        // A script: what matters is its interpreter.
        let line = bytes[2..].split(|&b| b == b'\n').next().unwrap_or(&[]);
        let interp = line
            .split(|&b| b == b' ' || b == b'\t')
            .find(|s| !s.is_empty());
        if let Some(i) = interp {
            let i = Path::new(OsStr::from_bytes(i));
            if i != prog {
                w.extend(check_program(i));
            }
        }
        return w;
    }
    // Not ELF (or unreadable): exec says what it is.
    if let Ok(info) = elf::inspect(prog) {
        if !info.dynamic {
            w.push(format!("{name} is statically linked: it runs without ember (its connections are not fused)"));
        } else if info.go {
            w.push(format!("{name} is a Go program, which makes its system calls itself: it runs without ember (its connections are not fused)"));
        }
    }
    w
}

fn read_head(p: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(p)?;
    let mut b = vec![0u8; 256];
    let n = f.read(&mut b)?;
    b.truncate(n);
    Ok(b)
}

fn has_file_capabilities(p: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: both strings are NUL-terminated; a null buffer of size 0 asks for the
    // attribute's size only.
    let n = unsafe {
        libc::getxattr(
            c.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    n > 0
}

/// Just enough ELF to tell a static binary (no `PT_INTERP`) and a Go binary (a
/// `.go.buildinfo` section) from the others. Every offset read from the file is
/// bounds-checked: a malformed file is an error, never a panic.
pub mod elf {
    use std::io::{Error, ErrorKind, Read, Seek, SeekFrom};
    use std::path::Path;

    /// What the ELF file says.
    #[derive(Debug, PartialEq, Eq)]
    pub struct Info {
        /// It names an ELF interpreter (a dynamic linker).
        pub dynamic: bool,
        /// It has a `.go.buildinfo` section.
        pub go: bool,
    }

    const PT_INTERP: u32 = 3;
    const MAX_HEADERS: usize = 4096;

    fn bad(what: &str) -> Error {
        Error::new(ErrorKind::InvalidData, what.to_string())
    }

    struct Rd {
        b64: bool,
        le: bool,
    }

    impl Rd {
        fn u16(&self, b: &[u8], off: usize) -> Result<u64, Error> {
            let s = b.get(off..off + 2).ok_or_else(|| bad("short"))?;
            let a = [s[0], s[1]];
            Ok(u64::from(if self.le {
                u16::from_le_bytes(a)
            } else {
                u16::from_be_bytes(a)
            }))
        }
        fn u32(&self, b: &[u8], off: usize) -> Result<u64, Error> {
            let s = b.get(off..off + 4).ok_or_else(|| bad("short"))?;
            let a = [s[0], s[1], s[2], s[3]];
            Ok(u64::from(if self.le {
                u32::from_le_bytes(a)
            } else {
                u32::from_be_bytes(a)
            }))
        }
        fn word(&self, b: &[u8], off: usize) -> Result<u64, Error> {
            if !self.b64 {
                return self.u32(b, off);
            }
            let s = b.get(off..off + 8).ok_or_else(|| bad("short"))?;
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            Ok(if self.le {
                u64::from_le_bytes(a)
            } else {
                u64::from_be_bytes(a)
            })
        }
    }

    fn read_at(f: &mut std::fs::File, off: u64, len: usize) -> Result<Vec<u8>, Error> {
        if len > 1 << 24 {
            return Err(bad("table too large"));
        }
        f.seek(SeekFrom::Start(off))?;
        let mut v = vec![0u8; len];
        f.read_exact(&mut v)?;
        Ok(v)
    }

    /// Reads `path`'s ELF headers.
    pub fn inspect(path: &Path) -> Result<Info, Error> {
        let mut f = std::fs::File::open(path)?;
        let h = read_at(&mut f, 0, 64).or_else(|_| read_at(&mut f, 0, 52))?;
        parse(&h, |off, len| read_at(&mut f, off, len))
    }

    /// Parses an ELF header `h` (at least 52 bytes), reading tables through `read`.
    pub fn parse(
        h: &[u8],
        mut read: impl FnMut(u64, usize) -> Result<Vec<u8>, Error>,
    ) -> Result<Info, Error> {
        if h.len() < 52 || &h[..4] != b"\x7fELF" {
            return Err(bad("not ELF"));
        }
        let r = Rd {
            b64: match h[4] {
                1 => false,
                2 => true,
                _ => return Err(bad("class")),
            },
            le: match h[5] {
                1 => true,
                2 => false,
                _ => return Err(bad("data")),
            },
        };
        if r.b64 && h.len() < 64 {
            return Err(bad("short header"));
        }
        let (phoff, shoff, at) = if r.b64 {
            (r.word(h, 32)?, r.word(h, 40)?, 52)
        } else {
            (r.u32(h, 28)?, r.u32(h, 32)?, 40)
        };
        let phentsize = r.u16(h, at + 2)? as usize;
        let phnum = r.u16(h, at + 4)? as usize;
        let shentsize = r.u16(h, at + 6)? as usize;
        let shnum = r.u16(h, at + 8)? as usize;
        let shstrndx = r.u16(h, at + 10)? as usize;
        let min_ph = if r.b64 { 56 } else { 32 };
        let min_sh = if r.b64 { 64 } else { 40 };

        let mut dynamic = false;
        if phnum > 0 {
            if phentsize < min_ph || phnum > MAX_HEADERS {
                return Err(bad("program headers"));
            }
            let t = read(phoff, phentsize * phnum)?;
            for i in 0..phnum {
                if r.u32(&t, i * phentsize)? as u32 == PT_INTERP {
                    dynamic = true;
                }
            }
        }
        let mut go = false;
        if shnum > 0 && shstrndx < shnum {
            if shentsize < min_sh || shnum > MAX_HEADERS {
                return Err(bad("section headers"));
            }
            let t = read(shoff, shentsize * shnum)?;
            let (off_at, size_at) = if r.b64 { (24, 32) } else { (16, 20) };
            let strs_hdr = shstrndx * shentsize;
            let str_off = r.word(&t, strs_hdr + off_at)?;
            let str_size = r.word(&t, strs_hdr + size_at)? as usize;
            let strs = read(str_off, str_size.min(1 << 20))?;
            for i in 0..shnum {
                let name = r.u32(&t, i * shentsize)? as usize;
                if let Some(rest) = strs.get(name..) {
                    let n = rest.split(|&b| b == 0).next().unwrap_or(&[]);
                    if n == b".go.buildinfo" {
                        go = true;
                    }
                }
            }
        }
        Ok(Info { dynamic, go })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_checked_and_named_as_the_environment_names_them() {
        let env = settings(
            &[
                "tcp_fusion_rcv_unread_min=0".into(),
                "do_tcp_fusion = 1".into(),
            ],
            None,
        )
        .unwrap();
        assert_eq!(
            env,
            vec![
                ("EMBER_DO_TCP_FUSION".to_string(), "1".to_string()),
                (
                    "EMBER_TCP_FUSION_RCV_UNREAD_MIN".to_string(),
                    "0".to_string()
                ),
            ]
        );
        assert!(settings(&["tcp_nonesuch=1".into()], None).is_err());
        assert!(settings(&["do_tcp_fusion".into()], None)
            .unwrap_err()
            .contains("NAME=VALUE"));
        assert!(settings(&["tcp_fusion_rcv_unread_min=-3".into()], None).is_err());
    }

    #[test]
    fn the_config_file_gives_params_and_the_command_line_wins() {
        let dir = std::env::temp_dir().join(format!("ember-run-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("c.toml");
        std::fs::write(
            &f,
            "[params]\ntcp_fusion_rcv_unread_min = 4\ndo_tcp_fusion = 0\n",
        )
        .unwrap();
        let env = settings(&["do_tcp_fusion=1".into()], Some(&f)).unwrap();
        assert!(env.contains(&("EMBER_DO_TCP_FUSION".into(), "1".into())));
        assert!(env.contains(&("EMBER_TCP_FUSION_RCV_UNREAD_MIN".into(), "4".into())));
        std::fs::write(&f, "tap = \"tap0\"\n").unwrap();
        assert!(settings(&[], Some(&f))
            .unwrap_err()
            .contains("only the [params]"));
        assert!(settings(&[], Some(&dir.join("none.toml"))).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ld_preload_puts_the_library_first_once() {
        let lib = Path::new("/x/libember_preload.so");
        assert_eq!(
            ld_preload(lib, None),
            OsString::from("/x/libember_preload.so")
        );
        assert_eq!(
            ld_preload(lib, Some("/a.so:/x/libember_preload.so /b.so".into())),
            OsString::from("/x/libember_preload.so /a.so /b.so")
        );
    }

    #[test]
    fn the_library_is_found_from_the_environment_or_beside_the_binary() {
        let dir = std::env::temp_dir().join(format!("ember-run-lib-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("deps")).unwrap();
        let exe = dir.join("ember");
        std::fs::write(&exe, b"").unwrap();
        assert!(find_library(None, Some(exe.clone()))
            .unwrap_err()
            .contains("EMBER_PRELOAD"));
        std::fs::write(dir.join("deps").join(LIBRARY), b"").unwrap();
        assert!(find_library(None, Some(exe.clone()))
            .unwrap()
            .ends_with("deps/libember_preload.so"));
        std::fs::write(dir.join(LIBRARY), b"").unwrap();
        let beside = find_library(None, Some(exe.clone())).unwrap();
        assert_eq!(beside.parent(), std::fs::canonicalize(&dir).ok().as_deref());
        assert!(find_library(Some(dir.join("nope.so").into()), Some(exe.clone())).is_err());
        let own = find_library(Some(dir.join(LIBRARY).into()), None).unwrap();
        assert!(own.ends_with(LIBRARY));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn programs_the_library_cannot_enter_are_named() {
        // A dynamic ELF program: this test binary.
        let me = std::env::current_exe().unwrap();
        assert_eq!(
            elf::inspect(&me).unwrap(),
            elf::Info {
                dynamic: true,
                go: false
            }
        );
        assert!(check_program(&me).is_empty());
        // A script whose interpreter is a dynamic program.
        assert!(check_program(Path::new("/bin/sh")).is_empty());
        // Debian's ldconfig is a static binary.
        let ldconfig = Path::new("/sbin/ldconfig");
        if elf::inspect(ldconfig).is_ok_and(|i| !i.dynamic) {
            assert!(check_program(ldconfig)[0].contains("statically linked"));
        } else {
            eprintln!("static-binary check skipped: no static /sbin/ldconfig here");
        }
        // Set-user-ID.
        let dir = std::env::temp_dir().join(format!("ember-run-suid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let s = dir.join("prog");
        std::fs::write(&s, b"").unwrap();
        std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o4755)).unwrap();
        assert!(check_program(&s)[0].contains("set-user-ID"));
        std::fs::remove_dir_all(&dir).unwrap();
        // Truncated and garbage headers are errors, not panics.
        let h = std::fs::read(&me).unwrap();
        for n in [0, 4, 20, 51, 52, 63, 64] {
            let _ = elf::parse(&h[..n.min(h.len())], |_, _| {
                Err(std::io::ErrorKind::UnexpectedEof.into())
            });
        }
        let mut g = h[..64].to_vec();
        for b in &mut g[16..] {
            *b = 0xff;
        }
        assert!(elf::parse(&g, |o, l| h
            .get(o as usize..o as usize + l)
            .map(<[u8]>::to_vec)
            .ok_or(std::io::ErrorKind::UnexpectedEof.into()))
        .is_err());
    }
}
