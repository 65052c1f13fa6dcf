//! `payonce-fake-psp [--provider stripe|omise] [--addr A] [--api-key K] [--webhook-url URL]
//! [--webhook-secret S]`: runs the fake PSP with the given face (Stripe by default) until Ctrl-C,
//! announcing its base URL as the only line on stdout. Without `--webhook-secret`, an Omise face
//! signs with `DEFAULT_OMISE_WEBHOOK_SECRET`.

use std::io::Write;

use payonce_fake_psp::{FakePsp, FakePspConfig, Provider};

const USAGE: &str =
    "flags: --provider stripe|omise --addr A --api-key K --webhook-url URL --webhook-secret S";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Logs go to stderr so that stdout carries only the line scripts wait for.
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let (mut config, mut addr) = (FakePspConfig::default(), "127.0.0.1:0".parse()?);
    let mut secret = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--provider" => {
                config.provider = match value.as_str() {
                    "stripe" => Provider::Stripe,
                    "omise" => Provider::Omise,
                    other => return Err(format!("unknown provider {other}; {USAGE}").into()),
                }
            }
            "--addr" => addr = value.parse()?,
            "--api-key" => config.api_key = value,
            "--webhook-url" => config.webhook_url = Some(value),
            "--webhook-secret" => secret = Some(value),
            _ => return Err(format!("unknown argument {flag}; {USAGE}").into()),
        }
    }
    config.webhook_secret = match (secret, config.provider) {
        (Some(secret), _) => secret,
        (None, Provider::Omise) => FakePspConfig::omise().webhook_secret,
        (None, Provider::Stripe) => config.webhook_secret,
    };
    let psp = FakePsp::start(config, addr).await?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "fake PSP listening on {}", psp.base_url())?;
    stdout.flush()?;
    tokio::signal::ctrl_c().await?;
    psp.shutdown().await;
    Ok(())
}
