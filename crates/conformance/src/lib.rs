//! # ember-conformance: packetdrill scripts against ember
//!
//! This crate is ember's packetdrill interpreter: it reads the scripts of the
//! packetdrill test corpus (timed packets, system calls, shell commands and `tcp_info`
//! assertions) and runs them against two backends, ember's own stack (driven through
//! its sans-IO core on a virtual clock) and the Linux kernel (over a TUN device), so
//! that the same script both checks ember and checks the script.
//!
//! The script language: [`script::parse`] turns a script into a
//! [`script::Script`] syntax tree, with errors that carry a line and a column. The
//! grammar is the one documented in packetdrill's `syntax.md`; the corpus under
//! `shared/conformance/packetdrill/gtests/net` is the test of coverage (every script
//! there parses, see `tests/corpus.rs`). [`profile`] holds the linux profile (the ember
//! tunables that make ember answer as Linux), the meaning of the scripts' shell lines
//! for those tunables, and the features a script needs that ember lacks.
//!
//! [`packets`] is the packet half of the interpreter: it builds the IPv4 datagrams of
//! inbound (`<`) lines and matches what the stack sends against outbound (`>`) lines,
//! reading the script's relative sequence numbers and timestamps in a [`packets::Flow`].
//!
//! [`runner`] is the loop both backends share (packetdrill's run.c and run_packet.c):
//! script time and tolerances, inbound packets built and outbound ones matched (GSO
//! trains merged), system-call results checked, the verdict; a backend implements its
//! `Backend` trait (clock, inject, capture, system calls, shell lines, code blocks).
//! `syscalls` decodes system-call arguments for both; `tcp_info` is ember's `tcp_info`.
//!
//! [`ember`] is the ember backend and [`run`] its public entry point:
//! [`run::run_script`] runs a parsed script against ember's sans-IO core on a virtual
//! clock and scores it (pass, fail with the line, unsupported with the reason).
//!
//! [`linux`] is the Linux backend: [`linux::run_script_linux`] runs the same script
//! against the kernel through a TUN device in a network namespace of its own, with real
//! system calls on a wall clock (root only). It is the interpreter's calibration: what
//! Linux fails here is an interpreter bug, not an ember bug. It is the only module with
//! `unsafe` (the system calls), each block with its `SAFETY:` reason.

#![deny(unsafe_code)]

pub mod corpus;
pub mod ember;
#[allow(unsafe_code)]
pub mod linux;
pub mod packets;
pub mod profile;
pub mod run;
pub mod runner;
pub mod script;
pub(crate) mod syscalls;
pub(crate) mod tcp_info;
