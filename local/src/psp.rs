//! Which PSP the sandbox runs (`--psp` or `PAYONCE_LOCAL_PSP`): it picks both payonce's adapter
//! and the wire format the in-process fake PSP speaks, the fake's webhook signing secret (2C2P:
//! the merchant secret key and merchant id), and the one webhook scheme the receiver accepts.
//! Webhooks for any other provider are answered 404.

use payonce::adapters::psp::{
    ConfiguredPsp, OmiseConfig, OmisePsp, OmiseWebhooks, SquareConfig, SquarePsp, SquareWebhooks,
    StripeConfig, StripePsp, StripeWebhooks, TwoC2pConfig, TwoC2pNotifications, TwoC2pPsp,
};
use payonce::service::webhooks::Providers;
use payonce_fake_psp::{
    FakePspConfig, DEFAULT_API_KEY, DEFAULT_OMISE_WEBHOOK_SECRET, DEFAULT_SQUARE_SIGNATURE_KEY,
    DEFAULT_TWOC2P_MERCHANT_ID, DEFAULT_TWOC2P_SECRET_KEY,
};

type Error = Box<dyn std::error::Error>;

/// The PSP names `--psp` takes, for messages.
pub const PSP_NAMES: &str = "stripe, omise, 2c2p, square";

/// The secrets the sandbox's PSP runs with, shared by the fake PSP and payonce's adapter and
/// webhook scheme.
#[derive(Clone)]
pub struct PspSecrets {
    /// The webhook signing secret (Stripe, Omise), the subscription's signature key (Square),
    /// or the merchant secret key (2C2P), which signs requests, answers and notifications alike.
    pub secret: String,
    /// 2C2P's merchant id (unused by the other PSPs).
    pub merchant_id: String,
}

impl std::fmt::Debug for PspSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PspSecrets")
            .field("secret", &"<secret>")
            .field("merchant_id", &self.merchant_id)
            .finish()
    }
}

/// The sandbox's PSP: payonce's adapter and the fake PSP's face. Its variants' doc comments are
/// the help of `--psp`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SandboxPsp {
    /// Stripe's PaymentIntents (the default).
    #[default]
    Stripe,
    /// Omise's Charges.
    Omise,
    /// 2C2P PGW v4.3 (no refunds: they are answered 409 refund-not-supported).
    #[value(name = "2c2p")]
    TwoC2p,
    /// Square's Payments (each payment approved, then completed).
    Square,
}

impl SandboxPsp {
    /// The PSP named `name` (`stripe`, `omise`, `2c2p`).
    pub fn from_name(name: &str) -> Result<Self, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "stripe" => Ok(Self::Stripe),
            "omise" => Ok(Self::Omise),
            "2c2p" => Ok(Self::TwoC2p),
            "square" => Ok(Self::Square),
            _ => Err(format!(
                "--psp {name:?} is not a PSP the sandbox speaks; expected one of {PSP_NAMES}"
            )),
        }
    }

    /// The deployment PSP it stands for (whose charge limits orders are checked against).
    pub fn kind(self) -> payonce::config::PspKind {
        match self {
            Self::Stripe => payonce::config::PspKind::Stripe,
            Self::Omise => payonce::config::PspKind::Omise,
            Self::TwoC2p => payonce::config::PspKind::TwoC2p,
            Self::Square => payonce::config::PspKind::Square,
        }
    }

    /// Its name, as `--psp` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Stripe => "stripe",
            Self::Omise => "omise",
            Self::TwoC2p => "2c2p",
            Self::Square => "square",
        }
    }

    /// The wire format the fake PSP speaks, in words (for the banner).
    pub fn wire_format(self) -> &'static str {
        match self {
            Self::Stripe => "Stripe's PaymentIntents",
            Self::Omise => "Omise's Charges",
            Self::TwoC2p => "2C2P's PGW v4.3",
            Self::Square => "Square's Payments",
        }
    }

    /// The provider name stored on payments, and the webhook route `/webhooks/{provider}`.
    /// The Stripe sandbox keeps `fake`, its name since the first sandbox (`/webhooks/stripe`
    /// is accepted too).
    pub fn provider(self) -> &'static str {
        match self {
            Self::Stripe => "fake",
            Self::Omise => "omise",
            Self::TwoC2p => "2c2p",
            Self::Square => "square",
        }
    }

    /// The environment variable holding the webhook signing secret (2C2P: the merchant secret
    /// key, which signs its notifications).
    pub fn webhook_secret_var(self) -> &'static str {
        match self {
            Self::Stripe => "PAYONCE_LOCAL_STRIPE_WEBHOOK_SECRET",
            Self::Omise => "PAYONCE_LOCAL_OMISE_WEBHOOK_SECRET",
            Self::TwoC2p => "PAYONCE_LOCAL_2C2P_SECRET_KEY",
            Self::Square => "PAYONCE_LOCAL_SQUARE_SIGNATURE_KEY",
        }
    }

    /// The webhook signing secret used when the variable is unset (a development value, printed).
    pub fn default_webhook_secret(self) -> &'static str {
        match self {
            Self::Stripe => "whsec_payonce_local",
            Self::Omise => DEFAULT_OMISE_WEBHOOK_SECRET,
            Self::TwoC2p => DEFAULT_TWOC2P_SECRET_KEY,
            Self::Square => DEFAULT_SQUARE_SIGNATURE_KEY,
        }
    }

    /// The environment variable holding the merchant id, for the PSPs that have one (2C2P).
    pub fn merchant_id_var(self) -> Option<&'static str> {
        match self {
            Self::Stripe | Self::Omise | Self::Square => None,
            Self::TwoC2p => Some("PAYONCE_LOCAL_2C2P_MERCHANT_ID"),
        }
    }

    /// The merchant id used when its variable is unset (a development value, printed; empty for
    /// the PSPs without one).
    pub fn default_merchant_id(self) -> &'static str {
        match self {
            Self::Stripe | Self::Omise | Self::Square => "",
            Self::TwoC2p => DEFAULT_TWOC2P_MERCHANT_ID,
        }
    }

    /// The development defaults of this PSP's secrets.
    pub fn default_secrets(self) -> PspSecrets {
        PspSecrets {
            secret: self.default_webhook_secret().to_owned(),
            merchant_id: self.default_merchant_id().to_owned(),
        }
    }

    /// The fake PSP's settings: this face, signing with `secrets` (Stripe, Omise and Square: API
    /// key `DEFAULT_API_KEY`; 2C2P: the merchant id and secret key) and delivering to `api_url`'s
    /// webhook route ([`SandboxPsp::webhook_url`]).
    pub fn fake_config(self, api_url: &str, secrets: &PspSecrets) -> FakePspConfig {
        let webhook_url = Some(self.webhook_url(api_url));
        let webhook_secret = secrets.secret.clone();
        match self {
            Self::Stripe | Self::Omise => FakePspConfig {
                api_key: DEFAULT_API_KEY.into(),
                webhook_url,
                webhook_secret,
                ..if self == Self::Stripe {
                    FakePspConfig::default()
                } else {
                    FakePspConfig::omise()
                }
            },
            // 2C2P signs with the merchant secret key; the face does not use `webhook_secret`.
            Self::TwoC2p => FakePspConfig {
                api_key: secrets.secret.clone(),
                twoc2p_merchant_id: secrets.merchant_id.clone(),
                webhook_url,
                webhook_secret,
                ..FakePspConfig::twoc2p()
            },
            Self::Square => FakePspConfig {
                api_key: DEFAULT_API_KEY.into(),
                webhook_url,
                webhook_secret,
                ..FakePspConfig::square()
            },
        }
    }

    /// The sandbox's webhook route for this PSP under `api_url`: where the fake PSP delivers,
    /// and (Square) the notification URL its signatures cover.
    pub fn webhook_url(self, api_url: &str) -> String {
        format!("{api_url}/webhooks/{}", self.provider())
    }

    /// payonce's adapter for this PSP against the fake PSP at `psp_url`, with `secrets` (used by
    /// 2C2P, whose merchant secret key signs requests too).
    pub fn adapter(self, psp_url: &str, secrets: &PspSecrets) -> Result<ConfiguredPsp, Error> {
        Ok(match self {
            Self::Stripe => {
                let mut config = StripeConfig::new(psp_url, DEFAULT_API_KEY);
                config.provider_name = self.provider().into();
                ConfiguredPsp::Stripe(StripePsp::new(config)?)
            }
            Self::Omise => {
                let mut config = OmiseConfig::new(DEFAULT_API_KEY).with_base_url(psp_url);
                config.provider_name = self.provider().into();
                ConfiguredPsp::Omise(OmisePsp::new(config)?)
            }
            Self::TwoC2p => {
                let mut config = TwoC2pConfig::new(psp_url, &secrets.merchant_id, &secrets.secret);
                config.provider_name = self.provider().into();
                ConfiguredPsp::TwoC2p(TwoC2pPsp::new(config)?)
            }
            Self::Square => {
                let mut config = SquareConfig::new(DEFAULT_API_KEY).with_base_url(psp_url);
                config.provider_name = self.provider().into();
                ConfiguredPsp::Square(SquarePsp::new(config)?)
            }
        })
    }

    /// The only webhook scheme the receiver and the processor accept, verifying with `secrets`
    /// (for Omise, base64 as Omise shows it: anything else is refused here; for 2C2P, the
    /// merchant id and secret key, neither empty; for Square, the signature key over the
    /// sandbox's own webhook URL under `api_url`).
    pub fn webhooks(self, secrets: &PspSecrets, api_url: &str) -> Result<Providers, Error> {
        let webhook_secret = secrets.secret.as_str();
        Ok(match self {
            Self::Stripe => Providers::new()
                .with(StripeWebhooks::new(
                    self.provider(),
                    vec![webhook_secret.to_owned()],
                ))
                .with(StripeWebhooks::new(
                    "stripe",
                    vec![webhook_secret.to_owned()],
                )),
            Self::Omise => Providers::new().with(
                OmiseWebhooks::new(&[webhook_secret])
                    .map_err(|e| format!("{}: {e}", self.webhook_secret_var()))?
                    .with_provider(self.provider()),
            ),
            Self::TwoC2p => Providers::new().with(
                TwoC2pNotifications::new(&secrets.merchant_id, &secrets.secret)
                    .map_err(|e| {
                        format!(
                            "{} / {}: {e}",
                            self.webhook_secret_var(),
                            self.merchant_id_var().unwrap_or_default()
                        )
                    })?
                    .with_provider(self.provider()),
            ),
            Self::Square => Providers::new().with(
                SquareWebhooks::new(webhook_secret, &self.webhook_url(api_url))
                    .map_err(|e| format!("{}: {e}", self.webhook_secret_var()))?
                    .with_provider(self.provider()),
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{PspSecrets, SandboxPsp};

    fn secret(secret: &str) -> PspSecrets {
        PspSecrets {
            secret: secret.into(),
            merchant_id: String::new(),
        }
    }

    #[test]
    fn names_pick_a_psp() {
        assert_eq!(SandboxPsp::from_name("stripe"), Ok(SandboxPsp::Stripe));
        assert_eq!(SandboxPsp::from_name("omise"), Ok(SandboxPsp::Omise));
        assert_eq!(SandboxPsp::from_name("Omise"), Ok(SandboxPsp::Omise));
        assert_eq!(SandboxPsp::from_name("2c2p"), Ok(SandboxPsp::TwoC2p));
        assert_eq!(SandboxPsp::from_name(" 2C2P "), Ok(SandboxPsp::TwoC2p));
        let refused = SandboxPsp::from_name("paypal").unwrap_err();
        assert!(refused.contains("stripe, omise, 2c2p, square"), "{refused}");
        assert!(SandboxPsp::from_name("").is_err());
        assert_eq!(SandboxPsp::default(), SandboxPsp::Stripe);
        assert_eq!(SandboxPsp::from_name("square"), Ok(SandboxPsp::Square));
        for kind in [
            SandboxPsp::Stripe,
            SandboxPsp::Omise,
            SandboxPsp::TwoC2p,
            SandboxPsp::Square,
        ] {
            assert_eq!(SandboxPsp::from_name(kind.name()), Ok(kind));
        }
    }

    #[test]
    fn each_psp_registers_only_its_own_webhook_scheme() {
        let api = "http://127.0.0.1:3000";
        let stripe = SandboxPsp::Stripe
            .webhooks(&secret("whsec_test"), api)
            .unwrap();
        assert!(stripe.get("fake").is_some() && stripe.get("stripe").is_some());
        assert!(stripe.get("omise").is_none() && stripe.get("2c2p").is_none());
        let omise = SandboxPsp::Omise
            .webhooks(&SandboxPsp::Omise.default_secrets(), api)
            .unwrap();
        assert!(omise.get("omise").is_some());
        assert!(omise.get("fake").is_none() && omise.get("stripe").is_none());
        assert!(omise.get("2c2p").is_none());
        let Err(error) = SandboxPsp::Omise.webhooks(&secret("not base64!"), api) else {
            panic!("a webhook secret that is not base64 is refused");
        };
        assert!(
            error
                .to_string()
                .contains("PAYONCE_LOCAL_OMISE_WEBHOOK_SECRET"),
            "{error}"
        );
        let twoc2p = SandboxPsp::TwoC2p
            .webhooks(&SandboxPsp::TwoC2p.default_secrets(), api)
            .unwrap();
        assert!(twoc2p.get("2c2p").is_some());
        assert!(twoc2p.get("fake").is_none() && twoc2p.get("stripe").is_none());
        assert!(twoc2p.get("omise").is_none());
        let Err(error) = SandboxPsp::TwoC2p.webhooks(&secret("a key"), api) else {
            panic!("an empty merchant id is refused");
        };
        assert!(
            error.to_string().contains("PAYONCE_LOCAL_2C2P_MERCHANT_ID"),
            "{error}"
        );
        let square = SandboxPsp::Square
            .webhooks(&SandboxPsp::Square.default_secrets(), api)
            .unwrap();
        assert!(square.get("square").is_some());
        assert!(square.get("fake").is_none() && square.get("omise").is_none());
        let Err(error) = SandboxPsp::Square.webhooks(&secret(""), api) else {
            panic!("an empty signature key is refused");
        };
        assert!(
            error
                .to_string()
                .contains("PAYONCE_LOCAL_SQUARE_SIGNATURE_KEY"),
            "{error}"
        );
    }

    #[test]
    fn the_fake_speaks_the_psps_format_and_delivers_to_its_route() {
        let config = SandboxPsp::Omise.fake_config("http://127.0.0.1:3000", &secret("c2VjcmV0"));
        assert_eq!(config.provider, payonce_fake_psp::Provider::Omise);
        assert_eq!(
            config.webhook_url.as_deref(),
            Some("http://127.0.0.1:3000/webhooks/omise")
        );
        let config = SandboxPsp::Stripe.fake_config("http://127.0.0.1:3000", &secret("whsec_x"));
        assert_eq!(config.provider, payonce_fake_psp::Provider::Stripe);
        assert_eq!(
            config.webhook_url.as_deref(),
            Some("http://127.0.0.1:3000/webhooks/fake")
        );
        let secrets = PspSecrets {
            secret: "merchant-secret-key".into(),
            merchant_id: "MERCHANT42".into(),
        };
        let config = SandboxPsp::TwoC2p.fake_config("http://127.0.0.1:3000", &secrets);
        assert_eq!(config.provider, payonce_fake_psp::Provider::TwoC2p);
        assert_eq!(
            config.webhook_url.as_deref(),
            Some("http://127.0.0.1:3000/webhooks/2c2p")
        );
        assert_eq!(
            (config.api_key.as_str(), config.twoc2p_merchant_id.as_str()),
            ("merchant-secret-key", "MERCHANT42")
        );
        let defaults = SandboxPsp::TwoC2p.default_secrets();
        assert_eq!(
            (defaults.secret.as_str(), defaults.merchant_id.as_str()),
            (
                payonce_fake_psp::DEFAULT_TWOC2P_SECRET_KEY,
                payonce_fake_psp::DEFAULT_TWOC2P_MERCHANT_ID
            )
        );
    }

    #[test]
    fn a_twoc2p_adapter_is_built_with_the_secrets() {
        let psp = SandboxPsp::TwoC2p
            .adapter("http://127.0.0.1:1", &SandboxPsp::TwoC2p.default_secrets())
            .unwrap();
        assert!(matches!(
            psp,
            payonce::adapters::psp::ConfiguredPsp::TwoC2p(_)
        ));
        assert!(format!("{:?}", SandboxPsp::TwoC2p.default_secrets()).contains("<secret>"));
    }
}
