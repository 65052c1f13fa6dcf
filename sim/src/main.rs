//! `payonce-sim`: runs the simulation over many seeds, or replays one.
//!
//! ```text
//! payonce-sim --seeds 2000 [--start 0]      run seeds start..start+N
//! payonce-sim --seed 42 [--trace]           replay one seed (prints its trace with --trace)
//! payonce-sim --planted-holes               every planted hole, each on its PSP: the table
//!   [--psp stripe|omise|2c2p]               the PSP model and adapter (default stripe)
//!   [--clients N] [--faults a,b,...|none]   a shrunk schedule, as printed on failure
//!   [--overlap on|off]                      calls take time, invocations overlap (default on)
//!   [--mutation NAME]                       put a fixed hole back (mutation check)
//!   [--expect-violation]                    succeed only if some seed breaks an invariant
//!   [--keep-going]                          report every failing seed (unshrunk), not the first
//!   [--jobs N]                              spread the seeds over N threads (default: cores)
//! ```

/// What `--help` prints, and what follows a usage error.
const USAGE: &str = "\
usage: payonce-sim --seeds N [--start S]   run seeds S..S+N (default S = 0)
       payonce-sim --seed N [--trace]      replay one seed (its trace with --trace)
       payonce-sim --planted-holes         put each planted hole back on its PSP; print the table
options:
  --psp stripe|omise|2c2p      the PSP model and adapter (default stripe)
  --clients N                  a shrunk schedule's clients, as printed on failure
  --faults a,b,...|none        a shrunk schedule's fault kinds, as printed on failure
  --overlap on|off             calls take time and invocations overlap (default on)
  --mutation NAME              put a fixed hole back (mutation check; repeatable)
  --expect-violation           succeed only if some seed breaks an invariant
  --keep-going                 report every failing seed (unshrunk), not only the first
  --jobs N                     threads to spread the seeds over (default: the cores)
  -h, --help                   this text";

use payonce::config::PspKind;
use payonce::mutations::Mutation;
use payonce_sim::{run, FaultKind, Schedule};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

struct Args {
    psp: PspKind,
    seeds: Option<u64>,
    start: u64,
    seed: Option<u64>,
    clients: Option<u32>,
    faults: Option<Vec<FaultKind>>,
    overlap: bool,
    mutations: Vec<Mutation>,
    expect_violation: bool,
    keep_going: bool,
    trace: bool,
    planted_holes: bool,
    jobs: usize,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        psp: PspKind::Stripe,
        seeds: None,
        start: 0,
        seed: None,
        clients: None,
        faults: None,
        overlap: true,
        mutations: Vec::new(),
        expect_violation: false,
        keep_going: false,
        trace: false,
        planted_holes: false,
        jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--psp" => args.psp = PspKind::from_name(&value()?).map_err(|e| e.to_string())?,
            "--seeds" => args.seeds = Some(value()?.parse().map_err(|e| format!("--seeds: {e}"))?),
            "--start" => args.start = value()?.parse().map_err(|e| format!("--start: {e}"))?,
            "--seed" => args.seed = Some(value()?.parse().map_err(|e| format!("--seed: {e}"))?),
            "--clients" => {
                args.clients = Some(value()?.parse().map_err(|e| format!("--clients: {e}"))?)
            }
            "--faults" => {
                let raw = value()?;
                let kinds = raw
                    .split(',')
                    .filter(|s| !s.is_empty() && *s != "none")
                    .map(|name| FaultKind::parse(name).ok_or(format!("unknown fault {name}")))
                    .collect::<Result<Vec<_>, _>>()?;
                args.faults = Some(kinds);
            }
            "--overlap" => {
                args.overlap = match value()?.as_str() {
                    "on" => true,
                    "off" => false,
                    other => return Err(format!("--overlap takes on or off, not {other}")),
                }
            }
            "--mutation" => {
                let name = value()?;
                args.mutations
                    .push(Mutation::parse(&name).ok_or(format!("unknown mutation {name}"))?);
            }
            "--jobs" => {
                args.jobs = value()?
                    .parse()
                    .map_err(|e| format!("--jobs: {e}"))
                    .and_then(|n: usize| {
                        (n > 0)
                            .then_some(n)
                            .ok_or("--jobs must be at least 1".into())
                    })?
            }
            "--expect-violation" => args.expect_violation = true,
            "--keep-going" => args.keep_going = true,
            "--trace" => args.trace = true,
            "--planted-holes" => args.planted_holes = true,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(args)
}

fn schedule(args: &Args, psp: PspKind, seed: u64) -> Schedule {
    let mut schedule = Schedule::of_seed_with(seed, psp);
    if let Some(clients) = args.clients {
        schedule.clients = clients;
    }
    if let Some(faults) = &args.faults {
        schedule.faults = faults.iter().copied().collect();
    }
    schedule.overlap = args.overlap;
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
    if std::env::args().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match parse() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("payonce-sim: {error}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
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
