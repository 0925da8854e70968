//! `ember-xproc-check`: the scenario binary (see the library's docs for the design).
//!
//! `list`, `run NAME [--seed N]` (prints the transcript), and the internal `role ...` commands
//! that a scenario's coordinator starts by re-executing this binary.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    std::process::exit(ember_xproc_check::cli_main(args));
}
