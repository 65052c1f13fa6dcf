//! `payonce-local`: the whole payonce system on one machine with no AWS account.
//!
//! ```text
//! payonce-local [--port 3000] [--psp stripe|omise|2c2p] [--psp-port 0]
//!               [--dynamodb-endpoint URL|aws] [--sqs-endpoint URL|aws]
//!               [--allowed-origin ORIGIN]... [--host ADDR --allow-remote]
//!               [--reconcile-every-seconds 30] [--count-dynamodb]
//! payonce-local token <user> [--scope SCOPE]... [--ttl-seconds 3600]
//! ```
//!
//! `--psp` (or `PAYONCE_LOCAL_PSP`; default `stripe`) picks payonce's PSP adapter and the wire
//! format of the fake PSP it runs.
//!
//! It listens on loopback and uses local emulators; a non-loopback `--host` or an `aws`
//! endpoint needs `--allow-remote` and a `PAYONCE_LOCAL_JWT_SECRET` of your own. A checkout on
//! another origin needs that origin in `--allowed-origin`.
//!
//! `--count-dynamodb` (with `--dynamodb-endpoint`, on loopback) counts the sandbox's DynamoDB
//! requests and consumed capacity and serves the totals at `GET /_sandbox/dynamodb-usage`, for
//! `scripts/load`.
//!
//! `token` prints an HS256 token for `<user>`; each `--scope` adds an OAuth scope to its
//! space-separated `scope` claim (`--scope payments:refund` for a token that may refund).

mod exposure;
mod gateway;
mod jwt;
mod psp;
mod sandbox;
mod wiring;

use payonce::clock::{Clock, SystemClock};

/// Usage of both commands, for `--help`.
const USAGE: &str = "\
usage: payonce-local [--port 3000] [--psp stripe|omise|2c2p] [--psp-port 0]
                     [--dynamodb-endpoint URL|aws] [--sqs-endpoint URL|aws]
                     [--allowed-origin ORIGIN]... [--host ADDR --allow-remote]
                     [--reconcile-every-seconds 30] [--count-dynamodb]
       payonce-local token <user> [--scope SCOPE]... [--ttl-seconds 3600]
       payonce-local --help";

/// Usage of the `token` command.
const TOKEN_USAGE: &str = "usage: payonce-local token <user> [--scope SCOPE]... [--ttl-seconds N]";

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
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return Ok(());
    }
    if args.first().map(String::as_str) == Some("token") {
        let (user, ttl, scopes) = token_args(&args[1..])?;
        println!(
            "{}",
            jwt::sign(&jwt_secret(), &user, SystemClock.now_s(), ttl, &scopes)
        );
        return Ok(());
    }
    let options = wiring::Options::parse(&args)?;
    wiring::init_logs();
    let secret = jwt_secret();
    let default_secret = secret == DEFAULT_JWT_SECRET;
    wiring::run(options, secret, default_secret).await
}

/// The `token` command's arguments: the user, the lifetime in seconds (default 3600) and the
/// scopes (each `--scope` value split on spaces, so `--scope "a b"` is `--scope a --scope b`).
fn token_args(args: &[String]) -> Result<(String, i64, Vec<String>), String> {
    let user = match args.first() {
        Some(user) if !user.starts_with("--") => user.clone(),
        _ => return Err(TOKEN_USAGE.into()),
    };
    let (mut ttl, mut scopes) = (3600, Vec::new());
    let mut rest = args[1..].iter();
    while let Some(name) = rest.next() {
        let value = rest
            .next()
            .ok_or_else(|| format!("{name} needs a value; {TOKEN_USAGE}"))?;
        match name.as_str() {
            "--ttl-seconds" => {
                ttl = value
                    .parse()
                    .map_err(|_| format!("--ttl-seconds takes a number; {TOKEN_USAGE}"))?;
            }
            "--scope" => scopes.extend(value.split_whitespace().map(str::to_owned)),
            _ => return Err(format!("unknown argument {name}; {TOKEN_USAGE}")),
        }
    }
    Ok((user, ttl, scopes))
}

/// The demo checkout page the sandbox serves at `/`.
pub fn sandbox_page() -> &'static str {
    include_str!("../../clients/web/index.html")
}

/// The browser key manager module, served at `/payonce-keys.js` for the demo page.
pub const KEY_MANAGER_SCRIPT: &str = include_str!("../../clients/web/payonce-keys.js");

#[cfg(test)]
mod tests {
    use super::token_args;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn token_takes_a_user_scopes_and_a_lifetime() {
        assert_eq!(
            token_args(&args(&["alice"])).unwrap(),
            ("alice".into(), 3600, vec![])
        );
        assert_eq!(
            token_args(&args(&[
                "bob",
                "--scope",
                "payments:refund",
                "--ttl-seconds",
                "60",
                "--scope",
                "openid profile"
            ]))
            .unwrap(),
            (
                "bob".into(),
                60,
                args(&["payments:refund", "openid", "profile"])
            )
        );
        assert!(token_args(&args(&[])).is_err());
        assert!(token_args(&args(&["--scope", "payments:refund"])).is_err());
        assert!(token_args(&args(&["bob", "--scope"])).is_err());
        assert!(token_args(&args(&["bob", "--ttl-seconds", "soon"])).is_err());
        assert!(token_args(&args(&["bob", "--scopes", "x"])).is_err());
    }
}
