//! One file per bench: the workload, written once over [`crate::env::Conn`], run on
//! every variant the bench lists.

pub mod crr;
pub(crate) mod ksock;
pub mod libmicro;
pub mod lsofin;
pub mod nagle;
pub mod rr;
pub mod scale;
pub mod slowreader;
pub mod starvation;
pub mod stream;
pub mod xproc;
