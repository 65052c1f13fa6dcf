//! Which PSP the sandbox runs (`--psp` or `PAYONCE_LOCAL_PSP`): it picks both payonce's adapter
//! and the wire format the in-process fake PSP speaks, the fake's webhook signing secret (2C2P:
//! the merchant secret key and merchant id; PayPal: an RSA key and the webhook id it signs for),
//! and the one webhook scheme the receiver accepts. Webhooks for any other provider are answered
//! 404. On 2C2P, payonce's adapter also holds the fake's Payment Maintenance keys and action URL
//! ([`twoc2p_maintenance`]), so it refunds, unless the sandbox runs without 2C2P refunds.

use payonce::adapters::psp::twoc2p::MaintenanceConfig;
use payonce::adapters::psp::{
    ConfiguredPsp, HttpCertFetch, OmiseConfig, OmisePsp, OmiseWebhooks, PayPalConfig, PayPalPsp,
    PayPalWebhooks, SquareConfig, SquarePsp, SquareWebhooks, StripeConfig, StripePsp,
    StripeWebhooks, TwoC2pConfig, TwoC2pNotifications, TwoC2pPsp,
};
use payonce::service::webhooks::Providers;
use payonce_fake_psp::{
    FakePspConfig, PayPalSigner, TwoC2pMerchantKeys, DEFAULT_API_KEY, DEFAULT_OMISE_WEBHOOK_SECRET,
    DEFAULT_PAYPAL_CLIENT_ID, DEFAULT_PAYPAL_WEBHOOK_ID, DEFAULT_SQUARE_SIGNATURE_KEY,
    DEFAULT_TWOC2P_MERCHANT_ID, DEFAULT_TWOC2P_SECRET_KEY,
};
use std::sync::Arc;
use std::time::Duration;

type Error = Box<dyn std::error::Error>;

/// The PSP names `--psp` takes, for messages.
pub const PSP_NAMES: &str = "stripe, omise, 2c2p, square, paypal";

/// The environment variable naming a PEM file with the RSA private key the fake PayPal signs
/// its webhooks with (unset: a key generated at each start).
pub const PAYPAL_SIGNING_KEY_VAR: &str = "PAYONCE_LOCAL_PAYPAL_SIGNING_KEY";

/// What the common name of the fake PayPal's certificate ends with
/// ([`payonce_fake_psp::PAYPAL_CERT_COMMON_NAME`]): the only name the sandbox's verifier
/// accepts, where a deployment's accepts only PayPal's own `.paypal.com`.
pub const FAKE_PAYPAL_CERT_SUFFIX: &str = ".paypal.example";

/// How long the sandbox's PayPal verifier waits for the fake's certificate (as a deployment's
/// waits for PayPal's).
const CERT_FETCH_TIMEOUT: Duration = Duration::from_secs(3);

/// The secrets the sandbox's PSP runs with, shared by the fake PSP and payonce's adapter and
/// webhook scheme.
#[derive(Clone)]
pub struct PspSecrets {
    /// The webhook signing secret (Stripe, Omise), the subscription's signature key (Square),
    /// or the merchant secret key (2C2P), which signs requests, answers and notifications alike.
    pub secret: String,
    /// 2C2P's merchant id (unused by the other PSPs).
    pub merchant_id: String,
    /// PayPal's webhook signing key, an RSA private key in PEM (unused by the other PSPs);
    /// `None`: the fake PSP generates one when it starts.
    pub signing_key_pem: Option<String>,
    /// 2C2P only: whether the merchant account settles manually (the fake's account and
    /// payonce's adapter and notifications alike), as a deployment with
    /// `TwoC2pSettlement=manual`: approvals are authorizations payonce settles.
    pub twoc2p_manual_settlement: bool,
}

impl std::fmt::Debug for PspSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PspSecrets")
            .field("secret", &"<secret>")
            .field("merchant_id", &self.merchant_id)
            .field(
                "signing_key_pem",
                &self.signing_key_pem.as_ref().map(|_| "<secret>"),
            )
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
    /// 2C2P PGW v4.3, refunding through its Payment Maintenance API with the fake's test keys
    /// (--no-2c2p-refunds: refunds answered 409 refund-not-supported).
    #[value(name = "2c2p")]
    TwoC2p,
    /// Square's Payments (each payment approved, then completed).
    Square,
    /// PayPal's Orders and Payments (webhooks signed with an RSA key, its certificate fetched
    /// from the fake).
    #[value(name = "paypal")]
    PayPal,
}

impl SandboxPsp {
    /// The PSP named `name` (`stripe`, `omise`, `2c2p`, `square`, `paypal`), in any case.
    pub fn from_name(name: &str) -> Result<Self, String> {
        match name.trim().to_ascii_lowercase().as_str() {
            "stripe" => Ok(Self::Stripe),
            "omise" => Ok(Self::Omise),
            "2c2p" => Ok(Self::TwoC2p),
            "square" => Ok(Self::Square),
            "paypal" => Ok(Self::PayPal),
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
            Self::PayPal => payonce::config::PspKind::PayPal,
        }
    }

    /// Its name, as `--psp` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Stripe => "stripe",
            Self::Omise => "omise",
            Self::TwoC2p => "2c2p",
            Self::Square => "square",
            Self::PayPal => "paypal",
        }
    }

    /// The wire format the fake PSP speaks, in words (for the banner).
    pub fn wire_format(self) -> &'static str {
        match self {
            Self::Stripe => "Stripe's PaymentIntents",
            Self::Omise => "Omise's Charges",
            Self::TwoC2p => "2C2P's PGW v4.3",
            Self::Square => "Square's Payments",
            Self::PayPal => "PayPal's Orders v2",
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
            Self::PayPal => "paypal",
        }
    }

    /// The environment variable holding the webhook signing secret (2C2P: the merchant secret
    /// key, which signs its notifications; PayPal: the webhook id each signature covers, the
    /// key itself being [`PAYPAL_SIGNING_KEY_VAR`]'s).
    pub fn webhook_secret_var(self) -> &'static str {
        match self {
            Self::Stripe => "PAYONCE_LOCAL_STRIPE_WEBHOOK_SECRET",
            Self::Omise => "PAYONCE_LOCAL_OMISE_WEBHOOK_SECRET",
            Self::TwoC2p => "PAYONCE_LOCAL_2C2P_SECRET_KEY",
            Self::Square => "PAYONCE_LOCAL_SQUARE_SIGNATURE_KEY",
            Self::PayPal => "PAYONCE_LOCAL_PAYPAL_WEBHOOK_ID",
        }
    }

    /// The webhook signing secret used when the variable is unset (a development value, printed).
    pub fn default_webhook_secret(self) -> &'static str {
        match self {
            Self::Stripe => "whsec_payonce_local",
            Self::Omise => DEFAULT_OMISE_WEBHOOK_SECRET,
            Self::TwoC2p => DEFAULT_TWOC2P_SECRET_KEY,
            Self::Square => DEFAULT_SQUARE_SIGNATURE_KEY,
            Self::PayPal => DEFAULT_PAYPAL_WEBHOOK_ID,
        }
    }

    /// The environment variable holding the merchant id, for the PSPs that have one (2C2P).
    pub fn merchant_id_var(self) -> Option<&'static str> {
        match self {
            Self::Stripe | Self::Omise | Self::Square | Self::PayPal => None,
            Self::TwoC2p => Some("PAYONCE_LOCAL_2C2P_MERCHANT_ID"),
        }
    }

    /// The environment variable naming a file with the webhook signing key, for the PSPs that
    /// sign with a key pair (PayPal).
    pub fn signing_key_var(self) -> Option<&'static str> {
        match self {
            Self::Stripe | Self::Omise | Self::TwoC2p | Self::Square => None,
            Self::PayPal => Some(PAYPAL_SIGNING_KEY_VAR),
        }
    }

    /// The signing key in the file at `path` (the value of [`SandboxPsp::signing_key_var`]),
    /// checked: an unreadable file, or one that is not an RSA private key in PEM, is an error
    /// naming the variable.
    pub fn read_signing_key(self, path: &str) -> Result<String, Error> {
        let var = self.signing_key_var().unwrap_or(PAYPAL_SIGNING_KEY_VAR);
        let pem = std::fs::read_to_string(path)
            .map_err(|e| format!("{var}: cannot read {path:?}: {e}"))?;
        PayPalSigner::from_pem(&pem).map_err(|e| format!("{var} ({path:?}): {e}"))?;
        Ok(pem)
    }

    /// The merchant id used when its variable is unset (a development value, printed; empty for
    /// the PSPs without one).
    pub fn default_merchant_id(self) -> &'static str {
        match self {
            Self::Stripe | Self::Omise | Self::Square | Self::PayPal => "",
            Self::TwoC2p => DEFAULT_TWOC2P_MERCHANT_ID,
        }
    }

    /// The development defaults of this PSP's secrets.
    pub fn default_secrets(self) -> PspSecrets {
        PspSecrets {
            secret: self.default_webhook_secret().to_owned(),
            merchant_id: self.default_merchant_id().to_owned(),
            signing_key_pem: None,
            twoc2p_manual_settlement: false,
        }
    }

    /// The fake PSP's settings: this face, signing with `secrets` (Stripe, Omise and Square: API
    /// key `DEFAULT_API_KEY`; 2C2P: the merchant id and secret key; PayPal: client id
    /// `DEFAULT_PAYPAL_CLIENT_ID` and secret `DEFAULT_API_KEY`, webhooks signed with the signing
    /// key for the webhook id) and delivering to `api_url`'s webhook route
    /// ([`SandboxPsp::webhook_url`]).
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
                twoc2p_manual_settlement: secrets.twoc2p_manual_settlement,
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
            // PayPal signs with its RSA key for the webhook id; `webhook_secret` is not used.
            Self::PayPal => FakePspConfig {
                api_key: DEFAULT_API_KEY.into(),
                paypal_client_id: DEFAULT_PAYPAL_CLIENT_ID.into(),
                paypal_webhook_id: secrets.secret.clone(),
                paypal_signing_key_pem: secrets.signing_key_pem.clone(),
                webhook_url,
                ..FakePspConfig::paypal()
            },
        }
    }

    /// The sandbox's webhook route for this PSP under `api_url`: where the fake PSP delivers,
    /// and (Square) the notification URL its signatures cover.
    pub fn webhook_url(self, api_url: &str) -> String {
        format!("{api_url}/webhooks/{}", self.provider())
    }

    /// payonce's adapter for this PSP against the fake PSP at `psp_url`, with `secrets` (used by
    /// 2C2P, whose merchant secret key signs requests too) and, for 2C2P, the Payment
    /// Maintenance API `maintenance` (with it the adapter refunds; without it refunds are not
    /// supported). The other PSPs ignore `maintenance`.
    pub fn adapter(
        self,
        psp_url: &str,
        secrets: &PspSecrets,
        maintenance: Option<&MaintenanceConfig>,
    ) -> Result<ConfiguredPsp, Error> {
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
                if let Some(maintenance) = maintenance {
                    config = config.with_maintenance(maintenance.clone());
                    config.manual_settlement = secrets.twoc2p_manual_settlement;
                }
                ConfiguredPsp::TwoC2p(TwoC2pPsp::new(config)?)
            }
            Self::Square => {
                let mut config = SquareConfig::new(DEFAULT_API_KEY).with_base_url(psp_url);
                config.provider_name = self.provider().into();
                ConfiguredPsp::Square(SquarePsp::new(config)?)
            }
            Self::PayPal => {
                let mut config = PayPalConfig::new(DEFAULT_PAYPAL_CLIENT_ID, DEFAULT_API_KEY)
                    .with_base_url(psp_url);
                config.provider_name = self.provider().into();
                ConfiguredPsp::PayPal(PayPalPsp::new(config)?)
            }
        })
    }

    /// Checks `secrets` before anything starts, so that an unusable one is an error naming its
    /// variable: the webhook scheme they make ([`SandboxPsp::webhooks`]) and, for PayPal, the
    /// webhook id and the signing key.
    pub fn check_secrets(self, secrets: &PspSecrets, api_url: &str) -> Result<(), Error> {
        if self != Self::PayPal {
            return self.webhooks(secrets, api_url, "").map(drop);
        }
        // No origin yet (the fake's port is known once it listens): the webhook id alone.
        paypal_webhooks(self, secrets, &[])?;
        if let Some(pem) = &secrets.signing_key_pem {
            PayPalSigner::from_pem(pem).map_err(|e| format!("{PAYPAL_SIGNING_KEY_VAR}: {e}"))?;
        }
        Ok(())
    }

    /// The only webhook scheme the receiver and the processor accept, verifying with `secrets`
    /// (for Omise, base64 as Omise shows it: anything else is refused here; for 2C2P, the
    /// merchant id and secret key, neither empty; for Square, the signature key over the
    /// sandbox's own webhook URL under `api_url`; for PayPal, the webhook id, with the
    /// certificate fetched from the fake PSP at `psp_url` and from nowhere else, named under
    /// [`FAKE_PAYPAL_CERT_SUFFIX`]). Only PayPal reads `psp_url`.
    pub fn webhooks(
        self,
        secrets: &PspSecrets,
        api_url: &str,
        psp_url: &str,
    ) -> Result<Providers, Error> {
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
                    .with_provider(self.provider())
                    .settling_manually(secrets.twoc2p_manual_settlement),
            ),
            Self::Square => Providers::new().with(
                SquareWebhooks::new(webhook_secret, &self.webhook_url(api_url))
                    .map_err(|e| format!("{}: {e}", self.webhook_secret_var()))?
                    .with_provider(self.provider()),
            ),
            Self::PayPal => Providers::new().with(paypal_webhooks(
                self,
                secrets,
                &[psp_url.trim_end_matches('/')],
            )?),
        })
    }
}

/// The Payment Maintenance API of the fake 2C2P, as its face serves it
/// ([`payonce_fake_psp::RunningFakePsp::twoc2p_keys`], also at `GET /_fake/2c2p/keys`): its
/// action URL, the merchant's private key and 2C2P's public key it generated at start. Test keys
/// only, made anew each start; an error when the fake kept the merchant's key to itself (`None`:
/// not the 2C2P face) or gave none.
pub fn twoc2p_maintenance(keys: Option<TwoC2pMerchantKeys>) -> Result<MaintenanceConfig, Error> {
    let keys = keys.ok_or("the fake PSP serves no 2C2P maintenance keys")?;
    Ok(MaintenanceConfig {
        action_url: keys.action_url,
        merchant_private_key: keys
            .merchant_private_key_pkcs8
            .ok_or("the fake 2C2P gave no merchant private key")?,
        twoc2p_public_key: keys.twoc2p_public_key_spki,
    })
}

/// PayPal's verifier for the webhook id in `secrets`, fetching certificates from `origins` only
/// (the fake PSP's own `http://127.0.0.1:<port>`: a sandbox allows nothing else, where a
/// deployment allows only PayPal's HTTPS hosts), each named under [`FAKE_PAYPAL_CERT_SUFFIX`].
fn paypal_webhooks(
    psp: SandboxPsp,
    secrets: &PspSecrets,
    origins: &[&str],
) -> Result<PayPalWebhooks, Error> {
    let fetch = HttpCertFetch::new(CERT_FETCH_TIMEOUT)?;
    Ok(PayPalWebhooks::with_origins(
        &secrets.secret,
        Arc::new(fetch),
        origins,
        FAKE_PAYPAL_CERT_SUFFIX,
    )
    .map_err(|e| format!("{}: {e}", psp.webhook_secret_var()))?
    .with_provider(psp.provider()))
}

#[cfg(test)]
mod tests {
    use super::{PspSecrets, SandboxPsp};

    fn secret(secret: &str) -> PspSecrets {
        PspSecrets {
            secret: secret.into(),
            merchant_id: String::new(),
            signing_key_pem: None,
            twoc2p_manual_settlement: false,
        }
    }

    #[test]
    fn names_pick_a_psp() {
        assert_eq!(SandboxPsp::from_name("stripe"), Ok(SandboxPsp::Stripe));
        assert_eq!(SandboxPsp::from_name("omise"), Ok(SandboxPsp::Omise));
        assert_eq!(SandboxPsp::from_name("Omise"), Ok(SandboxPsp::Omise));
        assert_eq!(SandboxPsp::from_name("2c2p"), Ok(SandboxPsp::TwoC2p));
        assert_eq!(SandboxPsp::from_name(" 2C2P "), Ok(SandboxPsp::TwoC2p));
        let refused = SandboxPsp::from_name("visa").unwrap_err();
        assert!(
            refused.contains("stripe, omise, 2c2p, square, paypal"),
            "{refused}"
        );
        assert!(SandboxPsp::from_name("").is_err());
        assert_eq!(SandboxPsp::default(), SandboxPsp::Stripe);
        assert_eq!(SandboxPsp::from_name("square"), Ok(SandboxPsp::Square));
        assert_eq!(SandboxPsp::from_name("PayPal"), Ok(SandboxPsp::PayPal));
        for kind in [
            SandboxPsp::Stripe,
            SandboxPsp::Omise,
            SandboxPsp::TwoC2p,
            SandboxPsp::Square,
            SandboxPsp::PayPal,
        ] {
            assert_eq!(SandboxPsp::from_name(kind.name()), Ok(kind));
            // `--psp` spells each value as `from_name` takes it.
            let value = clap::ValueEnum::to_possible_value(&kind).unwrap();
            assert_eq!(value.get_name(), kind.name());
        }
    }

    #[test]
    fn each_psp_registers_only_its_own_webhook_scheme() {
        let (api, psp) = ("http://127.0.0.1:3000", "http://127.0.0.1:3001");
        let stripe = SandboxPsp::Stripe
            .webhooks(&secret("whsec_test"), api, psp)
            .unwrap();
        assert!(stripe.get("fake").is_some() && stripe.get("stripe").is_some());
        assert!(stripe.get("omise").is_none() && stripe.get("2c2p").is_none());
        let omise = SandboxPsp::Omise
            .webhooks(&SandboxPsp::Omise.default_secrets(), api, psp)
            .unwrap();
        assert!(omise.get("omise").is_some());
        assert!(omise.get("fake").is_none() && omise.get("stripe").is_none());
        assert!(omise.get("2c2p").is_none());
        let Err(error) = SandboxPsp::Omise.webhooks(&secret("not base64!"), api, psp) else {
            panic!("a webhook secret that is not base64 is refused");
        };
        assert!(
            error
                .to_string()
                .contains("PAYONCE_LOCAL_OMISE_WEBHOOK_SECRET"),
            "{error}"
        );
        let twoc2p = SandboxPsp::TwoC2p
            .webhooks(&SandboxPsp::TwoC2p.default_secrets(), api, psp)
            .unwrap();
        assert!(twoc2p.get("2c2p").is_some());
        assert!(twoc2p.get("fake").is_none() && twoc2p.get("stripe").is_none());
        assert!(twoc2p.get("omise").is_none());
        let Err(error) = SandboxPsp::TwoC2p.webhooks(&secret("a key"), api, psp) else {
            panic!("an empty merchant id is refused");
        };
        assert!(
            error.to_string().contains("PAYONCE_LOCAL_2C2P_MERCHANT_ID"),
            "{error}"
        );
        let square = SandboxPsp::Square
            .webhooks(&SandboxPsp::Square.default_secrets(), api, psp)
            .unwrap();
        assert!(square.get("square").is_some());
        assert!(square.get("fake").is_none() && square.get("omise").is_none());
        let Err(error) = SandboxPsp::Square.webhooks(&secret(""), api, psp) else {
            panic!("an empty signature key is refused");
        };
        assert!(
            error
                .to_string()
                .contains("PAYONCE_LOCAL_SQUARE_SIGNATURE_KEY"),
            "{error}"
        );
        let paypal = SandboxPsp::PayPal
            .webhooks(&SandboxPsp::PayPal.default_secrets(), api, psp)
            .unwrap();
        assert!(paypal.get("paypal").is_some());
        assert!(paypal.get("fake").is_none() && paypal.get("square").is_none());
        let Err(error) = SandboxPsp::PayPal.webhooks(&secret(" "), api, psp) else {
            panic!("a blank webhook id is refused");
        };
        assert!(
            error
                .to_string()
                .contains("PAYONCE_LOCAL_PAYPAL_WEBHOOK_ID"),
            "{error}"
        );
        // The fake's own loopback origin, and nothing else, may serve PayPal's certificate.
        let Err(error) = SandboxPsp::PayPal.webhooks(
            &SandboxPsp::PayPal.default_secrets(),
            api,
            "http://localhost:3001",
        ) else {
            panic!("only http://127.0.0.1:<port> is an allowed plain-HTTP origin");
        };
        assert!(error.to_string().contains("localhost"), "{error}");
    }

    #[test]
    fn paypal_secrets_are_checked_before_anything_starts() {
        let api = "http://127.0.0.1:3000";
        let paypal = SandboxPsp::PayPal;
        assert_eq!(
            paypal.default_secrets().secret,
            payonce_fake_psp::DEFAULT_PAYPAL_WEBHOOK_ID
        );
        assert!(paypal.check_secrets(&paypal.default_secrets(), api).is_ok());
        let key = payonce_fake_psp::PayPalSigner::generate()
            .unwrap()
            .private_key_pem()
            .unwrap();
        let with_key = PspSecrets {
            signing_key_pem: Some(key.clone()),
            ..paypal.default_secrets()
        };
        assert!(paypal.check_secrets(&with_key, api).is_ok());
        assert!(!format!("{with_key:?}").contains(&key[40..80]));
        let not_a_key = PspSecrets {
            signing_key_pem: Some("-----BEGIN CERTIFICATE-----\nAAAA\n".into()),
            ..paypal.default_secrets()
        };
        let error = paypal.check_secrets(&not_a_key, api).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("PAYONCE_LOCAL_PAYPAL_SIGNING_KEY"),
            "{error}"
        );
        let error = paypal
            .check_secrets(&secret("\t"), api)
            .unwrap_err()
            .to_string();
        assert!(error.contains("PAYONCE_LOCAL_PAYPAL_WEBHOOK_ID"), "{error}");
        // The other PSPs' checks are their schemes'.
        assert!(SandboxPsp::Omise
            .check_secrets(&secret("not base64!"), api)
            .is_err());
        // A key file: read and checked, or an error naming the variable and the path.
        let path =
            std::env::temp_dir().join(format!("payonce-local-key-{}.pem", std::process::id()));
        std::fs::write(&path, &key).unwrap();
        let path_text = path.to_str().unwrap();
        assert_eq!(paypal.read_signing_key(path_text).unwrap(), key);
        std::fs::write(&path, "not a key").unwrap();
        let error = paypal.read_signing_key(path_text).unwrap_err().to_string();
        assert!(
            error.contains("PAYONCE_LOCAL_PAYPAL_SIGNING_KEY") && error.contains(path_text),
            "{error}"
        );
        std::fs::remove_file(&path).unwrap();
        let error = paypal.read_signing_key(path_text).unwrap_err().to_string();
        assert!(error.contains("cannot read"), "{error}");
    }

    #[test]
    fn the_fake_paypal_signs_for_the_webhook_id_with_the_key_given() {
        let secrets = PspSecrets {
            secret: "WHSANDBOXTEST0001".into(),
            merchant_id: String::new(),
            signing_key_pem: Some("<pem>".into()),
            twoc2p_manual_settlement: false,
        };
        let config = SandboxPsp::PayPal.fake_config("http://127.0.0.1:3000", &secrets);
        assert_eq!(config.provider, payonce_fake_psp::Provider::PayPal);
        assert_eq!(
            config.webhook_url.as_deref(),
            Some("http://127.0.0.1:3000/webhooks/paypal")
        );
        assert_eq!(config.paypal_webhook_id, "WHSANDBOXTEST0001");
        assert_eq!(config.paypal_signing_key_pem.as_deref(), Some("<pem>"));
        assert_eq!(
            (config.paypal_client_id.as_str(), config.api_key.as_str()),
            (
                payonce_fake_psp::DEFAULT_PAYPAL_CLIENT_ID,
                payonce_fake_psp::DEFAULT_API_KEY
            )
        );
        // The verifier's name rule admits the fake's certificate.
        assert!(payonce_fake_psp::PAYPAL_CERT_COMMON_NAME.ends_with(super::FAKE_PAYPAL_CERT_SUFFIX));
        let psp = SandboxPsp::PayPal
            .adapter("http://127.0.0.1:1", &secrets, None)
            .unwrap();
        assert!(matches!(
            psp,
            payonce::adapters::psp::ConfiguredPsp::PayPal(_)
        ));
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
            signing_key_pem: None,
            twoc2p_manual_settlement: false,
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
        use payonce::ports::Psp as _;
        let psp = SandboxPsp::TwoC2p
            .adapter(
                "http://127.0.0.1:1",
                &SandboxPsp::TwoC2p.default_secrets(),
                None,
            )
            .unwrap();
        assert!(matches!(
            psp,
            payonce::adapters::psp::ConfiguredPsp::TwoC2p(_)
        ));
        // Without the maintenance keys, 2C2P refunds are not supported.
        assert!(!psp.supports_refunds());
        assert!(format!("{:?}", SandboxPsp::TwoC2p.default_secrets()).contains("<secret>"));
    }

    /// The fake 2C2P's maintenance keys and action URL, as it serves them, make an adapter that
    /// refunds; the other PSPs' adapters ignore them.
    #[tokio::test]
    async fn the_fake_twoc2p_keys_make_an_adapter_that_refunds() {
        use payonce::ports::Psp as _;
        let secrets = SandboxPsp::TwoC2p.default_secrets();
        let fake = payonce_fake_psp::FakePsp::start(
            SandboxPsp::TwoC2p.fake_config("http://127.0.0.1:1", &secrets),
            ([127, 0, 0, 1], 0).into(),
        )
        .await
        .unwrap();
        let maintenance = super::twoc2p_maintenance(fake.twoc2p_keys()).unwrap();
        assert_eq!(
            maintenance.action_url,
            format!(
                "{}/2C2PFrontend/PaymentAction/2.0/action",
                fake.base_url().trim_end_matches('/')
            )
        );
        let psp = SandboxPsp::TwoC2p
            .adapter(&fake.base_url(), &secrets, Some(&maintenance))
            .unwrap();
        assert!(psp.supports_refunds());
        // The private key is never shown.
        assert!(!format!("{maintenance:?}").contains("merchant_private_key: ["));
        let stripe = SandboxPsp::Stripe
            .adapter(&fake.base_url(), &secrets, Some(&maintenance))
            .unwrap();
        assert!(stripe.supports_refunds());
        fake.shutdown().await;

        // A fake that is not 2C2P's, or that kept the merchant's key: an error, not an adapter.
        let error = super::twoc2p_maintenance(None).unwrap_err().to_string();
        assert!(error.contains("no 2C2P maintenance keys"), "{error}");
        let kept = payonce_fake_psp::TwoC2pMerchantKeys {
            merchant_private_key_pkcs8: None,
            twoc2p_public_key_spki: vec![1, 2, 3],
            action_url: "http://127.0.0.1:1/action".into(),
        };
        let error = super::twoc2p_maintenance(Some(kept))
            .unwrap_err()
            .to_string();
        assert!(error.contains("no merchant private key"), "{error}");
    }
}
