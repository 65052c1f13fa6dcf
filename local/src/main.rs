//! `payonce-local`: the whole payonce system on one machine with no AWS account.
//!
//! ```text
//! payonce-local [--port 3000] [--psp stripe|omise|2c2p|square|paypal] [--psp-port 0]
//!               [--dynamodb-endpoint URL|aws] [--sqs-endpoint URL|aws]
//!               [--allowed-origin ORIGIN]... [--host ADDR --allow-remote]
//!               [--reconcile-every-seconds 30] [--count-dynamodb] [--no-2c2p-refunds]
//! payonce-local token <user> [--scope SCOPE]... [--ttl-seconds 3600]
//! ```
//!
//! `--psp` (or `PAYONCE_LOCAL_PSP`; default `stripe`) picks payonce's PSP adapter and the wire
//! format of the fake PSP it runs. On 2C2P, payonce's adapter refunds through the fake's Payment
//! Maintenance API with the test keys the fake makes at start, as a deployment with
//! `TwoC2pRefunds=enabled`; `--no-2c2p-refunds` (or `PAYONCE_LOCAL_2C2P_REFUNDS=disabled`) runs
//! it without them: refunds are answered 409 `refund-not-supported`, late duplicates marked
//! `refund_required`.
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

use clap::Parser;
use payonce::clock::{Clock, SystemClock};

/// The whole payonce system on one machine: the API, its store and queue, and a fake PSP.
#[derive(Debug, Parser)]
#[command(
    name = "payonce-local",
    args_conflicts_with_subcommands = true,
    disable_help_subcommand = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: wiring::Flags,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print an HS256 token for a user, signed with PAYONCE_LOCAL_JWT_SECRET.
    Token(TokenArgs),
}

/// The `token` command's arguments.
#[derive(Debug, clap::Args)]
struct TokenArgs {
    /// The user the token is for (its sub claim).
    user: String,
    /// Add OAuth scopes to the token's scope claim (repeatable; a value with spaces adds each word).
    #[arg(long = "scope", value_name = "SCOPE")]
    scopes: Vec<String>,
    /// How long the token is valid, in seconds (a negative number gives an expired token).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 3600,
        allow_negative_numbers = true
    )]
    ttl_seconds: i64,
}

impl TokenArgs {
    /// The scopes, each `--scope` value split on whitespace (so `--scope "a b"` is
    /// `--scope a --scope b`).
    fn scopes(&self) -> Vec<String> {
        self.scopes
            .iter()
            .flat_map(|value| value.split_whitespace().map(str::to_owned))
            .collect()
    }
}

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
    // `--help` prints the usage and exits 0; a usage error is printed and exits 2.
    let cli = Cli::parse();
    if let Some(Command::Token(token)) = &cli.command {
        println!(
            "{}",
            jwt::sign(
                &jwt_secret(),
                &token.user,
                SystemClock.now_s(),
                token.ttl_seconds,
                &token.scopes()
            )
        );
        return Ok(());
    }
    let options = wiring::Options::from_flags(cli.serve, |name| std::env::var(name).ok())?;
    wiring::init_logs();
    let secret = jwt_secret();
    let default_secret = secret == DEFAULT_JWT_SECRET;
    wiring::run(options, secret, default_secret).await
}

/// The demo checkout page the sandbox serves at `/`.
pub fn sandbox_page() -> &'static str {
    include_str!("../../clients/web/index.html")
}

/// The browser key manager module, served at `/payonce-keys.js` for the demo page.
pub const KEY_MANAGER_SCRIPT: &str = include_str!("../../clients/web/payonce-keys.js");

#[cfg(test)]
mod tests {
    use super::{Cli, Command};
    use clap::Parser;

    /// `payonce-local token <args>` through the command line: the user, the lifetime and the
    /// scopes.
    fn token_args(args: &[&str]) -> Result<(String, i64, Vec<String>), clap::Error> {
        let cli = Cli::try_parse_from(["payonce-local", "token"].iter().chain(args))?;
        match cli.command {
            Some(Command::Token(token)) => {
                Ok((token.user.clone(), token.ttl_seconds, token.scopes()))
            }
            None => panic!("not the token command: {cli:?}"),
        }
    }

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn token_takes_a_user_scopes_and_a_lifetime() {
        assert_eq!(
            token_args(&["alice"]).unwrap(),
            ("alice".into(), 3600, vec![])
        );
        assert_eq!(
            token_args(&[
                "bob",
                "--scope",
                "payments:refund",
                "--ttl-seconds",
                "60",
                "--scope",
                "openid profile"
            ])
            .unwrap(),
            (
                "bob".into(),
                60,
                strings(&["payments:refund", "openid", "profile"])
            )
        );
        // An expired token, for the tests of expiry.
        assert_eq!(
            token_args(&["carol", "--ttl-seconds", "-10"]).unwrap(),
            ("carol".into(), -10, vec![])
        );
        assert!(token_args(&[]).is_err());
        assert!(token_args(&["--scope", "payments:refund"]).is_err());
        assert!(token_args(&["bob", "--scope"]).is_err());
        assert!(token_args(&["bob", "--ttl-seconds", "soon"]).is_err());
        assert!(token_args(&["bob", "--scopes", "x"]).is_err());
    }

    #[test]
    fn the_server_flags_do_not_mix_with_the_token_command() {
        assert!(
            Cli::try_parse_from(["payonce-local", "--port", "4000", "token", "alice"]).is_err()
        );
        let cli = Cli::try_parse_from(["payonce-local", "--port", "4000"]).unwrap();
        assert!(cli.command.is_none());
    }

    #[test]
    fn help_and_usage_errors_are_told_apart() {
        use clap::error::ErrorKind;
        let help = Cli::try_parse_from(["payonce-local", "--help"]).unwrap_err();
        assert_eq!(help.kind(), ErrorKind::DisplayHelp);
        assert_eq!(help.exit_code(), 0);
        let bogus = Cli::try_parse_from(["payonce-local", "--bogus"]).unwrap_err();
        assert_eq!(bogus.kind(), ErrorKind::UnknownArgument);
        assert_eq!(bogus.exit_code(), 2);
        assert!(bogus.to_string().contains("--bogus"), "{bogus}");
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
