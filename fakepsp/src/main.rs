//! `payonce-fake-psp [--provider stripe|omise|2c2p|square] [--addr A] [--api-key K]
//! [--webhook-url URL] [--webhook-secret S] [--merchant-id M]`: runs the fake PSP with the given
//! face (Stripe by default) until Ctrl-C, announcing its base URL as the only line on stdout.
//! Without `--webhook-secret`, an Omise face signs with `DEFAULT_OMISE_WEBHOOK_SECRET` and a
//! Square face with the signature key `DEFAULT_SQUARE_SIGNATURE_KEY` (`--webhook-secret` is the
//! Square subscription's signature key; deliveries are signed over `--webhook-url`). A 2C2P face's
//! secret key is `--api-key` (default `DEFAULT_TWOC2P_SECRET_KEY`), its merchant `--merchant-id`
//! (default `DEFAULT_TWOC2P_MERCHANT_ID`). `--help` lists the flags.

use std::io::Write;
use std::net::SocketAddr;

use clap::Parser;
use payonce_fake_psp::{FakePsp, FakePspConfig, Provider, DEFAULT_TWOC2P_MERCHANT_ID};

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
    /// Where to send webhooks (default: nowhere).
    #[arg(long, value_name = "URL")]
    webhook_url: Option<String>,
    /// The secret webhooks are signed with; Square: the signature key (default: the face's development secret).
    #[arg(long, value_name = "SECRET")]
    webhook_secret: Option<String>,
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
}

impl From<Face> for Provider {
    fn from(face: Face) -> Self {
        match face {
            Face::Stripe => Provider::Stripe,
            Face::Omise => Provider::Omise,
            Face::TwoC2p => Provider::TwoC2p,
            Face::Square => Provider::Square,
        }
    }
}

impl Cli {
    /// The fake PSP's configuration: the face's own defaults where a flag is left out.
    fn config(self) -> FakePspConfig {
        let mut config = FakePspConfig {
            provider: self.provider.into(),
            webhook_url: self.webhook_url,
            twoc2p_merchant_id: self.merchant_id,
            ..FakePspConfig::default()
        };
        config.webhook_secret = match (self.webhook_secret, config.provider) {
            (Some(secret), _) => secret,
            (None, Provider::Omise) => FakePspConfig::omise().webhook_secret,
            (None, Provider::Square) => FakePspConfig::square().webhook_secret,
            (None, Provider::Stripe | Provider::TwoC2p) => config.webhook_secret,
        };
        config.api_key = match (self.api_key, config.provider) {
            (Some(key), _) => key,
            (None, Provider::TwoC2p) => FakePspConfig::twoc2p().api_key,
            (None, Provider::Stripe | Provider::Omise | Provider::Square) => config.api_key,
        };
        config
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
    let psp = FakePsp::start(cli.config(), addr).await?;
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
        DEFAULT_SQUARE_SIGNATURE_KEY, DEFAULT_TWOC2P_MERCHANT_ID, DEFAULT_TWOC2P_SECRET_KEY,
    };

    fn config(args: &[&str]) -> FakePspConfig {
        Cli::try_parse_from(["payonce-fake-psp"].iter().chain(args))
            .unwrap()
            .config()
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
        let square = config(&["--provider", "square"]);
        assert_eq!(square.provider, Provider::Square);
        assert_eq!(square.webhook_secret, DEFAULT_SQUARE_SIGNATURE_KEY);
        assert_eq!(square.api_key, DEFAULT_API_KEY);
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
        ]);
        assert_eq!(
            (
                c.api_key.as_str(),
                c.twoc2p_merchant_id.as_str(),
                c.webhook_secret.as_str()
            ),
            ("k", "M1", "s")
        );
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
