//! `payonce-sim`: runs the simulation over many seeds, or replays one (`--help` lists every flag).
//!
//! ```text
//! payonce-sim --seeds 2000 [--start 0]   run seeds start..start+N
//! payonce-sim --seed 42 [--trace]        replay one seed (with its trace)
//! payonce-sim --planted-holes            put each planted hole back on its PSP: the table
//! ```

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Parser;
use payonce::config::PspKind;
use payonce::mutations::Mutation;
use payonce_sim::{run, FaultKind, Schedule};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The whole-system simulation: runs a range of seeds, replays one, or checks that every planted hole is found.
///
/// With --seeds N [--start S] it runs seeds S..S+N (without --seed or --seeds: 0..100); with --seed N
/// [--trace] it replays one; with --planted-holes it puts each planted hole back on its PSP and
/// prints the first seed that found it. It exits 0 when the run went as expected, 1 when it did
/// not, and 2 on a usage error.
#[derive(Debug, Parser)]
#[command(name = "payonce-sim")]
struct Args {
    /// Run this many seeds from --start (with --planted-holes: per hole, default 5000).
    #[arg(long, value_name = "N")]
    seeds: Option<u64>,
    /// The first seed of --seeds.
    #[arg(long, value_name = "S", default_value_t = 0)]
    start: u64,
    /// Run this one seed (a replay) instead of a range.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Print each run's trace.
    #[arg(long)]
    trace: bool,
    /// Put each planted hole back on the PSP whose model finds it, and print the table.
    #[arg(long)]
    planted_holes: bool,
    /// The PSP model, adapter and webhook scheme.
    #[arg(long, value_parser = psp_names(), default_value = "stripe")]
    psp: PspKind,
    /// Shoppers per run, as a shrunk schedule prints them (default: the seed's own).
    #[arg(long, value_name = "N")]
    clients: Option<u32>,
    /// The fault kinds allowed, comma-separated, or none, as a shrunk schedule prints them (default: the seed's own).
    #[arg(long, value_name = "a,b,...|none", value_parser = fault_kinds)]
    faults: Option<Faults>,
    /// Whether calls take time and invocations overlap.
    #[arg(long, value_name = "on|off", value_enum, default_value_t = Overlap::On)]
    overlap: Overlap,
    /// Whether shoppers check out with 3-D Secure and pay later too, and staff capture.
    #[arg(long, value_name = "on|off", value_enum, default_value_t = Overlap::On)]
    checkout_flows: Overlap,
    /// Put a fixed hole back, for the mutation check (repeatable).
    #[arg(long = "mutation", value_name = "NAME", value_parser = mutation_names())]
    mutations: Vec<Mutation>,
    /// Succeed only if some seed breaks an invariant.
    #[arg(long)]
    expect_violation: bool,
    /// Report every failing seed (unshrunk), not only the first.
    #[arg(long)]
    keep_going: bool,
    /// Threads to spread the seeds over (default: one per core).
    #[arg(
        long,
        value_name = "N",
        value_parser = at_least_one,
        default_value_t = cores(),
        hide_default_value = true
    )]
    jobs: usize,
}

/// `--faults`: the kinds a run may compose (empty for `none`).
#[derive(Debug, Clone)]
struct Faults(Vec<FaultKind>);

/// `--overlap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Overlap {
    On,
    Off,
}

/// `--psp`: a name of [`PspKind::ALL`].
fn psp_names() -> impl TypedValueParser<Value = PspKind> {
    PossibleValuesParser::new(PspKind::ALL.map(PspKind::name))
        .try_map(|name| PspKind::from_name(&name))
}

/// `--mutation`: a name of [`Mutation::ALL`].
fn mutation_names() -> impl TypedValueParser<Value = Mutation> {
    PossibleValuesParser::new(Mutation::ALL.map(Mutation::name))
        .try_map(|name| Mutation::parse(&name).ok_or(format!("unknown mutation {name}")))
}

/// `--faults a,b,...|none`: fault names, comma-separated; `none` (or nothing) allows none.
fn fault_kinds(list: &str) -> Result<Faults, String> {
    list.split(',')
        .filter(|s| !s.is_empty() && *s != "none")
        .map(|name| {
            FaultKind::parse(name).ok_or_else(|| {
                let names: Vec<_> = FaultKind::ALL.map(FaultKind::name).into();
                format!(
                    "unknown fault {name}; expected {} or none",
                    names.join(", ")
                )
            })
        })
        .collect::<Result<_, _>>()
        .map(Faults)
}

/// `--jobs N`, N at least 1.
fn at_least_one(n: &str) -> Result<usize, String> {
    match n.parse() {
        Ok(0) => Err("--jobs must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e}")),
    }
}

/// The cores this process may use, the default of `--jobs`.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn schedule(args: &Args, psp: PspKind, seed: u64) -> Schedule {
    let mut schedule = Schedule::of_seed_with(seed, psp);
    if let Some(clients) = args.clients {
        schedule.clients = clients;
    }
    if let Some(Faults(faults)) = &args.faults {
        schedule.faults = faults.iter().copied().collect();
    }
    schedule.overlap = args.overlap == Overlap::On;
    schedule.checkout_flows = args.checkout_flows == Overlap::On;
    schedule
}

/// What a range of seeds came to.
#[derive(Default)]
struct Summary {
    requests: usize,
    charges: usize,
    moves: u32,
    to_operator: usize,
    /// Failing seeds with their violations, in seed order.
    failing: Vec<(u64, Vec<String>)>,
    /// Seeds run.
    ran: u64,
}

/// Runs `seeds` of `psp` with `mutations` over `jobs` threads. Unless `keep_going`, stops at the
/// first failing seed: every seed below it is still run, so the failure reported is the lowest,
/// whatever the number of threads. Each seed's run is the same on any thread.
fn run_seeds(
    args: &Args,
    psp: PspKind,
    mutations: &[Mutation],
    seeds: &[u64],
    keep_going: bool,
) -> Summary {
    let lowest_failure = AtomicU64::new(u64::MAX);
    let jobs = args.jobs.min(seeds.len()).max(1);
    let parts: Vec<Summary> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..jobs)
            .map(|job| {
                let lowest_failure = &lowest_failure;
                scope.spawn(move || {
                    let mut part = Summary::default();
                    for seed in seeds.iter().copied().skip(job).step_by(jobs) {
                        if !keep_going && seed > lowest_failure.load(Ordering::SeqCst) {
                            break;
                        }
                        let outcome = run(&schedule(args, psp, seed), mutations);
                        part.ran += 1;
                        part.requests += outcome.requests;
                        part.charges += outcome.psp_charges;
                        part.moves += outcome.webhook_moves;
                        part.to_operator += outcome.left_to_operator;
                        if args.trace {
                            println!("{}", outcome.trace.join("\n"));
                        }
                        if !outcome.violations.is_empty() {
                            lowest_failure.fetch_min(seed, Ordering::SeqCst);
                            part.failing.push((seed, outcome.violations));
                        }
                    }
                    part
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a simulation thread panicked"))
            .collect()
    });
    let mut summary = Summary::default();
    for part in parts {
        summary.requests += part.requests;
        summary.charges += part.charges;
        summary.moves += part.moves;
        summary.to_operator += part.to_operator;
        summary.ran += part.ran;
        summary.failing.extend(part.failing);
    }
    summary.failing.sort_by_key(|(seed, _)| *seed);
    if !keep_going {
        summary.failing.truncate(1);
    }
    summary
}

fn mutation_flags(mutations: &[Mutation]) -> String {
    mutations
        .iter()
        .map(|m| format!(" --mutation {}", m.name()))
        .collect()
}

fn main() -> ExitCode {
    // `--help` prints the usage and exits 0; a usage error is printed and exits 2.
    let args = Args::parse();
    if args.planted_holes {
        return planted_holes(&args);
    }
    let flags = mutation_flags(&args.mutations);
    let seeds: Vec<u64> = match (args.seed, args.seeds) {
        (Some(seed), _) => vec![seed],
        (None, Some(n)) => (args.start..args.start + n).collect(),
        (None, None) => (0..100).collect(),
    };
    let started = Instant::now();
    let summary = run_seeds(&args, args.psp, &args.mutations, &seeds, args.keep_going);
    if args.keep_going {
        for (seed, violations) in &summary.failing {
            println!("VIOLATION at seed {seed}:");
            for violation in violations {
                println!("  {violation}");
            }
            println!(
                "replay: scripts/sim {}{flags} --trace",
                schedule(&args, args.psp, *seed).replay_flags()
            );
        }
    } else if let Some((seed, violations)) = summary.failing.first() {
        println!(
            "VIOLATION at seed {seed} (after {} seeds):",
            seed - seeds[0] + 1
        );
        for violation in violations {
            println!("  {violation}");
        }
        let (shrunk, violations) =
            payonce_sim::shrink::shrink(&schedule(&args, args.psp, *seed), &args.mutations);
        println!("shrunk schedule: {shrunk}");
        for violation in &violations {
            println!("  {violation}");
        }
        println!(
            "replay: scripts/sim {}{flags} --trace",
            shrunk.replay_flags()
        );
        return if args.expect_violation {
            println!("the simulation found the planted hole, as expected");
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let left = if summary.to_operator > 0 {
        format!(
            ", {} left to an operator with an alarm",
            summary.to_operator
        )
    } else {
        String::new()
    };
    let found = match summary.failing.len() {
        0 => "0 violations".to_owned(),
        n => format!("{n} with violations"),
    };
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{} seeds on the {} model, {found} ({} payment requests, {} PSP charges, {} settled by webhook{left}) in {secs:.1} s ({:.0} seeds/s on {} threads)",
        summary.ran,
        args.psp.name(),
        summary.requests,
        summary.charges,
        summary.moves,
        summary.ran as f64 / secs.max(1e-9),
        args.jobs.min(seeds.len()).max(1),
    );
    if !summary.failing.is_empty() {
        let seeds: Vec<u64> = summary.failing.iter().map(|(s, _)| *s).collect();
        println!("failing seeds: {seeds:?}");
        return if args.expect_violation {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    if args.expect_violation {
        println!("expected a violation{flags}, found none");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Puts each planted hole back, on the PSP whose model finds it, over `--seeds` seeds (default
/// 5,000) from `--start`; prints one row per hole: the first seed that broke an invariant, how
/// many seeds that took, the shrunk schedule and the first violation. Fails unless every hole is
/// found.
fn planted_holes(args: &Args) -> ExitCode {
    let budget = args.seeds.unwrap_or(5_000);
    let seeds: Vec<u64> = (args.start..args.start + budget).collect();
    println!(
        "{:<34} {:<6} {:>10} {:>6}  shrunk schedule / first violation",
        "planted hole", "psp", "first seed", "seeds"
    );
    let mut missed = Vec::new();
    for (mutation, psp) in payonce_sim::PLANTED_HOLES {
        let started = Instant::now();
        let summary = run_seeds(args, psp, &[mutation], &seeds, false);
        match summary.failing.first() {
            Some((seed, _)) => {
                let (shrunk, violations) =
                    payonce_sim::shrink::shrink(&schedule(args, psp, *seed), &[mutation]);
                println!(
                    "{:<34} {:<6} {:>10} {:>6}  {shrunk} ({:.0} s)",
                    mutation.name(),
                    psp.name(),
                    seed,
                    seed - args.start + 1,
                    started.elapsed().as_secs_f64()
                );
                if let Some(first) = violations.first() {
                    println!("{:<60}{first}", "");
                }
            }
            None => {
                println!(
                    "{:<34} {:<6} {:>10} {:>6}  NOT FOUND",
                    mutation.name(),
                    psp.name(),
                    "-",
                    budget
                );
                missed.push(mutation.name());
            }
        }
    }
    if missed.is_empty() {
        println!(
            "every planted hole found within {budget} seeds ({})",
            payonce_sim::PLANTED_HOLES.len()
        );
        ExitCode::SUCCESS
    } else {
        println!("not found within {budget} seeds: {missed:?}");
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::{Args, Faults, Overlap};
    use clap::Parser;
    use payonce::config::PspKind;
    use payonce::mutations::Mutation;
    use payonce_sim::FaultKind;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(["payonce-sim"].iter().chain(args))
    }

    #[test]
    fn defaults() {
        let args = parse(&[]).unwrap();
        assert_eq!((args.seeds, args.start, args.seed), (None, 0, None));
        assert_eq!(args.psp, PspKind::Stripe);
        assert_eq!(args.overlap, Overlap::On);
        assert!(args.faults.is_none() && args.clients.is_none() && args.mutations.is_empty());
        assert!(!args.trace && !args.planted_holes && !args.expect_violation && !args.keep_going);
        assert_eq!(args.jobs, super::cores());
    }

    #[test]
    fn a_replay_line_parses_back() {
        let args = parse(&[
            "--psp",
            "omise",
            "--seed",
            "4711",
            "--overlap",
            "off",
            "--clients",
            "2",
            "--faults",
            "crash,psp-timeout",
            "--mutation",
            "trust-recent-reads",
            "--mutation",
            "forget-webhook-events",
            "--trace",
            "--jobs",
            "1",
        ])
        .unwrap();
        assert_eq!(
            (args.psp, args.seed, args.clients),
            (PspKind::Omise, Some(4711), Some(2))
        );
        assert_eq!(args.overlap, Overlap::Off);
        let Some(Faults(faults)) = args.faults else {
            panic!("no --faults")
        };
        assert_eq!(faults, [FaultKind::Crash, FaultKind::PspTimeout]);
        assert_eq!(
            args.mutations,
            [Mutation::TrustRecentReads, Mutation::ForgetWebhookEvents]
        );
        assert!(args.trace);
        assert_eq!(args.jobs, 1);
        let Some(Faults(faults)) = parse(&["--faults", "none"]).unwrap().faults else {
            panic!("no --faults")
        };
        assert!(faults.is_empty());
    }

    #[test]
    fn usage_errors_exit_2_and_help_0() {
        for args in [
            &["--seedz", "3"][..],
            &["--seeds"],
            &["--seeds", "many"],
            &["--jobs", "0"],
            &["--overlap", "maybe"],
            &["--faults", "crash,nope"],
            &["--mutation", "nope"],
            &["--psp", "visa"],
        ] {
            let error = parse(args).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{args:?}: {error}");
        }
        assert!(parse(&["--jobs", "0"])
            .unwrap_err()
            .to_string()
            .contains("--jobs must be at least 1"));
        assert!(parse(&["--faults", "nope"])
            .unwrap_err()
            .to_string()
            .contains("unknown fault nope"));
        assert_eq!(parse(&["--help"]).unwrap_err().exit_code(), 0);
        assert_eq!(parse(&["-h"]).unwrap_err().exit_code(), 0);
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Args::command().debug_assert();
    }
}
