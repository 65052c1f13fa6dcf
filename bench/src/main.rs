//! `payonce-bench`: the measurements behind `scripts/bench` (which starts DynamoDB Local, runs
//! the Powertools peer and writes the table in docs/benchmarks.md). Subcommands print JSON:
//!
//! - `requests`: DynamoDB requests and consumed capacity per operation;
//! - `latency [n] [round]`: p50/p99 of `Idempotency::run` around a no-op, first call and replay,
//!   against DynamoDB Local (beside the raw-SDK floor; `round` sets which goes first) and the
//!   embedded store;
//! - `coldstart <binary> [runs]`: process start to the first poll of a local Runtime API stub,
//!   and peak RSS, per function binary.
//!
//! `--help` (of each subcommand too) prints the usage; a usage error exits 2.

mod coldstart;
mod ops;

use clap::Parser;

/// Benchmarks of payonce: DynamoDB requests per operation, latency and cold start, printed as JSON.
#[derive(Debug, Parser)]
#[command(name = "payonce-bench", disable_help_subcommand = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, PartialEq, Eq, clap::Subcommand)]
enum Command {
    /// Count the DynamoDB requests and consumed capacity of each operation (against DynamoDB Local).
    Requests,
    /// Time the idempotency wrapper, first call and replay, against DynamoDB Local, the raw-SDK floor and the embedded store.
    Latency {
        /// Calls to time on each side.
        #[arg(default_value_t = 300)]
        n: usize,
        /// The round's number: an even round times the wrapper first, an odd one the floor.
        #[arg(default_value_t = 0)]
        round: u32,
    },
    /// Time a function binary's start to its first poll of a local Runtime API stub, and its peak memory.
    Coldstart {
        /// The function binary (a bootstrap) to start.
        binary: String,
        /// How many times to start it.
        #[arg(default_value_t = 20)]
        runs: usize,
    },
}

#[tokio::main]
async fn main() {
    // `--help` prints the usage and exits 0; a usage error is printed and exits 2.
    let report = match Cli::parse().command {
        Command::Requests => ops::requests().await,
        Command::Latency { n, round } => ops::latency(n, round).await,
        Command::Coldstart { binary, runs } => coldstart::measure(&binary, runs).await,
    };
    println!("{report}");
}

#[cfg(test)]
mod tests {
    use super::{Cli, Command};
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<Command, clap::Error> {
        Cli::try_parse_from(["payonce-bench"].iter().chain(args)).map(|cli| cli.command)
    }

    #[test]
    fn subcommands_keep_their_defaults() {
        assert_eq!(parse(&["requests"]).unwrap(), Command::Requests);
        assert_eq!(
            parse(&["latency"]).unwrap(),
            Command::Latency { n: 300, round: 0 }
        );
        assert_eq!(
            parse(&["latency", "50", "3"]).unwrap(),
            Command::Latency { n: 50, round: 3 }
        );
        assert_eq!(
            parse(&["coldstart", "target/lambda/charge/bootstrap"]).unwrap(),
            Command::Coldstart {
                binary: "target/lambda/charge/bootstrap".into(),
                runs: 20
            }
        );
        assert_eq!(
            parse(&["coldstart", "bootstrap", "5"]).unwrap(),
            Command::Coldstart {
                binary: "bootstrap".into(),
                runs: 5
            }
        );
    }

    #[test]
    fn usage_errors_exit_2_and_help_0() {
        for args in [
            &[][..],
            &["warmup"],
            &["latency", "many"],
            &["coldstart"],
            &["requests", "--bogus"],
        ] {
            assert_eq!(parse(args).unwrap_err().exit_code(), 2, "{args:?}");
        }
        for args in [&["--help"][..], &["-h"], &["latency", "--help"]] {
            assert_eq!(parse(args).unwrap_err().exit_code(), 0, "{args:?}");
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
