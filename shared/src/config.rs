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

/// The PSP's secrets: the API key and the webhook signing secrets.
#[derive(Clone, Default)]
pub struct PspSecrets {
    /// The secret API key.
    pub api_key: Option<String>,
    /// Webhook signing secrets (two while one rotates).
    pub webhook_secrets: Vec<String>,
}

impl std::fmt::Debug for PspSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PspSecrets")
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("webhook_secrets", &self.webhook_secrets.len())
            .finish()
    }
}

/// Loads the PSP secrets once at start-up: from the Secrets Manager secret named by
/// `PSP_SECRET_ARN` (JSON `{"api_key": "...", "webhook_secrets": "whsec_a,whsec_b"}`) in AWS,
/// or from `STRIPE_API_KEY` / `STRIPE_WEBHOOK_SECRETS` for local runs. Never from the template.
pub async fn psp_secrets(aws: &aws_config::SdkConfig) -> Result<PspSecrets, ConfigError> {
    match optional("PSP_SECRET_ARN") {
        Some(arn) => crate::adapters::secrets::load_psp_secrets(aws, &arn)
            .await
            .map_err(|reason| ConfigError::Invalid {
                name: "PSP_SECRET_ARN",
                reason,
            }),
        None => Ok(PspSecrets {
            api_key: optional("STRIPE_API_KEY"),
            webhook_secrets: optional("STRIPE_WEBHOOK_SECRETS")
                .map(|raw| split_list(&raw))
                .unwrap_or_default(),
        }),
    }
}

/// Splits a comma-separated list, dropping blanks.
pub fn split_list(raw: &str) -> Vec<String> {
    raw.split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The Stripe adapter's settings: `STRIPE_API_BASE` (default Stripe's), the API key from
/// `secrets`, `PSP_CONNECT_TIMEOUT_MS`, `PSP_TIMEOUT_MS`.
pub fn stripe(secrets: &PspSecrets) -> Result<crate::adapters::psp::StripeConfig, ConfigError> {
    let api_key = secrets.api_key.clone().ok_or(ConfigError::Missing(
        "the PSP API key (PSP_SECRET_ARN or STRIPE_API_KEY)",
    ))?;
    let mut config = crate::adapters::psp::StripeConfig::new(
        optional("STRIPE_API_BASE").unwrap_or_else(|| "https://api.stripe.com".into()),
        api_key,
    );
    config.connect_timeout = millis("PSP_CONNECT_TIMEOUT_MS", config.connect_timeout)?;
    config.request_timeout = millis("PSP_TIMEOUT_MS", config.request_timeout)?;
    Ok(config)
}

/// Starts JSON logs for a Lambda function, one object per line on stdout (CloudWatch reads
/// them as JSON). The level comes from `AWS_LAMBDA_LOG_LEVEL` (Lambda's logging controls) or
/// `RUST_LOG` as a plain level name (`error`, `warn`, `info`, `debug`, `trace`); default `info`.
pub fn init_lambda_tracing() {
    let level = optional("AWS_LAMBDA_LOG_LEVEL")
        .or_else(|| optional("RUST_LOG"))
        .and_then(|raw| {
            raw.trim()
                .to_ascii_lowercase()
                .parse::<tracing::Level>()
                .ok()
        })
        .unwrap_or(tracing::Level::INFO);
    tracing_subscriber::fmt()
        .json()
        .with_max_level(level)
        .with_current_span(false)
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .init();
}

/// The webhook providers: `stripe`, verifying with `secrets.webhook_secrets` (the processor,
/// which only parses verified events, may pass none).
pub fn webhook_providers(secrets: &PspSecrets) -> crate::service::webhooks::Providers {
    crate::service::webhooks::Providers::new().with(crate::adapters::psp::StripeWebhooks::new(
        "stripe",
        secrets.webhook_secrets.clone(),
    ))
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
