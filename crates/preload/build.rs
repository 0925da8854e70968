//! Compiles `src/varargs.c`: the variadic entry points (`fcntl`, `ioctl`, `syscall`,
//! `execl*`) and `vfork`, which stable Rust cannot define.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    println!("cargo:rerun-if-changed=src/exports.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/src/exports.map");
    println!("cargo:rerun-if-changed=src/varargs.c");
    // The unwinder linked in, privately: with it std's `_Unwind_*` references are
    // resolved before `-lgcc_s` is reached, so (with `--as-needed`) libgcc_s.so is not
    // loaded into every program. See the crate's design comment on start-up cost.
    let gcc_eh = std::process::Command::new("cc")
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| std::path::PathBuf::from(s.trim()));
    if let Some(dir) = gcc_eh
        .as_ref()
        .filter(|p| p.is_absolute())
        .and_then(|p| p.parent())
    {
        println!("cargo:rustc-link-search=native={}", dir.display());
        println!("cargo:rustc-link-lib=static:+whole-archive=gcc_eh");
    }
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,noseparate-code");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,lazy");
    cc::Build::new()
        .file("src/varargs.c")
        .flag_if_supported("-fno-strict-aliasing")
        .warnings(true)
        .link_lib_modifier("+whole-archive")
        .compile("ember_preload_varargs");

    // The vfork check of tests/passthrough.rs is C: calling vfork from Rust is not
    // sound (the compiler does not know it returns twice). Built here, where a C
    // compiler is known to exist, and named to the tests by EMBER_VFORK_PROBE.
    println!("cargo:rerun-if-changed=tests/c/vfork_exec.c");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let probe = out.join("vfork_exec");
    let status = cc::Build::new()
        .get_compiler()
        .to_command()
        .args(["-O1", "-o"])
        .arg(&probe)
        .arg(format!("{dir}/tests/c/vfork_exec.c"))
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "compiling tests/c/vfork_exec.c failed");
    println!("cargo:rustc-env=EMBER_VFORK_PROBE={}", probe.display());
}
