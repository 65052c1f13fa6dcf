//! `payonce-fake-psp [--addr A] [--api-key K] [--webhook-url URL] [--webhook-secret S]`: runs
//! the fake PSP until Ctrl-C, announcing its base URL as the only line on stdout.

use std::io::Write;

use payonce_fake_psp::{FakePsp, FakePspConfig};

const USAGE: &str = "flags: --addr A --api-key K --webhook-url URL --webhook-secret S";

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
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--addr" => addr = value.parse()?,
            "--api-key" => config.api_key = value,
            "--webhook-url" => config.webhook_url = Some(value),
            "--webhook-secret" => config.webhook_secret = value,
            _ => return Err(format!("unknown argument {flag}; {USAGE}").into()),
        }
    }
    let psp = FakePsp::start(config, addr).await?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "fake PSP listening on {}", psp.base_url())?;
    stdout.flush()?;
    tokio::signal::ctrl_c().await?;
    psp.shutdown().await;
    Ok(())
}
