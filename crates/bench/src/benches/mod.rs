//! One file per bench: the workload, written once over [`crate::env::Conn`], run on
//! every variant the bench lists.

pub mod crr;
pub mod lsofin;
pub mod rr;
pub mod starvation;
pub mod stream;
