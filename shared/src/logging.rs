//! The functions' logs: one flat JSON object per event on stdout, in the shape Powertools for
//! AWS Lambda users know, so CloudWatch Logs Insights, metric filters and Lambda's own log-level
//! filter read it as it is.
//!
//! ```json
//! {"timestamp":"2026-05-01T09:30:12.345Z","level":"INFO","message":"webhook queued",
//!  "target":"payonce::service::webhooks","function_request_id":"8f5e…","xray_trace_id":"Root=1-…",
//!  "cold_start":false,"message_id":"…","provider":"stripe","event_id":"evt_…"}
//! ```
//!
//! (one line in CloudWatch). Fixed keys first: `timestamp` (RFC 3339, UTC, milliseconds),
//! `level` (`TRACE` … `ERROR`, what Lambda's `ApplicationLogLevel` filters on), `message`,
//! `target` (the Rust module that logged it), then the invocation's `function_request_id` and
//! `xray_trace_id` (absent outside an invocation) and `cold_start` (true during the process's
//! start-up and its first invocation only). Then the fields of the spans the event happened in
//! (outermost first) and the event's own fields, all at the top level: a metric filter reads an
//! alarm as `$.alarm` ([`ALARM_FIELD`]). A field named like a fixed key is written as
//! `field_<name>`.
//!
//! The request id and trace id come from the span the Lambda runtime opens around each
//! invocation (`lambda_runtime::layers::trace::request_span`: `requestId`, `xrayTraceId`); the
//! trace id falls back to `_X_AMZN_TRACE_ID`, which the runtime sets per invocation.
//!
//! **Levels** ([`LevelRule`]): payonce's own crates log at the configured level
//! (`AWS_LAMBDA_LOG_LEVEL`, else `RUST_LOG` as a plain level name, else `INFO`); every other
//! crate (the AWS SDK, hyper, h2, rustls, reqwest, the Lambda runtime, tower…) is capped at
//! `INFO` whatever the configured level: at `TRACE` the runtime logs each raw event (bearer
//! tokens, webhook bodies and signatures) and the SDK and HTTP crates log what they send.
//!
//! **What is never logged.** Code logs ids, kinds, statuses and lengths: never a bearer token
//! or JWT, an API or secret key, a webhook signing secret, a webhook body or signature header,
//! or a payment method token. A text that comes from outside (a PSP's error message) may quote
//! a token: such text goes through [`masked`] where it is logged, and every string this module
//! writes goes through it again, so a token shape that slips through is written as its prefix
//! and length only (`pm_…(24 chars)`).

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// The field an alarm is raised with (the alarm's name as its value, e.g.
/// `late-duplicate-charge`): at the top level of the line, so a metric filter matches it as
/// `$.alarm`.
pub const ALARM_FIELD: &str = "alarm";

/// The level third-party crates are capped at.
pub const THIRD_PARTY_CAP: LevelFilter = LevelFilter::INFO;

/// The invocation span's request id field (`lambda_runtime::layers::trace::request_span`).
const RUNTIME_REQUEST_ID: &str = "requestId";
/// The invocation span's X-Ray trace id field.
const RUNTIME_TRACE_ID: &str = "xrayTraceId";
/// The invocation span's tenant id field (tenant-isolated functions).
const RUNTIME_TENANT_ID: &str = "tenantId";

/// The keys every line starts with; an event or span field of one of these names is written as
/// `field_<name>`.
const FIXED_KEYS: [&str; 8] = [
    "timestamp",
    "level",
    "message",
    "target",
    "function_request_id",
    "xray_trace_id",
    "tenant_id",
    "cold_start",
];

/// Starts the function's logs: [`subscriber`] at [`level_from_env`], writing to stdout, as the
/// process's global default. Call it first thing in `main`; a second call changes nothing.
pub fn init_lambda_tracing() {
    let _ = tracing::subscriber::set_global_default(subscriber(level_from_env(), std::io::stdout));
}

/// The configured level: `AWS_LAMBDA_LOG_LEVEL` (Lambda's logging controls: `TRACE`, `DEBUG`,
/// `INFO`, `WARN`, `ERROR`, `FATAL`), else `RUST_LOG` as a plain level name, else `INFO`.
pub fn level_from_env() -> LevelFilter {
    let read = |name| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    read("AWS_LAMBDA_LOG_LEVEL")
        .or_else(|| read("RUST_LOG"))
        .and_then(|raw| parse_level(&raw))
        .unwrap_or(LevelFilter::INFO)
}

/// A plain level name, any case; Lambda's `FATAL` is `ERROR`. `None` for anything else
/// (`RUST_LOG` directives such as `info,hyper=debug` are not read).
pub fn parse_level(raw: &str) -> Option<LevelFilter> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "fatal" => Some(LevelFilter::ERROR),
        "off" => Some(LevelFilter::OFF),
        name => name.parse::<Level>().ok().map(LevelFilter::from_level),
    }
}

/// The production subscriber at `level`, writing one JSON line per event to `writer`: what
/// [`init_lambda_tracing`] installs, and what tests capture.
pub fn subscriber<W>(level: LevelFilter, writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::registry().with(JsonLogs::new(level, writer))
}

/// Which events and spans are logged: payonce's own crates (targets `payonce`, `payonce::…`,
/// `payonce_…`) at the configured level; every other crate's events at the configured level
/// capped at [`THIRD_PARTY_CAP`]; every span at `INFO` or above whatever the level, so an event
/// always carries its invocation's request id (the runtime's span is `INFO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LevelRule {
    own: LevelFilter,
}

impl LevelRule {
    /// The rule for a configured `level`.
    pub fn new(level: LevelFilter) -> Self {
        Self { own: level }
    }

    /// Whether `target` names one of payonce's own crates.
    pub fn is_own(target: &str) -> bool {
        target
            .strip_prefix("payonce")
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::") || rest.starts_with('_'))
    }

    /// Whether an event (or a span, `is_span`) at `level` from `target` is logged.
    pub fn allows(&self, target: &str, level: &Level, is_span: bool) -> bool {
        let limit = if Self::is_own(target) {
            self.own
        } else {
            self.own.min(THIRD_PARTY_CAP)
        };
        *level <= limit || (is_span && *level <= THIRD_PARTY_CAP)
    }

    /// The most verbose level anything may be logged at.
    pub fn max_level(&self) -> LevelFilter {
        self.own.max(THIRD_PARTY_CAP)
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.allows(metadata.target(), metadata.level(), metadata.is_span())
    }
}

/// The layer that writes each event as one flat JSON line (see the module documentation).
pub struct JsonLogs<W> {
    rule: LevelRule,
    writer: W,
    /// Whether an invocation span has been opened yet in this process.
    invoked: Arc<AtomicBool>,
}

impl<W> JsonLogs<W> {
    /// Logs at `level` (see [`LevelRule`]) into `writer`.
    pub fn new(level: LevelFilter, writer: W) -> Self {
        Self {
            rule: LevelRule::new(level),
            writer,
            invoked: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// What the runtime's invocation span says, kept on the span.
#[derive(Clone, Debug)]
struct Invocation {
    request_id: String,
    xray_trace_id: Option<String>,
    tenant_id: Option<String>,
    cold_start: bool,
}

/// A span's own fields, kept on the span.
#[derive(Default)]
struct SpanFields(Fields);

impl<S, W> Layer<S> for JsonLogs<W>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + 'static,
{
    /// `sometimes`, whatever the rule: tracing caches a callsite's interest for the whole
    /// process, combining every live subscriber's answer when the callsite or a subscriber is
    /// registered. A subscriber that is one thread's default (a test's log capture, a
    /// simulation run) answering `never` can leave a callsite cached as never while another
    /// thread's subscriber registers concurrently, and that subscriber then misses the event;
    /// answering `always` would hand events to a subscriber whose rule refuses them. With
    /// `sometimes`, each event asks the current subscriber's [`Layer::enabled`]: one check per
    /// event, the same answer on every thread.
    fn register_callsite(&self, _metadata: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }

    fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
        self.rule.enabled(metadata)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.rule.max_level())
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        let mut extensions = span.extensions_mut();
        if let Some(request_id) = fields.take(RUNTIME_REQUEST_ID) {
            let text = |value: Option<serde_json::Value>| match value {
                Some(serde_json::Value::String(s)) => Some(s),
                Some(other) => Some(other.to_string()),
                None => None,
            };
            extensions.insert(Invocation {
                request_id: text(Some(request_id)).unwrap_or_default(),
                xray_trace_id: text(fields.take(RUNTIME_TRACE_ID)),
                tenant_id: text(fields.take(RUNTIME_TENANT_ID)),
                cold_start: !self.invoked.swap(true, Ordering::Relaxed),
            });
        }
        extensions.insert(SpanFields(fields));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(SpanFields(fields)) = extensions.get_mut::<SpanFields>() {
            values.record(fields);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        let mut invocation = None;
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                let extensions = span.extensions();
                if let Some(found) = extensions.get::<Invocation>() {
                    invocation = Some(found.clone());
                }
                if let Some(SpanFields(own)) = extensions.get::<SpanFields>() {
                    fields.extend(own);
                }
            }
        }
        let mut own = Fields::default();
        event.record(&mut own);
        let message = own.take("message");
        fields.extend(&own);
        let cold_start = match &invocation {
            Some(invocation) => invocation.cold_start,
            // Start-up, before the first invocation, is part of the cold start.
            None => !self.invoked.load(Ordering::Relaxed),
        };
        let xray_trace_id = invocation.as_ref().and_then(|i| {
            i.xray_trace_id
                .clone()
                .or_else(|| std::env::var("_X_AMZN_TRACE_ID").ok())
        });
        let line = Line {
            timestamp_ms: now_ms(),
            level: event.metadata().level(),
            message,
            target: event.metadata().target(),
            invocation: invocation.as_ref(),
            xray_trace_id: xray_trace_id.as_deref(),
            cold_start,
            fields: &fields,
        };
        let mut writer = self.writer.make_writer();
        // One write per line, so concurrent lines never interleave; a log that cannot be
        // written is dropped (there is nowhere to report it).
        let _ = writer.write_all(&line.to_json());
    }
}

/// Milliseconds since the Unix epoch, now.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// One event, ready to write.
struct Line<'a> {
    timestamp_ms: i64,
    level: &'a Level,
    message: Option<serde_json::Value>,
    target: &'a str,
    invocation: Option<&'a Invocation>,
    xray_trace_id: Option<&'a str>,
    cold_start: bool,
    fields: &'a Fields,
}

impl Line<'_> {
    /// The JSON object, newline-terminated.
    fn to_json(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.push(b'{');
        let mut first = true;
        let mut put = |out: &mut Vec<u8>, key: &str, value: &serde_json::Value| {
            if !first {
                out.push(b',');
            }
            first = false;
            // Writing JSON into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *out, key);
            out.push(b':');
            let _ = serde_json::to_writer(&mut *out, value);
        };
        let text = |s: &str| serde_json::Value::String(s.to_owned());
        put(
            &mut out,
            "timestamp",
            &serde_json::Value::String(rfc3339_ms(self.timestamp_ms)),
        );
        put(&mut out, "level", &text(self.level.as_str()));
        let message = match &self.message {
            Some(serde_json::Value::String(s)) => serde_json::Value::String(masked(s).to_string()),
            Some(other) => other.clone(),
            None => text(""),
        };
        put(&mut out, "message", &message);
        put(&mut out, "target", &text(self.target));
        if let Some(invocation) = self.invocation {
            put(
                &mut out,
                "function_request_id",
                &text(&invocation.request_id),
            );
            if let Some(tenant) = &invocation.tenant_id {
                put(&mut out, "tenant_id", &text(tenant));
            }
        }
        if let Some(trace) = self.xray_trace_id {
            put(&mut out, "xray_trace_id", &text(trace));
        }
        put(
            &mut out,
            "cold_start",
            &serde_json::Value::Bool(self.cold_start),
        );
        for (name, value) in &self.fields.0 {
            let value = match value {
                serde_json::Value::String(s) => serde_json::Value::String(masked(s).to_string()),
                other => other.clone(),
            };
            if FIXED_KEYS.contains(&name.as_str()) {
                put(&mut out, &format!("field_{name}"), &value);
            } else {
                put(&mut out, name, &value);
            }
        }
        out.extend_from_slice(b"}\n");
        out
    }
}

/// Fields in the order they were first recorded; a later value of a name replaces the earlier.
#[derive(Default, Debug)]
struct Fields(Vec<(String, serde_json::Value)>);

impl Fields {
    fn set(&mut self, name: &str, value: serde_json::Value) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            // An event that names `message` as a field and also has a message (`%message,
            // "text"`): tracing's macros record the text first; the field is kept under another
            // name.
            Some((n, _)) if n == "message" => self.set("field_message", value),
            Some((_, old)) => *old = value,
            None => self.0.push((name.to_owned(), value)),
        }
    }

    fn take(&mut self, name: &str) -> Option<serde_json::Value> {
        let at = self.0.iter().position(|(n, _)| n == name)?;
        Some(self.0.remove(at).1)
    }

    fn extend(&mut self, other: &Fields) {
        for (name, value) in &other.0 {
            self.set(name, value.clone());
        }
    }
}

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        let number =
            serde_json::Number::from_f64(value).map_or(serde_json::Value::Null, Into::into);
        self.set(field.name(), number);
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field.name(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(field.name(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field.name(), value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field.name(), value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.set(field.name(), value.to_string().into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.set(field.name(), format!("{value:?}").into());
    }
}

/// `ms` since the Unix epoch as RFC 3339 in UTC with milliseconds (`2026-05-01T09:30:12.345Z`).
pub fn rfc3339_ms(ms: i64) -> String {
    let (days, ms_of_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let (s, milli) = (ms_of_day / 1000, ms_of_day % 1000);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// The epoch milliseconds of an RFC 3339 time (`2026-05-01T09:30:12Z`, with or without a
/// fraction of a second, in UTC or at an offset such as `-07:00`, as PSPs write them); `None` for
/// anything else.
pub fn epoch_ms_of_rfc3339(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    let at = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[10] != b'T' {
        return None;
    }
    let (year, month, day) = (at(0..4)?, at(5..7)?, at(8..10)?);
    let (hour, minute, second) = (at(11..13)?, at(14..16)?, at(17..19)?);
    let rest = text.get(19..)?;
    let (fraction, zone) = match rest.strip_prefix('.') {
        Some(after) => {
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            (&after[..digits], &after[digits..])
        }
        None => ("", rest),
    };
    let offset_minutes = match zone.as_bytes() {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (hours, minutes) = (at_zone(zone, 1..3)?, at_zone(zone, 4..6)?);
            if hours > 23 || minutes > 59 {
                return None;
            }
            let magnitude = hours * 60 + minutes;
            if *sign == b'-' {
                -magnitude
            } else {
                magnitude
            }
        }
        _ => return None,
    };
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let milli = format!("{fraction:0<3}").get(..3)?.parse::<i64>().ok()?;
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + hour) * 60 + minute - offset_minutes) * 60_000 + second * 1000 + milli)
}

/// The digits of `zone` in `range`, as a number.
fn at_zone(zone: &str, range: std::ops::Range<usize>) -> Option<i64> {
    let part = zone.get(range)?;
    part.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| part.parse().ok())?
}

/// The days from 1970-01-01 to the proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date `days` after 1970-01-01 (H. Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The token shapes [`masked`] hides: Stripe payment methods, secret and restricted keys and
/// webhook secrets, Omise card tokens and secret keys, and JWTs (their base64 `{"` header).
const TOKEN_PREFIXES: [&str; 7] = ["pm_", "sk_", "rk_", "whsec_", "tokn_", "skey_", "eyJ"];

/// `text` with every token shape (a bearer token, a JWT, `pm_…`, `tokn_…`, `sk_…`, `rk_…`,
/// `skey_…`, `whsec_…`) replaced by its prefix and length, e.g. `No such PaymentMethod:
/// 'pm_…(19 chars)'`: for a text from outside (a PSP's message) that may quote one.
pub fn masked(text: &str) -> Masked<'_> {
    Masked(text)
}

/// [`masked`]'s result: shown without the tokens (`{}` and `{:?}` alike).
#[derive(Clone, Copy)]
pub struct Masked<'a>(&'a str);

impl std::fmt::Debug for Masked<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

impl std::fmt::Display for Masked<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.0;
        let token_char = |c: char| {
            c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '~' | '+' | '/' | '=')
        };
        let mut rest = text;
        let mut at_boundary = true;
        while let Some(c) = rest.chars().next() {
            if at_boundary {
                // (what is written before the mask, how much of it the count includes, the
                // text after it): a bearer token is counted alone, a prefixed token whole.
                let bearer = rest
                    .get(..7)
                    .filter(|p| p.eq_ignore_ascii_case("bearer "))
                    .map(|p| (p, 0, &rest[7..]));
                let prefixed = TOKEN_PREFIXES
                    .iter()
                    .find(|p| rest.starts_with(*p))
                    .map(|p| (*p, p.len(), &rest[p.len()..]));
                if let Some((prefix, counted, after)) = bearer.or(prefixed) {
                    let len = after.find(|c: char| !token_char(c)).unwrap_or(after.len());
                    if len > 0 {
                        f.write_str(prefix)?;
                        write!(f, "…({} chars)", counted + len)?;
                        rest = &after[len..];
                        at_boundary = false;
                        continue;
                    }
                }
            }
            f.write_char(c)?;
            at_boundary = !(c.is_alphanumeric() || c == '_');
            rest = &rest[c.len_utf8()..];
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_http::lambda_runtime::layers::trace::request_span;
    use lambda_http::lambda_runtime::Context as LambdaContext;
    use serde_json::Value;
    use std::sync::Mutex;

    /// Lines written, kept.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn lines(&self) -> Vec<Value> {
            let bytes = self.0.lock().expect("lock").clone();
            String::from_utf8(bytes)
                .expect("UTF-8")
                .lines()
                .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
                .collect()
        }
    }

    fn capture(level: LevelFilter) -> (Captured, tracing::subscriber::DefaultGuard) {
        let captured = Captured::default();
        let writer = captured.clone();
        let guard = tracing::subscriber::set_default(subscriber(level, move || writer.clone()));
        (captured, guard)
    }

    fn invocation(request_id: &str, trace_id: Option<&str>) -> tracing::Span {
        let mut context = LambdaContext::default();
        context.request_id = request_id.to_owned();
        context.xray_trace_id = trace_id.map(str::to_owned);
        request_span(&context)
    }

    #[test]
    fn rfc3339_utc_times_read_back_and_anything_else_is_refused() {
        for ms in [0, 951_782_400_000, 1_796_354_244_123, -86_400_000] {
            assert_eq!(super::epoch_ms_of_rfc3339(&rfc3339_ms(ms)), Some(ms));
        }
        assert_eq!(
            super::epoch_ms_of_rfc3339("2026-12-11T05:00:00Z"),
            Some(1_796_965_200_000)
        );
        // An offset names the same instant (PayPal writes `-07:00` times).
        for same in [
            "2026-12-11T12:00:00+07:00",
            "2026-12-10T22:00:00-07:00",
            "2026-12-11T05:00:00.000+00:00",
        ] {
            assert_eq!(
                super::epoch_ms_of_rfc3339(same),
                Some(1_796_965_200_000),
                "{same}"
            );
        }
        for bad in [
            "2026-12-11T05:00:00+7:00",
            "2026-12-11T05:00:00+24:00",
            "2026-12-11T05:00:00+07",
            "2026-12-11T05:00:00 07:00",
            "2026-13-11T05:00:00Z",
            "tomorrow",
            "",
        ] {
            assert_eq!(super::epoch_ms_of_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn timestamps_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_796_000_000_123), "2026-11-30T00:53:20.123Z");
        assert_eq!(rfc3339_ms(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
        // Every day of four centuries round-trips through the calendar, in order.
        let mut last = String::new();
        for day in -73_000..73_000_i64 {
            let stamp = rfc3339_ms(day * 86_400_000 + 43_200_000);
            assert!(stamp > last, "{stamp} after {last}");
            assert!(stamp.ends_with("T12:00:00.000Z"), "{stamp}");
            last = stamp;
        }
    }

    #[test]
    fn own_crates_log_at_the_configured_level_and_others_at_info_at_most() {
        let trace = LevelRule::new(LevelFilter::TRACE);
        for own in [
            "payonce",
            "payonce::service::charge",
            "payonce_charge::handler",
            "payonce_webhook",
        ] {
            assert!(LevelRule::is_own(own), "{own}");
            assert!(trace.allows(own, &Level::TRACE, false), "{own}");
        }
        for other in [
            "payoncex",
            "aws_smithy_runtime::client::orchestrator",
            "aws_sdk_dynamodb",
            "hyper::proto::h1",
            "h2::codec",
            "rustls::client",
            "reqwest::connect",
            "lambda_runtime::layers::api_response",
            "lambda_http",
            "tower::buffer",
        ] {
            assert!(!LevelRule::is_own(other), "{other}");
            assert!(trace.allows(other, &Level::INFO, false), "{other}");
            for verbose in [Level::DEBUG, Level::TRACE] {
                assert!(
                    !trace.allows(other, &verbose, false),
                    "{other} at {verbose}"
                );
                assert!(
                    !trace.allows(other, &verbose, true),
                    "{other} span at {verbose}"
                );
            }
        }
        // A quieter configured level holds for everyone's events, but spans at INFO stay on:
        // the runtime's invocation span carries the request id.
        let warn = LevelRule::new(LevelFilter::WARN);
        assert!(!warn.allows("payonce::service", &Level::INFO, false));
        assert!(!warn.allows("hyper", &Level::INFO, false));
        assert!(warn.allows("hyper", &Level::WARN, false));
        assert!(warn.allows("lambda_runtime::layers::trace", &Level::INFO, true));
        assert_eq!(warn.max_level(), LevelFilter::INFO);
        assert_eq!(trace.max_level(), LevelFilter::TRACE);
    }

    #[test]
    fn the_level_comes_from_lambda_or_rust_log_as_a_plain_name() {
        assert_eq!(parse_level("TRACE"), Some(LevelFilter::TRACE));
        assert_eq!(parse_level(" debug "), Some(LevelFilter::DEBUG));
        assert_eq!(parse_level("WARN"), Some(LevelFilter::WARN));
        assert_eq!(parse_level("FATAL"), Some(LevelFilter::ERROR));
        assert_eq!(parse_level("info,hyper=debug"), None);
    }

    #[test]
    fn each_event_is_one_flat_line_with_the_invocation_s_ids_and_cold_start() {
        // GIVEN the production subscriber at TRACE
        let (captured, _guard) = capture(LevelFilter::TRACE);
        // WHEN the process starts, then serves two invocations, as the Lambda runtime opens them
        tracing::info!(target: "payonce::config", "started");
        for (request_id, trace_id) in [("req-1", Some("Root=1-aaa")), ("req-2", None)] {
            if trace_id.is_none() {
                // The runtime also sets the invocation's trace id in the environment.
                std::env::set_var("_X_AMZN_TRACE_ID", "Root=1-bbb");
            }
            let span = invocation(request_id, trace_id);
            let _entered = span.enter();
            let webhook = tracing::info_span!(target: "payonce::service::webhooks", "webhook", message_id = "m-1");
            let _in_webhook = webhook.enter();
            tracing::error!(
                target: "payonce::service::settle",
                payment_id = "pay_1",
                amount = 3000,
                late = true,
                alarm = "late-duplicate-charge",
                "a charge succeeded twice"
            );
            tracing::trace!(target: "hyper::proto", "a frame");
        }
        // THEN each event is one flat object: fixed keys first, then the span's and event's fields
        let lines = captured.lines();
        assert_eq!(lines.len(), 3, "{lines:#?}");
        let start = &lines[0];
        assert_eq!(start["level"], "INFO");
        assert_eq!(start["message"], "started");
        assert_eq!(
            start["cold_start"], true,
            "start-up is part of the cold start"
        );
        assert!(start.get("function_request_id").is_none());
        let first = &lines[1];
        assert_eq!(first["level"], "ERROR");
        assert_eq!(first["message"], "a charge succeeded twice");
        assert_eq!(first["target"], "payonce::service::settle");
        assert_eq!(first["alarm"], "late-duplicate-charge");
        assert_eq!(
            (first["amount"].as_i64(), first["late"].as_bool()),
            (Some(3000), Some(true))
        );
        assert_eq!(first["message_id"], "m-1", "the enclosing span's fields");
        assert!(first.get("fields").is_none() && first.get("span").is_none());
        assert_eq!(first["function_request_id"], "req-1");
        assert_eq!(first["xray_trace_id"], "Root=1-aaa");
        assert_eq!(first["cold_start"], true);
        let stamp = first["timestamp"].as_str().unwrap();
        assert_eq!(
            (stamp.len(), &stamp[10..11], &stamp[23..]),
            (24, "T", "Z"),
            "{stamp}"
        );
        let keys: Vec<&str> = first
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert!(
            keys.contains(&"timestamp") && !keys.contains(&"requestId"),
            "{keys:?}"
        );
        // AND the second invocation is not a cold start; its trace id, absent from the span, is
        // read from `_X_AMZN_TRACE_ID`
        let second = &lines[2];
        std::env::remove_var("_X_AMZN_TRACE_ID");
        assert_eq!(second["function_request_id"], "req-2");
        assert_eq!(second["xray_trace_id"], "Root=1-bbb");
        assert_eq!(second["cold_start"], false);
        // AND the raw line starts with the fixed keys, in order
        let raw = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        assert!(
            raw.lines().nth(1).unwrap().starts_with(r#"{"timestamp":""#)
                && raw.contains(r#""level":"ERROR","message":"a charge succeeded twice","target":"payonce::service::settle","function_request_id":"req-1","xray_trace_id":"Root=1-aaa","cold_start":true,"message_id":"m-1""#),
            "{raw}"
        );
    }

    #[test]
    fn a_field_named_like_a_fixed_key_is_kept_under_another_name() {
        let (captured, _guard) = capture(LevelFilter::INFO);
        let message = "No such PaymentMethod: 'pm_card_nonexistent'";
        tracing::info!(target: "payonce", %message, level = 3, "the PSP rejected the payment method");
        let line = &captured.lines()[0];
        assert_eq!(line["message"], "the PSP rejected the payment method");
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["field_level"], 3);
        // AND a token in a logged text is written as its prefix and length only
        assert_eq!(
            line["field_message"],
            "No such PaymentMethod: 'pm_…(19 chars)'"
        );
    }

    #[test]
    fn masking_keeps_a_token_s_prefix_and_length_only() {
        let cases = [
            (
                "Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln",
                "Bearer …(41 chars)",
            ),
            (
                "jwt eyJhbGciOiJSUzI1NiJ9.e30.c2ln here",
                "jwt eyJ…(29 chars) here",
            ),
            (
                "key sk_test_abc123, secret whsec_x9",
                "key sk_…(14 chars), secret whsec_…(8 chars)",
            ),
            (
                "tokens tokn_test_5x and skey_test_1 and rk_live_2",
                "tokens tokn_…(12 chars) and skey_…(11 chars) and rk_…(9 chars)",
            ),
            (
                "pay_123 npm_x pm_ alone, ids stay: evt_1 pi_1",
                "pay_123 npm_x pm_ alone, ids stay: evt_1 pi_1",
            ),
            ("(pm_card_visa)", "(pm_…(12 chars))"),
        ];
        for (text, shown) in cases {
            assert_eq!(masked(text).to_string(), shown, "{text}");
            assert_eq!(format!("{:?}", masked(text)), format!("{shown:?}"));
        }
    }
}
