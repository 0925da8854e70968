//! The preload library of `ember run` (`../shared/spec/crossproc.md`): loaded into an
//! unmodified, dynamically linked program by `LD_PRELOAD`, it interposes the calls
//! through which the program uses TCP, so that two programs under `ember run` on one
//! host can be fused.
//!
//! # Layers
//! * `real` — the C library's functions behind the interposed ones, resolved lazily
//!   with `dlsym(RTLD_NEXT)`, so calls made before the library's constructor work.
//! * `fdtab` — what the library knows of each descriptor (an inet stream socket, a
//!   listener), created at the first inet socket: until then every lookup is one load.
//! * The interposers, one module per concern: `socket` (socket, bind, listen,
//!   connect, accept*, shutdown, *sockopt), `io` (read/write and every send/recv form,
//!   sendfile, splice, the `_chk` forms), `wait` (epoll, poll, select), `fd` (fcntl,
//!   ioctl, dup*, close*), `process` (fork, exec*, posix_spawn*, signals, uid and gid
//!   changes, `syscall()`), and `varargs.c` for what C declares variadic (`fcntl`,
//!   `ioctl`, `syscall`, `execl*`) and `vfork`, which stable Rust cannot define.
//!
//! Today every call passes through to the kernel: the library keeps the descriptor
//! table and changes nothing else, which is stage A of cross-process fusion.
//!
//! # Doing no harm
//! * Before the program's first `AF_INET`/`AF_INET6` stream socket the library starts
//!   no thread, maps nothing and installs no signal handler (tested in
//!   `tests/passthrough.rs`).
//! * `vfork` keeps its meaning: it jumps to the C library's `vfork` with the caller's
//!   return address untouched (`varargs.c`).
//! * Start-up cost: the library is loaded into every process the program starts, so
//!   its load time counts for programs that start many short processes. It links the
//!   unwinder statically (no `libgcc_s.so` to load) and binds its own imports lazily
//!   (`build.rs`); docs/PERFORMANCE.md gives the measured cost.
//! * No unwinding crosses the C boundary: a panic in an `extern "C"` function aborts.
//!
//! # Interposition and the C library
//! A program's calls to the C library's functions reach the library through the
//! dynamic linker; the C library's calls to its own functions (`fclose` closing a
//! socket, `system` spawning) do not, and raw system calls (static binaries, Go
//! programs) never do. The design keeps every socket a real kernel socket, so what the
//! library does not see still works, unfused.
#![allow(clippy::missing_safety_doc)] // every export's contract is its C prototype
pub mod errno;
pub mod fd;
pub mod fdtab;
pub mod fuse;
pub mod io;
pub mod process;
mod real;
pub mod socket;
pub mod wait;
