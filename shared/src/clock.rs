//! Time as a port: production reads the system clock, tests move a manual one.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in epoch milliseconds.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;

    /// Seconds since the Unix epoch (DynamoDB TTL attributes are in seconds).
    fn now_s(&self) -> i64 {
        self.now_ms().div_euclid(1000)
    }
}

/// Shared handle to a clock, as adapters and services hold it.
pub type SharedClock = Arc<dyn Clock>;

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

/// The system clock as a [`SharedClock`].
pub fn system_clock() -> SharedClock {
    Arc::new(SystemClock)
}

/// A clock that only moves when told to; for tests that cross leases and expiries without sleeping.
#[derive(Debug)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn at_ms(now_ms: i64) -> Arc<Self> {
        Arc::new(Self {
            now_ms: AtomicI64::new(now_ms),
        })
    }

    /// A clock standing at the current system time.
    pub fn at_system_time() -> Arc<Self> {
        Self::at_ms(SystemClock.now_ms())
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by_ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.now_ms.fetch_add(by_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

/// Converts a duration to whole milliseconds, saturating.
pub fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::at_ms(1_500);
        assert_eq!(clock.now_s(), 1);
        clock.advance(Duration::from_millis(600));
        assert_eq!(clock.now_ms(), 2_100);
        assert_eq!(clock.now_s(), 2);
    }
}
