//! Where the packetdrill corpus is, and its scripts.
//!
//! The corpus is data kept outside the repository (`../shared/conformance/packetdrill`
//! beside the workspace, or `$EMBER_PACKETDRILL_CORPUS`); its scripts are the `*.pkt`
//! files under `gtests/net`. Tests that read it pass with a printed note when it is absent,
//! so that the workspace's tests run on a machine without it.

use std::io;
use std::path::{Path, PathBuf};

/// The environment variable that names the corpus directory.
pub const ENV: &str = "EMBER_PACKETDRILL_CORPUS";

/// The corpus directory: `$EMBER_PACKETDRILL_CORPUS`, else
/// `../shared/conformance/packetdrill` beside the workspace root this crate was built in.
pub fn default_root() -> PathBuf {
    match std::env::var_os(ENV) {
        Some(p) => PathBuf::from(p),
        // crates/conformance -> workspace root -> its parent.
        None => {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/packetdrill")
        }
    }
}

/// The `*.pkt` files below `dir`, sorted, each as (path relative to `dir`, full path).
pub fn scripts_under(dir: &Path) -> io::Result<Vec<(PathBuf, PathBuf)>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "pkt") {
                let rel = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
                files.push((rel, path));
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Every script of the corpus at `root` with its text (path relative to `gtests/net`), or
/// `None` after a printed note when the corpus is absent. For tests: an unreadable file
/// panics.
pub fn load(root: &Path) -> Option<Vec<(PathBuf, String)>> {
    let net = root.join("gtests/net");
    if !net.is_dir() {
        println!("skipped: corpus not found at {}", root.display());
        return None;
    }
    let files = scripts_under(&net).expect("read the corpus");
    Some(
        files
            .into_iter()
            .map(|(rel, full)| {
                let text = std::fs::read_to_string(&full)
                    .unwrap_or_else(|e| panic!("{}: {e}", full.display()));
                (rel, text)
            })
            .collect(),
    )
}
