//! Random identifiers (payment, order and attempt ids, lease tokens, message ids).
//!
//! Production draws them from the operating system's randomness (UUID v4). Builds with the
//! `faults` feature (tests and the simulation) can make one thread draw them from a seeded
//! generator instead, so a simulation run is the same for the same seed.

/// A new random UUID.
pub fn new_uuid() -> uuid::Uuid {
    #[cfg(feature = "faults")]
    if let Some(bytes) = seeded::next_bytes() {
        return uuid::Builder::from_random_bytes(bytes).into_uuid();
    }
    uuid::Uuid::new_v4()
}

#[cfg(feature = "faults")]
mod seeded {
    use std::cell::RefCell;

    thread_local! {
        static RNG: RefCell<Option<fastrand::Rng>> = const { RefCell::new(None) };
    }

    pub(super) fn next_bytes() -> Option<[u8; 16]> {
        RNG.with(|rng| {
            rng.borrow_mut().as_mut().map(|rng| {
                let mut bytes = [0u8; 16];
                rng.fill(&mut bytes);
                bytes
            })
        })
    }

    /// Makes this thread's ids come from a generator seeded with `seed` (`None`: the OS again).
    pub fn seed_thread(seed: Option<u64>) {
        RNG.with(|rng| *rng.borrow_mut() = seed.map(fastrand::Rng::with_seed));
    }
}

#[cfg(feature = "faults")]
pub use seeded::seed_thread;
