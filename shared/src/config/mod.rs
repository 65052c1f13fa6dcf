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
//! after `SECRETS_TTL_SECONDS` (default 300; see the `secrets` module), so a rotation takes effect
//! without recycling instances.

pub use crate::env::EnvError;
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
    #[cfg(feature = "psp")]
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
    /// A variable is missing or does not parse.
    #[error(transparent)]
    Env(#[from] EnvError),
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
    #[cfg(feature = "psp")]
    #[error("the PSP's HTTP client could not be built: {0}")]
    PspClient(#[source] reqwest::Error),
}

/// Reads a required variable.
pub fn required(name: &'static str) -> Result<String, ConfigError> {
    Ok(crate::env::required(name)?)
}

pub use crate::env::optional;

/// Reads an optional duration given in milliseconds.
pub fn millis(name: &'static str, default: Duration) -> Result<Duration, ConfigError> {
    Ok(crate::env::millis(name, default)?)
}

/// Table names (`IDEMPOTENCY_TABLE`, `PAYMENTS_TABLE`).
#[cfg(all(feature = "dynamodb", feature = "payments"))]
pub fn tables() -> Result<crate::adapters::dynamodb::Tables, ConfigError> {
    Ok(crate::adapters::dynamodb::Tables {
        idempotency: required("IDEMPOTENCY_TABLE")?,
        payments: required("PAYMENTS_TABLE")?,
    })
}

/// The PSP a deployment uses (`PSP`; one per deployment): it picks the adapter of the charge,
/// refund and reconcile functions, the one webhook scheme the receiver and processor accept, and
/// the charge limits orders are checked against.
#[cfg(feature = "payments")]
pub use crate::domain::PspKind;

#[cfg(feature = "payments")]
impl PspKind {
    /// The name in `PSP`, on payments and in `/webhooks/{provider}`.
    pub const fn name(self) -> &'static str {
        match self {
            PspKind::Stripe => "stripe",
            PspKind::Omise => "omise",
            PspKind::TwoC2p => "2c2p",
            PspKind::Square => "square",
            PspKind::PayPal => "paypal",
        }
    }

    /// The PSP named `name` (exactly as [`PspKind::name`] writes it).
    pub fn from_name(name: &str) -> Result<Self, ConfigError> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| {
                ConfigError::Env(EnvError::Invalid {
                    name: "PSP",
                    reason: format!(
                        "{name:?} is not a PSP payonce speaks; expected one of {}",
                        Self::ALL.map(Self::name).join(", ")
                    ),
                })
            })
    }

    /// `PSP`, `stripe` when unset.
    pub fn from_env() -> Result<Self, ConfigError> {
        optional("PSP").map_or(Ok(PspKind::Stripe), |name| Self::from_name(&name))
    }

    /// The API base used when none is configured. Stripe and Omise serve test and live keys on
    /// one host; 2C2P, Square and PayPal have a separate sandbox, used unless `live`.
    #[cfg(feature = "psp")]
    pub fn default_api_base(self, live: bool) -> &'static str {
        match self {
            PspKind::Stripe => STRIPE_API_BASE,
            PspKind::Omise => crate::adapters::psp::omise::OMISE_API_BASE,
            PspKind::TwoC2p if live => crate::adapters::psp::twoc2p::PRODUCTION_BASE_URL,
            PspKind::TwoC2p => crate::adapters::psp::twoc2p::SANDBOX_BASE_URL,
            PspKind::Square if live => crate::adapters::psp::square::SQUARE_API_BASE,
            PspKind::Square => crate::adapters::psp::square::SQUARE_SANDBOX_BASE,
            PspKind::PayPal if live => crate::adapters::psp::paypal::PAYPAL_API_BASE,
            PspKind::PayPal => crate::adapters::psp::paypal::PAYPAL_SANDBOX_BASE,
        }
    }
}

#[cfg(feature = "dynamodb")]
mod aws;
#[cfg(feature = "dynamodb")]
pub use aws::lambda_aws;
#[cfg(feature = "psp")]
mod psp;
#[cfg(feature = "psp")]
pub use psp::*;

/// Starts the function's JSON logs: see [`crate::logging`] (flat lines with the request id, trace
/// id and cold start; level from `AWS_LAMBDA_LOG_LEVEL` or `RUST_LOG`, third-party crates capped
/// at `INFO`).
#[cfg(feature = "runtime")]
pub use crate::logging::init_lambda_tracing;

/// The checkout origins (`CHECKOUT_ORIGINS`, comma-separated; the template passes the API's
/// CORS list): a payment's `return_url` must be on one of them. None when unset.
#[cfg(feature = "psp")]
pub fn checkout_origins() -> Result<Vec<String>, ConfigError> {
    Ok(optional("CHECKOUT_ORIGINS")
        .map(|list| split_list(&list))
        .unwrap_or_default())
}

/// Reads an optional unsigned number.
pub fn number(name: &'static str, default: u32) -> Result<u32, ConfigError> {
    Ok(crate::env::number(name, default)?)
}

#[cfg(all(test, feature = "psp"))]
mod tests {
    use super::*;
    use crate::adapters::psp::ConfiguredPsp;
    use crate::ports::Psp;

    /// Omise-style webhook secrets: standard base64.
    const OMISE_WHSEC: &str = "c2VjcmV0LW9uZQ==";
    const OMISE_WHSEC_NEXT: &str = "c2VjcmV0LXR3bw==";

    fn secret(json: &str) -> PspSecrets {
        parse_psp_secrets(json).expect("the test secret is JSON")
    }

    /// Each PSP's API secret, as docs/deploy.md documents it.
    fn api_secret(kind: PspKind) -> PspSecrets {
        match kind {
            PspKind::Stripe => secret(r#"{"api_key":"sk_test_cfg"}"#),
            PspKind::Omise => secret(r#"{"secret_key":"skey_test_cfg"}"#),
            PspKind::TwoC2p => twoc2p_secret(),
            PspKind::Square => secret(r#"{"access_token":"EAAAsq_cfg","location_id":"L1"}"#),
            PspKind::PayPal => {
                secret(r#"{"client_id":"AbPayPal","client_secret":"pp-secret-cfg"}"#)
            }
        }
    }

    /// Each PSP's webhook secret, as docs/deploy.md documents it.
    fn webhook_secret(kind: PspKind) -> PspSecrets {
        match kind {
            PspKind::Stripe => secret(r#"{"webhook_secrets":"whsec_one, whsec_two"}"#),
            PspKind::Omise => secret(&format!(
                r#"{{"webhook_secrets":"{OMISE_WHSEC},{OMISE_WHSEC_NEXT}"}}"#
            )),
            PspKind::TwoC2p => twoc2p_secret(),
            PspKind::Square => secret(
                r#"{"signature_key":"sq-sig-key","notification_url":"https://api.example.com/webhooks/square"}"#,
            ),
            PspKind::PayPal => secret(r#"{"webhook_id":"1JE4291016473214C"}"#),
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
            "EAAAsq_cfg",
            "sq-sig-key",
            "pp-secret-cfg",
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
        assert_eq!(
            PspKind::ALL.map(PspKind::name),
            ["stripe", "omise", "2c2p", "square", "paypal"]
        );
        for unknown in ["PayPal", "Stripe", "twoc2p", "fake", ""] {
            let error = PspKind::from_name(unknown).unwrap_err().to_string();
            assert!(
                error.contains("PSP") && error.contains("stripe, omise, 2c2p, square, paypal"),
                "{error}"
            );
        }
    }

    #[test]
    fn each_psp_is_built_from_its_own_secret_shape() {
        // GIVEN each PSP's API secret, as docs/deploy.md documents it
        for kind in PspKind::ALL {
            // WHEN the adapter is built
            let psp = psp_with(&PspSettings::defaults(kind), &api_secret(kind)).unwrap();
            // THEN it is that PSP's adapter, under that PSP's name
            let variant = match &psp {
                ConfiguredPsp::Stripe(_) => PspKind::Stripe,
                ConfiguredPsp::Omise(_) => PspKind::Omise,
                ConfiguredPsp::TwoC2p(_) => PspKind::TwoC2p,
                ConfiguredPsp::Square(_) => PspKind::Square,
                ConfiguredPsp::PayPal(_) => PspKind::PayPal,
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
    fn twoc2p_refunds_come_with_both_maintenance_keys_and_a_half_pair_stops_the_start() {
        use crate::adapters::psp::b64::{encode, Alphabet};
        use crate::adapters::psp::twoc2p_maintenance::MaintenanceKeys;
        use crate::ports::Psp;
        let mut settings = PspSettings::defaults(PspKind::TwoC2p);
        // Without them: refunds are not supported, as before.
        let psp = psp_with(&settings, &twoc2p_secret()).unwrap();
        assert!(!psp.supports_refunds());
        settings.twoc2p_refunds = true;
        // Enabled without keys: refused, naming the key.
        let error = psp_with(&settings, &twoc2p_secret())
            .err()
            .unwrap()
            .to_string();
        names(
            &error,
            SecretRole::Api,
            PspKind::TwoC2p,
            "maintenance_private_key",
        );
        let (merchant_private, _) = MaintenanceKeys::generate_pair().unwrap();
        let (_, twoc2p_public) = MaintenanceKeys::generate_pair().unwrap();
        let private = encode(&merchant_private, Alphabet::Standard);
        let public = format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
            encode(&twoc2p_public, Alphabet::Standard)
        );
        let with = |private: Option<&str>, public: Option<&str>| PspSecrets {
            maintenance_private_key: private.map(str::to_owned),
            maintenance_public_key: public.map(str::to_owned),
            ..twoc2p_secret()
        };
        let psp = psp_with(&settings, &with(Some(&private), Some(&public))).unwrap();
        assert!(psp.supports_refunds());
        // Keys while refunds are not enabled: refused too, so that the webhook processor (which
        // never reads this secret) and the others decide a late duplicate alike.
        let disabled = PspSettings::defaults(PspKind::TwoC2p);
        let error = psp_with(&disabled, &with(Some(&private), Some(&public)))
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("TWOC2P_REFUNDS"), "{error}");
        assert!(!format!("{:?}", with(Some(&private), Some(&public))).contains(&private));
        api_refusal(
            PspKind::TwoC2p,
            &with(Some(&private), None),
            "maintenance_public_key",
        );
        api_refusal(
            PspKind::TwoC2p,
            &with(None, Some(&public)),
            "maintenance_private_key",
        );
        // Swapped, or a certificate where a key belongs: refused, naming the field.
        api_refusal(
            PspKind::TwoC2p,
            &with(
                Some(&encode(&twoc2p_public, Alphabet::Standard)),
                Some(&public),
            ),
            "maintenance_private_key",
        );
        let certificate = public.replace("PUBLIC KEY", "CERTIFICATE");
        let error = api_refusal(
            PspKind::TwoC2p,
            &with(Some(&private), Some(&certificate)),
            "maintenance_public_key",
        );
        assert!(error.contains("openssl x509"), "{error}");
        assert!(!error.contains(&private));
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
        // Square: the access token (a blank location is refused, none is Square's main one);
        // the subscription's signature key and its notification URL, an https one.
        api_refusal(
            PspKind::Square,
            &api_secret(PspKind::Stripe),
            "access_token",
        );
        api_refusal(
            PspKind::Square,
            &secret(r#"{"access_token":"EAAAsq_cfg","location_id":" "}"#),
            "location_id",
        );
        assert!(psp_with(
            &PspSettings::defaults(PspKind::Square),
            &secret(r#"{"access_token":"EAAAsq_cfg"}"#)
        )
        .is_ok());
        webhook_refusal(
            PspKind::Square,
            &secret(r#"{"notification_url":"https://api.example.com/webhooks/square"}"#),
            "signature_key",
        );
        webhook_refusal(
            PspKind::Square,
            &secret(r#"{"signature_key":"sq-sig-key"}"#),
            "notification_url",
        );
        for url in [
            "http://api.example.com/webhooks/square",
            "/webhooks/square",
            "https:///webhooks/square",
            "https://api.example.com/webhooks/ square",
        ] {
            webhook_refusal(
                PspKind::Square,
                &secret(&format!(
                    r#"{{"signature_key":"sq-sig-key","notification_url":"{url}"}}"#
                )),
                "notification_url",
            );
        }
        // PayPal: the REST app's client id and secret; the subscription's webhook id.
        api_refusal(
            PspKind::PayPal,
            &secret(r#"{"client_id":"AbPayPal"}"#),
            "client_secret",
        );
        api_refusal(
            PspKind::PayPal,
            &secret(r#"{"client_secret":"pp-secret-cfg"}"#),
            "client_id",
        );
        webhook_refusal(
            PspKind::PayPal,
            &secret(r#"{"webhook_id":" "}"#),
            "webhook_id",
        );
        assert!(webhook_providers_for(
            PspKind::Square,
            &secret(r#"{"signature_key":"k","notification_url":"http://127.0.0.1:8080/webhooks/square"}"#)
        )
        .is_ok());
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
                    matches!(error, ConfigError::Env(EnvError::Missing(v)) if v == role.arn_variable()),
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
            Err(ConfigError::Env(EnvError::Missing(
                "PSP_WEBHOOK_SECRET_ARN"
            )))
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
