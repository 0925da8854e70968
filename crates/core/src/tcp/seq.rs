//! TCP sequence numbers: 32-bit, compared modulo 2^32 (RFC 9293 §3.4, "Sequence Numbers").
//!
//! Every comparison between sequence numbers in ember goes through [`SeqNum`]; nothing
//! compares raw `u32`s. `a < b` means `b` lies in the half of the number space ahead of
//! `a`. Arithmetic wraps. No value of a `SeqNum` can make these operations panic.

use core::cmp::Ordering;
use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A TCP sequence number (RFC 9293 §3.4).
#[derive(Copy, Clone, Default, PartialEq, Eq, Hash)]
pub struct SeqNum(pub u32);

impl SeqNum {
    /// The raw 32-bit value, as carried on the wire.
    pub const fn raw(self) -> u32 {
        self.0
    }

    /// Signed distance from `other` to `self` (`self - other`), in -2^31..2^31.
    pub const fn diff(self, other: SeqNum) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// `self + n` (wrapping).
    pub const fn add_u32(self, n: u32) -> SeqNum {
        SeqNum(self.0.wrapping_add(n))
    }

    /// Bytes from `earlier` up to `self`, or 0 if `self` is not after `earlier`.
    pub const fn since(self, earlier: SeqNum) -> u32 {
        let d = self.diff(earlier);
        if d > 0 {
            d as u32
        } else {
            0
        }
    }

    /// `lo <= self < hi` modulo 2^32 (RFC 9293 §3.4, the acceptability ranges).
    pub fn in_range(self, lo: SeqNum, hi: SeqNum) -> bool {
        self.0.wrapping_sub(lo.0) < hi.0.wrapping_sub(lo.0)
    }

    /// `lo <= self <= hi` modulo 2^32.
    pub fn in_range_inclusive(self, lo: SeqNum, hi: SeqNum) -> bool {
        self.0.wrapping_sub(lo.0) <= hi.0.wrapping_sub(lo.0)
    }

    /// The later of two sequence numbers.
    pub fn max(self, other: SeqNum) -> SeqNum {
        if self >= other {
            self
        } else {
            other
        }
    }

    /// The earlier of two sequence numbers.
    pub fn min(self, other: SeqNum) -> SeqNum {
        if self <= other {
            self
        } else {
            other
        }
    }
}

impl PartialOrd for SeqNum {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SeqNum {
    /// Modular order. Not a total order over all of u32 (it is not transitive across
    /// more than half the space), which is what TCP wants for numbers within one window.
    fn cmp(&self, other: &Self) -> Ordering {
        self.diff(*other).cmp(&0)
    }
}

impl Add<u32> for SeqNum {
    type Output = SeqNum;
    fn add(self, n: u32) -> SeqNum {
        self.add_u32(n)
    }
}

impl AddAssign<u32> for SeqNum {
    fn add_assign(&mut self, n: u32) {
        *self = self.add_u32(n);
    }
}

impl Sub<u32> for SeqNum {
    type Output = SeqNum;
    fn sub(self, n: u32) -> SeqNum {
        SeqNum(self.0.wrapping_sub(n))
    }
}

impl Sub<SeqNum> for SeqNum {
    type Output = i32;
    fn sub(self, other: SeqNum) -> i32 {
        self.diff(other)
    }
}

impl fmt::Debug for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps() {
        let a = SeqNum(u32::MAX - 10);
        let b = a + 20;
        assert_eq!(b.raw(), 9);
        assert!(a < b);
        assert_eq!(b - a, 20);
        assert_eq!(b.since(a), 20);
        assert_eq!(a.since(b), 0);
        assert!(SeqNum(0).in_range(a, b));
        assert!(!b.in_range(a, b));
        assert!(b.in_range_inclusive(a, b));
    }

    proptest! {
        #[test]
        fn order_is_antisymmetric(x: u32, d in 1u32..0x7fff_ffff) {
            let a = SeqNum(x);
            let b = a + d;
            prop_assert!(a < b);
            prop_assert!(b > a);
            prop_assert_eq!(b - a, d as i32);
            prop_assert_eq!(b.since(a), d);
            prop_assert!(a.in_range(a, b));
            prop_assert!(!b.in_range(a, b));
        }
    }
}
