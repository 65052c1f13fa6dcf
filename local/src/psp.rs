//! Which PSP the sandbox runs (`--psp` or `PAYONCE_LOCAL_PSP`): it picks both payonce's adapter
//! and the wire format the in-process fake PSP speaks, the fake's webhook signing secret, and the
//! one webhook scheme the receiver accepts. Webhooks for any other provider are answered 404.

use payonce::adapters::psp::{
    ConfiguredPsp, OmiseConfig, OmisePsp, OmiseWebhooks, StripeConfig, StripePsp, StripeWebhooks,
};
use payonce::service::webhooks::Providers;
use payonce_fake_psp::{FakePspConfig, DEFAULT_API_KEY, DEFAULT_OMISE_WEBHOOK_SECRET};

type Error = Box<dyn std::error::Error>;

/// The PSP names `--psp` takes, for messages.
pub const PSP_NAMES: &str = "stripe, omise";

/// The sandbox's PSP: payonce's adapter and the fake PSP's face.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxPsp {
    /// Stripe's PaymentIntents (the default).
    #[default]
    Stripe,
    /// Omise's Charges.
    Omise,
}

impl SandboxPsp {
    /// The PSP named `name` (`stripe`, `omise`); `2c2p` is refused until the fake PSP speaks it.
    pub fn from_name(name: &str) -> Result<Self, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "stripe" => Ok(Self::Stripe),
            "omise" => Ok(Self::Omise),
            "2c2p" => Err(format!(
                "--psp 2c2p: the fake PSP's 2C2P face is not available yet; use one of {PSP_NAMES}"
            )),
            _ => Err(format!(
                "--psp {name:?} is not a PSP the sandbox speaks; expected one of {PSP_NAMES}"
            )),
        }
    }

    /// Its name, as `--psp` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Stripe => "stripe",
            Self::Omise => "omise",
        }
    }

    /// The wire format the fake PSP speaks, in words (for the banner).
    pub fn wire_format(self) -> &'static str {
        match self {
            Self::Stripe => "Stripe's PaymentIntents",
            Self::Omise => "Omise's Charges",
        }
    }

    /// The provider name stored on payments, and the webhook route `/webhooks/{provider}`.
    /// The Stripe sandbox keeps `fake`, its name since the first sandbox (`/webhooks/stripe`
    /// is accepted too).
    pub fn provider(self) -> &'static str {
        match self {
            Self::Stripe => "fake",
            Self::Omise => "omise",
        }
    }

    /// The environment variable holding the webhook signing secret.
    pub fn webhook_secret_var(self) -> &'static str {
        match self {
            Self::Stripe => "PAYONCE_LOCAL_STRIPE_WEBHOOK_SECRET",
            Self::Omise => "PAYONCE_LOCAL_OMISE_WEBHOOK_SECRET",
        }
    }

    /// The webhook signing secret used when the variable is unset (a development value, printed).
    pub fn default_webhook_secret(self) -> &'static str {
        match self {
            Self::Stripe => "whsec_payonce_local",
            Self::Omise => DEFAULT_OMISE_WEBHOOK_SECRET,
        }
    }

    /// The fake PSP's settings: this face, `DEFAULT_API_KEY`, signing with `webhook_secret` and
    /// delivering to `api_url`'s webhook route.
    pub fn fake_config(self, api_url: &str, webhook_secret: &str) -> FakePspConfig {
        let face = match self {
            Self::Stripe => FakePspConfig::default(),
            Self::Omise => FakePspConfig::omise(),
        };
        FakePspConfig {
            api_key: DEFAULT_API_KEY.into(),
            webhook_url: Some(format!("{api_url}/webhooks/{}", self.provider())),
            webhook_secret: webhook_secret.to_owned(),
            ..face
        }
    }

    /// payonce's adapter for this PSP against the fake PSP at `psp_url`.
    pub fn adapter(self, psp_url: &str) -> Result<ConfiguredPsp, Error> {
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
        })
    }

    /// The only webhook scheme the receiver and the processor accept, verifying with
    /// `webhook_secret` (for Omise, base64 as Omise shows it: anything else is refused here).
    pub fn webhooks(self, webhook_secret: &str) -> Result<Providers, Error> {
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::SandboxPsp;

    #[test]
    fn names_pick_a_psp_and_2c2p_is_refused_for_now() {
        assert_eq!(SandboxPsp::from_name("stripe"), Ok(SandboxPsp::Stripe));
        assert_eq!(SandboxPsp::from_name("omise"), Ok(SandboxPsp::Omise));
        assert_eq!(SandboxPsp::from_name("Omise"), Ok(SandboxPsp::Omise));
        let refused = SandboxPsp::from_name("2c2p").unwrap_err();
        assert!(
            refused.contains("2C2P face is not available yet"),
            "{refused}"
        );
        assert!(SandboxPsp::from_name("paypal").is_err());
        assert!(SandboxPsp::from_name("").is_err());
        assert_eq!(SandboxPsp::default(), SandboxPsp::Stripe);
    }

    #[test]
    fn each_psp_registers_only_its_own_webhook_scheme() {
        let stripe = SandboxPsp::Stripe.webhooks("whsec_test").unwrap();
        assert!(stripe.get("fake").is_some() && stripe.get("stripe").is_some());
        assert!(stripe.get("omise").is_none());
        let omise = SandboxPsp::Omise
            .webhooks(SandboxPsp::Omise.default_webhook_secret())
            .unwrap();
        assert!(omise.get("omise").is_some());
        assert!(omise.get("fake").is_none() && omise.get("stripe").is_none());
        let Err(error) = SandboxPsp::Omise.webhooks("not base64!") else {
            panic!("a webhook secret that is not base64 is refused");
        };
        assert!(
            error
                .to_string()
                .contains("PAYONCE_LOCAL_OMISE_WEBHOOK_SECRET"),
            "{error}"
        );
    }

    #[test]
    fn the_fake_speaks_the_psps_format_and_delivers_to_its_route() {
        let config = SandboxPsp::Omise.fake_config("http://127.0.0.1:3000", "c2VjcmV0");
        assert_eq!(config.provider, payonce_fake_psp::Provider::Omise);
        assert_eq!(
            config.webhook_url.as_deref(),
            Some("http://127.0.0.1:3000/webhooks/omise")
        );
        let config = SandboxPsp::Stripe.fake_config("http://127.0.0.1:3000", "whsec_x");
        assert_eq!(config.provider, payonce_fake_psp::Provider::Stripe);
        assert_eq!(
            config.webhook_url.as_deref(),
            Some("http://127.0.0.1:3000/webhooks/fake")
        );
    }
}
