//! The PSP a deployment talks to: its settings, its two secrets (where they are read from, what
//! each must hold) and the adapters and webhook schemes built from them.

use super::{millis, optional, ConfigError, EnvError, SecretRole};
use crate::adapters::psp::ConfiguredPsp;
use crate::domain::PspKind;
use crate::ports::WebhookScheme;
use crate::secrets::{
    FixedSecret, Refreshing, RefreshingPsp, RefreshingScheme, SecretRead, SecretsManagerSecret,
};
use crate::service::webhooks::Providers;
use std::sync::Arc;
use std::time::Duration;

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
    /// `TWOC2P_REFUNDS` is `enabled`: the API secret must then hold the 2C2P maintenance keys,
    /// and must not otherwise ([`refunds_through_payonce`]).
    pub twoc2p_refunds: bool,
    /// `TWOC2P_SETTLEMENT` is `manual`: the 2C2P account settles manually, so approvals are
    /// authorizations payonce settles through the maintenance API (which `TWOC2P_REFUNDS`
    /// must enable).
    pub twoc2p_manual_settlement: bool,
    /// 2C2P's Payment Maintenance action URL: `PSP_MAINTENANCE_URL`, else 2C2P's production one
    /// when `PSP_LIVEMODE` is `true`, else its sandbox's (used only with the maintenance keys).
    pub maintenance_url: String,
}

/// 2C2P's maintenance action URL for `live`.
fn default_maintenance_url(live: bool) -> String {
    use crate::adapters::psp::twoc2p_maintenance::{PRODUCTION_ACTION_URL, SANDBOX_ACTION_URL};
    if live {
        PRODUCTION_ACTION_URL
    } else {
        SANDBOX_ACTION_URL
    }
    .to_owned()
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
        let live = optional("PSP_LIVEMODE").as_deref() == Some("true");
        Ok(Self {
            kind,
            api_base: api_base(
                kind,
                optional("PSP_API_BASE"),
                optional("STRIPE_API_BASE"),
                live,
            ),
            connect_timeout: optional_millis("PSP_CONNECT_TIMEOUT_MS")?,
            request_timeout: optional_millis("PSP_TIMEOUT_MS")?,
            maintenance_url: optional("PSP_MAINTENANCE_URL")
                .unwrap_or_else(|| default_maintenance_url(live)),
            twoc2p_refunds: twoc2p_refunds_enabled()?,
            twoc2p_manual_settlement: twoc2p_settles_manually()?,
        })
    }

    /// The settings of `kind` at its default API base (test mode), adapter timeouts.
    pub fn defaults(kind: PspKind) -> Self {
        Self {
            kind,
            api_base: kind.default_api_base(false).to_owned(),
            connect_timeout: None,
            request_timeout: None,
            maintenance_url: default_maintenance_url(false),
            twoc2p_refunds: false,
            twoc2p_manual_settlement: false,
        }
    }
}

/// A two-valued variable `name`: `on` is true, `off` (the default, also when unset) false,
/// anything else refused.
fn switch(name: &'static str, off: &str, on: &str) -> Result<bool, ConfigError> {
    match optional(name).as_deref() {
        None => Ok(false),
        Some(value) if value == off => Ok(false),
        Some(value) if value == on => Ok(true),
        Some(other) => Err(ConfigError::Env(EnvError::Invalid {
            name,
            reason: format!("{other:?} is neither `{on}` nor `{off}`"),
        })),
    }
}

/// `TWOC2P_REFUNDS`: `enabled`, or `disabled` (the default).
fn twoc2p_refunds_enabled() -> Result<bool, ConfigError> {
    switch("TWOC2P_REFUNDS", "disabled", "enabled")
}

/// `TWOC2P_SETTLEMENT`: `manual` (the 2C2P account settles manually), or `automatic` (the
/// default). Read alike by every function: the webhook processor too, which must read an
/// approval as an authorization on such an account.
pub fn twoc2p_settles_manually() -> Result<bool, ConfigError> {
    switch("TWOC2P_SETTLEMENT", "automatic", "manual")
}

/// Whether payonce refunds through the configured PSP (`PSP`): every PSP but 2C2P, and 2C2P
/// when `TWOC2P_REFUNDS` is `enabled` (its Payment Maintenance keys in the API secret, which
/// [`psp_with`] checks). What a late duplicate becomes, decided alike by every function —
/// the webhook processor too, which never reads the API secret.
pub fn refunds_through_payonce() -> Result<bool, ConfigError> {
    let kind = PspKind::from_env()?;
    Ok(kind.refunds_through_payonce() || (kind == PspKind::TwoC2p && twoc2p_refunds_enabled()?))
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
    /// `access_token`: Square's access token.
    pub access_token: Option<String>,
    /// `location_id`: the Square location payments are taken at (optional: Square's main
    /// location).
    pub location_id: Option<String>,
    /// `signature_key`: the signature key of the Square webhook subscription.
    pub signature_key: Option<String>,
    /// `notification_url`: the Square subscription's notification URL, byte for byte as
    /// registered (Square signs it with the body).
    pub notification_url: Option<String>,
    /// `client_id`: the PayPal REST app's client id.
    pub client_id: Option<String>,
    /// `client_secret`: the PayPal REST app's secret.
    pub client_secret: Option<String>,
    /// `webhook_id`: the id PayPal gave our webhook subscription (it is signed with each
    /// notification).
    pub webhook_id: Option<String>,
    /// `maintenance_private_key`: the 2C2P merchant's private key for the Payment Maintenance
    /// API (PKCS#8, PEM or base64 DER); with `maintenance_public_key`, 2C2P refunds work.
    pub maintenance_private_key: Option<String>,
    /// `maintenance_public_key`: 2C2P's JWE public key (SubjectPublicKeyInfo, PEM or base64 DER).
    pub maintenance_public_key: Option<String>,
}

impl std::fmt::Debug for PspSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |value: &Option<String>| value.as_ref().map(|_| "<redacted>");
        f.debug_struct("PspSecrets")
            .field("api_key", &shown(&self.api_key))
            .field("secret_key", &shown(&self.secret_key))
            .field("merchant_id", &self.merchant_id)
            .field("webhook_secrets", &self.webhook_secrets.len())
            .field("access_token", &shown(&self.access_token))
            .field("location_id", &self.location_id)
            .field("signature_key", &shown(&self.signature_key))
            .field("notification_url", &self.notification_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &shown(&self.client_secret))
            .field("webhook_id", &self.webhook_id)
            .field(
                "maintenance_private_key",
                &shown(&self.maintenance_private_key),
            )
            .field(
                "maintenance_public_key",
                &self.maintenance_public_key.as_ref().map(|_| "<set>"),
            )
            .finish()
    }
}

impl PspSecrets {
    /// Checks the PSP API secret has `kind`'s shape: Stripe's `api_key`, Omise's `secret_key`,
    /// 2C2P's `merchant_id` and `secret_key`, Square's `access_token` (and `location_id`, if
    /// given, not blank), PayPal's `client_id` and `client_secret`, each present and not blank. Other fields are ignored. Errors name the
    /// secret and the field, never a value.
    pub fn check_api(&self, kind: PspKind) -> Result<(), ConfigError> {
        let text = Self::text(SecretRole::Api, kind);
        match kind {
            PspKind::Stripe => text("api_key", &self.api_key),
            PspKind::Omise => text("secret_key", &self.secret_key),
            PspKind::TwoC2p => {
                text("merchant_id", &self.merchant_id)?;
                text("secret_key", &self.secret_key)?;
                self.maintenance("").map(drop)
            }
            PspKind::Square => {
                text("access_token", &self.access_token)?;
                match &self.location_id {
                    Some(_) => text("location_id", &self.location_id),
                    None => Ok(()),
                }
            }
            PspKind::PayPal => {
                text("client_id", &self.client_id)?;
                text("client_secret", &self.client_secret)
            }
        }
    }

    /// 2C2P's Payment Maintenance API at `action_url` with the keys of this secret, if both are
    /// given; one without the other, or one that is not a usable RSA key, is an error naming the
    /// field.
    pub fn maintenance(
        &self,
        action_url: &str,
    ) -> Result<Option<crate::adapters::psp::twoc2p::MaintenanceConfig>, ConfigError> {
        use crate::adapters::psp::twoc2p_maintenance::{key_der, MaintenanceKeys};
        let refused = |field: &'static str, problem: String| ConfigError::Secret {
            secret: SecretRole::Api,
            psp: "2c2p",
            field,
            problem,
        };
        let (private, public) = match (&self.maintenance_private_key, &self.maintenance_public_key)
        {
            (None, None) => return Ok(None),
            (Some(private), Some(public)) => (private, public),
            (Some(_), None) => {
                return Err(refused(
                    "maintenance_public_key",
                    "is missing (both maintenance keys, or neither)".into(),
                ))
            }
            (None, Some(_)) => {
                return Err(refused(
                    "maintenance_private_key",
                    "is missing (both maintenance keys, or neither)".into(),
                ))
            }
        };
        let private = key_der(private, "PRIVATE KEY")
            .map_err(|problem| refused("maintenance_private_key", problem))?;
        let public = key_der(public, "PUBLIC KEY")
            .map_err(|problem| refused("maintenance_public_key", problem))?;
        MaintenanceKeys::from_der(&private, &public).map_err(|error| {
            let field = match error {
                crate::adapters::psp::twoc2p_maintenance::MaintenanceKeyError::Merchant(_) => {
                    "maintenance_private_key"
                }
                crate::adapters::psp::twoc2p_maintenance::MaintenanceKeyError::TwoC2p(_) => {
                    "maintenance_public_key"
                }
            };
            refused(field, "is not a usable RSA key".into())
        })?;
        Ok(Some(crate::adapters::psp::twoc2p::MaintenanceConfig {
            action_url: action_url.to_owned(),
            merchant_private_key: private,
            twoc2p_public_key: public,
        }))
    }

    /// Checks the webhook secret has `kind`'s shape: for Stripe and Omise at least one
    /// `webhook_secrets` entry, none of them blank (an HMAC under an empty key is one anyone can
    /// compute), Omise's each valid base64; for 2C2P the `merchant_id` and `secret_key` that sign
    /// its notifications; for Square the subscription's `signature_key` and its
    /// `notification_url`, an absolute `https` URL; for PayPal the subscription's `webhook_id`
    /// (PayPal signs with its own certificate, fetched from PayPal's hosts only). Every function that reads the secret checks
    /// the whole shape, so a wrong secret stops the first deploy, not a webhook days later.
    pub fn check_webhook(&self, kind: PspKind) -> Result<(), ConfigError> {
        if kind == PspKind::TwoC2p {
            let text = Self::text(SecretRole::Webhook, kind);
            text("merchant_id", &self.merchant_id)?;
            return text("secret_key", &self.secret_key);
        }
        if kind == PspKind::PayPal {
            return Self::text(SecretRole::Webhook, kind)("webhook_id", &self.webhook_id);
        }
        if kind == PspKind::Square {
            let text = Self::text(SecretRole::Webhook, kind);
            text("signature_key", &self.signature_key)?;
            text("notification_url", &self.notification_url)?;
            let url = Self::field(&self.notification_url);
            return if notification_url_is_usable(&url) {
                Ok(())
            } else {
                Err(ConfigError::Secret {
                    secret: SecretRole::Webhook,
                    psp: kind.name(),
                    field: "notification_url",
                    problem: "is not an absolute https URL (http only on 127.0.0.1 or localhost), as registered with Square".into(),
                })
            };
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

/// Whether `url` can be a Square subscription's notification URL: absolute `https`, or `http`
/// on a loopback host (the sandbox's own receiver).
fn notification_url_is_usable(url: &str) -> bool {
    let Some(rest) = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
    else {
        return false;
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_name = host.rsplit_once(':').map_or(host, |(name, _)| name);
    !host_name.is_empty()
        && !url.chars().any(char::is_whitespace)
        && (url.starts_with("https://") || matches!(host_name, "127.0.0.1" | "localhost"))
}

/// Where a secret comes from, as the environment says (see [`secret_origin`]).
#[derive(Debug)]
pub enum SecretOrigin {
    /// A Secrets Manager secret (its ARN), re-read after the TTL.
    Arn(String),
    /// Fixed at start-up: a local run's JSON, or Stripe's local variable.
    Fixed(Box<PspSecrets>),
}

/// Where `role`'s secret comes from: in AWS, the Secrets Manager secret whose ARN is `arn`
/// (`PSP_SECRET_ARN` / `PSP_WEBHOOK_SECRET_ARN`); in local runs without AWS, the same JSON in
/// `json` (`PSP_SECRET` / `PSP_WEBHOOK_SECRET`), or for Stripe its one field in `stripe`
/// (`STRIPE_API_KEY` / `STRIPE_WEBHOOK_SECRETS`, comma-separated). None of them set is a
/// [`EnvError::Missing`](crate::env::EnvError::Missing) naming the ARN variable; JSON that does not parse names its variable.
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
        return parse_psp_secrets(&json)
            .map(|secrets| SecretOrigin::Fixed(Box::new(secrets)))
            .map_err(|reason| {
                ConfigError::Env(EnvError::Invalid {
                    name: role.json_variable(),
                    reason,
                })
            });
    }
    match stripe.filter(|_| kind == PspKind::Stripe) {
        Some(value) => Ok(SecretOrigin::Fixed(Box::new(match role {
            SecretRole::Api => PspSecrets {
                api_key: Some(value),
                ..PspSecrets::default()
            },
            SecretRole::Webhook => PspSecrets {
                webhook_secrets: split_list(&value),
                ..PspSecrets::default()
            },
        }))),
        None => Err(ConfigError::Env(EnvError::Missing(role.arn_variable()))),
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
            SecretOrigin::Fixed(secrets) => Box::new(FixedSecret(*secrets)),
        },
    )
}

/// Parses the secret's JSON object: `api_key`, `secret_key`, `merchant_id`, `access_token`,
/// `location_id`, `signature_key`, `notification_url`, `client_id`, `client_secret`,
/// `webhook_id` (strings) and
/// `webhook_secrets` (a comma-separated string, blanks skipped, or an array of strings), each
/// optional here; which ones the configured PSP needs is checked by
/// [`PspSecrets::check_api`] and
/// [`PspSecrets::check_webhook`]. A field that is not a string reads as
/// absent; an array entry that is not a string reads as an empty entry (refused by that check).
/// An error never echoes the text: it may be the secret itself.
pub fn parse_psp_secrets(text: &str) -> Result<PspSecrets, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|_| "the secret is not JSON".to_owned())?;
    if !value.is_object() {
        return Err("the secret is not a JSON object".to_owned());
    }
    let webhook_secrets = match &value["webhook_secrets"] {
        serde_json::Value::String(list) => split_list(list),
        serde_json::Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().unwrap_or_default().trim().to_owned())
            .collect(),
        _ => Vec::new(),
    };
    let text = |field: &str| value[field].as_str().map(str::to_owned);
    Ok(PspSecrets {
        api_key: text("api_key"),
        secret_key: text("secret_key"),
        merchant_id: text("merchant_id"),
        webhook_secrets,
        access_token: text("access_token"),
        location_id: text("location_id"),
        signature_key: text("signature_key"),
        notification_url: text("notification_url"),
        client_id: text("client_id"),
        client_secret: text("client_secret"),
        webhook_id: text("webhook_id"),
        maintenance_private_key: text("maintenance_private_key"),
        maintenance_public_key: text("maintenance_public_key"),
    })
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
        OmiseConfig, OmisePsp, PayPalConfig, PayPalPsp, SquareConfig, SquarePsp, StripeConfig,
        StripePsp, TwoC2pConfig, TwoC2pPsp,
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
            match (
                secrets.maintenance(&settings.maintenance_url)?,
                settings.twoc2p_refunds,
            ) {
                (Some(maintenance), true) => config = config.with_maintenance(maintenance),
                (None, false) => {}
                (None, true) => {
                    return Err(ConfigError::Secret {
                        secret: SecretRole::Api,
                        psp: "2c2p",
                        field: "maintenance_private_key",
                        problem: "is missing, and TWOC2P_REFUNDS is enabled".into(),
                    })
                }
                (Some(_), false) => {
                    return Err(ConfigError::Secret {
                        secret: SecretRole::Api,
                        psp: "2c2p",
                        field: "maintenance_private_key",
                        problem: "is set, and TWOC2P_REFUNDS is not enabled: enable it (TwoC2pRefunds) so every function refunds alike".into(),
                    })
                }
            }
            if settings.twoc2p_manual_settlement && !settings.twoc2p_refunds {
                return Err(ConfigError::Env(EnvError::Invalid {
                    name: "TWOC2P_SETTLEMENT",
                    reason: "`manual` needs TWOC2P_REFUNDS `enabled`: payonce settles through the Payment Maintenance API".into(),
                }));
            }
            config.manual_settlement = settings.twoc2p_manual_settlement;
            ConfiguredPsp::TwoC2p(TwoC2pPsp::new(config).map_err(|e| match e {
                crate::adapters::psp::twoc2p::TwoC2pSetupError::Http(e) => {
                    ConfigError::PspClient(e)
                }
                crate::adapters::psp::twoc2p::TwoC2pSetupError::MaintenanceKeys(e) => {
                    ConfigError::Secret {
                        secret: SecretRole::Api,
                        psp: "2c2p",
                        field: "maintenance_private_key/maintenance_public_key",
                        problem: e.to_string(),
                    }
                }
                crate::adapters::psp::twoc2p::TwoC2pSetupError::MaintenanceUrl(url) => {
                    ConfigError::Env(EnvError::Invalid {
                        name: "PSP_MAINTENANCE_URL",
                        reason: format!("{url:?} is not an absolute http(s) URL"),
                    })
                }
                crate::adapters::psp::twoc2p::TwoC2pSetupError::Config(e) => ConfigError::Secret {
                    secret: SecretRole::Api,
                    psp: "2c2p",
                    field: "merchant_id/secret_key",
                    problem: e.to_string(),
                },
                crate::adapters::psp::twoc2p::TwoC2pSetupError::ManualSettlementWithoutMaintenance => {
                    ConfigError::Env(EnvError::Invalid {
                        name: "TWOC2P_SETTLEMENT",
                        reason: "`manual` needs the Payment Maintenance keys".into(),
                    })
                }
            })?)
        }
        PspKind::Square => {
            let mut config = SquareConfig::new(PspSecrets::field(&secrets.access_token))
                .with_base_url(base)
                .with_location(secrets.location_id.clone());
            timeouts(&mut config.connect_timeout, &mut config.request_timeout);
            ConfiguredPsp::Square(SquarePsp::new(config).map_err(ConfigError::PspClient)?)
        }
        PspKind::PayPal => {
            let mut config = PayPalConfig::new(
                PspSecrets::field(&secrets.client_id),
                PspSecrets::field(&secrets.client_secret),
            )
            .with_base_url(base);
            timeouts(&mut config.connect_timeout, &mut config.request_timeout);
            ConfiguredPsp::PayPal(PayPalPsp::new(config).map_err(ConfigError::PspClient)?)
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
    use crate::adapters::psp::{
        HttpCertFetch, OmiseWebhooks, PayPalWebhooks, SquareWebhooks, StripeWebhooks,
        TwoC2pNotifications,
    };
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
            .with_provider(kind.name())
            .settling_manually(twoc2p_settles_manually()?),
        ),
        PspKind::Square => Arc::new(
            SquareWebhooks::new(
                &PspSecrets::field(&secrets.signature_key),
                &PspSecrets::field(&secrets.notification_url),
            )
            .map_err(|e| refused("signature_key/notification_url", e.to_string()))?,
        ),
        PspKind::PayPal => {
            // Certificates from PayPal's own host of this deployment's mode only (`PSP_LIVEMODE`),
            // over HTTPS, within 3 s.
            let fetch =
                HttpCertFetch::new(Duration::from_secs(3)).map_err(ConfigError::PspClient)?;
            let live = optional("PSP_LIVEMODE").as_deref() == Some("true");
            Arc::new(
                PayPalWebhooks::for_mode(
                    &PspSecrets::field(&secrets.webhook_id),
                    Arc::new(fetch),
                    live,
                )
                .map_err(|e| refused("webhook_id", e.to_string()))?,
            )
        }
    })
}

/// A scheme shared behind an `Arc`, to register in [`Providers`].
struct SharedScheme(Arc<dyn WebhookScheme>);

#[async_trait::async_trait]
impl WebhookScheme for SharedScheme {
    fn provider(&self) -> &str {
        self.0.provider()
    }

    async fn fetch_keys(
        &self,
        headers: &lambda_http::http::HeaderMap,
    ) -> Result<(), crate::ports::SignatureError> {
        self.0.fetch_keys(headers).await
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
/// the receiver verified and queued. Stripe's, Omise's, Square's and PayPal's events are read without a secret
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
        PspKind::Stripe | PspKind::Omise | PspKind::Square | PspKind::PayPal => {
            Ok((webhook_parsers_for(kind, None)?, None))
        }
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
        PspKind::Square => Providers::new().with(ParseOnlyWebhooks::square(kind.name())),
        PspKind::PayPal => Providers::new().with(ParseOnlyWebhooks::paypal(kind.name())),
        PspKind::TwoC2p => {
            let secrets = secrets.ok_or(ConfigError::Env(EnvError::Missing(
                SecretRole::Webhook.arn_variable(),
            )))?;
            webhook_providers_for(kind, secrets)?
        }
    })
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    #[test]
    fn reads_both_list_forms_and_never_echoes_a_malformed_secret() {
        let a = parse_psp_secrets(r#"{"api_key":"sk_1","webhook_secrets":"whsec_a, whsec_b"}"#)
            .unwrap();
        assert_eq!(
            (a.api_key.as_deref(), a.webhook_secrets.len()),
            (Some("sk_1"), 2)
        );
        let b = parse_psp_secrets(r#"{"webhook_secrets":["whsec_a", "", 7]}"#).unwrap();
        assert_eq!(
            (b.api_key, b.webhook_secrets),
            (
                None,
                vec!["whsec_a".to_owned(), String::new(), String::new()]
            ),
            "empty and non-text entries are kept, for the shape check to refuse"
        );
        let c = parse_psp_secrets(r#"{"merchant_id":"JT01","secret_key":"k2c2p"}"#).unwrap();
        assert_eq!(
            (c.merchant_id.as_deref(), c.secret_key.as_deref()),
            (Some("JT01"), Some("k2c2p"))
        );
        assert!(!format!("{c:?}").contains("k2c2p"), "Debug redacts the key");
        assert!(parse_psp_secrets(r#""sk_live_in_a_string""#).is_err());
        let error = parse_psp_secrets("sk_live_secret_value").unwrap_err();
        assert!(!error.contains("sk_live"));
        assert!(!format!("{a:?}").contains("sk_1"), "Debug redacts the key");
    }
}
