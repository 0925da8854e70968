//! The runtime's clock: one monotonic epoch per process, so that every stack and every
//! in-memory link in the process share a time base. The protocol core takes time as a
//! parameter ([`ember_core::time::Instant`], nanoseconds since this epoch); this is the
//! only place the runtime reads the system clock for protocol purposes.

use ember_core::time::Instant;
use std::sync::OnceLock;

static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();

fn epoch() -> std::time::Instant {
    *EPOCH.get_or_init(std::time::Instant::now)
}

/// Now, on the core's clock.
pub fn now() -> Instant {
    let ns = epoch().elapsed().as_nanos();
    Instant::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// A core instant as a `std` instant (for parking until a deadline).
pub fn to_std(t: Instant) -> std::time::Instant {
    epoch() + std::time::Duration::from_nanos(t.as_nanos())
}

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic_and_convertible() {
        let a = super::now();
        let b = super::now();
        assert!(b >= a);
        let s = super::to_std(b);
        assert!(s <= std::time::Instant::now());
    }
}
