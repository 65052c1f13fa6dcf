//! Fault injection shared by the store adapters.
//!
//! DynamoDB Local serialises transactions instead of failing them with
//! `TransactionConflict`, so the conflict path cannot be reached against it naturally. Every
//! store adapter consults a [`Faults`] before each request, and the conformance suite drives
//! the conflict path through it on every backend alike.
//!
//! The hooks exist only with the `faults` cargo feature, which tests and the simulation turn
//! on and no Lambda does: without it [`Faults`] is an empty type whose check is a constant
//! `false`, so a production binary carries no way to arm a fault.

#[cfg(feature = "faults")]
mod armed {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    /// Armed faults: the next `n` store requests fail as if DynamoDB reported a transaction
    /// conflict, or the next `m` as if the request failed on the way (a throttle, a lost
    /// connection).
    #[derive(Debug, Default, Clone)]
    pub struct Faults {
        conflicts: Arc<AtomicU32>,
        backend_failures: Arc<AtomicU32>,
    }

    impl Faults {
        /// No faults armed.
        pub fn none() -> Self {
            Self::default()
        }

        /// Makes the next `n` requests fail with a transaction conflict (before they are sent).
        pub fn inject_conflicts(&self, n: u32) {
            self.conflicts.store(n, Ordering::SeqCst);
        }

        /// Consumes one armed conflict, if any: true means "fail this request".
        pub fn take_conflict(&self) -> bool {
            take(&self.conflicts)
        }

        /// Makes the next `n` requests fail as a backend error (before they are sent).
        pub fn inject_backend_failures(&self, n: u32) {
            self.backend_failures.store(n, Ordering::SeqCst);
        }

        /// Consumes one armed backend failure, if any: true means "fail this request".
        pub fn take_backend_failure(&self) -> bool {
            take(&self.backend_failures)
        }
    }

    fn take(armed: &AtomicU32) -> bool {
        armed
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

#[cfg(not(feature = "faults"))]
mod armed {
    /// Without the `faults` feature nothing can be armed.
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Faults;

    impl Faults {
        /// No faults armed (and none can be).
        pub fn none() -> Self {
            Self
        }

        /// Always false: this build has no fault hooks.
        #[inline(always)]
        pub fn take_conflict(&self) -> bool {
            false
        }

        /// Always false: this build has no fault hooks.
        #[inline(always)]
        pub fn take_backend_failure(&self) -> bool {
            false
        }
    }
}

pub use armed::Faults;
