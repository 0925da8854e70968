//! Builds the static peer used by the `exec-static` scenario, and a deliberately broken
//! preload library used by the tests to prove that the gate catches a library that changes
//! an outcome.
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
    println!("cargo:rerun-if-changed=static/flip_preload.rs");
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
    build_flip(&out, &target);
    if ok {
        println!("cargo:rustc-env=EMBER_XPROC_STATIC_PEER={}", dest.display());
    } else {
        println!("cargo:warning=static peer not built (no static libc?); exec-static will skip");
        println!("cargo:rustc-env=EMBER_XPROC_STATIC_PEER=");
    }
}

/// The broken preload library (`static/flip_preload.rs`), exported as EMBER_XPROC_FLIP_LIB
/// (empty if it could not be built; the test that uses it then says it skipped).
fn build_flip(out: &std::path::Path, target: &str) {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let dest = out.join("libember_xproc_flip.so");
    let mut cmd = Command::new(rustc);
    cmd.arg("--edition=2021")
        .arg("-O")
        .arg("--crate-type=cdylib")
        .arg("--crate-name=ember_xproc_flip")
        .arg("-o")
        .arg(&dest)
        .arg("static/flip_preload.rs");
    if !target.is_empty() {
        cmd.arg("--target").arg(target);
    }
    if matches!(cmd.status(), Ok(s) if s.success()) {
        println!("cargo:rustc-env=EMBER_XPROC_FLIP_LIB={}", dest.display());
    } else {
        println!("cargo:warning=flip preload library not built");
        println!("cargo:rustc-env=EMBER_XPROC_FLIP_LIB=");
    }
}
