//! Typed settings, read once at start-up from the environment the SAM template sets.

use std::time::Duration;

/// Why the configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
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
pub fn required(name: &'static str) -> Result<String, ConfigError> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or(ConfigError::Missing(name))
}

/// Reads an optional variable.
pub fn optional(name: &'static str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Reads an optional duration given in milliseconds.
pub fn millis(name: &'static str, default: Duration) -> Result<Duration, ConfigError> {
    match optional(name) {
        None => Ok(default),
        Some(raw) => {
            raw.parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|e| ConfigError::Invalid {
                    name,
                    reason: e.to_string(),
                })
        }
    }
}

/// Table names (`IDEMPOTENCY_TABLE`, `PAYMENTS_TABLE`).
pub fn tables() -> Result<crate::adapters::dynamodb::Tables, ConfigError> {
    Ok(crate::adapters::dynamodb::Tables {
        idempotency: required("IDEMPOTENCY_TABLE")?,
        payments: required("PAYMENTS_TABLE")?,
    })
}

/// The Stripe adapter's settings: `STRIPE_API_BASE` (default Stripe's), `STRIPE_API_KEY`,
/// `PSP_CONNECT_TIMEOUT_MS`, `PSP_TIMEOUT_MS`.
pub fn stripe() -> Result<crate::adapters::psp::StripeConfig, ConfigError> {
    let mut config = crate::adapters::psp::StripeConfig::new(
        optional("STRIPE_API_BASE").unwrap_or_else(|| "https://api.stripe.com".into()),
        required("STRIPE_API_KEY")?,
    );
    config.connect_timeout = millis("PSP_CONNECT_TIMEOUT_MS", config.connect_timeout)?;
    config.request_timeout = millis("PSP_TIMEOUT_MS", config.request_timeout)?;
    Ok(config)
}

/// Starts JSON logs for a Lambda function (level from `RUST_LOG`, default `info`).
pub fn init_lambda_tracing() {
    lambda_http::tracing::init_default_subscriber();
}

/// The webhook providers: `stripe` with `STRIPE_WEBHOOK_SECRETS` (comma-separated, two while
/// rotating) and, when `FAKE_WEBHOOK_SECRETS` is set, the fake PSP with the same scheme.
pub fn webhook_providers() -> Result<crate::service::webhooks::Providers, ConfigError> {
    let split = |raw: String| {
        raw.split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
    };
    let mut providers =
        crate::service::webhooks::Providers::new().with(crate::adapters::psp::StripeWebhooks::new(
            "stripe",
            split(required("STRIPE_WEBHOOK_SECRETS")?),
        ));
    if let Some(fake) = optional("FAKE_WEBHOOK_SECRETS") {
        providers = providers.with(crate::adapters::psp::StripeWebhooks::new(
            "fake",
            split(fake),
        ));
    }
    Ok(providers)
}

/// Reads an optional unsigned number.
pub fn number(name: &'static str, default: u32) -> Result<u32, ConfigError> {
    match optional(name) {
        None => Ok(default),
        Some(raw) => raw.parse::<u32>().map_err(|e| ConfigError::Invalid {
            name,
            reason: e.to_string(),
        }),
    }
}
