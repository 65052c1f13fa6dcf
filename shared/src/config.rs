//! Typed settings, read once at start-up from the environment the SAM template sets.
//!
//! The PSP: one per deployment, `PSP` = `stripe` (default) | `omise` | `2c2p` (template parameter
//! `Psp`), its API base in `PSP_API_BASE` (Stripe also reads the older `STRIPE_API_BASE`). Its
//! credentials are split in two Secrets Manager secrets, so the public webhook receiver never
//! holds the key that moves money (see [`SecretRole`]):
//!
//! | `PSP` | PSP API secret (`PSP_SECRET_ARN`) | webhook secret (`PSP_WEBHOOK_SECRET_ARN`) |
//! |---|---|---|
//! | `stripe` | `{"api_key": "sk_…"}` | `{"webhook_secrets": "whsec_…[,whsec_…]"}` |
//! | `omise` | `{"secret_key": "skey_…"}` | `{"webhook_secrets": "<base64>[,<base64>]"}` |
//! | `2c2p` | `{"merchant_id": "…", "secret_key": "…"}` | the same JSON (see below) |
//!
//! The charge, refund and reconcile functions read only the API secret; the receiver only the
//! webhook secret; the processor only the webhook secret, and only for 2C2P. 2C2P signs its
//! backend notifications with the merchant's secret key, the key that also signs our API
//! requests: its webhook secret is a copy of the merchant id and key, so for 2C2P the receiver
//! does hold a key that could call the API. The split still keeps the receiver's policy to one
//! secret and the API secret out of it.
//!
//! A function refuses to start when its secret is missing or unreadable, a field its PSP needs is
//! missing or blank, or a webhook secret is empty (anyone can compute an HMAC under an empty key)
//! or unusable; the error names the secret and the field, never a value. Secrets are re-read
//! after `SECRETS_TTL_SECONDS` (default 300; see [`crate::secrets`]), so a rotation takes effect
//! without recycling instances.

use crate::adapters::psp::ConfiguredPsp;
use crate::ports::WebhookScheme;
use crate::secrets::{
    FixedSecret, Refreshing, RefreshingPsp, RefreshingScheme, SecretRead, SecretsManagerSecret,
};
use crate::service::webhooks::Providers;
use std::sync::Arc;
use std::time::Duration;

/// Which of the two PSP secrets: each function's policy grants only the one it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretRole {
    /// The PSP API secret (`PSP_SECRET_ARN`): the credentials that charge and refund. Read by
    /// the charge, refund and reconcile functions only.
    Api,
    /// The webhook secret (`PSP_WEBHOOK_SECRET_ARN`): the signing secrets of the PSP's webhooks
    /// (for 2C2P, the merchant id and key, which sign its notifications). Read by the webhook
    /// receiver, and by the processor for 2C2P only.
    Webhook,
}

impl SecretRole {
    /// The variable holding the secret's ARN in AWS.
    pub fn arn_variable(self) -> &'static str {
        match self {
            SecretRole::Api => "PSP_SECRET_ARN",
            SecretRole::Webhook => "PSP_WEBHOOK_SECRET_ARN",
        }
    }

    /// The variable holding the secret's JSON in local runs without Secrets Manager.
    pub fn json_variable(self) -> &'static str {
        match self {
            SecretRole::Api => "PSP_SECRET",
            SecretRole::Webhook => "PSP_WEBHOOK_SECRET",
        }
    }

    /// Stripe's older local variable for this secret's one field.
    fn stripe_variable(self) -> &'static str {
        match self {
            SecretRole::Api => "STRIPE_API_KEY",
            SecretRole::Webhook => "STRIPE_WEBHOOK_SECRETS",
        }
    }
}

impl std::fmt::Display for SecretRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretRole::Api => write!(f, "PSP API secret ({})", self.arn_variable()),
            SecretRole::Webhook => write!(f, "PSP webhook secret ({})", self.arn_variable()),
        }
    }
}

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
    /// A PSP secret lacks what the configured PSP needs (never carries a value).
    #[error("the {secret} for PSP={psp} is refused: `{field}` {problem}")]
    Secret {
        /// Which secret.
        secret: SecretRole,
        /// The configured PSP.
        psp: &'static str,
        /// The secret's field.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The PSP adapter's HTTP client could not be built.
    #[error("the PSP's HTTP client could not be built: {0}")]
    PspClient(#[source] reqwest::Error),
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

/// The PSP a deployment uses (`PSP`; one per deployment): it picks the adapter of the charge,
/// refund and reconcile functions, the one webhook scheme the receiver and processor accept, and
/// the charge limits orders are checked against.
pub use crate::domain::PspKind;

impl PspKind {
    /// The name in `PSP`, on payments and in `/webhooks/{provider}`.
    pub fn name(self) -> &'static str {
        match self {
            PspKind::Stripe => "stripe",
            PspKind::Omise => crate::adapters::psp::omise_webhook::OMISE_PROVIDER,
            PspKind::TwoC2p => crate::adapters::psp::twoc2p_webhook::TWOC2P_PROVIDER,
        }
    }

    /// The PSP named `name` (exactly as [`PspKind::name`] writes it).
    pub fn from_name(name: &str) -> Result<Self, ConfigError> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| ConfigError::Invalid {
                name: "PSP",
                reason: format!(
                    "{name:?} is not a PSP payonce speaks; expected one of {}",
                    Self::ALL.map(Self::name).join(", ")
                ),
            })
    }

    /// `PSP`, `stripe` when unset.
    pub fn from_env() -> Result<Self, ConfigError> {
        optional("PSP").map_or(Ok(PspKind::Stripe), |name| Self::from_name(&name))
    }

    /// The API base used when none is configured. Stripe and Omise serve test and live keys on
    /// one host; 2C2P has a separate sandbox, used unless `live`.
    pub fn default_api_base(self, live: bool) -> &'static str {
        match self {
            PspKind::Stripe => STRIPE_API_BASE,
            PspKind::Omise => crate::adapters::psp::omise::OMISE_API_BASE,
            PspKind::TwoC2p if live => crate::adapters::psp::twoc2p::PRODUCTION_BASE_URL,
            PspKind::TwoC2p => crate::adapters::psp::twoc2p::SANDBOX_BASE_URL,
        }
    }
}

/// Stripe's API base URL.
pub const STRIPE_API_BASE: &str = "https://api.stripe.com";

/// How the configured PSP is reached: read once at start-up by [`PspSettings::from_env`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PspSettings {
    /// Which PSP (`PSP`).
    pub kind: PspKind,
    /// Its API base URL (see [`api_base`]).
    pub api_base: String,
    /// `PSP_CONNECT_TIMEOUT_MS`, if set (else the adapter's 3 s).
    pub connect_timeout: Option<Duration>,
    /// `PSP_TIMEOUT_MS`, if set (else the adapter's 10 s).
    pub request_timeout: Option<Duration>,
}

impl PspSettings {
    /// `PSP`; the API base ([`api_base`] of `PSP_API_BASE`, `STRIPE_API_BASE` and whether
    /// `PSP_LIVEMODE` is `true`); `PSP_CONNECT_TIMEOUT_MS` and `PSP_TIMEOUT_MS`.
    pub fn from_env() -> Result<Self, ConfigError> {
        let kind = PspKind::from_env()?;
        let optional_millis = |name: &'static str| {
            optional(name)
                .map(|_| millis(name, Duration::ZERO))
                .transpose()
        };
        Ok(Self {
            kind,
            api_base: api_base(
                kind,
                optional("PSP_API_BASE"),
                optional("STRIPE_API_BASE"),
                optional("PSP_LIVEMODE").as_deref() == Some("true"),
            ),
            connect_timeout: optional_millis("PSP_CONNECT_TIMEOUT_MS")?,
            request_timeout: optional_millis("PSP_TIMEOUT_MS")?,
        })
    }

    /// The settings of `kind` at its default API base (test mode), adapter timeouts.
    pub fn defaults(kind: PspKind) -> Self {
        Self {
            kind,
            api_base: kind.default_api_base(false).to_owned(),
            connect_timeout: None,
            request_timeout: None,
        }
    }
}

/// The API base of `kind`: `PSP_API_BASE` (`psp_api_base`) if set; for Stripe only, else the
/// older `STRIPE_API_BASE` (`stripe_api_base`, which local scripts still set); else the PSP's
/// default ([`PspKind::default_api_base`], 2C2P's production host only when `live`).
pub fn api_base(
    kind: PspKind,
    psp_api_base: Option<String>,
    stripe_api_base: Option<String>,
    live: bool,
) -> String {
    psp_api_base
        .or(stripe_api_base.filter(|_| kind == PspKind::Stripe))
        .unwrap_or_else(|| kind.default_api_base(live).to_owned())
}

/// A PSP secret's fields, as read from its JSON (see [`SecretRole`] for the two secrets' shapes).
/// Which ones a PSP needs is checked by [`PspSecrets::check_api`] and
/// [`PspSecrets::check_webhook`]; nothing here is ever logged (`Debug` shows only what is set).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PspSecrets {
    /// `api_key`: Stripe's secret API key.
    pub api_key: Option<String>,
    /// `secret_key`: Omise's secret key (`skey_…`), or the 2C2P merchant's secret key.
    pub secret_key: Option<String>,
    /// `merchant_id`: the 2C2P merchant id.
    pub merchant_id: Option<String>,
    /// `webhook_secrets`: Stripe's or Omise's webhook signing secrets (two while one rotates).
    pub webhook_secrets: Vec<String>,
}

impl std::fmt::Debug for PspSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |value: &Option<String>| value.as_ref().map(|_| "<redacted>");
        f.debug_struct("PspSecrets")
            .field("api_key", &shown(&self.api_key))
            .field("secret_key", &shown(&self.secret_key))
            .field("merchant_id", &self.merchant_id)
            .field("webhook_secrets", &self.webhook_secrets.len())
            .finish()
    }
}

impl PspSecrets {
    /// Checks the PSP API secret has `kind`'s shape: Stripe's `api_key`, Omise's `secret_key`,
    /// 2C2P's `merchant_id` and `secret_key`, each present and not blank. Other fields are
    /// ignored. Errors name the secret and the field, never a value.
    pub fn check_api(&self, kind: PspKind) -> Result<(), ConfigError> {
        let text = Self::text(SecretRole::Api, kind);
        match kind {
            PspKind::Stripe => text("api_key", &self.api_key),
            PspKind::Omise => text("secret_key", &self.secret_key),
            PspKind::TwoC2p => {
                text("merchant_id", &self.merchant_id)?;
                text("secret_key", &self.secret_key)
            }
        }
    }

    /// Checks the webhook secret has `kind`'s shape: for Stripe and Omise at least one
    /// `webhook_secrets` entry, none of them blank (an HMAC under an empty key is one anyone can
    /// compute), Omise's each valid base64; for 2C2P the `merchant_id` and `secret_key` that sign
    /// its notifications. Every function that reads the secret checks the whole shape, so a
    /// wrong secret stops the first deploy, not a webhook days later.
    pub fn check_webhook(&self, kind: PspKind) -> Result<(), ConfigError> {
        if kind == PspKind::TwoC2p {
            let text = Self::text(SecretRole::Webhook, kind);
            text("merchant_id", &self.merchant_id)?;
            return text("secret_key", &self.secret_key);
        }
        let refused = |problem: String| ConfigError::Secret {
            secret: SecretRole::Webhook,
            psp: kind.name(),
            field: "webhook_secrets",
            problem,
        };
        if self.webhook_secrets.is_empty() {
            return Err(refused("is missing or empty".into()));
        }
        if let Some(i) = self
            .webhook_secrets
            .iter()
            .position(|s| s.trim().is_empty())
        {
            return Err(refused(format!(
                "holds an empty entry (#{i}): anyone could sign with an empty key"
            )));
        }
        if kind == PspKind::Omise {
            crate::adapters::psp::OmiseWebhooks::new(&self.webhook_secrets)
                .map_err(|e| refused(format!("is unusable: {e}")))?;
        }
        Ok(())
    }

    /// A check that a text field of `secret` is present and not blank.
    fn text(
        secret: SecretRole,
        kind: PspKind,
    ) -> impl Fn(&'static str, &Option<String>) -> Result<(), ConfigError> {
        move |field, value| match value {
            Some(v) if !v.trim().is_empty() => Ok(()),
            _ => Err(ConfigError::Secret {
                secret,
                psp: kind.name(),
                field,
                problem: "is missing, empty or not a string".into(),
            }),
        }
    }

    /// The value of a field a check has passed.
    fn field(value: &Option<String>) -> String {
        value.clone().unwrap_or_default()
    }
}

/// Where a secret comes from, as the environment says (see [`secret_origin`]).
#[derive(Debug)]
pub enum SecretOrigin {
    /// A Secrets Manager secret (its ARN), re-read after the TTL.
    Arn(String),
    /// Fixed at start-up: a local run's JSON, or Stripe's local variable.
    Fixed(PspSecrets),
}

/// Where `role`'s secret comes from: in AWS, the Secrets Manager secret whose ARN is `arn`
/// (`PSP_SECRET_ARN` / `PSP_WEBHOOK_SECRET_ARN`); in local runs without AWS, the same JSON in
/// `json` (`PSP_SECRET` / `PSP_WEBHOOK_SECRET`), or for Stripe its one field in `stripe`
/// (`STRIPE_API_KEY` / `STRIPE_WEBHOOK_SECRETS`, comma-separated). None of them set is a
/// [`ConfigError::Missing`] naming the ARN variable; JSON that does not parse names its variable.
pub fn secret_origin(
    role: SecretRole,
    kind: PspKind,
    arn: Option<String>,
    json: Option<String>,
    stripe: Option<String>,
) -> Result<SecretOrigin, ConfigError> {
    if let Some(arn) = arn {
        return Ok(SecretOrigin::Arn(arn));
    }
    if let Some(json) = json {
        return crate::adapters::secrets::parse_psp_secrets(&json)
            .map(SecretOrigin::Fixed)
            .map_err(|reason| ConfigError::Invalid {
                name: role.json_variable(),
                reason,
            });
    }
    match stripe.filter(|_| kind == PspKind::Stripe) {
        Some(value) => Ok(SecretOrigin::Fixed(match role {
            SecretRole::Api => PspSecrets {
                api_key: Some(value),
                ..PspSecrets::default()
            },
            SecretRole::Webhook => PspSecrets {
                webhook_secrets: split_list(&value),
                ..PspSecrets::default()
            },
        })),
        None => Err(ConfigError::Missing(role.arn_variable())),
    }
}

/// The source of `role`'s secret for `kind`, from the environment ([`secret_origin`]).
pub fn secret_source(
    aws: &aws_config::SdkConfig,
    role: SecretRole,
    kind: PspKind,
) -> Result<Box<dyn SecretRead>, ConfigError> {
    Ok(
        match secret_origin(
            role,
            kind,
            optional(role.arn_variable()),
            optional(role.json_variable()),
            optional(role.stripe_variable()),
        )? {
            SecretOrigin::Arn(arn) => Box::new(SecretsManagerSecret::new(aws, arn, role)),
            SecretOrigin::Fixed(secrets) => Box::new(FixedSecret(secrets)),
        },
    )
}

/// Splits a comma-separated list, dropping blanks.
pub fn split_list(raw: &str) -> Vec<String> {
    raw.split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The configured PSP's adapter ([`PspSettings::from_env`]) with the credentials of the PSP API
/// secret ([`secret_source`]), checked at start-up ([`PspSecrets::check_api`]: a start-up
/// failure) and rebuilt when the secret has changed after `SECRETS_TTL_SECONDS`.
pub async fn psp(aws: &aws_config::SdkConfig) -> Result<RefreshingPsp<ConfiguredPsp>, ConfigError> {
    let settings = PspSettings::from_env()?;
    let source = secret_source(aws, SecretRole::Api, settings.kind)?;
    let cache = Refreshing::load(
        SecretRole::Api,
        source,
        Box::new(move |secrets: &PspSecrets| psp_with(&settings, secrets)),
        crate::clock::system_clock(),
        crate::secrets::ttl_from_env()?,
    )
    .await?;
    Ok(RefreshingPsp::new(cache))
}

/// The PSP adapter for `settings` with the credentials of the PSP API secret `secrets`, whose
/// shape is checked first ([`PspSecrets::check_api`]).
pub fn psp_with(
    settings: &PspSettings,
    secrets: &PspSecrets,
) -> Result<ConfiguredPsp, ConfigError> {
    use crate::adapters::psp::{
        OmiseConfig, OmisePsp, StripeConfig, StripePsp, TwoC2pConfig, TwoC2pPsp,
    };
    secrets.check_api(settings.kind)?;
    let timeouts = |connect: &mut Duration, request: &mut Duration| {
        if let Some(limit) = settings.connect_timeout {
            *connect = limit;
        }
        if let Some(limit) = settings.request_timeout {
            *request = limit;
        }
    };
    let base = settings.api_base.clone();
    Ok(match settings.kind {
        PspKind::Stripe => {
            let mut config = StripeConfig::new(base, PspSecrets::field(&secrets.api_key));
            timeouts(&mut config.connect_timeout, &mut config.request_timeout);
            ConfiguredPsp::Stripe(StripePsp::new(config).map_err(ConfigError::PspClient)?)
        }
        PspKind::Omise => {
            let mut config =
                OmiseConfig::new(PspSecrets::field(&secrets.secret_key)).with_base_url(base);
            timeouts(&mut config.connect_timeout, &mut config.request_timeout);
            ConfiguredPsp::Omise(OmisePsp::new(config).map_err(ConfigError::PspClient)?)
        }
        PspKind::TwoC2p => {
            let mut config = TwoC2pConfig::new(
                base,
                PspSecrets::field(&secrets.merchant_id),
                PspSecrets::field(&secrets.secret_key),
            );
            timeouts(&mut config.connect_timeout, &mut config.request_timeout);
            ConfiguredPsp::TwoC2p(TwoC2pPsp::new(config).map_err(|e| match e {
                crate::adapters::psp::twoc2p::TwoC2pSetupError::Http(e) => {
                    ConfigError::PspClient(e)
                }
                crate::adapters::psp::twoc2p::TwoC2pSetupError::Config(e) => ConfigError::Secret {
                    secret: SecretRole::Api,
                    psp: "2c2p",
                    field: "merchant_id/secret_key",
                    problem: e.to_string(),
                },
            })?)
        }
    })
}

/// The configured PSP's verifying webhook scheme (`PSP`), from the webhook secret
/// ([`secret_source`]), checked at start-up ([`PspSecrets::check_webhook`]: a start-up failure)
/// and rebuilt when the secret has changed after `SECRETS_TTL_SECONDS`. The receiver registers
/// only this scheme ([`RefreshingScheme::providers`]): deliveries for any other provider are
/// answered 404.
pub async fn webhook_scheme(aws: &aws_config::SdkConfig) -> Result<RefreshingScheme, ConfigError> {
    webhook_scheme_for(aws, PspKind::from_env()?).await
}

async fn webhook_scheme_for(
    aws: &aws_config::SdkConfig,
    kind: PspKind,
) -> Result<RefreshingScheme, ConfigError> {
    let source = secret_source(aws, SecretRole::Webhook, kind)?;
    let cache = Refreshing::load(
        SecretRole::Webhook,
        source,
        Box::new(move |secrets: &PspSecrets| verifying_scheme(kind, secrets)),
        crate::clock::system_clock(),
        crate::secrets::ttl_from_env()?,
    )
    .await?;
    Ok(RefreshingScheme::new(cache))
}

/// `kind`'s verifying scheme under its name (`stripe`, `omise` or `2c2p`), from the webhook
/// secret `secrets`, whose shape is checked first ([`PspSecrets::check_webhook`]).
pub fn verifying_scheme(
    kind: PspKind,
    secrets: &PspSecrets,
) -> Result<Arc<dyn WebhookScheme>, ConfigError> {
    use crate::adapters::psp::{OmiseWebhooks, StripeWebhooks, TwoC2pNotifications};
    secrets.check_webhook(kind)?;
    let refused = |field: &'static str, problem: String| ConfigError::Secret {
        secret: SecretRole::Webhook,
        psp: kind.name(),
        field,
        problem,
    };
    Ok(match kind {
        PspKind::Stripe => Arc::new(StripeWebhooks::new(
            kind.name(),
            secrets.webhook_secrets.clone(),
        )),
        PspKind::Omise => Arc::new(
            OmiseWebhooks::new(&secrets.webhook_secrets)
                .map_err(|e| refused("webhook_secrets", e.to_string()))?
                .with_provider(kind.name()),
        ),
        PspKind::TwoC2p => Arc::new(
            TwoC2pNotifications::new(
                PspSecrets::field(&secrets.merchant_id),
                PspSecrets::field(&secrets.secret_key),
            )
            .map_err(|e| refused("merchant_id/secret_key", e.to_string()))?
            .with_provider(kind.name()),
        ),
    })
}

/// A scheme shared behind an `Arc`, to register in [`Providers`].
struct SharedScheme(Arc<dyn WebhookScheme>);

impl WebhookScheme for SharedScheme {
    fn provider(&self) -> &str {
        self.0.provider()
    }

    fn verify(
        &self,
        headers: &lambda_http::http::HeaderMap,
        body: &[u8],
        now_s: i64,
    ) -> Result<(), crate::ports::SignatureError> {
        self.0.verify(headers, body, now_s)
    }

    fn parse(&self, body: &[u8]) -> Result<crate::ports::PspEvent, serde_json::Error> {
        self.0.parse(body)
    }
}

/// The receiver's providers for an explicit PSP, fixed (no refresh): only `kind`'s scheme,
/// verifying with the webhook secret `secrets` ([`verifying_scheme`]).
pub fn webhook_providers_for(
    kind: PspKind,
    secrets: &PspSecrets,
) -> Result<Providers, ConfigError> {
    Ok(Providers::new().with(SharedScheme(verifying_scheme(kind, secrets)?)))
}

/// The webhook processor's providers: the configured PSP's scheme (`PSP`), to read the events
/// the receiver verified and queued. Stripe's and Omise's events are read without a secret
/// ([`ParseOnlyWebhooks`], which never verifies), so for them the processor reads no secret. A
/// 2C2P notification is a signed JWT whose claims its scheme reads only after verifying them
/// with the merchant's secret key, and checks against the merchant id: for 2C2P the processor
/// loads the webhook secret (`PSP_WEBHOOK_SECRET_ARN`; the template grants it only when `Psp` is
/// `2c2p`), and returns its [`RefreshingScheme`] for the entry point to refresh before each batch.
///
/// [`ParseOnlyWebhooks`]: crate::adapters::psp::ParseOnlyWebhooks
pub async fn webhook_parsers(
    aws: &aws_config::SdkConfig,
) -> Result<(Providers, Option<RefreshingScheme>), ConfigError> {
    let kind = PspKind::from_env()?;
    match kind {
        PspKind::TwoC2p => {
            let scheme = webhook_scheme_for(aws, kind).await?;
            Ok((scheme.providers(), Some(scheme)))
        }
        PspKind::Stripe | PspKind::Omise => Ok((webhook_parsers_for(kind, None)?, None)),
    }
}

/// The processor's providers for an explicit PSP, fixed (no refresh); `secrets` (the webhook
/// secret) is needed for 2C2P only.
pub fn webhook_parsers_for(
    kind: PspKind,
    secrets: Option<&PspSecrets>,
) -> Result<Providers, ConfigError> {
    use crate::adapters::psp::ParseOnlyWebhooks;
    Ok(match kind {
        PspKind::Stripe => Providers::new().with(ParseOnlyWebhooks::stripe(kind.name())),
        PspKind::Omise => Providers::new().with(ParseOnlyWebhooks::omise(kind.name())),
        PspKind::TwoC2p => {
            let secrets =
                secrets.ok_or(ConfigError::Missing(SecretRole::Webhook.arn_variable()))?;
            webhook_providers_for(kind, secrets)?
        }
    })
}

/// Starts the function's JSON logs: see [`crate::logging`] (flat lines with the request id, trace
/// id and cold start; level from `AWS_LAMBDA_LOG_LEVEL` or `RUST_LOG`, third-party crates capped
/// at `INFO`).
pub use crate::logging::init_lambda_tracing;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::secrets::parse_psp_secrets;
    use crate::ports::Psp;

    /// Omise-style webhook secrets: standard base64.
    const OMISE_WHSEC: &str = "c2VjcmV0LW9uZQ==";
    const OMISE_WHSEC_NEXT: &str = "c2VjcmV0LXR3bw==";

    fn secret(json: &str) -> PspSecrets {
        parse_psp_secrets(json).expect("the test secret is JSON")
    }

    /// Each PSP's API secret, as the README documents it.
    fn api_secret(kind: PspKind) -> PspSecrets {
        match kind {
            PspKind::Stripe => secret(r#"{"api_key":"sk_test_cfg"}"#),
            PspKind::Omise => secret(r#"{"secret_key":"skey_test_cfg"}"#),
            PspKind::TwoC2p => twoc2p_secret(),
        }
    }

    /// Each PSP's webhook secret, as the README documents it.
    fn webhook_secret(kind: PspKind) -> PspSecrets {
        match kind {
            PspKind::Stripe => secret(r#"{"webhook_secrets":"whsec_one, whsec_two"}"#),
            PspKind::Omise => secret(&format!(
                r#"{{"webhook_secrets":"{OMISE_WHSEC},{OMISE_WHSEC_NEXT}"}}"#
            )),
            PspKind::TwoC2p => twoc2p_secret(),
        }
    }

    fn twoc2p_secret() -> PspSecrets {
        secret(r#"{"merchant_id":"JT01","secret_key":"c2p-merchant-key"}"#)
    }

    /// Checks `error` names `role`'s secret, `kind` and `field`, and none of the secrets' values.
    fn names(error: &str, role: SecretRole, kind: PspKind, field: &str) {
        assert!(
            error.contains(&format!("`{field}`"))
                && error.contains(kind.name())
                && error.contains(role.arn_variable()),
            "{error}"
        );
        for value in [
            "sk_test_cfg",
            "whsec_one",
            "skey_test_cfg",
            OMISE_WHSEC,
            "JT01",
            "c2p-merchant-key",
        ] {
            assert!(!error.contains(value), "the error shows a value: {error}");
        }
    }

    /// The refusal of the API secret `secrets` for `kind`, naming `field`.
    fn api_refusal(kind: PspKind, secrets: &PspSecrets, field: &str) -> String {
        let error = psp_with(&PspSettings::defaults(kind), secrets)
            .err()
            .unwrap_or_else(|| panic!("{kind:?}: the PSP was built without {field}"))
            .to_string();
        names(&error, SecretRole::Api, kind, field);
        error
    }

    /// The refusal of the webhook secret `secrets` for `kind`, by the receiver and (2C2P) the
    /// processor alike, naming `field`.
    fn webhook_refusal(kind: PspKind, secrets: &PspSecrets, field: &str) -> String {
        let error = webhook_providers_for(kind, secrets)
            .err()
            .unwrap_or_else(|| panic!("{kind:?}: the receiver was built without {field}"))
            .to_string();
        names(&error, SecretRole::Webhook, kind, field);
        if kind == PspKind::TwoC2p {
            let by_processor = webhook_parsers_for(kind, Some(secrets)).err().unwrap();
            assert_eq!(by_processor.to_string(), error);
        }
        error
    }

    #[test]
    fn psp_names_round_trip_and_an_unknown_psp_is_refused() {
        for kind in PspKind::ALL {
            assert_eq!(PspKind::from_name(kind.name()).unwrap(), kind);
        }
        assert_eq!(PspKind::ALL.map(PspKind::name), ["stripe", "omise", "2c2p"]);
        for unknown in ["paypal", "Stripe", "twoc2p", "fake", ""] {
            let error = PspKind::from_name(unknown).unwrap_err().to_string();
            assert!(
                error.contains("PSP") && error.contains("stripe, omise, 2c2p"),
                "{error}"
            );
        }
    }

    #[test]
    fn each_psp_is_built_from_its_own_secret_shape() {
        // GIVEN each PSP's API secret, as the README documents it
        for kind in PspKind::ALL {
            // WHEN the adapter is built
            let psp = psp_with(&PspSettings::defaults(kind), &api_secret(kind)).unwrap();
            // THEN it is that PSP's adapter, under that PSP's name
            let variant = match &psp {
                ConfiguredPsp::Stripe(_) => PspKind::Stripe,
                ConfiguredPsp::Omise(_) => PspKind::Omise,
                ConfiguredPsp::TwoC2p(_) => PspKind::TwoC2p,
            };
            assert_eq!(variant, kind);
            assert_eq!(psp.name(), kind.name());
            assert_eq!(psp.supports_refunds(), kind != PspKind::TwoC2p);
            // AND the receiver is built from the webhook secret alone
            assert!(webhook_providers_for(kind, &webhook_secret(kind)).is_ok());
        }
        // AND a webhook secret list may also be a JSON array
        let listed = secret(&format!(r#"{{"webhook_secrets":["{OMISE_WHSEC}"]}}"#));
        assert!(webhook_providers_for(PspKind::Omise, &listed).is_ok());
    }

    #[test]
    fn the_api_secret_and_the_webhook_secret_are_each_enough_alone() {
        for kind in [PspKind::Stripe, PspKind::Omise] {
            // GIVEN the webhook secret: it cannot build the PSP adapter (no API key in it)
            let field = if kind == PspKind::Stripe {
                "api_key"
            } else {
                "secret_key"
            };
            api_refusal(kind, &webhook_secret(kind), field);
            // AND the API secret cannot build the receiver (no signing secret in it)
            webhook_refusal(kind, &api_secret(kind), "webhook_secrets");
        }
        // AND for 2C2P both hold the merchant id and key: the notifications' signing key IS the
        // merchant key, so its webhook secret is a copy of the API secret's fields
        assert!(psp_with(&PspSettings::defaults(PspKind::TwoC2p), &twoc2p_secret()).is_ok());
        assert!(webhook_providers_for(PspKind::TwoC2p, &twoc2p_secret()).is_ok());
    }

    #[test]
    fn a_missing_or_blank_field_is_refused_by_name() {
        // Stripe's API secret: the API key.
        for json in [
            r#"{"webhook_secrets":"whsec_one"}"#,
            r#"{"api_key":""}"#,
            r#"{"api_key":"   "}"#,
            r#"{"api_key":7}"#,
        ] {
            api_refusal(PspKind::Stripe, &secret(json), "api_key");
        }
        // Stripe's webhook secret: at least one signing secret.
        for json in [
            r#"{}"#,
            r#"{"api_key":"sk_test_cfg"}"#,
            r#"{"webhook_secrets":""}"#,
            r#"{"webhook_secrets":" , "}"#,
            r#"{"webhook_secrets":[]}"#,
        ] {
            webhook_refusal(PspKind::Stripe, &secret(json), "webhook_secrets");
        }
        // Omise: the secret key (a Stripe key is not one), and at least one webhook secret.
        api_refusal(PspKind::Omise, &api_secret(PspKind::Stripe), "secret_key");
        webhook_refusal(
            PspKind::Omise,
            &secret(r#"{"secret_key":"skey_test_cfg"}"#),
            "webhook_secrets",
        );
        // 2C2P: the merchant id and its secret key, in both secrets.
        let no_merchant = secret(r#"{"secret_key":"c2p-merchant-key"}"#);
        let blank_key = secret(r#"{"merchant_id":"JT01","secret_key":""}"#);
        api_refusal(PspKind::TwoC2p, &no_merchant, "merchant_id");
        api_refusal(PspKind::TwoC2p, &blank_key, "secret_key");
        webhook_refusal(PspKind::TwoC2p, &no_merchant, "merchant_id");
        webhook_refusal(PspKind::TwoC2p, &blank_key, "secret_key");
        api_refusal(
            PspKind::TwoC2p,
            &webhook_secret(PspKind::Omise),
            "merchant_id",
        );
    }

    #[test]
    fn an_empty_or_unusable_webhook_secret_is_refused() {
        // GIVEN a webhook secret list with an empty entry: an HMAC under an empty key is one
        // anyone can compute
        let stripe = secret(r#"{"webhook_secrets":["whsec_one",""]}"#);
        let error = webhook_refusal(PspKind::Stripe, &stripe, "webhook_secrets");
        assert!(error.contains("empty entry (#1)"), "{error}");
        let omise = secret(&format!(r#"{{"webhook_secrets":["{OMISE_WHSEC}", "  "]}}"#));
        webhook_refusal(PspKind::Omise, &omise, "webhook_secrets");
        // AND Omise's secrets must be base64 that decodes to a key
        for bad in ["not base64!", "===="] {
            let omise = secret(&format!(r#"{{"webhook_secrets":"{OMISE_WHSEC},{bad}"}}"#));
            let error = webhook_refusal(PspKind::Omise, &omise, "webhook_secrets");
            assert!(error.contains("#1"), "{error}");
            assert!(!error.contains(bad), "{error}");
        }
    }

    #[test]
    fn a_missing_or_unreadable_secret_fails_the_start_naming_it() {
        for kind in PspKind::ALL {
            for role in [SecretRole::Api, SecretRole::Webhook] {
                // GIVEN neither the ARN nor a local JSON
                let error = secret_origin(role, kind, None, None, None).unwrap_err();
                // THEN the start fails naming the ARN variable
                assert!(
                    matches!(error, ConfigError::Missing(v) if v == role.arn_variable()),
                    "{error}"
                );
                // AND local JSON that does not parse names its variable, not its text
                let error = secret_origin(role, kind, None, Some("sk_live_x".into()), None)
                    .unwrap_err()
                    .to_string();
                assert!(
                    error.contains(role.json_variable()) && !error.contains("sk_live_x"),
                    "{error}"
                );
                // AND the ARN wins over everything local
                assert!(matches!(
                    secret_origin(role, kind, Some("arn:x".into()), Some("{}".into()), None),
                    Ok(SecretOrigin::Arn(arn)) if arn == "arn:x"
                ));
            }
        }
        // AND Stripe's local variables still work, for Stripe only
        let Ok(SecretOrigin::Fixed(api)) = secret_origin(
            SecretRole::Api,
            PspKind::Stripe,
            None,
            None,
            Some("sk_test_cfg".into()),
        ) else {
            panic!("STRIPE_API_KEY is read");
        };
        assert!(psp_with(&PspSettings::defaults(PspKind::Stripe), &api).is_ok());
        let Ok(SecretOrigin::Fixed(hooks)) = secret_origin(
            SecretRole::Webhook,
            PspKind::Stripe,
            None,
            None,
            Some("whsec_one,whsec_two".into()),
        ) else {
            panic!("STRIPE_WEBHOOK_SECRETS is read");
        };
        assert_eq!(hooks.webhook_secrets.len(), 2);
        assert!(secret_origin(
            SecretRole::Api,
            PspKind::Omise,
            None,
            None,
            Some("sk_test_cfg".into())
        )
        .is_err());
    }

    #[test]
    fn the_receiver_registers_only_the_configured_psp() {
        for kind in PspKind::ALL {
            // GIVEN the receiver's providers for one PSP
            let providers = webhook_providers_for(kind, &webhook_secret(kind)).unwrap();
            // THEN only that PSP's path has a scheme: any other provider is a 404
            for other in PspKind::ALL {
                assert_eq!(
                    providers.get(other.name()).is_some(),
                    other == kind,
                    "{kind:?} registers {other:?}"
                );
            }
            assert!(providers.get("fake").is_none());
            assert_eq!(providers.get(kind.name()).unwrap().provider(), kind.name());
        }
    }

    #[test]
    fn the_processor_reads_the_configured_psp_and_needs_a_secret_only_for_2c2p() {
        // GIVEN no secret: Stripe and Omise events are read without one
        for kind in [PspKind::Stripe, PspKind::Omise] {
            let providers = webhook_parsers_for(kind, None).unwrap();
            let scheme = providers.get(kind.name()).expect("the configured PSP");
            // AND the processor's scheme never verifies (it holds no secret)
            assert!(scheme
                .verify(&lambda_http::http::HeaderMap::new(), b"{}", 0)
                .is_err());
            for other in PspKind::ALL.into_iter().filter(|o| *o != kind) {
                assert!(providers.get(other.name()).is_none());
            }
        }
        // AND 2C2P's notification is read only once verified with the merchant's key: without
        // the secret the processor refuses to start, with it it reads 2C2P only
        assert!(matches!(
            webhook_parsers_for(PspKind::TwoC2p, None),
            Err(ConfigError::Missing("PSP_WEBHOOK_SECRET_ARN"))
        ));
        let providers = webhook_parsers_for(PspKind::TwoC2p, Some(&twoc2p_secret())).unwrap();
        assert!(providers.get("2c2p").is_some() && providers.get("stripe").is_none());
        webhook_refusal(
            PspKind::TwoC2p,
            &secret(r#"{"merchant_id":"JT01"}"#),
            "secret_key",
        );
        assert!(
            webhook_parsers_for(PspKind::TwoC2p, Some(&secret(r#"{"merchant_id":"JT01"}"#)))
                .is_err()
        );
    }

    #[test]
    fn the_api_base_defaults_per_psp_and_stripe_keeps_its_old_variable() {
        let base = |kind, psp: Option<&str>, stripe: Option<&str>, live| {
            api_base(kind, psp.map(Into::into), stripe.map(Into::into), live)
        };
        assert_eq!(
            base(PspKind::Stripe, None, None, true),
            "https://api.stripe.com"
        );
        assert_eq!(
            base(PspKind::Omise, None, None, true),
            "https://api.omise.co"
        );
        assert_eq!(
            base(PspKind::TwoC2p, None, None, true),
            "https://pgw.2c2p.com"
        );
        assert_eq!(
            base(PspKind::TwoC2p, None, None, false),
            "https://sandbox-pgw.2c2p.com"
        );
        // PSP_API_BASE wins; STRIPE_API_BASE still works for Stripe, and only for Stripe
        assert_eq!(
            base(PspKind::Stripe, Some("http://a"), Some("http://b"), false),
            "http://a"
        );
        assert_eq!(
            base(PspKind::Stripe, None, Some("http://b"), false),
            "http://b"
        );
        assert_eq!(
            base(PspKind::Omise, None, Some("http://b"), false),
            "https://api.omise.co"
        );
    }

    #[test]
    fn secrets_never_show_in_debug_output() {
        let shown = format!(
            "{:?} {:?} {:?}",
            api_secret(PspKind::Omise),
            webhook_secret(PspKind::Omise),
            twoc2p_secret()
        );
        for value in ["skey_test_cfg", OMISE_WHSEC, "c2p-merchant-key"] {
            assert!(!shown.contains(value), "{shown}");
        }
    }
}
