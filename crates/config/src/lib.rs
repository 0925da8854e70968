//! The `ember serve --config` file: a TOML document with the same keys as `ember serve`'s
//! long options (`_` for `-`) and the stack's tunables in a `[params]` table.
//!
//! # Design
//! [`parse`] is a pure function from the file's text to a checked [`FileConfig`]: it
//! reads no file, environment or clock, so that it can be unit-tested and fuzzed
//! (`fuzz/fuzz_targets/config_toml.rs`). It checks everything that can be checked
//! without the OS: the size limit ([`MAX_SIZE`]), the document's shape (unknown keys and
//! wrongly typed values are errors), every `[params]` value through
//! [`ember_core::params::Params`] (all of them at once, so relations between tunables are
//! checked too), and the ranges of the numeric options. The file must be valid on its
//! own. What needs the OS (the interface, the root directory, the environment's
//! `EMBER_<NAME>` settings) and the merge with the command line (which wins) stay in
//! `ember serve`, which checks the merged values again.

use ember_core::params::{ParamError, Params};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;
use std::path::PathBuf;

/// Largest configuration file, in bytes.
pub const MAX_SIZE: usize = 1 << 20;

/// The file's shape: every `ember serve` option, and the tunables.
#[derive(Deserialize, Debug, Default, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub tap: Option<String>,
    pub af_packet: Option<String>,
    pub addr: Option<String>,
    pub gw: Option<Ipv4Addr>,
    pub squeues: Option<usize>,
    pub queues: Option<usize>,
    pub offload: Option<bool>,
    pub mtu: Option<u32>,
    pub capture: Option<PathBuf>,
    pub capture_snaplen: Option<u32>,
    pub capture_max_bytes: Option<u64>,
    pub impair: Option<String>,
    pub root: Option<PathBuf>,
    pub echo_port: Option<u16>,
    pub discard_port: Option<u16>,
    pub chargen_port: Option<u16>,
    pub http_port: Option<u16>,
    pub iperf3_port: Option<u16>,
    pub max_conns: Option<usize>,
    /// Tunables, by name; see [`FileConfig::param_pairs`] for their text.
    #[serde(default)]
    pub params: BTreeMap<String, toml::Value>,
    pub duration: Option<f64>,
}

impl FileConfig {
    /// The `[params]` table as `(name, value)` text pairs, in name order, as
    /// `Params::set_many` takes them: a TOML string is its contents (`"1ms"` is `1ms`),
    /// any other value its TOML form (`1`, `true`).
    pub fn param_pairs(&self) -> Vec<(String, String)> {
        self.params
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), v)
            })
            .collect()
    }
}

/// Why a configuration file was refused. Its `Display` is the message for a person (the
/// caller names the file).
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigError {
    /// Longer than [`MAX_SIZE`] bytes (the length).
    TooLarge(usize),
    /// Not TOML, or not the file's shape: the TOML parser's message.
    Syntax(String),
    /// A `[params]` value that `Params` refuses.
    Param(ParamError),
    /// An option outside its range.
    Range {
        /// The option's key in the file.
        key: &'static str,
        /// The value and its valid range.
        message: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::TooLarge(_) => write!(f, "larger than 1 MiB"),
            ConfigError::Syntax(m) => f.write_str(m),
            // The wording of `ember serve`'s check of the merged tunables.
            ConfigError::Param(e @ ParamError::Unknown(n)) => write!(f, "param {n}: {e}"),
            ConfigError::Param(e) => write!(f, "param {e}"),
            ConfigError::Range { key, message } => write!(f, "{key} {message}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Parses and checks a configuration file's text (see the module documentation).
pub fn parse(text: &str) -> Result<FileConfig, ConfigError> {
    if text.len() > MAX_SIZE {
        return Err(ConfigError::TooLarge(text.len()));
    }
    let c: FileConfig = toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
    let pairs = c.param_pairs();
    Params::default()
        .set_many(&pairs)
        .map_err(ConfigError::Param)?;
    range("squeues", c.squeues, |&n| (1..=64).contains(&n), "1 ..= 64")?;
    range("queues", c.queues, |&n| (1..=64).contains(&n), "1 ..= 64")?;
    range(
        "mtu",
        c.mtu,
        |&m| (68..=65_535).contains(&m),
        "68 ..= 65535",
    )?;
    range(
        "capture_snaplen",
        c.capture_snaplen,
        |&n| (1..=262_144).contains(&n),
        "1 ..= 262144",
    )?;
    range(
        "capture_max_bytes",
        c.capture_max_bytes,
        |&m| m >= 1024,
        "at least 1024",
    )?;
    range(
        "max_conns",
        c.max_conns,
        |&n| (1..=65_536).contains(&n),
        "1 ..= 65536",
    )?;
    if let Some(d) = c.duration {
        if !(d.is_finite() && d > 0.0 && d <= 86_400.0) {
            return Err(ConfigError::Range {
                key: "duration",
                message: format!("{d}: must be > 0 and at most 86400 s"),
            });
        }
    }
    Ok(c)
}

/// `Err` when `value` is present and not `ok`.
fn range<T: fmt::Display>(
    key: &'static str,
    value: Option<T>,
    ok: impl Fn(&T) -> bool,
    valid: &str,
) -> Result<(), ConfigError> {
    match value {
        Some(v) if !ok(&v) => Err(ConfigError::Range {
            key,
            message: format!("{v}: must be {valid}"),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_file() {
        let c = parse(
            "tap = \"etap9\"\naddr = \"198.18.9.2/24\"\ngw = \"198.18.9.1\"\n\
             squeues = 2\noffload = true\nmtu = 9000\nhttp_port = 8080\nmax_conns = 65536\n\
             duration = 0.5\n[params]\ntcp_sack_permitted = 0\ntcp_tstamp_always = \"1\"\n",
        )
        .unwrap();
        assert_eq!(c.tap.as_deref(), Some("etap9"));
        assert_eq!(c.gw, Some(Ipv4Addr::new(198, 18, 9, 1)));
        assert_eq!(c.squeues, Some(2));
        assert_eq!(c.offload, Some(true));
        assert_eq!(c.http_port, Some(8080));
        assert_eq!(c.max_conns, Some(65536));
        assert_eq!(c.duration, Some(0.5));
        assert_eq!(
            c.param_pairs(),
            vec![
                ("tcp_sack_permitted".to_string(), "0".to_string()),
                ("tcp_tstamp_always".to_string(), "1".to_string())
            ]
        );
        assert_eq!(parse("").unwrap(), FileConfig::default());
        assert_eq!(parse("# nothing\n\n").unwrap(), FileConfig::default());
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = parse("tap = \"x\"\nbogus = 1\n").unwrap_err();
        assert!(matches!(e, ConfigError::Syntax(_)), "{e:?}");
        assert!(e.to_string().contains("bogus"), "{e}");
        let e = parse("[other]\nx = 1\n").unwrap_err();
        assert!(e.to_string().contains("other"), "{e}");
        let e = parse("[params]\nno_such_tunable = 1\n").unwrap_err();
        assert!(matches!(e, ConfigError::Param(ParamError::Unknown(_))));
        assert!(
            e.to_string()
                .starts_with("param no_such_tunable: unknown tunable 'no_such_tunable'"),
            "{e}"
        );
    }

    #[test]
    fn bad_params_are_refused() {
        let e = parse("[params]\ntcp_sack_permitted = 7\n").unwrap_err();
        assert!(matches!(e, ConfigError::Param(ParamError::Invalid { .. })));
        assert!(
            e.to_string().starts_with("param tcp_sack_permitted: "),
            "{e}"
        );
        for v in [
            "[1, 2]",
            "{ a = 1 }",
            "1.5",
            "-1",
            "\"\"",
            "99999999999999999",
        ] {
            let text = format!("[params]\ntcp_sack_permitted = {v}\n");
            assert!(parse(&text).is_err(), "{v}");
        }
    }

    #[test]
    fn relations_between_params_are_checked() {
        // Each value alone is in range; together they break tcp_recv_hiwat <= tcp_max_buf,
        // whichever key comes first.
        let e = parse("[params]\ntcp_max_buf = 65536\ntcp_recv_hiwat = 131072\n").unwrap_err();
        assert!(matches!(e, ConfigError::Param(_)), "{e:?}");
        assert!(e.to_string().contains("tcp_max_buf"), "{e}");
        // A buffer above the default maximum is fine when the maximum is raised with it.
        let max: u64 = Params::default()
            .get("tcp_max_buf")
            .unwrap()
            .parse()
            .unwrap();
        let big = max * 2;
        let alone = format!("[params]\ntcp_recv_hiwat = {big}\n");
        assert!(matches!(parse(&alone), Err(ConfigError::Param(_))));
        let text = format!(
            "[params]\ntcp_recv_hiwat = {big}\ntcp_max_buf = {}\n",
            big * 2
        );
        parse(&text).unwrap();
    }

    #[test]
    fn bad_types_are_refused() {
        for text in [
            "tap = 1",
            "squeues = \"2\"",
            "offload = \"yes\"",
            "gw = \"300.1.1.1\"",
            "gw = 5",
            "echo_port = 65536",
            "echo_port = -1",
            "duration = \"1s\"",
            "params = 3",
            "[params]\nx = 1\n[params]\ny = 2",
            "tap = \"a\"\ntap = \"b\"",
            "tap = \"unterminated",
        ] {
            let e = parse(text).unwrap_err();
            assert!(matches!(e, ConfigError::Syntax(_)), "{text}: {e:?}");
        }
    }

    #[test]
    fn ranges_are_checked() {
        for (text, want) in [
            ("max_conns = 0", "max_conns 0: must be 1 ..= 65536"),
            ("max_conns = 65537", "max_conns 65537: must be 1 ..= 65536"),
            ("squeues = 0", "squeues 0: must be 1 ..= 64"),
            ("queues = 65", "queues 65: must be 1 ..= 64"),
            ("mtu = 67", "mtu 67: must be 68 ..= 65535"),
            (
                "capture_snaplen = 0",
                "capture_snaplen 0: must be 1 ..= 262144",
            ),
            (
                "capture_max_bytes = 1023",
                "capture_max_bytes 1023: must be at least 1024",
            ),
            (
                "duration = 0",
                "duration 0: must be > 0 and at most 86400 s",
            ),
            (
                "duration = -1.5",
                "duration -1.5: must be > 0 and at most 86400 s",
            ),
            (
                "duration = 86400.5",
                "duration 86400.5: must be > 0 and at most 86400 s",
            ),
            (
                "duration = nan",
                "duration NaN: must be > 0 and at most 86400 s",
            ),
            (
                "duration = inf",
                "duration inf: must be > 0 and at most 86400 s",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert!(matches!(e, ConfigError::Range { .. }), "{text}: {e:?}");
            assert_eq!(e.to_string(), want);
        }
        parse("duration = 86400\nmax_conns = 1\nmtu = 68\nsqueues = 64").unwrap();
    }

    #[test]
    fn huge_numbers_are_refused() {
        for text in [
            "max_conns = 99999999999999999999999",
            "max_conns = 9223372036854775807",
            "mtu = 4294967296",
            "capture_max_bytes = -1",
            "duration = 1e400",
        ] {
            assert!(parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn size_limit() {
        let mut text = String::from("# ");
        text.push_str(&"x".repeat(MAX_SIZE - 2));
        assert!(parse(&text).is_ok());
        text.push('x');
        assert_eq!(
            parse(&text).unwrap_err(),
            ConfigError::TooLarge(MAX_SIZE + 1)
        );
        assert_eq!(
            ConfigError::TooLarge(MAX_SIZE + 1).to_string(),
            "larger than 1 MiB"
        );
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        // Within [params] any value parses as TOML first; nesting must not overflow the
        // stack (the parser limits its depth), and the tunable refuses the value.
        for depth in [10, 1000, 100_000] {
            let text = format!(
                "[params]\ntcp_sack_permitted = {}1{}\n",
                "[".repeat(depth),
                "]".repeat(depth)
            );
            assert!(parse(&text).is_err(), "arrays {depth}");
            let text = format!(
                "[params]\ntcp_sack_permitted = {}1{}\n",
                "{a = ".repeat(depth),
                "}".repeat(depth)
            );
            assert!(parse(&text).is_err(), "tables {depth}");
        }
        let text = format!("[{}]\n", vec!["a"; 100_000].join("."));
        assert!(parse(&text).is_err());
    }
}
