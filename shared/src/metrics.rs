//! Business metrics in CloudWatch Embedded Metric Format (EMF): each emission is one JSON object
//! on one stdout line, which CloudWatch Logs turns into metrics of namespace `payonce` (or
//! `METRICS_NAMESPACE`, or Powertools' `POWERTOOLS_METRICS_NAMESPACE`), without an API call or a
//! `cloudwatch:PutMetricData` permission.
//!
//! Every line carries the dimension `service` (the function); PSP and webhook lines add `psp`,
//! the PSP call line also `outcome`. Dimensions stay low in cardinality: a payment id is only
//! ever a plain property of a line, searchable in Logs Insights but never a metric dimension.
//!
//! Where lines go: a process emits only once [`init`] named its service (each function's `main`),
//! or, without it, inside Lambda (`AWS_LAMBDA_FUNCTION_NAME` set, which then names the service).
//! Anywhere else — the simulation's thousands of seeds, the local server, benches, tests — the
//! default is off. A test captures the lines of its own thread with [`MetricsCapture::install`],
//! as it captures logs.
//!
//! The writer is ours (a few dozen lines over `serde_json`'s string escaping) rather than a crate:
//! the EMF crates bring their own metric registries and formatters, and every function's zip has
//! a size budget.

use crate::ports::PspOutcome;
use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::Write as _;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The namespace when neither `METRICS_NAMESPACE` nor `POWERTOOLS_METRICS_NAMESPACE` is set.
pub const DEFAULT_NAMESPACE: &str = "payonce";
/// The dimension naming the function (`charge`, `webhook`, `reconcile`…), on every metric.
pub const SERVICE_DIMENSION: &str = "service";
/// The dimension naming the PSP (`stripe`, `omise`, `2c2p`; a webhook's provider name).
pub const PSP_DIMENSION: &str = "psp";
/// The dimension of the PSP call's outcome class (see [`psp_outcome_class`]).
pub const OUTCOME_DIMENSION: &str = "outcome";

/// POST /payments answered 201 with a success this request decided.
pub const PAYMENT_SUCCEEDED: &str = "PaymentSucceeded";
/// POST /payments answered 402: declined by the issuer, or the method or request refused.
pub const PAYMENT_DECLINED: &str = "PaymentDeclined";
/// POST /payments answered 202: the PSP's outcome is unknown; webhooks and reconcile settle it.
pub const PAYMENT_PENDING: &str = "PaymentPending";
/// POST /payments replayed a stored outcome (a client retry with the same key).
pub const PAYMENT_REPLAYED: &str = "PaymentReplayed";
/// POST /payments answered 409: another invocation holds the key.
pub const PAYMENT_IN_USE: &str = "PaymentInUse";
/// POST /payments answered 429: over the attempt limits (card testing).
pub const PAYMENT_TOO_MANY_ATTEMPTS: &str = "PaymentTooManyAttempts";
/// POST /payments answered 503: the PSP was not reached; the order is released.
pub const PAYMENT_PSP_UNAVAILABLE: &str = "PaymentPspUnavailable";
/// POST /payments refused before any attempt (key mismatch, order not found, paid, moved on,
/// or held by another attempt).
pub const PAYMENT_REFUSED: &str = "PaymentRefused";
/// POST /payments failed on the store (500).
pub const PAYMENT_ERROR: &str = "PaymentError";
/// One charge call to the PSP (dimensions `psp`, `outcome`).
pub const PSP_CALLS: &str = "PspCalls";
/// The charge call's duration in milliseconds (dimensions `psp`, and `psp` + `outcome`).
pub const PSP_LATENCY: &str = "PspLatency";
/// A webhook moved a payment or refund.
pub const WEBHOOK_APPLIED: &str = "WebhookApplied";
/// A webhook that changes nothing (the state is there already, or it would move backwards).
pub const WEBHOOK_UNCHANGED: &str = "WebhookUnchanged";
/// A webhook event that moved something (or was refused as a mismatch) delivered again (a PSP
/// retry, a queue redelivery); a redelivered event that changes nothing counts as unchanged.
pub const WEBHOOK_DUPLICATE: &str = "WebhookDuplicate";
/// A webhook whose signature is missing, malformed or does not verify (400/401).
pub const WEBHOOK_SIGNATURE_REJECTED: &str = "WebhookSignatureRejected";
/// A verified webhook not applied: another amount or currency, or the PSP's other mode.
pub const WEBHOOK_MISMATCH: &str = "WebhookMismatch";
/// Attempts reconcile settled (succeeded or declined) in one run.
pub const RECONCILE_SETTLED: &str = "ReconcileSettled";
/// Attempts reconcile failed and released after fencing their PSP key, in one run.
pub const RECONCILE_FENCED: &str = "ReconcileFenced";
/// Attempts still pending after reconcile looked at them, in one run.
pub const RECONCILE_STILL_PENDING: &str = "ReconcileStillPending";
/// Refunds reconcile settled in one run.
pub const RECONCILE_REFUNDS_SETTLED: &str = "ReconcileRefundsSettled";
/// Attempts whose reconcile failed in one run (the next run retries them).
pub const RECONCILE_ERRORS: &str = "ReconcileErrors";
/// A late duplicate charge (a success for an order paid by another attempt) found and refunded
/// automatically; emitted with the `late-duplicate-charge` alarm, the payment id a property.
pub const LATE_DUPLICATE_REFUNDED: &str = "LateDuplicateRefunded";
/// A late duplicate charge found on a PSP that cannot refund through payonce, marked
/// refund-required for an operator; emitted with the `refund-required` alarm.
pub const LATE_DUPLICATE_REFUND_REQUIRED: &str = "LateDuplicateRefundRequired";

/// Most metrics one EMF directive may hold.
const MAX_METRICS: usize = 100;
/// Most dimensions one dimension set may hold.
const MAX_DIMENSIONS: usize = 30;
/// Longest dimension value CloudWatch accepts.
const MAX_DIMENSION_VALUE_CHARS: usize = 1024;

/// The CloudWatch unit of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A count of events.
    Count,
    /// A duration in milliseconds.
    Milliseconds,
}

impl Unit {
    /// The unit as EMF spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Count => "Count",
            Self::Milliseconds => "Milliseconds",
        }
    }
}

/// One EMF document (one log line): dimensions, metrics and plain properties.
#[derive(Debug, Clone)]
pub struct Emf {
    namespace: String,
    dimensions: Vec<(&'static str, String)>,
    dimension_sets: Vec<Vec<&'static str>>,
    metrics: Vec<(&'static str, Unit, f64)>,
    properties: Vec<(&'static str, String)>,
}

impl Emf {
    /// An empty document in `namespace`.
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            dimensions: Vec::new(),
            dimension_sets: Vec::new(),
            metrics: Vec::new(),
            properties: Vec::new(),
        }
    }

    /// Adds dimension `name` = `value` (non-ASCII and control characters become `_`; an empty
    /// or blank value becomes `unknown`, as CloudWatch refuses those).
    pub fn dimension(mut self, name: &'static str, value: &str) -> Self {
        let mut clean: String = value
            .chars()
            .take(MAX_DIMENSION_VALUE_CHARS)
            .map(|c| {
                if c.is_ascii() && !c.is_ascii_control() {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if clean.trim().is_empty() {
            clean = "unknown".to_owned();
        }
        self.dimensions.push((name, clean));
        self
    }

    /// Adds a dimension set (the dimensions one metric series is aggregated by). Without any,
    /// the document has one set of all its dimensions; a set naming a dimension the document
    /// lacks is left out.
    pub fn dimension_set(mut self, names: &[&'static str]) -> Self {
        self.dimension_sets
            .push(names.iter().take(MAX_DIMENSIONS).copied().collect());
        self
    }

    /// Adds metric `name` with `value` in `unit` (a value that is not finite is left out).
    pub fn metric(mut self, name: &'static str, unit: Unit, value: f64) -> Self {
        if value.is_finite() && self.metrics.len() < MAX_METRICS {
            self.metrics.push((name, unit, value));
        }
        self
    }

    /// Adds a count.
    pub fn count(self, name: &'static str, count: u64) -> Self {
        self.metric(name, Unit::Count, count as f64)
    }

    /// Adds a duration in milliseconds.
    pub fn duration_ms(self, name: &'static str, duration: Duration) -> Self {
        self.metric(name, Unit::Milliseconds, duration.as_secs_f64() * 1000.0)
    }

    /// Adds a plain property: in the log line (Logs Insights reads it), not a dimension.
    pub fn property(mut self, name: &'static str, value: &str) -> Self {
        self.properties.push((name, value.to_owned()));
        self
    }

    /// The document as one JSON line (without the newline), stamped `timestamp_ms` (milliseconds
    /// since the Unix epoch). A key used twice keeps its first use; `_aws` is reserved.
    pub fn to_line(&self, timestamp_ms: i64) -> String {
        let mut used: Vec<&str> = vec!["_aws"];
        let dimensions: Vec<_> = self
            .dimensions
            .iter()
            .filter(|(name, _)| claim(&mut used, name))
            .collect();
        let metrics: Vec<_> = self
            .metrics
            .iter()
            .filter(|(name, _, _)| claim(&mut used, name))
            .collect();
        let properties: Vec<_> = self
            .properties
            .iter()
            .filter(|(name, _)| claim(&mut used, name))
            .collect();
        let has = |name: &&str| dimensions.iter().any(|(d, _)| d == name);
        let mut sets: Vec<Vec<&str>> = self
            .dimension_sets
            .iter()
            .filter(|set| set.iter().all(has))
            .cloned()
            .collect();
        if sets.is_empty() {
            sets.push(dimensions.iter().map(|(name, _)| *name).collect());
        }

        let mut out = String::with_capacity(256);
        let _ = write!(
            out,
            "{{\"_aws\":{{\"Timestamp\":{timestamp_ms},\"CloudWatchMetrics\":[{{\"Namespace\":"
        );
        push_str(&mut out, &self.namespace);
        out.push_str(",\"Dimensions\":[");
        for (i, set) in sets.iter().enumerate() {
            out.push_str(if i == 0 { "[" } else { ",[" });
            for (j, name) in set.iter().enumerate() {
                if j > 0 {
                    out.push(',');
                }
                push_str(&mut out, name);
            }
            out.push(']');
        }
        out.push_str("],\"Metrics\":[");
        for (i, (name, unit, _)) in metrics.iter().enumerate() {
            out.push_str(if i == 0 { "{\"Name\":" } else { ",{\"Name\":" });
            push_str(&mut out, name);
            let _ = write!(out, ",\"Unit\":\"{}\"}}", unit.as_str());
        }
        out.push_str("]}]}");
        for (name, value) in dimensions.iter().chain(properties.iter()) {
            out.push(',');
            push_str(&mut out, name);
            out.push(':');
            push_str(&mut out, value);
        }
        for (name, _, value) in &metrics {
            out.push(',');
            push_str(&mut out, name);
            out.push(':');
            push_number(&mut out, *value);
        }
        out.push('}');
        out
    }
}

/// Whether `name` was not used yet (and marks it used).
fn claim<'a>(used: &mut Vec<&'a str>, name: &'a str) -> bool {
    if used.contains(&name) {
        return false;
    }
    used.push(name);
    true
}

/// `text` as a JSON string.
fn push_str(out: &mut String, text: &str) {
    let _ = write!(out, "{}", serde_json::Value::from(text));
}

/// `value` as a JSON number: whole values without a fraction (`1`, not `1.0`).
fn push_number(out: &mut String, value: f64) {
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        let _ = write!(out, "{}", value as i64);
    } else {
        let _ = write!(out, "{value}");
    }
}

/// Where a process's or a thread's lines go.
#[derive(Debug, Clone)]
enum Sink {
    Off,
    Stdout,
    Memory(MetricsCapture),
}

#[derive(Debug)]
struct Emitter {
    namespace: String,
    service: String,
    sink: Sink,
}

impl Emitter {
    fn new(service: &str, sink: Sink) -> Self {
        let namespace = ["METRICS_NAMESPACE", "POWERTOOLS_METRICS_NAMESPACE"]
            .iter()
            .filter_map(|name| std::env::var(name).ok())
            .find(|value| !value.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
        Self {
            namespace,
            service: service.to_owned(),
            sink,
        }
    }

    fn emit(&self, build: impl FnOnce(Emf) -> Emf) {
        if matches!(self.sink, Sink::Off) {
            return;
        }
        let emf =
            build(Emf::new(self.namespace.clone()).dimension(SERVICE_DIMENSION, &self.service));
        let timestamp_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
            });
        let mut line = emf.to_line(timestamp_ms);
        match &self.sink {
            Sink::Off => {}
            Sink::Stdout => {
                line.push('\n');
                // One write of the whole line, under stdout's lock: never interleaved with a log
                // line. A metric lost to a closed stdout is not worth failing a payment for.
                let _ = std::io::stdout().lock().write_all(line.as_bytes());
            }
            Sink::Memory(capture) => capture
                .lines
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(line),
        }
    }
}

static PROCESS: OnceLock<Arc<Emitter>> = OnceLock::new();

thread_local! {
    static THREAD: RefCell<Option<Arc<Emitter>>> = const { RefCell::new(None) };
}

/// The process's emitter: [`init`]'s, else stdout inside Lambda, else off.
fn process() -> &'static Arc<Emitter> {
    PROCESS.get_or_init(|| match std::env::var("AWS_LAMBDA_FUNCTION_NAME") {
        Ok(name) if !name.trim().is_empty() => Arc::new(Emitter::new(&name, Sink::Stdout)),
        _ => Arc::new(Emitter::new("", Sink::Off)),
    })
}

/// Turns metrics on for this process, to stdout, with `service` as the `service` dimension
/// (call once at start-up, in `main`). `false` if the process's metrics were set up already.
pub fn init(service: &str) -> bool {
    PROCESS
        .set(Arc::new(Emitter::new(service, Sink::Stdout)))
        .is_ok()
}

/// Emits one line: `build` adds metrics, further dimensions and properties to a document that
/// already has the namespace and the `service` dimension. `build` runs only if metrics are on.
pub fn emit(build: impl FnOnce(Emf) -> Emf) {
    let emitter = THREAD
        .with(|thread| thread.borrow().clone())
        .unwrap_or_else(|| process().clone());
    emitter.emit(build);
}

/// Counts one `metric` (dimension `service`).
pub fn count(metric: &'static str) {
    emit(|emf| emf.count(metric, 1));
}

/// Counts one webhook `metric` of `provider` (dimensions `service`, `psp`).
pub fn count_webhook(metric: &'static str, provider: &str) {
    emit(|emf| emf.dimension(PSP_DIMENSION, provider).count(metric, 1));
}

/// Records one charge call to `psp`: its latency, by PSP and by PSP and outcome class, and a
/// count by PSP and outcome class.
pub fn psp_call(psp: &str, outcome: &PspOutcome, latency: Duration) {
    emit(|emf| {
        emf.dimension(PSP_DIMENSION, psp)
            .dimension(OUTCOME_DIMENSION, psp_outcome_class(outcome))
            .dimension_set(&[SERVICE_DIMENSION, PSP_DIMENSION])
            .dimension_set(&[SERVICE_DIMENSION, PSP_DIMENSION, OUTCOME_DIMENSION])
            .duration_ms(PSP_LATENCY, latency)
            .count(PSP_CALLS, 1)
    });
}

/// The outcome class of a charge call: `approved`, `declined`, `rejected`, `refused`, `unknown`
/// or `not-sent`.
pub fn psp_outcome_class(outcome: &PspOutcome) -> &'static str {
    match outcome {
        PspOutcome::Approved { .. } => "approved",
        PspOutcome::ActionRequired { .. } => "action-required",
        PspOutcome::Authorized { .. } => "authorized",
        PspOutcome::Pending { .. } => "pending",
        PspOutcome::AuthenticationRequired { .. } => "authentication-required",
        PspOutcome::Declined { .. } => "declined",
        PspOutcome::Rejected { .. } => "rejected",
        PspOutcome::Refused { .. } => "refused",
        PspOutcome::Unknown { .. } => "unknown",
        PspOutcome::NotSent { .. } => "not-sent",
    }
}

/// The lines one thread emitted while its capture was installed (tests).
#[derive(Debug, Clone, Default)]
pub struct MetricsCapture {
    lines: Arc<Mutex<Vec<String>>>,
}

/// Keeps a [`MetricsCapture`] installed on its thread until dropped (then the thread emits as
/// before). Not `Send`: it belongs to the thread it was installed on.
#[derive(Debug)]
pub struct MetricsGuard {
    previous: Option<Arc<Emitter>>,
    _thread: PhantomData<*const ()>,
}

impl Drop for MetricsGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        THREAD.with(|thread| *thread.borrow_mut() = previous);
    }
}

impl MetricsCapture {
    /// Captures what this thread emits, as `service`, until the guard is dropped. Use it in a
    /// current-thread test (`#[tokio::test]`), where every task of the test runs on that thread.
    pub fn install(service: &str) -> (Self, MetricsGuard) {
        let capture = Self::default();
        let emitter = Arc::new(Emitter::new(service, Sink::Memory(capture.clone())));
        let previous = THREAD.with(|thread| thread.borrow_mut().replace(emitter));
        let guard = MetricsGuard {
            previous,
            _thread: PhantomData,
        };
        (capture, guard)
    }

    /// Every line emitted so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every line emitted so far, parsed.
    pub fn documents(&self) -> Vec<serde_json::Value> {
        self.lines()
            .iter()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// The sum of `metric`'s values over the lines whose dimensions include `dimensions`.
    pub fn total(&self, metric: &str, dimensions: &[(&str, &str)]) -> f64 {
        self.documents()
            .iter()
            .filter(|doc| dimensions.iter().all(|(name, value)| doc[*name] == *value))
            .filter_map(|doc| doc[metric].as_f64())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    const AT_MS: i64 = 1_796_000_000_123;

    #[test]
    fn one_count_is_the_spec_s_document_exactly() {
        // GIVEN a count with the service dimension
        let emf = Emf::new("payonce")
            .dimension(SERVICE_DIMENSION, "charge")
            .count(PAYMENT_SUCCEEDED, 1);

        // WHEN it is written
        let line = emf.to_line(AT_MS);

        // THEN it is the EMF document, byte for byte, on one line
        assert_eq!(
            line,
            concat!(
                r#"{"_aws":{"Timestamp":1796000000123,"CloudWatchMetrics":[{"Namespace":"payonce","#,
                r#""Dimensions":[["service"]],"Metrics":[{"Name":"PaymentSucceeded","Unit":"Count"}]}]},"#,
                r#""service":"charge","PaymentSucceeded":1}"#
            )
        );
        assert!(!line.contains('\n'));
    }

    #[test]
    fn several_metrics_and_dimension_sets_share_one_line() {
        // GIVEN a PSP call: latency and a count, two dimension sets, a property
        let emf = Emf::new("payonce")
            .dimension(SERVICE_DIMENSION, "charge")
            .dimension(PSP_DIMENSION, "stripe")
            .dimension(OUTCOME_DIMENSION, "approved")
            .dimension_set(&[SERVICE_DIMENSION, PSP_DIMENSION])
            .dimension_set(&[SERVICE_DIMENSION, PSP_DIMENSION, OUTCOME_DIMENSION])
            .duration_ms(PSP_LATENCY, Duration::from_micros(12_500))
            .count(PSP_CALLS, 1)
            .property("payment_id", "pay_1");

        // WHEN it is written
        let doc: Value = serde_json::from_str(&emf.to_line(AT_MS)).expect("JSON");

        // THEN the directive lists both sets and both metrics with their units, and every
        // dimension and metric is a top-level member
        assert_eq!(
            doc,
            json!({
                "_aws": {
                    "Timestamp": AT_MS,
                    "CloudWatchMetrics": [{
                        "Namespace": "payonce",
                        "Dimensions": [["service", "psp"], ["service", "psp", "outcome"]],
                        "Metrics": [
                            {"Name": "PspLatency", "Unit": "Milliseconds"},
                            {"Name": "PspCalls", "Unit": "Count"}
                        ]
                    }]
                },
                "service": "charge",
                "psp": "stripe",
                "outcome": "approved",
                "payment_id": "pay_1",
                "PspLatency": 12.5,
                "PspCalls": 1
            })
        );
    }

    #[test]
    fn strings_are_escaped_and_dimension_values_kept_valid() {
        // GIVEN a namespace, a dimension and a property with quotes, backslashes, control and
        // non-ASCII characters, and a blank dimension value
        let emf = Emf::new("pay\"once")
            .dimension(SERVICE_DIMENSION, "a\"b\\c\nd")
            .dimension(PSP_DIMENSION, "2c2p ✓")
            .dimension(OUTCOME_DIMENSION, "  ")
            .property("note", "line\n\"quoted\"\t✓")
            .count(WEBHOOK_APPLIED, 3);

        // WHEN it is written
        let line = emf.to_line(AT_MS);
        let doc: Value = serde_json::from_str(&line).expect("valid JSON");

        // THEN strings round-trip, and dimension values are printable ASCII and not blank
        assert!(!line.contains('\n'), "{line}");
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Namespace"],
            "pay\"once"
        );
        assert_eq!(doc["service"], "a\"b\\c_d");
        assert_eq!(doc["psp"], "2c2p _");
        assert_eq!(doc["outcome"], "unknown");
        assert_eq!(doc["note"], "line\n\"quoted\"\t✓");
        assert_eq!(doc["WebhookApplied"], 3);
    }

    #[test]
    fn reserved_and_repeated_keys_and_unusable_values_are_left_out() {
        // GIVEN a property named `_aws`, a metric named as a dimension, a metric given twice, a
        // value that is not finite, and a set naming an absent dimension
        let emf = Emf::new("payonce")
            .dimension(SERVICE_DIMENSION, "reconcile")
            .dimension_set(&[SERVICE_DIMENSION])
            .dimension_set(&[SERVICE_DIMENSION, PSP_DIMENSION])
            .property("_aws", "x")
            .count(SERVICE_DIMENSION, 1)
            .count(RECONCILE_SETTLED, 2)
            .count(RECONCILE_SETTLED, 5)
            .count(RECONCILE_STILL_PENDING, 0)
            .metric(RECONCILE_FENCED, Unit::Count, f64::NAN);

        // WHEN it is written
        let doc: Value = serde_json::from_str(&emf.to_line(AT_MS)).expect("JSON");

        // THEN only the first of each key stays, zero counts are kept, the rest is dropped
        let directive = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Dimensions"], json!([["service"]]));
        assert_eq!(
            directive["Metrics"],
            json!([
                {"Name": "ReconcileSettled", "Unit": "Count"},
                {"Name": "ReconcileStillPending", "Unit": "Count"}
            ])
        );
        assert_eq!(doc["service"], "reconcile");
        assert_eq!(doc["ReconcileSettled"], 2);
        assert_eq!(doc["ReconcileStillPending"], 0);
        assert!(doc.get("ReconcileFenced").is_none());
        assert!(doc["_aws"].is_object());
    }

    #[test]
    fn numbers_are_whole_without_a_fraction_and_exact_with_one() {
        let mut out = String::new();
        for value in [0.0, 1.0, 42.0, 0.25, 1234.5] {
            push_number(&mut out, value);
            out.push(' ');
        }
        assert_eq!(out, "0 1 42 0.25 1234.5 ");
    }

    #[test]
    fn a_capture_gets_the_thread_s_lines_and_nothing_after_its_guard() {
        // GIVEN a capture on this thread
        let (capture, guard) = MetricsCapture::install("webhook");

        // WHEN a webhook count and a PSP call are emitted, then the guard is dropped
        count_webhook(WEBHOOK_DUPLICATE, "fake");
        psp_call(
            "stripe",
            &PspOutcome::NotSent {
                reason: "connect".into(),
            },
            Duration::from_millis(7),
        );
        drop(guard);
        count(PAYMENT_SUCCEEDED);

        // THEN both lines are captured, stamped now, with the service dimension
        let docs = capture.documents();
        assert_eq!(docs.len(), 2, "{:?}", capture.lines());
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as i64;
        for doc in &docs {
            let stamp = doc["_aws"]["Timestamp"].as_i64().expect("ms");
            assert!((now_ms - 60_000..=now_ms).contains(&stamp), "{doc}");
            assert_eq!(doc["service"], "webhook");
        }
        assert_eq!(capture.total(WEBHOOK_DUPLICATE, &[("psp", "fake")]), 1.0);
        assert_eq!(capture.total(PSP_CALLS, &[("outcome", "not-sent")]), 1.0);
        assert_eq!(capture.total(PSP_LATENCY, &[]), 7.0);
        assert_eq!(capture.total(PAYMENT_SUCCEEDED, &[]), 0.0);
    }

    #[test]
    fn without_init_or_lambda_nothing_is_emitted() {
        // GIVEN no capture on this thread, and a test process outside Lambda
        if std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some() {
            return;
        }
        // WHEN a count is emitted THEN the document is never even built
        let mut built = false;
        emit(|emf| {
            built = true;
            emf
        });
        assert!(!built);
    }
}
