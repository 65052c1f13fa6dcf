//! `payonce-sim`: runs the simulation over many seeds, or replays one.
//!
//! ```text
//! payonce-sim --seeds 2000 [--start 0]      run seeds start..start+N
//! payonce-sim --seed 42 [--trace]           replay one seed (prints its trace with --trace)
//!   [--psp stripe|omise|2c2p]               the PSP model and adapter (default stripe)
//!   [--clients N] [--faults a,b,...|none]   a shrunk schedule, as printed on failure
//!   [--overlap on|off]                      calls take time, invocations overlap (default on)
//!   [--mutation NAME]                       put a fixed hole back (mutation check)
//!   [--expect-violation]                    succeed only if some seed breaks an invariant
//!   [--keep-going]                          report every failing seed (unshrunk), not the first
//! ```

/// What `--help` prints, and what follows a usage error.
const USAGE: &str = "\
usage: payonce-sim --seeds N [--start S]   run seeds S..S+N (default S = 0)
       payonce-sim --seed N [--trace]      replay one seed (its trace with --trace)
options:
  --psp stripe|omise|2c2p      the PSP model and adapter (default stripe)
  --clients N                  a shrunk schedule's clients, as printed on failure
  --faults a,b,...|none        a shrunk schedule's fault kinds, as printed on failure
  --overlap on|off             calls take time and invocations overlap (default on)
  --mutation NAME              put a fixed hole back (mutation check; repeatable)
  --expect-violation           succeed only if some seed breaks an invariant
  --keep-going                 report every failing seed (unshrunk), not only the first
  -h, --help                   this text";

use payonce::config::PspKind;
use payonce::mutations::Mutation;
use payonce_sim::{run, FaultKind, Schedule};
use std::process::ExitCode;
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
            "--expect-violation" => args.expect_violation = true,
            "--keep-going" => args.keep_going = true,
            "--trace" => args.trace = true,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(args)
}

fn schedule(args: &Args, seed: u64) -> Schedule {
    let mut schedule = Schedule::of_seed_with(seed, args.psp);
    if let Some(clients) = args.clients {
        schedule.clients = clients;
    }
    if let Some(faults) = &args.faults {
        schedule.faults = faults.iter().copied().collect();
    }
    schedule.overlap = args.overlap;
    schedule
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
    let mutation_flags: String = args
        .mutations
        .iter()
        .map(|m| format!(" --mutation {}", m.name()))
        .collect();
    let seeds: Vec<u64> = match (args.seed, args.seeds) {
        (Some(seed), _) => vec![seed],
        (None, Some(n)) => (args.start..args.start + n).collect(),
        (None, None) => (0..100).collect(),
    };
    let started = Instant::now();
    let (mut requests, mut charges, mut moves, mut to_operator) = (0, 0, 0, 0);
    let mut failing = Vec::new();
    for (done, seed) in seeds.iter().copied().enumerate() {
        let schedule = schedule(&args, seed);
        let outcome = run(&schedule, &args.mutations);
        requests += outcome.requests;
        charges += outcome.psp_charges;
        moves += outcome.webhook_moves;
        to_operator += outcome.left_to_operator;
        if args.trace {
            for line in &outcome.trace {
                println!("{line}");
            }
        }
        if !outcome.violations.is_empty() && args.keep_going {
            println!("VIOLATION at seed {seed}:");
            for violation in &outcome.violations {
                println!("  {violation}");
            }
            println!(
                "replay: scripts/sim {}{mutation_flags} --trace",
                schedule.replay_flags()
            );
            failing.push(seed);
            continue;
        }
        if !outcome.violations.is_empty() {
            println!("VIOLATION at seed {seed} (after {} seeds):", done + 1);
            for violation in &outcome.violations {
                println!("  {violation}");
            }
            let (shrunk, violations) = payonce_sim::shrink::shrink(&schedule, &args.mutations);
            println!("shrunk schedule: {shrunk}");
            for violation in &violations {
                println!("  {violation}");
            }
            println!(
                "replay: scripts/sim {}{mutation_flags} --trace",
                shrunk.replay_flags()
            );
            return if args.expect_violation {
                println!("the simulation found the planted hole, as expected");
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
    }
    let left = if to_operator > 0 {
        format!(", {to_operator} left to an operator with an alarm")
    } else {
        String::new()
    };
    let found = match failing.len() {
        0 => "0 violations".to_owned(),
        n => format!("{n} with violations"),
    };
    println!(
        "{} seeds on the {} model, {found} ({requests} payment requests, {charges} PSP charges, {moves} settled by webhook{left}) in {:.1} s",
        seeds.len(),
        args.psp.name(),
        started.elapsed().as_secs_f64()
    );
    if !failing.is_empty() {
        println!("failing seeds: {failing:?}");
        return if args.expect_violation {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    if args.expect_violation {
        println!("expected a violation{mutation_flags}, found none");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
