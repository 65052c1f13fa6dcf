//! `payonce-fake-psp [--provider stripe|omise|2c2p|square|paypal] [--addr A] [--api-key K]
//! [--webhook-url URL] [--webhook-secret S] [--merchant-id M] [--twoc2p-manual-settlement]
//! [--client-id ID] [--paypal-signing-key PATH] [--paypal-webhook-id ID]`: runs the fake PSP
//! with the given face (Stripe by default) until Ctrl-C, announcing its base URL as the only line
//! on stdout. Without `--webhook-secret`, an Omise face signs with `DEFAULT_OMISE_WEBHOOK_SECRET`
//! and a Square face with the signature key `DEFAULT_SQUARE_SIGNATURE_KEY` (`--webhook-secret` is
//! the Square subscription's signature key; deliveries are signed over `--webhook-url`). A 2C2P
//! face's secret key is `--api-key` (default `DEFAULT_TWOC2P_SECRET_KEY`), its merchant
//! `--merchant-id` (default `DEFAULT_TWOC2P_MERCHANT_ID`); `--twoc2p-manual-settlement` makes
//! that merchant account a manual-settlement one (`FakePspConfig::twoc2p_manual_settlement`:
//! approved payments are authorizations until the Payment Maintenance API settles them). A PayPal
//! face's OAuth client is `--client-id` (default `DEFAULT_PAYPAL_CLIENT_ID`) with `--api-key` as
//! its secret (default `DEFAULT_API_KEY`); it signs webhooks SHA256withRSA with the PEM private
//! key at `--paypal-signing-key` (default: a key generated at start) for the webhook id
//! `--paypal-webhook-id` (default `DEFAULT_PAYPAL_WEBHOOK_ID`), and serves the key's certificate
//! at `/_fake/paypal/cert.pem`. `--help` lists the flags.

use std::io::Write;
use std::net::SocketAddr;

use clap::Parser;
use payonce_fake_psp::{
    FakePsp, FakePspConfig, Provider, DEFAULT_PAYPAL_CLIENT_ID, DEFAULT_PAYPAL_WEBHOOK_ID,
    DEFAULT_TWOC2P_MERCHANT_ID,
};

/// A fake PSP for tests and the sandbox: serves until Ctrl-C and prints its base URL as the only line on stdout.
#[derive(Debug, Parser)]
#[command(name = "payonce-fake-psp")]
struct Cli {
    /// The PSP whose wire format it speaks.
    #[arg(long, value_enum, default_value_t = Face::Stripe)]
    provider: Face,
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// The secret key it accepts (2C2P: the merchant secret key; default: the face's development key).
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
    /// 2C2P's merchant id.
    #[arg(long, value_name = "ID", default_value = DEFAULT_TWOC2P_MERCHANT_ID)]
    merchant_id: String,
    /// 2C2P: a manual-settlement merchant account (approved payments are authorizations until the maintenance API settles them).
    #[arg(long)]
    twoc2p_manual_settlement: bool,
    /// Where to send webhooks (default: nowhere).
    #[arg(long, value_name = "URL")]
    webhook_url: Option<String>,
    /// The secret webhooks are signed with; Square: the signature key (default: the face's development secret).
    #[arg(long, value_name = "SECRET")]
    webhook_secret: Option<String>,
    /// PayPal's OAuth client id (its secret is --api-key).
    #[arg(long, value_name = "ID", default_value = DEFAULT_PAYPAL_CLIENT_ID)]
    client_id: String,
    /// PayPal: a PEM file with the RSA private key webhooks are signed with (default: a key generated at start).
    #[arg(long, value_name = "PATH")]
    paypal_signing_key: Option<std::path::PathBuf>,
    /// PayPal: the webhook id in the signed string.
    #[arg(long, value_name = "ID", default_value = DEFAULT_PAYPAL_WEBHOOK_ID)]
    paypal_webhook_id: String,
}

/// The faces `--provider` names.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Face {
    /// Stripe's PaymentIntents and Refunds.
    Stripe,
    /// Omise's Charges, Refunds and Search.
    Omise,
    /// 2C2P PGW v4.3 (no refunds).
    #[value(name = "2c2p")]
    TwoC2p,
    /// Square's Payments and Refunds.
    Square,
    /// PayPal's Orders v2 and Payments v2.
    #[value(name = "paypal")]
    PayPal,
}

impl From<Face> for Provider {
    fn from(face: Face) -> Self {
        match face {
            Face::Stripe => Provider::Stripe,
            Face::Omise => Provider::Omise,
            Face::TwoC2p => Provider::TwoC2p,
            Face::Square => Provider::Square,
            Face::PayPal => Provider::PayPal,
        }
    }
}

impl Cli {
    /// The fake PSP's configuration: the face's own defaults where a flag is left out. Fails
    /// only if `--paypal-signing-key` cannot be read.
    fn config(self) -> std::io::Result<FakePspConfig> {
        let paypal_signing_key_pem = match &self.paypal_signing_key {
            Some(path) => Some(std::fs::read_to_string(path).map_err(|error| {
                std::io::Error::new(
                    error.kind(),
                    format!("--paypal-signing-key {}: {error}", path.display()),
                )
            })?),
            None => None,
        };
        let provider: Provider = self.provider.into();
        // The face's own defaults (PayPal's 3 h for an order nobody approves), then the flags.
        let defaults = match provider {
            Provider::PayPal => FakePspConfig::paypal(),
            _ => FakePspConfig::default(),
        };
        let mut config = FakePspConfig {
            provider,
            webhook_url: self.webhook_url,
            twoc2p_merchant_id: self.merchant_id,
            twoc2p_manual_settlement: self.twoc2p_manual_settlement,
            paypal_client_id: self.client_id,
            paypal_signing_key_pem,
            paypal_webhook_id: self.paypal_webhook_id,
            ..defaults
        };
        config.webhook_secret = match (self.webhook_secret, config.provider) {
            (Some(secret), _) => secret,
            (None, Provider::Omise) => FakePspConfig::omise().webhook_secret,
            (None, Provider::Square) => FakePspConfig::square().webhook_secret,
            // PayPal signs with its RSA key; the secret is not used.
            (None, Provider::Stripe | Provider::TwoC2p | Provider::PayPal) => config.webhook_secret,
        };
        config.api_key = match (self.api_key, config.provider) {
            (Some(key), _) => key,
            (None, Provider::TwoC2p) => FakePspConfig::twoc2p().api_key,
            (None, Provider::Stripe | Provider::Omise | Provider::Square | Provider::PayPal) => {
                config.api_key
            }
        };
        Ok(config)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `--help` prints the usage and exits 0; a usage error is printed and exits 2.
    let cli = Cli::parse();
    // Logs go to stderr so that stdout carries only the line scripts wait for.
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let addr = cli.addr;
    let psp = FakePsp::start(cli.config()?, addr).await?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "fake PSP listening on {}", psp.base_url())?;
    stdout.flush()?;
    tokio::signal::ctrl_c().await?;
    psp.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::Parser;
    use payonce_fake_psp::{
        FakePspConfig, Provider, DEFAULT_API_KEY, DEFAULT_OMISE_WEBHOOK_SECRET,
        DEFAULT_PAYPAL_CLIENT_ID, DEFAULT_PAYPAL_WEBHOOK_ID, DEFAULT_SQUARE_SIGNATURE_KEY,
        DEFAULT_TWOC2P_MERCHANT_ID, DEFAULT_TWOC2P_SECRET_KEY,
    };

    fn config(args: &[&str]) -> FakePspConfig {
        Cli::try_parse_from(["payonce-fake-psp"].iter().chain(args))
            .unwrap()
            .config()
            .unwrap()
    }

    #[test]
    fn each_face_has_its_own_defaults() {
        let stripe = config(&[]);
        let defaults = FakePspConfig::default();
        assert_eq!(stripe.provider, Provider::Stripe);
        assert_eq!(stripe.api_key, DEFAULT_API_KEY);
        assert_eq!(stripe.webhook_secret, defaults.webhook_secret);
        assert_eq!(stripe.webhook_url, None);
        let omise = config(&["--provider", "omise"]);
        assert_eq!(omise.provider, Provider::Omise);
        assert_eq!(omise.webhook_secret, DEFAULT_OMISE_WEBHOOK_SECRET);
        assert_eq!(omise.api_key, DEFAULT_API_KEY);
        let twoc2p = config(&["--provider", "2c2p"]);
        assert_eq!(twoc2p.provider, Provider::TwoC2p);
        assert_eq!(twoc2p.api_key, DEFAULT_TWOC2P_SECRET_KEY);
        assert_eq!(twoc2p.twoc2p_merchant_id, DEFAULT_TWOC2P_MERCHANT_ID);
        assert!(!twoc2p.twoc2p_manual_settlement);
        let square = config(&["--provider", "square"]);
        assert_eq!(square.provider, Provider::Square);
        assert_eq!(square.webhook_secret, DEFAULT_SQUARE_SIGNATURE_KEY);
        assert_eq!(square.api_key, DEFAULT_API_KEY);
        let paypal = config(&["--provider", "paypal"]);
        assert_eq!(paypal.provider, Provider::PayPal);
        assert_eq!(paypal.api_key, DEFAULT_API_KEY);
        assert_eq!(paypal.paypal_client_id, DEFAULT_PAYPAL_CLIENT_ID);
        assert_eq!(paypal.paypal_webhook_id, DEFAULT_PAYPAL_WEBHOOK_ID);
        assert_eq!(paypal.paypal_signing_key_pem, None);
        let defaults = FakePspConfig::paypal();
        assert_eq!(paypal.requires_action_for, defaults.requires_action_for);
        assert_eq!(
            (
                paypal.paypal_token_lifetime,
                paypal.paypal_request_id_ttl,
                paypal.paypal_one_step_vault,
                paypal.paypal_unique_invoice_id
            ),
            (
                defaults.paypal_token_lifetime,
                defaults.paypal_request_id_ttl,
                defaults.paypal_one_step_vault,
                defaults.paypal_unique_invoice_id
            )
        );
    }

    #[test]
    fn the_paypal_client_key_and_webhook_id_come_from_the_flags() {
        let pem_path =
            std::env::temp_dir().join(format!("payonce-fake-psp-cli-{}.pem", std::process::id()));
        std::fs::write(&pem_path, "-----BEGIN PRIVATE KEY-----\n").unwrap();
        let c = config(&[
            "--provider",
            "paypal",
            "--client-id",
            "client-from-flag",
            "--api-key",
            "secret-from-flag",
            "--paypal-signing-key",
            pem_path.to_str().unwrap(),
            "--paypal-webhook-id",
            "WHFROMFLAG",
        ]);
        std::fs::remove_file(&pem_path).unwrap();
        assert_eq!(c.provider, Provider::PayPal);
        assert_eq!(c.paypal_client_id, "client-from-flag");
        assert_eq!(c.api_key, "secret-from-flag");
        assert_eq!(
            c.paypal_signing_key_pem.as_deref(),
            Some("-----BEGIN PRIVATE KEY-----\n")
        );
        assert_eq!(c.paypal_webhook_id, "WHFROMFLAG");
        // A key file that cannot be read is an error, not a silently generated key.
        let missing = Cli::try_parse_from([
            "payonce-fake-psp",
            "--provider",
            "paypal",
            "--paypal-signing-key",
            "/nonexistent/payonce-key.pem",
        ])
        .unwrap()
        .config();
        assert!(missing.is_err());
    }

    #[test]
    fn the_square_signature_key_and_notification_url_come_from_the_flags() {
        let c = config(&[
            "--provider",
            "square",
            "--webhook-url",
            "https://example.test/webhooks/square",
            "--webhook-secret",
            "square-signature-key",
        ]);
        assert_eq!(c.provider, Provider::Square);
        assert_eq!(c.webhook_secret, "square-signature-key");
        assert_eq!(
            c.webhook_url.as_deref(),
            Some("https://example.test/webhooks/square")
        );
    }

    #[test]
    fn flags_override_the_defaults() {
        let c = config(&[
            "--provider=2c2p",
            "--api-key",
            "k",
            "--merchant-id",
            "M1",
            "--webhook-url",
            "http://127.0.0.1:9/hook",
            "--webhook-secret",
            "s",
            "--twoc2p-manual-settlement",
        ]);
        assert_eq!(
            (
                c.api_key.as_str(),
                c.twoc2p_merchant_id.as_str(),
                c.webhook_secret.as_str()
            ),
            ("k", "M1", "s")
        );
        assert!(c.twoc2p_manual_settlement);
        assert_eq!(c.webhook_url.as_deref(), Some("http://127.0.0.1:9/hook"));
    }

    #[test]
    fn bad_flags_are_refused() {
        for args in [
            &["--bogus", "x"][..],
            &["--provider", "visa"],
            &["--addr", "localhost"],
            &["--api-key"],
        ] {
            let parsed = Cli::try_parse_from(["payonce-fake-psp"].iter().chain(args));
            assert_eq!(parsed.unwrap_err().exit_code(), 2, "{args:?}");
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
