//! What one run shares: virtual time, the seeded random source, the fault plan and the trace.
//!
//! Everything runs on one thread in a paused tokio runtime, so time only moves when every task
//! waits, and every random draw comes from one generator seeded by the run's seed: the same
//! seed gives the same run, draw for draw.

use payonce::clock::Clock;
use payonce::config::PspKind;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Epoch milliseconds at which every run's virtual time starts (2026-01-01T00:00:00Z).
pub const EPOCH_MS: i64 = 1_767_225_600_000;

/// Wall-clock time read from tokio's (paused) clock: virtual, and the same for every component.
#[derive(Debug, Clone)]
pub struct VirtualClock {
    start: tokio::time::Instant,
}

impl VirtualClock {
    /// A clock standing at [`EPOCH_MS`] now.
    pub fn start() -> Self {
        Self {
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for VirtualClock {
    fn now_ms(&self) -> i64 {
        let elapsed = tokio::time::Instant::now().duration_since(self.start);
        EPOCH_MS + i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
    }
}

/// The kinds of fault a run may compose. A shrunk schedule is the seed with fewer of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// Store calls take time.
    StoreLatency,
    /// Store writes fail with a transaction conflict (past the adapter's own retries).
    StoreConflict,
    /// Store calls are throttled.
    StoreThrottle,
    /// The invocation dies before or after any store call.
    Crash,
    /// A recent (eventually consistent) read returns an item as it was before the writes of
    /// the last second.
    StaleRead,
    /// The PSP cannot be reached (no connection).
    PspNoConnection,
    /// The PSP call times out, before or after the PSP applied it.
    PspTimeout,
    /// The PSP's answer is cut after it applied the request.
    PspCut,
    /// The PSP answers 500 without applying.
    Psp5xx,
    /// The PSP answers 409 `idempotency_key_in_use` or 429.
    PspBusy,
    /// The PSP refuses our credentials (401).
    PspAuth,
    /// The invocation dies right after the PSP applied its call.
    CrashAfterPsp,
    /// Webhooks are delayed, duplicated and so reordered.
    WebhookChaos,
    /// Webhooks are lost.
    WebhookLoss,
    /// The PSP's search lags behind its writes.
    SearchLag,
    /// The PSP's effective minimum charge rises above payonce's table (exchange rates move), so
    /// some orders reach the PSP only to be refused `amount_too_small`.
    PspMinimumMoves,
    /// Time jumps ahead at once (a frozen and thawed instance, a stalled host): whatever was in
    /// flight finds its deadline, lease or timeout passed.
    ClockJump,
    /// A store write is applied and its answer lost: the SDK sends it again, and the retry
    /// meets the write it already made (a transaction's retry is answered from its client
    /// request token, as DynamoDB answers it), or the SDK gives up and reports an error.
    StoreLostAnswer,
    /// An invocation outlives its deadline and its lease (a stalled host, a skewed clock): it
    /// stalls between calls and keeps going until a fenced write refuses it.
    SlowHolder,
    /// Reconcile runs as two overlapping invocations (the schedule delivered twice, as
    /// EventBridge may), and a webhook that asks for a check wakes it early.
    ReconcileOverlap,
    /// Omise only: the PSP ignores `Idempotency-Key` on refunds (Omise does not document it),
    /// so a re-sent refund makes a second one unless the sender looked first.
    RefundKeysIgnored,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 21] = [
        Self::StoreLatency,
        Self::StoreConflict,
        Self::StoreThrottle,
        Self::Crash,
        Self::PspNoConnection,
        Self::PspTimeout,
        Self::PspCut,
        Self::Psp5xx,
        Self::PspBusy,
        Self::PspAuth,
        Self::CrashAfterPsp,
        Self::WebhookChaos,
        Self::WebhookLoss,
        Self::SearchLag,
        Self::PspMinimumMoves,
        Self::ClockJump,
        Self::StaleRead,
        Self::StoreLostAnswer,
        Self::SlowHolder,
        Self::ReconcileOverlap,
        Self::RefundKeysIgnored,
    ];

    /// The kinds that make invocations overlap and answers go astray the way production's do;
    /// off with `--overlap off` (the simulation before calls took time).
    pub const OVERLAP: [FaultKind; 4] = [
        Self::StoreLostAnswer,
        Self::SlowHolder,
        Self::ReconcileOverlap,
        Self::RefundKeysIgnored,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Self::StoreLatency => "store-latency",
            Self::StoreConflict => "store-conflict",
            Self::StoreThrottle => "store-throttle",
            Self::Crash => "crash",
            Self::PspNoConnection => "psp-no-connection",
            Self::PspTimeout => "psp-timeout",
            Self::PspCut => "psp-cut",
            Self::Psp5xx => "psp-5xx",
            Self::PspBusy => "psp-busy",
            Self::PspAuth => "psp-auth",
            Self::CrashAfterPsp => "crash-after-psp",
            Self::WebhookChaos => "webhook-chaos",
            Self::WebhookLoss => "webhook-loss",
            Self::SearchLag => "search-lag",
            Self::PspMinimumMoves => "psp-minimum-moves",
            Self::ClockJump => "clock-jump",
            Self::StaleRead => "stale-read",
            Self::StoreLostAnswer => "store-lost-answer",
            Self::SlowHolder => "slow-holder",
            Self::ReconcileOverlap => "reconcile-overlap",
            Self::RefundKeysIgnored => "refund-keys-ignored",
        }
    }

    /// Parses [`FaultKind::name`].
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// What a run is made of: its seed, the PSP it runs against, and the knobs a shrink turns down.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The seed every draw derives from.
    pub seed: u64,
    /// The PSP the deployment uses: its adapter, the model's wire format (face), its webhook
    /// scheme, currencies and minimums. A shrink keeps it.
    pub psp: PspKind,
    /// Shoppers (one order each).
    pub clients: u32,
    /// The fault kinds allowed; each run picks its own rates for them from the seed.
    pub faults: BTreeSet<FaultKind>,
    /// Whether calls take time and invocations overlap as in production (the default): every
    /// store and PSP call takes a heavy-tailed latency drawn per seed, and the
    /// [`FaultKind::OVERLAP`] kinds may strike. Off: the zero-latency model of before.
    pub overlap: bool,
    /// Whether shoppers check out with 3-D Secure and "pay later" too (the default, Stripe
    /// only), with staff capturing and canceling. Off: every payment charges at once, as
    /// before these flows existed (the schedules pinned from then replay so).
    pub checkout_flows: bool,
}

impl Schedule {
    /// The full schedule of a seed against Stripe: every fault kind, the default number of
    /// shoppers.
    pub fn of_seed(seed: u64) -> Self {
        Self::of_seed_with(seed, PspKind::Stripe)
    }

    /// The full schedule of a seed against `psp`.
    pub fn of_seed_with(seed: u64, psp: PspKind) -> Self {
        Self {
            seed,
            psp,
            clients: 5,
            faults: FaultKind::ALL.into_iter().collect(),
            overlap: true,
            checkout_flows: true,
        }
    }

    /// The flags that replay this schedule (the PSP always named, so a replay never runs
    /// against another PSP than the failure did).
    pub fn replay_flags(&self) -> String {
        let mut flags = format!("--psp {} --seed {}", self.psp.name(), self.seed);
        if !self.overlap {
            flags.push_str(" --overlap off");
        }
        if !self.checkout_flows {
            flags.push_str(" --checkout-flows off");
        }
        if self.clients != Self::of_seed(self.seed).clients {
            flags.push_str(&format!(" --clients {}", self.clients));
        }
        if self.faults.is_empty() {
            flags.push_str(" --faults none");
        } else if self.faults != Self::of_seed(self.seed).faults {
            let names: Vec<_> = self.faults.iter().map(|k| k.name()).collect();
            flags.push_str(&format!(" --faults {}", names.join(",")));
        }
        flags
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.replay_flags())
    }
}

/// The run's shared state.
#[derive(Debug)]
pub struct World {
    rng: Mutex<fastrand::Rng>,
    checkout_flows: bool,
    rates: Vec<(FaultKind, f64)>,
    latency: Latency,
    faults_on: AtomicBool,
    trace: Mutex<Vec<String>>,
    clock: VirtualClock,
    happened: Mutex<Happened>,
}

/// The order in which things happened that different components see: the checker compares
/// them. One counter for the run (a run is one thread), so the order is the seed's.
#[derive(Debug, Default)]
struct Happened {
    next: u64,
    /// Per invocation, when its last store write applied.
    last_write: std::collections::BTreeMap<u64, u64>,
    /// Per PSP charge, in creation order, when the model first held it (right after the call
    /// that created it).
    charge_seen: Vec<u64>,
}

/// The world as components hold it.
pub type SharedWorld = Arc<World>;

impl World {
    /// A world for `schedule`: each allowed fault kind gets a rate drawn from the seed (some
    /// runs are calm, some stormy), so faults compose differently in every run.
    pub fn new(schedule: &Schedule) -> SharedWorld {
        let mut rng = fastrand::Rng::with_seed(schedule.seed);
        let rates = FaultKind::ALL
            .into_iter()
            .map(|kind| {
                // Both draws happen whatever the schedule allows, so removing a fault kind
                // (shrinking) leaves every other rate as it was.
                let (on, level) = (rng.f64() < 0.7, rng.f64());
                let rate = if schedule.faults.contains(&kind) && on {
                    level * max_rate(kind)
                } else {
                    0.0
                };
                (kind, rate)
            })
            .collect::<Vec<_>>();
        let rates = if schedule.overlap {
            rates
        } else {
            rates
                .into_iter()
                .map(|(kind, rate)| {
                    let off = FaultKind::OVERLAP.contains(&kind);
                    (kind, if off { 0.0 } else { rate })
                })
                .collect()
        };
        // Drawn after the rates, so the rates are those of the seed whatever the model.
        let latency = if schedule.overlap {
            Latency::of_seed(&mut rng)
        } else {
            Latency::NONE
        };
        Arc::new(Self {
            rng: Mutex::new(rng),
            checkout_flows: schedule.checkout_flows,
            rates,
            latency,
            faults_on: AtomicBool::new(true),
            trace: Mutex::new(Vec::new()),
            clock: VirtualClock::start(),
            happened: Mutex::default(),
        })
    }

    /// A store write of `invocation` (numbered by the run; 0 is none) has just applied.
    pub fn note_write(&self, invocation: u64) {
        if invocation == 0 {
            return;
        }
        let mut happened = self.happened.lock().unwrap_or_else(PoisonError::into_inner);
        happened.next += 1;
        let at = happened.next;
        happened.last_write.insert(invocation, at);
    }

    /// The PSP model now holds `count` charges (in creation order): the ones not seen before
    /// are new now.
    pub fn note_charges(&self, count: usize) {
        let mut happened = self.happened.lock().unwrap_or_else(PoisonError::into_inner);
        if count > happened.charge_seen.len() {
            happened.next += 1;
            let at = happened.next;
            happened.charge_seen.resize(count, at);
        }
    }

    /// Whether the PSP's charge number `index` (in creation order) already existed when
    /// `invocation`'s last store write applied (`None`: the invocation wrote nothing).
    pub fn charged_before_last_write(&self, index: usize, invocation: u64) -> Option<bool> {
        let happened = self.happened.lock().unwrap_or_else(PoisonError::into_inner);
        let written = *happened.last_write.get(&invocation)?;
        Some(
            happened
                .charge_seen
                .get(index)
                .is_some_and(|seen| *seen < written),
        )
    }

    /// The virtual clock.
    pub fn clock(&self) -> &VirtualClock {
        &self.clock
    }

    /// Whether a fault of `kind` strikes now (never once faults are stopped).
    pub fn strikes(&self, kind: FaultKind) -> bool {
        if !self.faults_on.load(Ordering::SeqCst) {
            return false;
        }
        let rate = self
            .rates
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(0.0, |(_, r)| *r);
        // Drawn whatever the rate, so a schedule shrunk by a fault kind makes every other draw
        // as before: the failure it keeps is the same story, told with fewer faults.
        let draw = self.f64();
        draw < rate
    }

    /// Stops every fault source (the settling phase).
    pub fn stop_faults(&self) {
        self.faults_on.store(false, Ordering::SeqCst);
    }

    /// Whether faults are still on.
    pub fn faults_on(&self) -> bool {
        self.faults_on.load(Ordering::SeqCst)
    }

    /// A uniform draw in [0, 1).
    pub fn f64(&self) -> f64 {
        self.rng().f64()
    }

    /// A uniform draw in `range`.
    pub fn u64(&self, range: std::ops::Range<u64>) -> u64 {
        self.rng().u64(range)
    }

    /// A duration drawn uniformly between `low` and `high` milliseconds.
    pub fn millis(&self, low: u64, high: u64) -> Duration {
        Duration::from_millis(self.u64(low..high.max(low + 1)))
    }

    /// True with probability `p`.
    pub fn chance(&self, p: f64) -> bool {
        self.f64() < p
    }

    /// How long one leg (there or back) of a store call takes: heavy-tailed, per seed.
    pub fn store_leg(&self) -> Duration {
        let (scale_ms, alpha, cap_ms) = self.latency.store;
        self.pareto(scale_ms, alpha, cap_ms)
    }

    /// How long one leg (there or back) of a PSP call takes: heavy-tailed, per seed.
    pub fn psp_leg(&self) -> Duration {
        let (scale_ms, alpha, cap_ms) = self.latency.psp;
        self.pareto(scale_ms, alpha, cap_ms)
    }

    /// Whether shoppers may take the 3-D Secure and pay-later flows.
    pub fn checkout_flows(&self) -> bool {
        self.checkout_flows
    }

    /// Whether calls take time in this run.
    pub fn calls_take_time(&self) -> bool {
        self.latency.store.0 > 0.0
    }

    /// A Pareto draw of scale `scale_ms` and shape `alpha`, capped: most calls take about the
    /// scale, a few take many times it.
    fn pareto(&self, scale_ms: f64, alpha: f64, cap_ms: f64) -> Duration {
        if scale_ms <= 0.0 {
            return Duration::ZERO;
        }
        // 1 - u is in (0, 1]: never a division by zero.
        let u = 1.0 - self.f64();
        let ms = (scale_ms * u.powf(-1.0 / alpha)).min(cap_ms);
        Duration::from_micros((ms * 1000.0) as u64)
    }

    /// Picks one of `items`.
    pub fn pick<'a, T>(&self, items: &'a [T]) -> &'a T {
        let i = usize::try_from(self.u64(0..items.len() as u64)).unwrap_or(0);
        &items[i]
    }

    /// Appends a line to the run's trace (compared between two runs of one seed).
    pub fn trace(&self, line: impl Into<String>) {
        let line = format!("{:>10} {}", self.clock.now_ms() - EPOCH_MS, line.into());
        if std::env::var_os("PAYONCE_SIM_LIVE").is_some() {
            eprintln!("{line}");
        }
        self.trace
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(line);
    }

    /// The trace so far.
    pub fn trace_lines(&self) -> Vec<String> {
        self.trace
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn rng(&self) -> std::sync::MutexGuard<'_, fastrand::Rng> {
        self.rng.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Per seed, how long calls take: (scale ms, Pareto shape, cap ms) for each leg of a store call
/// and of a PSP call. A smaller shape is a heavier tail.
#[derive(Debug, Clone, Copy)]
struct Latency {
    store: (f64, f64, f64),
    psp: (f64, f64, f64),
}

impl Latency {
    /// Calls take no time (the model before overlap).
    const NONE: Self = Self {
        store: (0.0, 1.0, 0.0),
        psp: (0.0, 1.0, 0.0),
    };

    /// DynamoDB answers in milliseconds, now and then in seconds; a PSP in tens to hundreds of
    /// milliseconds, now and then in seconds.
    fn of_seed(rng: &mut fastrand::Rng) -> Self {
        let mut between = |low: f64, high: f64| low + rng.f64() * (high - low);
        Self {
            store: (between(1.0, 12.0), between(1.1, 3.0), 3_000.0),
            psp: (between(20.0, 250.0), between(1.1, 3.0), 5_000.0),
        }
    }
}

/// The highest rate a run may draw for `kind`: high enough to compose faults in most runs, low
/// enough that shoppers still get through.
fn max_rate(kind: FaultKind) -> f64 {
    match kind {
        FaultKind::StoreLatency => 0.8,
        FaultKind::StoreConflict | FaultKind::StoreThrottle => 0.06,
        FaultKind::Crash => 0.04,
        FaultKind::PspNoConnection
        | FaultKind::PspTimeout
        | FaultKind::PspCut
        | FaultKind::Psp5xx
        | FaultKind::PspBusy
        | FaultKind::PspAuth => 0.12,
        FaultKind::CrashAfterPsp => 0.15,
        FaultKind::WebhookChaos => 0.8,
        FaultKind::WebhookLoss => 0.4,
        FaultKind::SearchLag | FaultKind::PspMinimumMoves => 1.0,
        FaultKind::ClockJump => 0.2,
        FaultKind::StaleRead => 0.9,
        FaultKind::StoreLostAnswer => 0.05,
        FaultKind::SlowHolder => 0.1,
        FaultKind::ReconcileOverlap => 1.0,
        FaultKind::RefundKeysIgnored => 1.0,
    }
}
