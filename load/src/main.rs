//! `payonce-load`: an open-loop load generator against a running sandbox (`payonce-local`),
//! then an audit of what it did against the fake PSP's ledger. `scripts/load` builds and starts
//! everything and calls it.
//!
//! ```text
//! payonce-load --api URL [--rate 50] [--duration 60] [--seed N] [--store LABEL]
//!              [--mix pay=30,retries=12,...] [--settle 180] [--users 0] [--max-in-flight 4000]
//!              [--out DIR]
//! ```
//!
//! (`--help` describes each flag.)
//!
//! Open loop: arrival `i` is due at `start + i / rate`, whatever happened before; each runs in
//! its own task, and the first request of each is timed from its due time, so a system that
//! falls behind shows it in latency instead of slowing the arrivals (no coordinated omission).
//! Later requests of a flow (they depend on an answer) are timed from their own send.
//! With `--count-dynamodb` on the sandbox, the DynamoDB requests and capacity of the run are read
//! from its `/_sandbox/dynamodb-usage` before and after.
//!
//! Exits 1 on any audit anomaly, 2 on a usage or setup error.

mod audit;
mod client;
mod report;
mod scenarios;

use audit::{AuditInput, LastAnswer, LedgerCharge, LedgerRefund, StoredOrder, StoredPayment};
use clap::Parser;
use client::{now_s, token, Api};
use scenarios::{Driver, Flow, Scenario};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// An open-loop load generator against a running payonce-local, then an audit of what it did against the fake PSP's ledger.
///
/// It exits 0 when the audit found nothing wrong, 1 on any anomaly, and 2 on a usage or setup
/// error.
#[derive(Debug, Parser)]
#[command(name = "payonce-load")]
struct Cli {
    /// The sandbox's base URL.
    #[arg(long, value_name = "URL")]
    api: String,
    /// Arrivals per second.
    #[arg(long, default_value_t = 50.0)]
    rate: f64,
    /// How long arrivals go on, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    duration: f64,
    /// Seed of the arrivals' draws.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// The store's name in the report.
    #[arg(long, value_name = "LABEL", default_value = "embedded")]
    store: String,
    /// The scenarios and their weights, comma-separated (a name alone weighs 1).
    #[arg(long, value_name = "NAME=WEIGHT,...", value_parser = parse_mix, default_value_t = Mix(Scenario::DEFAULT_MIX.to_vec()))]
    mix: Mix,
    /// How long the run may take to settle after the last flow, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 180)]
    settle: u64,
    /// Distinct users (0: one per 8 arrivals, at least 200).
    #[arg(long, value_name = "N", default_value_t = 0)]
    users: usize,
    /// Flows in flight at most; an arrival beyond it is shed.
    #[arg(long, value_name = "N", default_value_t = 4000)]
    max_in_flight: usize,
    /// Folder to write the report into.
    #[arg(long, value_name = "DIR")]
    out: Option<String>,
}

/// `--mix`: each scenario with its weight, in order.
#[derive(Debug, Clone, PartialEq)]
struct Mix(Vec<(Scenario, u32)>);

impl std::fmt::Display for Mix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(scenario, weight)| format!("{}={weight}", scenario.name()))
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// Parses `--mix name=weight,...`; a name without a weight weighs 1. Some weight must be above 0.
fn parse_mix(list: &str) -> Result<Mix, String> {
    let mix = list
        .split(',')
        .map(|part| {
            let (name, weight) = part.split_once('=').unwrap_or((part, "1"));
            let scenario = Scenario::from_name(name.trim())
                .ok_or_else(|| format!("unknown scenario {name:?} in --mix"))?;
            let weight = weight
                .trim()
                .parse()
                .map_err(|_| format!("bad weight in --mix: {part}"))?;
            Ok((scenario, weight))
        })
        .collect::<Result<Vec<_>, String>>()?;
    if mix.iter().map(|(_, w)| w).sum::<u32>() == 0 {
        return Err("--mix has no weight".into());
    }
    Ok(Mix(mix))
}

#[derive(Debug)]
struct Args {
    api: String,
    rate: f64,
    duration_s: f64,
    seed: u64,
    store: String,
    mix: Vec<(Scenario, u32)>,
    settle_s: u64,
    /// Distinct users (0: one per 8 arrivals, at least 200), so no user reaches the attempt
    /// limits (20 attempts, 10 declines an hour by default) as a real crowd would not.
    users: usize,
    max_in_flight: usize,
    out: Option<String>,
}

impl From<Cli> for Args {
    fn from(cli: Cli) -> Self {
        Self {
            api: cli.api,
            rate: cli.rate,
            duration_s: cli.duration,
            seed: cli.seed,
            store: cli.store,
            mix: cli.mix.0,
            settle_s: cli.settle,
            users: cli.users,
            max_in_flight: cli.max_in_flight.max(1),
            out: cli.out,
        }
    }
}

fn pick(mix: &[(Scenario, u32)], rng: &mut fastrand::Rng) -> Scenario {
    let total: u32 = mix.iter().map(|(_, w)| w).sum();
    let mut draw = rng.u32(..total);
    for (scenario, weight) in mix {
        if draw < *weight {
            return *scenario;
        }
        draw -= weight;
    }
    mix[0].0
}

#[tokio::main]
async fn main() {
    // `--help` prints the usage and exits 0; a usage error is printed and exits 2.
    let args = Args::from(Cli::parse());
    match run(args).await {
        Ok(0) => {}
        Ok(_) => std::process::exit(1),
        Err(message) => {
            eprintln!("payonce-load: {message}");
            std::process::exit(2);
        }
    }
}

/// The run; returns the number of anomalies.
async fn run(args: Args) -> Result<usize, String> {
    let env = |name: &str, default: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| default.to_owned())
    };
    let jwt_secret = env("PAYONCE_LOCAL_JWT_SECRET", "payonce-local-dev-secret");
    let webhook_secret = env("PAYONCE_LOCAL_STRIPE_WEBHOOK_SECRET", "whsec_payonce_local");
    let api = Api::new(&args.api, &webhook_secret).map_err(|e| e.to_string())?;
    let (_, config) = api
        .get_json(&format!("{}/_sandbox/config", api.base), None)
        .await?;
    let psp_url = config["psp_url"]
        .as_str()
        .ok_or("the sandbox did not name its PSP")?
        .to_owned();
    if config["psp"] != "stripe" {
        return Err("the load run speaks to the Stripe face of the fake PSP (--psp stripe)".into());
    }
    let usage_url = format!("{}/_sandbox/dynamodb-usage", api.base);
    let usage_before = api
        .get_json(&usage_url, None)
        .await
        .ok()
        .filter(|(s, _)| *s == 200);

    let ttl = 6 * 3600;
    let arrivals = (args.rate * args.duration_s).round() as u64;
    let users = match args.users {
        0 => (arrivals as usize / 8).max(200),
        n => n,
    };
    let tokens: Vec<String> = (0..users)
        .map(|u| token(&jwt_secret, &format!("load-user-{u}"), now_s(), ttl, None))
        .collect();
    let staff = token(
        &jwt_secret,
        "load-staff",
        now_s(),
        ttl,
        Some("payments:refund"),
    );
    let driver = Driver {
        api: api.clone(),
        tokens,
        staff: staff.clone(),
        give_up_after: Duration::from_secs(60),
    };

    // The open loop: arrivals by the clock, each in its own task.
    let mut rng = fastrand::Rng::with_seed(args.seed);
    let start = Instant::now() + Duration::from_millis(200);
    let mut driver_for_run = driver.clone();
    driver_for_run.api.started = start;
    let mut tasks = Vec::with_capacity(arrivals as usize);
    let mut max_send_lag = Duration::ZERO;
    // A guard for the machine, not a closed loop: an arrival that finds this many flows still
    // running is not sent, and counted as shed.
    let in_flight = std::sync::Arc::new(tokio::sync::Semaphore::new(args.max_in_flight));
    let mut shed = 0u64;
    eprintln!(
        "load: {arrivals} arrivals at {}/s for {} s (seed {}, store {})",
        args.rate, args.duration_s, args.seed, args.store
    );
    for n in 0..arrivals {
        let due = start + Duration::from_secs_f64(n as f64 / args.rate);
        tokio::time::sleep_until(due.into()).await;
        max_send_lag = max_send_lag.max(due.elapsed());
        let scenario = pick(&args.mix, &mut rng);
        let flow_rng = fastrand::Rng::with_seed(rng.u64(..));
        let driver = driver_for_run.clone();
        let Ok(permit) = in_flight.clone().try_acquire_owned() else {
            shed += 1;
            continue;
        };
        tasks.push(tokio::spawn(async move {
            let flow = driver.run(scenario, n, due, flow_rng).await;
            drop(permit);
            (n, flow)
        }));
    }
    let load_window_s = start.elapsed().as_secs_f64();
    eprintln!("load: all arrivals sent in {load_window_s:.1} s; waiting for the flows to finish");
    let mut flows: Vec<(u64, Flow)> = Vec::with_capacity(tasks.len());
    for task in tasks {
        if let Ok(flow) = task.await {
            flows.push(flow);
        }
    }
    let flows_done_s = start.elapsed().as_secs_f64();
    let samples = driver_for_run.api.recorder.samples();

    // The DynamoDB counts once the run's traffic has died down; then settle and audit.
    let usage_after = match usage_before {
        Some(_) => wait_quiet(&api, &usage_url, Duration::from_secs(args.settle_s)).await,
        None => None,
    };
    let (input, settle_s) =
        settle_and_collect(&driver_for_run, &psp_url, &flows, args.settle_s).await?;
    let findings = audit::check(&input);
    let anomalies = &findings.anomalies;

    // The report.
    let stats = report::endpoint_stats(&samples, load_window_s);
    let successful = input
        .payments
        .values()
        .filter(|p| {
            matches!(
                p.status.as_str(),
                "succeeded" | "partially_refunded" | "refunded"
            )
        })
        .count();
    let mut scenario_counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, flow) in &flows {
        *scenario_counts.entry(flow.scenario.name()).or_default() += 1;
    }
    let mut md = String::new();
    let _ = writeln!(
        md,
        "### {} store, {} arrivals/s for {} s (seed {})\n",
        args.store, args.rate, args.duration_s, args.seed
    );
    let _ = writeln!(
        md,
        "Arrivals: {arrivals} due, sent over {load_window_s:.1} s ({:.1}/s sent, sender at most {:.0} ms late, {shed} shed for more than {} flows in flight); every flow finished {flows_done_s:.1} s after the start; settled after {settle_s:.0} s more. Flows: {}. Payments stored: {}, succeeded (captured): {successful}; PSP charges: {}, refunds: {}.\n",
        (arrivals - shed) as f64 / load_window_s,
        max_send_lag.as_secs_f64() * 1000.0,
        args.max_in_flight,
        scenario_counts
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        input.payments.len(),
        input.charges.len(),
        input.refunds.len(),
    );
    md.push_str(&report::endpoint_table(&stats));
    let capacity = match (&usage_before, &usage_after) {
        (Some((_, before)), Some((_, after))) => {
            let text = capacity_text(before, after, successful);
            let _ = writeln!(md, "\n{text}");
            Some(capacity_numbers(before, after, successful))
        }
        _ => {
            md.push_str("\nDynamoDB capacity: not counted (embedded store).\n");
            None
        }
    };
    let audit_line = if anomalies.is_empty() {
        "audit: 0 anomalies".to_owned()
    } else {
        format!("audit: {} anomalies", anomalies.len())
    };
    if !findings.unsent_processing.is_empty() {
        let _ = writeln!(
            md,
            "\nStill `processing` after the bounded settle, never having reached the PSP (no charge under their key; reconcile fails them through the PSP fence once older than 20 min, by design; not anomalies): {} ({}).",
            findings.unsent_processing.len(),
            findings.unsent_processing.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
        );
    }
    let _ = writeln!(md, "\n{audit_line}");
    for anomaly in anomalies.iter().take(50) {
        let _ = writeln!(md, "- {anomaly}");
    }
    println!("{md}");
    if let Some(dir) = &args.out {
        let name = format!("{}-{}", args.store, args.rate);
        std::fs::create_dir_all(dir).map_err(|e| format!("{dir}: {e}"))?;
        let title = format!(
            "payonce sandbox, {} store, {} arrivals/s (open loop), latency per second",
            args.store, args.rate
        );
        let write = |file: String, text: &str| {
            std::fs::write(&file, text).map_err(|e| format!("{file}: {e}"))
        };
        write(
            format!("{dir}/{name}.svg"),
            &report::latency_svg(&samples, &title),
        )?;
        write(format!("{dir}/{name}.md"), &md)?;
        let summary = json!({
            "store": args.store, "rate": args.rate, "duration_s": args.duration_s, "seed": args.seed,
            "sent_arrivals_per_s": (arrivals - shed) as f64 / load_window_s, "shed": shed,
            "endpoints": stats.iter().map(|s| json!({
                "endpoint": s.endpoint.route(), "requests": s.requests, "answered_per_s": s.throughput,
                "p50_ms": s.p50, "p99_ms": s.p99, "p999_ms": s.p999, "max_ms": s.max, "answers": s.classes,
            })).collect::<Vec<_>>(),
            "successful_payments": successful,
            "dynamodb_per_successful_payment": capacity,
            "anomalies": anomalies,
            "unsent_processing": findings.unsent_processing,
        });
        write(format!("{dir}/{name}.json"), &format!("{summary:#}\n"))?;
        eprintln!("load: wrote {dir}/{name}.md, .svg and .json");
    }
    for anomaly in anomalies {
        eprintln!("anomaly: {anomaly}");
    }
    eprintln!("{audit_line}");
    Ok(anomalies.len())
}

fn usage_delta(before: &Value, after: &Value) -> (f64, f64, BTreeMap<String, (f64, f64)>) {
    let mut by_operation = BTreeMap::new();
    if let Some(ops) = after["by_operation"].as_object() {
        for (op, counts) in ops {
            let r = counts["requests"].as_f64().unwrap_or(0.0)
                - before["by_operation"][op]["requests"]
                    .as_f64()
                    .unwrap_or(0.0);
            let c = counts["capacity_units"].as_f64().unwrap_or(0.0)
                - before["by_operation"][op]["capacity_units"]
                    .as_f64()
                    .unwrap_or(0.0);
            if r > 0.0 {
                by_operation.insert(op.clone(), (r, c));
            }
        }
    }
    let requests = by_operation.values().map(|v| v.0).sum();
    let units = by_operation.values().map(|v| v.1).sum();
    (requests, units, by_operation)
}

fn capacity_numbers(before: &Value, after: &Value, successful: usize) -> Value {
    let (requests, units, _) = usage_delta(before, after);
    let per = successful.max(1) as f64;
    json!({"requests": requests / per, "capacity_units": units / per, "total_requests": requests, "total_capacity_units": units})
}

fn capacity_text(before: &Value, after: &Value, successful: usize) -> String {
    let (requests, units, by_operation) = usage_delta(before, after);
    let per = successful.max(1) as f64;
    let ops: Vec<String> = by_operation
        .iter()
        .map(|(op, (r, c))| format!("{op} {:.2} req / {:.2} CU", r / per, c / per))
        .collect();
    format!(
        "DynamoDB, counted by the sandbox's interceptor over the whole run (orders, charges and their retries, webhooks, refunds, reconcile; not the audit's reads): {requests:.0} requests, {units:.0} capacity units; per successful payment ({successful}): **{:.2} requests, {:.2} capacity units** ({}).",
        requests / per,
        units / per,
        ops.join(", ")
    )
}

/// Waits (bounded) until the sandbox's DynamoDB traffic has died down (webhooks drained, only
/// reconcile's idle scans left), so the counts cover the whole run but none of the audit's reads.
async fn wait_quiet(api: &Api, usage_url: &str, bound: Duration) -> Option<(u16, Value)> {
    let started = Instant::now();
    let mut last = api
        .get_json(usage_url, None)
        .await
        .ok()
        .filter(|(s, _)| *s == 200)?;
    while started.elapsed() < bound {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = api
            .get_json(usage_url, None)
            .await
            .ok()
            .filter(|(s, _)| *s == 200)?;
        let moved =
            now.1["requests"].as_f64().unwrap_or(0.0) - last.1["requests"].as_f64().unwrap_or(0.0);
        last = now;
        // Reconcile's scan of the in-flight index every 5 s is all an idle sandbox sends.
        if moved <= 3.0 {
            break;
        }
    }
    Some(last)
}

fn ledger_charges(charges: &Value) -> Vec<LedgerCharge> {
    charges
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| LedgerCharge {
            id: c["id"].as_str().unwrap_or_default().to_owned(),
            payment_id: c["payment_id"].as_str().map(str::to_owned),
            outcome: c["outcome"].as_str().unwrap_or_default().to_owned(),
            amount: c["amount"].as_i64().unwrap_or_default(),
        })
        .collect()
}

fn ledger_refunds(refunds: &Value) -> Vec<LedgerRefund> {
    refunds
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| LedgerRefund {
            id: r["id"].as_str().unwrap_or_default().to_owned(),
            payment_id: r["payment_id"].as_str().map(str::to_owned),
            refund_id: r["refund_id"].as_str().map(str::to_owned),
            outcome: r["outcome"].as_str().unwrap_or_default().to_owned(),
            amount: r["amount"].as_i64().unwrap_or_default(),
        })
        .collect()
}

fn unsettled(payment: &StoredPayment) -> bool {
    payment.status == "processing" || payment.refunds.values().any(|s| s == "pending")
}

/// Whether a client would stop at this answer (not 202, in use, no answer or a 5xx).
fn is_final(answer: &client::Answer) -> bool {
    matches!(answer.status, 201 | 400..=499) && answer.problem() != Some("idempotency-key-in-use")
}

/// Waits (bounded) until nothing is `processing` or `pending`, re-asks every key whose last
/// answer was not final (as the client would, once more), then gathers what the audit needs.
async fn settle_and_collect(
    driver: &Driver,
    psp_url: &str,
    flows: &[(u64, Flow)],
    settle_s: u64,
) -> Result<(AuditInput, f64), String> {
    let api = &driver.api;
    let started = Instant::now();
    let bound = Duration::from_secs(settle_s);
    let mut flows: Vec<(u64, Flow)> = flows.to_vec();
    let ledger = || async {
        let (_, charges) = api
            .get_json(&format!("{psp_url}/_fake/charges"), None)
            .await?;
        let (_, refunds) = api
            .get_json(&format!("{psp_url}/_fake/refunds"), None)
            .await?;
        Ok::<_, String>((ledger_charges(&charges), ledger_refunds(&refunds)))
    };
    // Every payment named by an answer or by the PSP, read once; then the unsettled ones again
    // every 3 s (webhooks and reconcile settle them) until none is left or the bound passes.
    let (charges, _) = ledger().await?;
    let mut ids: Vec<String> = flows
        .iter()
        .flat_map(|(_, f)| {
            f.charges
                .iter()
                .filter_map(|c| c.last.payment_id().map(str::to_owned))
        })
        .chain(charges.iter().filter_map(|c| c.payment_id.clone()))
        .collect();
    ids.sort();
    ids.dedup();
    let mut payments = fetch_payments(api, &driver.staff, &ids).await;
    wait_settled(api, &driver.staff, &mut payments, &charges, started + bound).await;
    // Clients whose last answer was not final ask again with the same key. A retry may take
    // over an attempt that never reached the PSP and meet an unknown outcome of its own (a
    // lost-response card answers 202 again): those settle like any other, and their clients
    // ask once more, as a client polling a 202 would.
    let mut asked_again = Vec::new();
    for pass in 0..2 {
        let mut open = Vec::new();
        for (_, flow) in &mut flows {
            for charge in &mut flow.charges {
                if !is_final(&charge.last) {
                    *charge = driver
                        .pay(
                            flow.user,
                            charge.key.clone(),
                            charge.body.clone(),
                            Instant::now(),
                            None,
                        )
                        .await;
                    asked_again.extend(charge.last.payment_id().map(str::to_owned));
                    if !is_final(&charge.last) {
                        open.extend(charge.last.payment_id().map(str::to_owned));
                    }
                }
            }
            for refund in &mut flow.refunds {
                if !is_final(&refund.last) {
                    *refund = driver
                        .refund(
                            refund.key.clone(),
                            refund.payment_id.clone(),
                            refund.body.clone(),
                            Instant::now(),
                        )
                        .await;
                    asked_again.push(refund.payment_id.clone());
                    if !is_final(&refund.last) {
                        open.push(refund.payment_id.clone());
                    }
                }
            }
        }
        if pass == 1 || open.is_empty() {
            break;
        }
        let (charges, _) = ledger().await?;
        let mut waiting = fetch_payments(api, &driver.staff, &open).await;
        wait_settled(
            api,
            &driver.staff,
            &mut waiting,
            &charges,
            Instant::now() + bound,
        )
        .await;
    }
    payments.extend(fetch_payments(api, &driver.staff, &asked_again).await);
    let settle_s = started.elapsed().as_secs_f64();
    // The ledger now, and any payment it names that was not read yet.
    let (charges, refunds) = ledger().await?;
    let mut answers = Vec::new();
    for (n, flow) in &flows {
        for charge in &flow.charges {
            answers.push(LastAnswer {
                client: format!("flow {n} ({}) key {}", flow.scenario.name(), charge.key),
                refund: false,
                status: charge.last.status,
                problem: charge.last.problem().map(str::to_owned),
                payment_id: charge.last.payment_id().map(str::to_owned),
                refund_id: None,
            });
        }
        for refund in &flow.refunds {
            answers.push(LastAnswer {
                client: format!(
                    "flow {n} ({}) refund key {}",
                    flow.scenario.name(),
                    refund.key
                ),
                refund: true,
                status: refund.last.status,
                problem: refund.last.problem().map(str::to_owned),
                payment_id: Some(refund.payment_id.clone()),
                refund_id: refund.last.body["refund_id"].as_str().map(str::to_owned),
            });
        }
    }
    let mut input = AuditInput {
        charges,
        refunds,
        payments: BTreeMap::new(),
        orders: Vec::new(),
        answers,
    };
    let missing: Vec<String> = audit::payment_ids(&input)
        .into_iter()
        .filter(|id| !payments.contains_key(id))
        .collect();
    payments.extend(fetch_payments(api, &driver.staff, &missing).await);
    input.payments = payments;
    let orders: Vec<(usize, scenarios::Order)> = flows
        .iter()
        .filter_map(|(_, f)| f.order.clone().map(|o| (f.user, o)))
        .collect();
    for chunk in orders.chunks(32) {
        let reads = chunk.iter().map(|(user, order)| {
            let api = api.clone();
            let url = format!("{}/orders/{}", api.base, order.id);
            let token = driver.tokens[*user].clone();
            let order = order.clone();
            async move { (order, api.get_json(&url, Some(&token)).await) }
        });
        for (order, result) in join_all(reads).await {
            let (status, body) = result?;
            if status == 200 {
                input.orders.push(StoredOrder {
                    order_id: order.id,
                    amount: order.amount,
                    payment_state: body["payment_state"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                });
            }
        }
    }
    Ok((input, settle_s))
}

/// `GET /payments/{id}` for each id with the staff token (which may read any payment), a few at
/// a time; unreadable ones are left out (the audit then reports them as unknown).
/// Reads the unsettled ones of `payments` again every 3 s (webhooks and reconcile settle them)
/// until none is left or `until` passes. An attempt still `processing` that never reached the
/// PSP (no charge in `charges`) waits for reconcile's fence (20 min): not for it.
async fn wait_settled(
    api: &Api,
    staff: &str,
    payments: &mut BTreeMap<String, StoredPayment>,
    charges: &[LedgerCharge],
    until: Instant,
) {
    let charged: std::collections::BTreeSet<&str> = charges
        .iter()
        .filter_map(|c| c.payment_id.as_deref())
        .collect();
    loop {
        let open: Vec<String> = payments
            .values()
            .filter(|p| {
                unsettled(p)
                    && (charged.contains(p.payment_id.as_str()) || p.status != "processing")
            })
            .map(|p| p.payment_id.clone())
            .collect();
        if open.is_empty() || Instant::now() >= until {
            return;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        payments.extend(fetch_payments(api, staff, &open).await);
    }
}

async fn fetch_payments(api: &Api, staff: &str, ids: &[String]) -> BTreeMap<String, StoredPayment> {
    let mut out = BTreeMap::new();
    for chunk in ids.chunks(32) {
        let reads = chunk.iter().map(|id| {
            let api = api.clone();
            let url = format!("{}/payments/{id}", api.base);
            let staff = staff.to_owned();
            async move { api.get_json(&url, Some(&staff)).await }
        });
        for result in join_all(reads).await {
            if let Ok((200, body)) = result {
                if let Some(payment) = StoredPayment::from_json(&body) {
                    out.insert(payment.payment_id.clone(), payment);
                }
            }
        }
    }
    out
}

/// Runs the futures concurrently and returns their outputs in order.
async fn join_all<F: std::future::Future + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        if let Ok(value) = handle.await {
            out.push(value);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Args, Cli, Mix};
    use crate::scenarios::Scenario;
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Cli::try_parse_from(["payonce-load"].iter().chain(args)).map(Args::from)
    }

    #[test]
    fn defaults_need_only_the_api() {
        let args = parse(&["--api", "http://127.0.0.1:3000"]).unwrap();
        assert_eq!(args.api, "http://127.0.0.1:3000");
        assert_eq!((args.rate, args.duration_s), (50.0, 60.0));
        assert_eq!((args.seed, args.settle_s, args.users), (1, 180, 0));
        assert_eq!(
            (args.store.as_str(), args.max_in_flight),
            ("embedded", 4000)
        );
        assert_eq!(args.mix, Scenario::DEFAULT_MIX);
        assert_eq!(args.out, None);
    }

    #[test]
    fn flags_as_scripts_load_passes_them() {
        let args = parse(&[
            "--api",
            "http://127.0.0.1:3000",
            "--rate",
            "500",
            "--duration",
            "60",
            "--seed",
            "7",
            "--store",
            "dynamodb",
            "--settle",
            "180",
            "--out",
            "docs/load",
            "--mix",
            "pay=3,refund=1,lost-psp",
            "--max-in-flight",
            "0",
        ])
        .unwrap();
        assert_eq!(
            (args.rate, args.seed, args.store.as_str()),
            (500.0, 7, "dynamodb")
        );
        assert_eq!(args.out.as_deref(), Some("docs/load"));
        assert_eq!(
            args.mix,
            [
                (Scenario::Pay, 3),
                (Scenario::Refund, 1),
                (Scenario::LostPsp, 1)
            ]
        );
        assert_eq!(args.max_in_flight, 1, "at least one flow in flight");
    }

    #[test]
    fn the_default_mix_reads_back() {
        let mix = Mix(Scenario::DEFAULT_MIX.to_vec());
        assert_eq!(super::parse_mix(&mix.to_string()).unwrap(), mix);
    }

    #[test]
    fn usage_errors_exit_2() {
        let api = ["--api", "http://127.0.0.1:3000"];
        for extra in [
            &["--bogus"][..],
            &["--rate", "fast"],
            &["--rate"],
            &["--mix", "pay=x"],
            &["--mix", "walk=1"],
            &["--mix", "pay=0"],
        ] {
            let error = parse(&[&api[..], extra].concat()).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{extra:?}: {error}");
        }
        assert_eq!(
            parse(&["--rate", "5"]).unwrap_err().exit_code(),
            2,
            "--api is needed"
        );
        assert_eq!(parse(&["--help"]).unwrap_err().exit_code(), 0);
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
