//! Measuring: process CPU time, latency histograms, medians, memory.
//!
//! CPU time is the whole process's user + system time (`getrusage(RUSAGE_SELF)`), so an
//! ember variant is charged for its squeue workers and a kernel variant for the system
//! time its syscalls (and the softirq work done on their behalf) take: per operation it
//! is the efficiency metric of the FireEngine paper. Latencies go into an HDR histogram
//! in nanoseconds (three significant digits), from which percentiles are read in µs.

use hdrhistogram::Histogram;
use std::time::Duration;

/// User + system CPU time of the whole process so far.
pub fn cpu_time() -> Duration {
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage through the pointer, which points at `ru`.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if r != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Resident set size of the process in bytes (from `/proc/self/statm`).
pub fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page.max(1) as u64
}

/// A latency histogram in nanoseconds, 1 ns to 100 s.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("valid histogram bounds")
}

/// Records one duration (clamped into the histogram's range).
pub fn record(h: &mut Histogram<u64>, d: Duration) {
    let ns = (d.as_nanos() as u64).clamp(1, h.high());
    h.saturating_record(ns);
}

/// The `q` quantile (0..=1) of a histogram, in microseconds.
pub fn quantile_us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

/// The median of some values (the mean of the middle two for an even count); NaNs sort
/// last. 0 for none.
pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

/// The `q` quantile of some values by nearest rank; 0 for none.
pub fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let i = ((s.len() as f64 * q).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_quantiles() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&v, 0.0), 1.0);
    }

    #[test]
    fn histogram_percentiles_in_us() {
        let mut h = histogram();
        for i in 1..=1000u64 {
            record(&mut h, Duration::from_micros(i));
        }
        let p50 = quantile_us(&h, 0.5);
        assert!((499.0..=501.0).contains(&p50), "{p50}");
        record(&mut h, Duration::from_secs(1000));
        assert!(quantile_us(&h, 1.0) <= 100_000_000.0 * 1.001);
    }

    #[test]
    fn cpu_time_moves_and_rss_is_plausible() {
        let t0 = cpu_time();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(cpu_time() > t0);
        assert!(rss_bytes() > 1 << 20);
    }
}
