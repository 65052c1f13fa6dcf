//! Reading settings from the environment: the helpers every layer uses, knowing nothing of
//! payments (the payment settings built on them are in [`crate::config`]).

use std::time::Duration;

/// A variable that is missing or does not parse.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// A required variable is absent or empty.
    #[error("environment variable {0} is required")]
    Missing(&'static str),
    /// A variable does not parse.
    #[error("environment variable {name} is invalid: {reason}")]
    Invalid {
        /// The variable.
        name: &'static str,
        /// Why.
        reason: String,
    },
}

/// Reads a required variable.
pub fn required(name: &'static str) -> Result<String, EnvError> {
    optional(name).ok_or(EnvError::Missing(name))
}

/// Reads an optional variable (empty counts as unset).
pub fn optional(name: &'static str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Reads an optional duration given in milliseconds.
pub fn millis(name: &'static str, default: Duration) -> Result<Duration, EnvError> {
    match optional(name) {
        None => Ok(default),
        Some(raw) => raw
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|e| EnvError::Invalid {
                name,
                reason: e.to_string(),
            }),
    }
}

/// Reads an optional unsigned number.
pub fn number(name: &'static str, default: u32) -> Result<u32, EnvError> {
    match optional(name) {
        None => Ok(default),
        Some(raw) => raw.parse::<u32>().map_err(|e| EnvError::Invalid {
            name,
            reason: e.to_string(),
        }),
    }
}
