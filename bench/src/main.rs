//! `payonce-bench`: the measurements behind `scripts/bench` (which starts DynamoDB Local, runs
//! the Powertools peer and writes the table in docs/benchmarks.md). Subcommands print JSON:
//!
//! - `requests`: DynamoDB requests and consumed capacity per operation;
//! - `latency <n> [round]`: p50/p99 of `Idempotency::run` around a no-op, first call and replay,
//!   against DynamoDB Local (beside the raw-SDK floor; `round` sets which goes first) and the
//!   embedded store;
//! - `coldstart <binary> <runs>`: process start to the first poll of a local Runtime API stub,
//!   and peak RSS, per function binary.

mod coldstart;
mod ops;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let report = match args.first().map(String::as_str) {
        Some("requests") => ops::requests().await,
        Some("latency") => {
            ops::latency(
                args.get(1).and_then(|n| n.parse().ok()).unwrap_or(300),
                args.get(2).and_then(|n| n.parse().ok()).unwrap_or(0),
            )
            .await
        }
        Some("coldstart") => {
            coldstart::measure(
                &args[1],
                args.get(2).and_then(|n| n.parse().ok()).unwrap_or(20),
            )
            .await
        }
        _ => {
            eprintln!(
                "usage: payonce-bench requests | latency [n] [round] | coldstart <binary> [runs]"
            );
            std::process::exit(2);
        }
    };
    println!("{report}");
}
