//! `payonce-local`: the whole payonce system on one machine with no AWS account.
//!
//! ```text
//! payonce-local [--port 3000] [--psp-port 0] [--dynamodb-endpoint URL|aws] [--sqs-endpoint URL|aws]
//! payonce-local token <user> [--ttl-seconds 3600]
//! ```

mod gateway;
mod jwt;
mod sandbox;
mod wiring;

use payonce::clock::{Clock, SystemClock};

/// The default HS256 secret (printed at start; override with `PAYONCE_LOCAL_JWT_SECRET`).
const DEFAULT_JWT_SECRET: &str = "payonce-local-dev-secret";

fn jwt_secret() -> String {
    std::env::var("PAYONCE_LOCAL_JWT_SECRET")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_JWT_SECRET.to_owned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("token") {
        let user = args
            .get(1)
            .ok_or("usage: payonce-local token <user> [--ttl-seconds N]")?;
        let ttl = wiring::flag(&args, "--ttl-seconds")
            .map(|v| v.parse())
            .transpose()?
            .unwrap_or(3600);
        println!(
            "{}",
            jwt::sign(&jwt_secret(), user, SystemClock.now_s(), ttl)
        );
        return Ok(());
    }
    let options = wiring::Options::parse(&args)?;
    wiring::init_logs();
    wiring::run(options, jwt_secret()).await
}

/// The demo checkout page the sandbox serves at `/`.
pub fn sandbox_page() -> &'static str {
    include_str!("../../clients/web/index.html")
}

/// The browser key manager module, served at `/payonce-keys.js` for the demo page.
pub const KEY_MANAGER_SCRIPT: &str = include_str!("../../clients/web/payonce-keys.js");
