//! Builds the static peer used by the `exec-static` scenario.
//!
//! Design: a scenario must be able to exec an image that cannot load a preload library (the
//! spec's "exec into a static binary unfuses first, nothing lost"). Cargo cannot give one binary
//! of a package a different link mode, so this script invokes the same `rustc` directly on
//! `static/static_peer.rs` (std only, no crates) with `-C target-feature=+crt-static`. When that
//! fails (no static libc on the machine) the build still succeeds: the path is left empty and
//! the scenario records that it was skipped, identically in every run.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=static/static_peer.rs");
    println!("cargo:rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = std::env::var("TARGET").unwrap_or_default();
    let dest = out.join("ember-xproc-static-peer");
    let mut cmd = Command::new(rustc);
    cmd.arg("--edition=2021")
        .arg("-O")
        .arg("-C")
        .arg("target-feature=+crt-static")
        .arg("-o")
        .arg(&dest)
        .arg("static/static_peer.rs");
    if !target.is_empty() {
        cmd.arg("--target").arg(&target);
    }
    let ok = matches!(cmd.status(), Ok(s) if s.success());
    if ok {
        println!("cargo:rustc-env=EMBER_XPROC_STATIC_PEER={}", dest.display());
    } else {
        println!("cargo:warning=static peer not built (no static libc?); exec-static will skip");
        println!("cargo:rustc-env=EMBER_XPROC_STATIC_PEER=");
    }
}
