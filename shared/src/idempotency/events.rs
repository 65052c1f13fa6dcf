//! Idempotency for `lambda_runtime` event handlers (SQS, EventBridge, direct invocations): the
//! key is taken from the event, as Powertools' `event_key_jmespath` does, here with a JSON
//! Pointer (RFC 6901) or a function.
//!
//! ```no_run
//! use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
//! use lambda_runtime::{service_fn, Error, LambdaEvent};
//! use payonce::adapters::dynamodb::DynamoIdempotencyStore;
//! use payonce::idempotency::{Idempotency, IdempotencyConfig, IdempotentEvents};
//! use serde_json::Value;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Error> {
//!     let aws = aws_config::load_from_env().await;
//!     let store = DynamoIdempotencyStore::from_env(aws_sdk_dynamodb::Client::new(&aws))?;
//!     // One shipment per order, however often SQS delivers the message.
//!     let events = IdempotentEvents::new(
//!         Idempotency::new(store, IdempotencyConfig::from_env()?),
//!         "orders.ship",
//!         "/body/order_id",
//!     );
//!     let events = &events;
//!     lambda_runtime::run(service_fn(|event: LambdaEvent<SqsEvent>| async move {
//!         Ok::<SqsBatchResponse, Error>(
//!             events
//!                 .sqs_batch(event, |record: Value| async move {
//!                     // ship record["body"]["order_id"] …
//!                     Ok::<_, Error>(serde_json::json!({"shipped": true}))
//!                 })
//!                 .await,
//!         )
//!     }))
//!     .await
//! }
//! ```
//!
//! Semantics, per event (or per SQS record):
//! - the key is the value at the pointer (a string, a number or any JSON), hashed, so any
//!   business id works; records of different scopes never meet;
//! - the first delivery runs the work and stores its result; a redelivery, from any instance,
//!   returns the stored result without running it;
//! - a delivery while the first still runs is an error (the runtime retries the event; an SQS
//!   record is reported as a batch item failure, so SQS redelivers only it);
//! - without [`payload_validation`](IdempotentEvents::payload_validation) two events with the
//!   same key are the same event; with it, one whose validated part differs is refused
//!   ([`EventError::Mismatch`]);
//! - a missing key is an error ([`EventError::MissingKey`]) unless
//!   [`raise_on_missing_key`](IdempotentEvents::raise_on_missing_key) is off, which runs the
//!   work without idempotency; `null`, `""`, `[]`, `{}` and arrays or objects holding only
//!   such values are missing keys, not keys (as in Powertools);
//! - when the work fails, nothing is stored and the next delivery runs it again, under the same
//!   attempt id (the lease is handed back, the record kept);
//! - a result too large to store completes the record without it: a redelivery does not run the
//!   work again ([`EventError::ResultTooLarge`], which the SQS batch methods count as handled);
//! - for SQS, [`payload_validation("")`](IdempotentEvents::payload_validation) validates the
//!   message body, not the record (whose receipt handle and receive count change with every
//!   delivery);
//! - a FIFO queue needs [`sqs_fifo_batch`](IdempotentEvents::sqs_fifo_batch): after a failed
//!   message it runs none of the later ones (of its group, or of the batch), so the order of a
//!   message group is kept.

use super::{
    Fingerprint, Idempotency, IdempotencyKey, IdempotencyStore, Outcome, RunError, RunRequest,
};
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::future::Future;
use std::time::Duration;

/// Finds an event's key: `None` when the event has none.
pub type EventKeyFn = dyn Fn(&Value) -> Option<Value> + Send + Sync;

/// The "user" part of event record keys: events carry no caller identity.
const EVENT_IDENTITY: &str = "event";

/// Why an event was not handled.
#[derive(Debug, thiserror::Error)]
pub enum EventError<E> {
    /// The event has nothing at the key's pointer.
    #[error("the event has no idempotency key")]
    MissingKey,
    /// Another delivery of the event is being processed; retry after `retry_after`.
    #[error("the event is already being processed; retry in {retry_after:?}")]
    InProgress {
        /// When the other delivery's lease lapses.
        retry_after: Duration,
    },
    /// An event with the same key but another validated payload was handled already.
    #[error("an event with this key and another payload was handled already")]
    Mismatch,
    /// The work failed; nothing was stored, and the lease was handed back, so the next delivery
    /// runs it again under the same attempt id.
    #[error("the event's work failed")]
    Work(#[source] E),
    /// The event was handled before, but its result was too large to store: the work is not
    /// run again, and there is no result to return. The SQS batch methods count the record as
    /// handled.
    #[error("the event was handled before; its result ({size_bytes} bytes) was too large to keep")]
    ResultTooLarge {
        /// The size the result's record would have had.
        size_bytes: usize,
    },
    /// A message of a FIFO queue that was not run because an earlier message (of its group, or
    /// of the batch) failed: it is reported so SQS delivers it again, after that one.
    #[error("not run: an earlier message of its FIFO group failed")]
    SkippedAfterFailure,
    /// The idempotency table failed, or a stored result could not be read or written.
    #[error("the idempotency record could not be used")]
    Store(#[source] RunError<std::convert::Infallible>),
}

/// Idempotency for event handlers (see the [module](self) docs).
pub struct IdempotentEvents<S> {
    idempotency: Idempotency<S>,
    scope: String,
    key: Box<EventKeyFn>,
    validation: Option<String>,
    raise_on_missing_key: bool,
    fallback_timeout: Duration,
    skip_group_on_error: bool,
}

/// Whether a key's value names nothing: `null`, `""`, or an array or object of only such values
/// (so `[]` and `{}` too). `0`, `false` and `"0"` are keys.
fn is_missing_key(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(text) => text.is_empty(),
        Value::Array(items) => items.iter().all(is_missing_key),
        Value::Object(fields) => fields.values().all(is_missing_key),
        Value::Bool(_) | Value::Number(_) => false,
    }
}

impl<S: IdempotencyStore> IdempotentEvents<S> {
    /// Events of the operation `scope` (a stable name without `#`), keyed by the value at
    /// `event_key` (a JSON Pointer such as `/detail/order_id`; for SQS records, a JSON body is
    /// parsed first, so `/body/order_id` reaches into it).
    ///
    /// # Panics
    /// If `scope` is empty or holds `#`.
    pub fn new(
        idempotency: Idempotency<S>,
        scope: impl Into<String>,
        event_key: impl Into<String>,
    ) -> Self {
        let scope = scope.into();
        assert!(
            !scope.is_empty() && !scope.contains('#'),
            "an idempotency scope is a non-empty name without '#'"
        );
        let fallback_timeout = Duration::from_secs(30);
        let pointer = event_key.into();
        Self {
            idempotency,
            scope,
            key: Box::new(move |event| event.pointer(&pointer).cloned()),
            validation: None,
            raise_on_missing_key: true,
            fallback_timeout,
            skip_group_on_error: false,
        }
    }

    /// Finds the key with `key` instead of a pointer (several fields, a normalised id…).
    pub fn event_key_with(
        mut self,
        key: impl Fn(&Value) -> Option<Value> + Send + Sync + 'static,
    ) -> Self {
        self.key = Box::new(key);
        self
    }

    /// Refuses an event whose part at `pointer` differs from the first one handled under its
    /// key (Powertools' `payload_validation_jmespath`); `""` validates the whole event, and for
    /// an SQS record its body.
    pub fn payload_validation(mut self, pointer: impl Into<String>) -> Self {
        self.validation = Some(pointer.into());
        self
    }

    /// Whether an event without a key is an error (the default) or runs without idempotency.
    pub fn raise_on_missing_key(mut self, raise: bool) -> Self {
        self.raise_on_missing_key = raise;
        self
    }

    /// The lease when the invocation carries no deadline (local runs): the function's timeout.
    ///
    /// # Panics
    /// If the configuration's retention is shorter than a lease of `timeout`.
    pub fn fallback_timeout(mut self, timeout: Duration) -> Self {
        if let Err(error) = self.idempotency.config().check_timeout(timeout) {
            panic!("{error}");
        }
        self.fallback_timeout = timeout;
        self
    }

    /// For [`sqs_fifo_batch`](Self::sqs_fifo_batch): after a failed message, skip only the later
    /// messages of its message group and go on with the others (Powertools'
    /// `skip_group_on_error`), instead of skipping the rest of the batch (the default, as AWS
    /// documents for FIFO event sources).
    pub fn skip_group_on_error(mut self, skip_group_only: bool) -> Self {
        self.skip_group_on_error = skip_group_only;
        self
    }

    /// The underlying idempotency layer.
    pub fn idempotency(&self) -> &Idempotency<S> {
        &self.idempotency
    }

    /// Runs `work` on `event` at most once per key; a redelivery gets the stored result.
    /// `deadline_ms` is the invocation's deadline (epoch ms; [`LambdaEvent`]'s context has it).
    pub async fn run<T, E, F, Fut>(
        &self,
        event: Value,
        deadline_ms: Option<i64>,
        work: F,
    ) -> Result<T, EventError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(Value) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.run_validating(event, deadline_ms, "", work).await
    }

    /// [`run`](Self::run), with `whole` the pointer that `payload_validation("")` stands for.
    async fn run_validating<T, E, F, Fut>(
        &self,
        event: Value,
        deadline_ms: Option<i64>,
        whole: &str,
        work: F,
    ) -> Result<T, EventError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce(Value) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let Some(key_value) = (self.key)(&event).filter(|value| !is_missing_key(value)) else {
            if self.raise_on_missing_key {
                return Err(EventError::MissingKey);
            }
            return work(event).await.map_err(EventError::Work);
        };
        // Hashed: any JSON value is a key, and the stored key never holds business data.
        let digest = Fingerprint::of_value(&key_value);
        let key = IdempotencyKey::parse(digest.as_str()).expect("a hex digest is a valid key");
        let fingerprint = match &self.validation {
            None => digest.clone(),
            Some(pointer) => {
                let pointer = if pointer.is_empty() { whole } else { pointer };
                Fingerprint::of_value(event.pointer(pointer).unwrap_or(&Value::Null))
            }
        };
        let now_ms = self.idempotency.store().now_ms();
        let fallback = i64::try_from(self.fallback_timeout.as_millis()).unwrap_or(i64::MAX);
        let deadline_ms = deadline_ms
            .filter(|d| *d > now_ms)
            .unwrap_or(now_ms + fallback);
        let outcome = self
            .idempotency
            .run(
                RunRequest {
                    scope: &self.scope,
                    user: EVENT_IDENTITY,
                    key: &key,
                    fingerprint,
                    deadline_ms,
                },
                |_attempt| work(event),
            )
            .await;
        match outcome {
            Ok(Outcome::Fresh(value) | Outcome::Replayed(value)) => Ok(value),
            Ok(Outcome::InProgress { retry_after }) => Err(EventError::InProgress { retry_after }),
            Ok(Outcome::Mismatch) => Err(EventError::Mismatch),
            Ok(Outcome::TooLargeToReplay { size_bytes }) => {
                Err(EventError::ResultTooLarge { size_bytes })
            }
            Err(RunError::Work(error)) => Err(EventError::Work(error)),
            Err(RunError::Store(error)) => Err(EventError::Store(RunError::Store(error))),
            Err(RunError::UnreadableResult { key, source }) => {
                Err(EventError::Store(RunError::UnreadableResult {
                    key,
                    source,
                }))
            }
            Err(RunError::UnserialisableResult(error)) => {
                Err(EventError::Store(RunError::UnserialisableResult(error)))
            }
        }
    }

    /// Runs `work` once per key for a whole invocation: `Ok` for a first or repeated delivery,
    /// `Err` otherwise, so the runtime reports the invocation failed and the event source retries.
    /// [`EventError::ResultTooLarge`] is the exception: the event was handled before, so answer
    /// it as a success (there is no stored result to return), or the source retries it to no end.
    pub async fn handle<In, T, E, F, Fut>(
        &self,
        event: LambdaEvent<In>,
        work: F,
    ) -> Result<T, EventError<E>>
    where
        In: Serialize,
        T: Serialize + DeserializeOwned,
        F: FnOnce(Value) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let deadline = i64::try_from(event.context.deadline).ok();
        let payload = serde_json::to_value(&event.payload)
            .map_err(|e| EventError::Store(RunError::UnserialisableResult(e)))?;
        self.run(payload, deadline, work).await
    }

    /// Runs `work` once per key for each record of an SQS batch, in order, and reports the
    /// records that failed, are in progress elsewhere or mismatch as batch item failures
    /// (the event source mapping needs `FunctionResponseTypes: ReportBatchItemFailures`), so
    /// SQS deletes the others and redelivers only those. `work` gets the record as JSON, its
    /// `body` parsed when it is JSON.
    pub async fn sqs_batch<T, E, F, Fut>(
        &self,
        event: LambdaEvent<SqsEvent>,
        work: F,
    ) -> SqsBatchResponse
    where
        T: Serialize + DeserializeOwned,
        E: std::fmt::Display,
        F: Fn(Value) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let deadline = i64::try_from(event.context.deadline).ok();
        let mut response = SqsBatchResponse::default();
        for record in event.payload.records {
            let outcome = self.sqs_record(&record, deadline, &work).await;
            self.report(&mut response, &record, outcome);
        }
        response
    }

    /// [`sqs_batch`](Self::sqs_batch) for a FIFO queue, whose order must hold: after a message
    /// fails (or is in progress elsewhere, or mismatches), the later messages are not run but
    /// reported as failures too, so SQS delivers them again after it — all of the batch's later
    /// messages, or only those of the failed message's group with
    /// [`skip_group_on_error`](Self::skip_group_on_error).
    pub async fn sqs_fifo_batch<T, E, F, Fut>(
        &self,
        event: LambdaEvent<SqsEvent>,
        work: F,
    ) -> SqsBatchResponse
    where
        T: Serialize + DeserializeOwned,
        E: std::fmt::Display,
        F: Fn(Value) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let deadline = i64::try_from(event.context.deadline).ok();
        let mut response = SqsBatchResponse::default();
        let mut failed_groups: Vec<Option<String>> = Vec::new();
        for record in event.payload.records {
            let group = record.attributes.get("MessageGroupId").cloned();
            // A message without a group could belong to any: it waits for every failure, and
            // its own failure holds every later message back.
            let blocked = match &group {
                Some(_) if self.skip_group_on_error => {
                    failed_groups.contains(&group) || failed_groups.contains(&None)
                }
                _ => !failed_groups.is_empty(),
            };
            let outcome = if blocked {
                Err(EventError::SkippedAfterFailure)
            } else {
                self.sqs_record(&record, deadline, &work).await
            };
            if self.report(&mut response, &record, outcome) {
                failed_groups.push(group);
            }
        }
        response
    }

    async fn sqs_record<T, E, F, Fut>(
        &self,
        record: &SqsMessage,
        deadline: Option<i64>,
        work: &F,
    ) -> Result<(), EventError<E>>
    where
        T: Serialize + DeserializeOwned,
        F: Fn(Value) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        match self
            .run_validating(sqs_record_json(record), deadline, "/body", work)
            .await
        {
            // Handled before: nothing to return, nothing to run again.
            Ok(_) | Err(EventError::ResultTooLarge { .. }) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Adds `record` to the batch failures when `outcome` failed; says whether it did.
    fn report<E: std::fmt::Display>(
        &self,
        response: &mut SqsBatchResponse,
        record: &SqsMessage,
        outcome: Result<(), EventError<E>>,
    ) -> bool {
        let Err(error) = outcome else {
            return false;
        };
        let id = record.message_id.clone().unwrap_or_default();
        tracing::warn!(message_id = %id, scope = %self.scope, error = %error, cause = %cause(&error), "SQS record not handled; SQS redelivers it");
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = id;
        response.batch_item_failures.push(failure);
        true
    }
}

fn cause<E: std::fmt::Display>(error: &EventError<E>) -> String {
    match error {
        EventError::Work(e) => e.to_string(),
        EventError::Store(e) => crate::error_chain(e),
        _ => String::new(),
    }
}

/// An SQS record as JSON, with a JSON `body` parsed (as Powertools' `powertools_json(body)`).
pub fn sqs_record_json(record: &SqsMessage) -> Value {
    let mut value = serde_json::to_value(record).unwrap_or(Value::Null);
    if let Some(body) = record.body.as_deref() {
        if let Ok(parsed) = serde_json::from_str::<Value>(body) {
            value["body"] = parsed;
        }
    }
    value
}
