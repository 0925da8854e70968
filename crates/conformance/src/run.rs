//! The ember backend's public face: [`run_script`] runs a parsed script against ember's
//! sans-IO core on a virtual clock and scores it. The backend itself is
//! [`crate::ember`]; the verdict types are the shared runner's ([`crate::runner`]).

pub use crate::ember::{run_script, RunOptions, DEFAULT_LOCAL_IP, DEFAULT_REMOTE_IP};
pub use crate::runner::{Outcome, RunResult, DEFAULT_PORT, DEFAULT_TOLERANCE_US, REMOTE_PORT};
