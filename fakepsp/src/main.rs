//! `payonce-fake-psp [--provider stripe|omise|2c2p] [--addr A] [--api-key K] [--webhook-url URL]
//! [--webhook-secret S] [--merchant-id M]`: runs the fake PSP with the given face (Stripe by
//! default) until Ctrl-C, announcing its base URL as the only line on stdout. Without
//! `--webhook-secret`, an Omise face signs with `DEFAULT_OMISE_WEBHOOK_SECRET`. A 2C2P face's
//! secret key is `--api-key` (default `DEFAULT_TWOC2P_SECRET_KEY`), its merchant `--merchant-id`
//! (default `DEFAULT_TWOC2P_MERCHANT_ID`).

use std::io::Write;

use payonce_fake_psp::{FakePsp, FakePspConfig, Provider};

const USAGE: &str = "flags: --provider stripe|omise|2c2p --addr A --api-key K --webhook-url URL \
     --webhook-secret S --merchant-id M";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Logs go to stderr so that stdout carries only the line scripts wait for.
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        println!("usage: payonce-fake-psp [flags]; {USAGE}");
        return Ok(());
    }
    let (mut config, mut addr) = (FakePspConfig::default(), "127.0.0.1:0".parse()?);
    let (mut secret, mut api_key) = (None, None);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--provider" => {
                config.provider = match value.as_str() {
                    "stripe" => Provider::Stripe,
                    "omise" => Provider::Omise,
                    "2c2p" => Provider::TwoC2p,
                    other => return Err(format!("unknown provider {other}; {USAGE}").into()),
                }
            }
            "--addr" => addr = value.parse()?,
            "--api-key" => api_key = Some(value),
            "--merchant-id" => config.twoc2p_merchant_id = value,
            "--webhook-url" => config.webhook_url = Some(value),
            "--webhook-secret" => secret = Some(value),
            _ => return Err(format!("unknown argument {flag}; {USAGE}").into()),
        }
    }
    config.webhook_secret = match (secret, config.provider) {
        (Some(secret), _) => secret,
        (None, Provider::Omise) => FakePspConfig::omise().webhook_secret,
        (None, Provider::Stripe | Provider::TwoC2p) => config.webhook_secret,
    };
    config.api_key = match (api_key, config.provider) {
        (Some(key), _) => key,
        (None, Provider::TwoC2p) => FakePspConfig::twoc2p().api_key,
        (None, Provider::Stripe | Provider::Omise) => config.api_key,
    };
    let psp = FakePsp::start(config, addr).await?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "fake PSP listening on {}", psp.base_url())?;
    stdout.flush()?;
    tokio::signal::ctrl_c().await?;
    psp.shutdown().await;
    Ok(())
}
