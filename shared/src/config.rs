//! Typed settings, read once at start-up from the environment the SAM template sets.
//!
//! The PSP: one per deployment, `PSP` = `stripe` (default) | `omise` | `2c2p` (template parameter
//! `Psp`), its API base in `PSP_API_BASE` (Stripe also reads the older `STRIPE_API_BASE`), its
//! credentials in the Secrets Manager secret `PSP_SECRET_ARN`, whose JSON shape depends on the
//! PSP (see [`psp_secrets`]):
//!
//! | `PSP` | secret |
//! |---|---|
//! | `stripe` | `{"api_key": "sk_…", "webhook_secrets": "whsec_…[,whsec_…]"}` |
//! | `omise` | `{"secret_key": "skey_…", "webhook_secrets": "<base64>[,<base64>]"}` |
//! | `2c2p` | `{"merchant_id": "…", "secret_key": "…"}` (the same key verifies notifications) |
//!
//! A function that reads the secret refuses to start when a field its PSP needs is missing or
//! blank, or a webhook secret is empty (anyone can compute an HMAC under an empty key); the
//! error names the field, never its value.

use crate::adapters::psp::ConfiguredPsp;
use crate::service::webhooks::Providers;
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
    /// The PSP secret lacks what the configured PSP needs (never carries a value).
    #[error("the PSP secret for PSP={psp} is refused: `{field}` {problem}")]
    Secret {
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

/// The PSP secret's fields, as read from its JSON (see [`psp_secrets`]). Which ones a PSP needs is
/// checked by [`PspSecrets::check`]; nothing here is ever logged (`Debug` shows only what is set).
#[derive(Clone, Default)]
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
    /// Checks the secret has `kind`'s shape: every field it needs present and not blank, and for
    /// Stripe and Omise at least one webhook secret, none of them blank (an HMAC under an empty
    /// key is one anyone can compute), Omise's each valid base64. Every function that reads the
    /// secret checks the whole shape, so a wrong secret stops the first deploy, not a webhook
    /// days later. Errors name the field, never a value.
    pub fn check(&self, kind: PspKind) -> Result<(), ConfigError> {
        let psp = kind.name();
        let text = |field: &'static str, value: &Option<String>| match value {
            Some(v) if !v.trim().is_empty() => Ok(()),
            _ => Err(ConfigError::Secret {
                psp,
                field,
                problem: "is missing, empty or not a string".into(),
            }),
        };
        match kind {
            PspKind::Stripe => text("api_key", &self.api_key)?,
            PspKind::Omise => text("secret_key", &self.secret_key)?,
            PspKind::TwoC2p => {
                text("merchant_id", &self.merchant_id)?;
                text("secret_key", &self.secret_key)?;
                return Ok(());
            }
        }
        let refused = |problem: String| ConfigError::Secret {
            psp,
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

    /// The value of a field [`PspSecrets::check`] has passed.
    fn field(value: &Option<String>) -> String {
        value.clone().unwrap_or_default()
    }
}

/// Loads the PSP secret once at start-up. In AWS: the Secrets Manager secret named by
/// `PSP_SECRET_ARN`, a JSON object whose shape depends on `PSP`:
///
/// - `stripe`: `{"api_key": "sk_…", "webhook_secrets": "whsec_a[,whsec_b]"}`;
/// - `omise`: `{"secret_key": "skey_…", "webhook_secrets": "<base64>[,<base64>]"}` (the webhook
///   secrets as Omise's dashboard shows them: base64);
/// - `2c2p`: `{"merchant_id": "…", "secret_key": "…"}` (the merchant's secret key signs our
///   requests and verifies 2C2P's answers and backend notifications: there is no separate
///   webhook secret).
///
/// `webhook_secrets` is a comma-separated string (blanks between commas are skipped) or a JSON
/// array of strings; two while a secret rotates, either verifies. Local runs without AWS: the same
/// JSON in `PSP_SECRET`, or for Stripe `STRIPE_API_KEY` / `STRIPE_WEBHOOK_SECRETS`. Never from the
/// template. Which fields the configured PSP needs is checked by [`psp`] and the webhook helpers.
pub async fn psp_secrets(aws: &aws_config::SdkConfig) -> Result<PspSecrets, ConfigError> {
    if let Some(arn) = optional("PSP_SECRET_ARN") {
        return crate::adapters::secrets::load_psp_secrets(aws, &arn)
            .await
            .map_err(|reason| ConfigError::Invalid {
                name: "PSP_SECRET_ARN",
                reason,
            });
    }
    if let Some(json) = optional("PSP_SECRET") {
        return crate::adapters::secrets::parse_psp_secrets(&json).map_err(|reason| {
            ConfigError::Invalid {
                name: "PSP_SECRET",
                reason,
            }
        });
    }
    Ok(PspSecrets {
        api_key: optional("STRIPE_API_KEY"),
        webhook_secrets: optional("STRIPE_WEBHOOK_SECRETS")
            .map(|raw| split_list(&raw))
            .unwrap_or_default(),
        ..PspSecrets::default()
    })
}

/// Splits a comma-separated list, dropping blanks.
pub fn split_list(raw: &str) -> Vec<String> {
    raw.split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The configured PSP's adapter ([`PspSettings::from_env`]) with the credentials of `secrets`,
/// whose shape is checked first ([`PspSecrets::check`]).
pub fn psp(secrets: &PspSecrets) -> Result<ConfiguredPsp, ConfigError> {
    psp_with(&PspSettings::from_env()?, secrets)
}

/// [`psp`] with explicit settings.
pub fn psp_with(
    settings: &PspSettings,
    secrets: &PspSecrets,
) -> Result<ConfiguredPsp, ConfigError> {
    use crate::adapters::psp::{
        OmiseConfig, OmisePsp, StripeConfig, StripePsp, TwoC2pConfig, TwoC2pPsp,
    };
    secrets.check(settings.kind)?;
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
                    psp: "2c2p",
                    field: "merchant_id/secret_key",
                    problem: e.to_string(),
                },
            })?)
        }
    })
}

/// The webhook receiver's providers: only the configured PSP's scheme (`PSP`), under its name
/// (`/webhooks/stripe`, `/webhooks/omise` or `/webhooks/2c2p`), verifying with `secrets`, whose
/// shape is checked first. Deliveries for any other provider are answered 404.
pub fn webhook_providers(secrets: &PspSecrets) -> Result<Providers, ConfigError> {
    webhook_providers_for(PspKind::from_env()?, secrets)
}

/// [`webhook_providers`] for an explicit PSP.
pub fn webhook_providers_for(
    kind: PspKind,
    secrets: &PspSecrets,
) -> Result<Providers, ConfigError> {
    use crate::adapters::psp::{OmiseWebhooks, StripeWebhooks, TwoC2pNotifications};
    secrets.check(kind)?;
    let refused = |field: &'static str, problem: String| ConfigError::Secret {
        psp: kind.name(),
        field,
        problem,
    };
    Ok(match kind {
        PspKind::Stripe => Providers::new().with(StripeWebhooks::new(
            kind.name(),
            secrets.webhook_secrets.clone(),
        )),
        PspKind::Omise => Providers::new().with(
            OmiseWebhooks::new(&secrets.webhook_secrets)
                .map_err(|e| refused("webhook_secrets", e.to_string()))?
                .with_provider(kind.name()),
        ),
        PspKind::TwoC2p => Providers::new().with(
            TwoC2pNotifications::new(
                PspSecrets::field(&secrets.merchant_id),
                PspSecrets::field(&secrets.secret_key),
            )
            .map_err(|e| refused("merchant_id/secret_key", e.to_string()))?
            .with_provider(kind.name()),
        ),
    })
}

/// The webhook processor's providers: the configured PSP's scheme (`PSP`), to read the events
/// the receiver verified and queued. Stripe's and Omise's events are read without a secret
/// ([`ParseOnlyWebhooks`], which never verifies), so for them the processor reads no secret. A
/// 2C2P notification is a signed JWT whose claims its scheme reads only after verifying them
/// with the merchant's secret key, and checks against the merchant id: for 2C2P the processor
/// loads the secret (`PSP_SECRET_ARN`; the template grants it only when `Psp` is `2c2p`).
///
/// [`ParseOnlyWebhooks`]: crate::adapters::psp::ParseOnlyWebhooks
pub async fn webhook_parsers(aws: &aws_config::SdkConfig) -> Result<Providers, ConfigError> {
    let kind = PspKind::from_env()?;
    let secrets = match kind {
        PspKind::TwoC2p => Some(psp_secrets(aws).await?),
        PspKind::Stripe | PspKind::Omise => None,
    };
    webhook_parsers_for(kind, secrets.as_ref())
}

/// [`webhook_parsers`] for an explicit PSP; `secrets` is needed for 2C2P only.
pub fn webhook_parsers_for(
    kind: PspKind,
    secrets: Option<&PspSecrets>,
) -> Result<Providers, ConfigError> {
    use crate::adapters::psp::ParseOnlyWebhooks;
    Ok(match kind {
        PspKind::Stripe => Providers::new().with(ParseOnlyWebhooks::stripe(kind.name())),
        PspKind::Omise => Providers::new().with(ParseOnlyWebhooks::omise(kind.name())),
        PspKind::TwoC2p => {
            let secrets = secrets.ok_or(ConfigError::Missing("PSP_SECRET_ARN"))?;
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

    fn stripe_secret() -> PspSecrets {
        secret(r#"{"api_key":"sk_test_cfg","webhook_secrets":"whsec_one, whsec_two"}"#)
    }

    fn omise_secret() -> PspSecrets {
        secret(&format!(
            r#"{{"secret_key":"skey_test_cfg","webhook_secrets":"{OMISE_WHSEC},{OMISE_WHSEC_NEXT}"}}"#
        ))
    }

    fn twoc2p_secret() -> PspSecrets {
        secret(r#"{"merchant_id":"JT01","secret_key":"c2p-merchant-key"}"#)
    }

    fn secret_for(kind: PspKind) -> PspSecrets {
        match kind {
            PspKind::Stripe => stripe_secret(),
            PspKind::Omise => omise_secret(),
            PspKind::TwoC2p => twoc2p_secret(),
        }
    }

    /// The refusal of `secrets` for `kind`: by the adapter and the receiver alike, naming `field`
    /// and none of the secret's values.
    fn refusal(kind: PspKind, secrets: &PspSecrets, field: &str) -> String {
        let by_psp = psp_with(&PspSettings::defaults(kind), secrets)
            .err()
            .unwrap_or_else(|| panic!("{kind:?}: the PSP was built without {field}"))
            .to_string();
        let by_receiver = webhook_providers_for(kind, secrets)
            .err()
            .unwrap_or_else(|| panic!("{kind:?}: the receiver was built without {field}"))
            .to_string();
        assert_eq!(by_psp, by_receiver);
        assert!(
            by_psp.contains(&format!("`{field}`")) && by_psp.contains(kind.name()),
            "{by_psp}"
        );
        for value in [
            "sk_test_cfg",
            "whsec_one",
            "skey_test_cfg",
            OMISE_WHSEC,
            "JT01",
            "c2p-merchant-key",
        ] {
            assert!(!by_psp.contains(value), "the error shows a value: {by_psp}");
        }
        by_psp
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
        // GIVEN each PSP's secret, as the README documents it
        for kind in PspKind::ALL {
            // WHEN the adapter is built
            let psp = psp_with(&PspSettings::defaults(kind), &secret_for(kind)).unwrap();
            // THEN it is that PSP's adapter, under that PSP's name
            let variant = match &psp {
                ConfiguredPsp::Stripe(_) => PspKind::Stripe,
                ConfiguredPsp::Omise(_) => PspKind::Omise,
                ConfiguredPsp::TwoC2p(_) => PspKind::TwoC2p,
            };
            assert_eq!(variant, kind);
            assert_eq!(psp.name(), kind.name());
            assert_eq!(psp.supports_refunds(), kind != PspKind::TwoC2p);
        }
        // AND a webhook secret list may also be a JSON array
        let listed = secret(&format!(
            r#"{{"secret_key":"skey_test_cfg","webhook_secrets":["{OMISE_WHSEC}"]}}"#
        ));
        assert!(psp_with(&PspSettings::defaults(PspKind::Omise), &listed).is_ok());
    }

    #[test]
    fn a_missing_or_blank_field_is_refused_by_name() {
        // Stripe: the API key and at least one webhook secret.
        for json in [
            r#"{"webhook_secrets":"whsec_one"}"#,
            r#"{"api_key":"","webhook_secrets":"whsec_one"}"#,
            r#"{"api_key":"   ","webhook_secrets":"whsec_one"}"#,
            r#"{"api_key":7,"webhook_secrets":"whsec_one"}"#,
        ] {
            refusal(PspKind::Stripe, &secret(json), "api_key");
        }
        for json in [
            r#"{"api_key":"sk_test_cfg"}"#,
            r#"{"api_key":"sk_test_cfg","webhook_secrets":""}"#,
            r#"{"api_key":"sk_test_cfg","webhook_secrets":" , "}"#,
            r#"{"api_key":"sk_test_cfg","webhook_secrets":[]}"#,
        ] {
            refusal(PspKind::Stripe, &secret(json), "webhook_secrets");
        }
        // Omise: the secret key and at least one webhook secret (a Stripe secret is not one).
        refusal(PspKind::Omise, &stripe_secret(), "secret_key");
        refusal(
            PspKind::Omise,
            &secret(r#"{"secret_key":"skey_test_cfg"}"#),
            "webhook_secrets",
        );
        // 2C2P: the merchant id and its secret key.
        refusal(
            PspKind::TwoC2p,
            &secret(r#"{"secret_key":"c2p-merchant-key"}"#),
            "merchant_id",
        );
        refusal(
            PspKind::TwoC2p,
            &secret(r#"{"merchant_id":"JT01","secret_key":""}"#),
            "secret_key",
        );
        refusal(PspKind::TwoC2p, &omise_secret(), "merchant_id");
    }

    #[test]
    fn an_empty_or_unusable_webhook_secret_is_refused() {
        // GIVEN a webhook secret list with an empty entry: an HMAC under an empty key is one
        // anyone can compute
        let stripe = secret(r#"{"api_key":"sk_test_cfg","webhook_secrets":["whsec_one",""]}"#);
        let error = refusal(PspKind::Stripe, &stripe, "webhook_secrets");
        assert!(error.contains("empty entry (#1)"), "{error}");
        let omise = secret(&format!(
            r#"{{"secret_key":"skey_test_cfg","webhook_secrets":["{OMISE_WHSEC}", "  "]}}"#
        ));
        refusal(PspKind::Omise, &omise, "webhook_secrets");
        // AND Omise's secrets must be base64 that decodes to a key
        for bad in ["not base64!", "===="] {
            let omise = secret(&format!(
                r#"{{"secret_key":"skey_test_cfg","webhook_secrets":"{OMISE_WHSEC},{bad}"}}"#
            ));
            let error = refusal(PspKind::Omise, &omise, "webhook_secrets");
            assert!(error.contains("#1"), "{error}");
            assert!(!error.contains(bad), "{error}");
        }
    }

    #[test]
    fn the_receiver_registers_only_the_configured_psp() {
        for kind in PspKind::ALL {
            // GIVEN the receiver's providers for one PSP
            let providers = webhook_providers_for(kind, &secret_for(kind)).unwrap();
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
            Err(ConfigError::Missing("PSP_SECRET_ARN"))
        ));
        let providers = webhook_parsers_for(PspKind::TwoC2p, Some(&twoc2p_secret())).unwrap();
        assert!(providers.get("2c2p").is_some() && providers.get("stripe").is_none());
        refusal(
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
        let shown = format!("{:?} {:?}", omise_secret(), twoc2p_secret());
        for value in ["skey_test_cfg", OMISE_WHSEC, "c2p-merchant-key"] {
            assert!(!shown.contains(value), "{shown}");
        }
    }
}
