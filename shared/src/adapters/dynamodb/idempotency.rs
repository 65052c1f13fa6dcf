//! The DynamoDB idempotency store: one conditional request per operation.
//!
//! Item layout (every name goes through ExpressionAttributeNames; `status` is reserved):
//! `pk` S `<scope>#<user>#<key>` · `status` S · `fingerprint` S · `attempt_id` S ·
//! `created_at_ms` N · `request_id` S (the claiming request's, when it has one) ·
//! `lease_token` S and `lease_until_ms` N while in progress ·
//! `result` S once completed · `expires_at` N epoch seconds, the TTL attribute.

use super::attributes::{n, number, s, string, AttributeError, Item};
#[cfg(feature = "payments")]
use super::cursor::{decode_cursor, encode_cursor};
use super::schema::{
    ATTEMPT_ID, CREATED_AT_MS, EXPIRES_AT, FINGERPRINT, LEASE_TOKEN, LEASE_UNTIL_MS, PK,
    REQUEST_ID, RESULT, STATUS,
};
use super::{backend, is_condition_failure};
use crate::adapters::faults::Faults;
use crate::clock::{system_clock, SharedClock};
use crate::idempotency::{
    check_completed_size_named, Claim, ClaimOutcome, CompletedNames, Fingerprint,
    IdempotencyRecord, IdempotencyStore, Lease, LeaseToken, RecordKey, RecordState, RecordStatus,
    StoreError, TakeoverOutcome,
};
#[cfg(feature = "payments")]
use crate::ports::ExpiredSweep;
use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use std::borrow::Cow;
use std::sync::Arc;

/// The variable [`DynamoIdempotencyStore::from_env`] reads the table name from.
pub const TABLE_VARIABLE: &str = "IDEMPOTENCY_TABLE";

/// The names of a record's attributes in the idempotency table, for a table laid out for
/// another tool (Powertools for AWS Lambda calls them `key_attr`, `expiry_attr`,
/// `in_progress_expiry_attr`, `status_attr`, `data_attr` and `validation_key_attr`). The
/// attempt id, creation time and lease token keep their names. The payment functions, whose
/// transactions write records beside orders and payments, use the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyAttributes {
    /// The string partition key (default `pk`).
    pub key: Cow<'static, str>,
    /// The TTL attribute, epoch seconds (default `expires_at`).
    pub expiry: Cow<'static, str>,
    /// The lease's end, epoch milliseconds (default `lease_until_ms`).
    pub in_progress_expiry: Cow<'static, str>,
    /// `IN_PROGRESS` or `COMPLETED` (default `status`).
    pub status: Cow<'static, str>,
    /// The stored result (default `result`).
    pub data: Cow<'static, str>,
    /// The request's fingerprint (default `fingerprint`).
    pub validation: Cow<'static, str>,
}

/// payonce's own layout.
const DEFAULT_ATTRIBUTES: IdempotencyAttributes = IdempotencyAttributes {
    key: Cow::Borrowed(PK),
    expiry: Cow::Borrowed(EXPIRES_AT),
    in_progress_expiry: Cow::Borrowed(LEASE_UNTIL_MS),
    status: Cow::Borrowed(STATUS),
    data: Cow::Borrowed(RESULT),
    validation: Cow::Borrowed(FINGERPRINT),
};

impl Default for IdempotencyAttributes {
    fn default() -> Self {
        DEFAULT_ATTRIBUTES
    }
}

impl IdempotencyAttributes {
    /// The defaults, each replaced by its variable when set: `IDEMPOTENCY_KEY_ATTR`,
    /// `IDEMPOTENCY_EXPIRY_ATTR`, `IDEMPOTENCY_IN_PROGRESS_EXPIRY_ATTR`,
    /// `IDEMPOTENCY_STATUS_ATTR`, `IDEMPOTENCY_DATA_ATTR`, `IDEMPOTENCY_VALIDATION_ATTR`.
    pub fn from_env() -> Self {
        let read = |name: &'static str, default: Cow<'static, str>| {
            crate::env::optional(name).map_or(default, Cow::Owned)
        };
        Self {
            key: read("IDEMPOTENCY_KEY_ATTR", DEFAULT_ATTRIBUTES.key),
            expiry: read("IDEMPOTENCY_EXPIRY_ATTR", DEFAULT_ATTRIBUTES.expiry),
            in_progress_expiry: read(
                "IDEMPOTENCY_IN_PROGRESS_EXPIRY_ATTR",
                DEFAULT_ATTRIBUTES.in_progress_expiry,
            ),
            status: read("IDEMPOTENCY_STATUS_ATTR", DEFAULT_ATTRIBUTES.status),
            data: read("IDEMPOTENCY_DATA_ATTR", DEFAULT_ATTRIBUTES.data),
            validation: read("IDEMPOTENCY_VALIDATION_ATTR", DEFAULT_ATTRIBUTES.validation),
        }
    }
}

/// [`IdempotencyStore`] on a DynamoDB table with a string partition key (`pk`, or the one
/// [`IdempotencyAttributes`] names).
#[derive(Debug, Clone)]
pub struct DynamoIdempotencyStore {
    client: Client,
    table: String,
    names: Arc<IdempotencyAttributes>,
    clock: SharedClock,
    faults: Faults,
}

impl DynamoIdempotencyStore {
    /// The store on `table`, using the system clock.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            names: Arc::new(IdempotencyAttributes::default()),
            clock: system_clock(),
            faults: Faults::none(),
        }
    }

    /// The store on the table named in `IDEMPOTENCY_TABLE`, with the attribute names of
    /// [`IdempotencyAttributes::from_env`].
    pub fn from_env(client: Client) -> Result<Self, crate::env::EnvError> {
        Ok(Self::new(client, crate::env::required(TABLE_VARIABLE)?)
            .with_attributes(IdempotencyAttributes::from_env()))
    }

    /// The same store on a table whose attributes are named `names`.
    pub fn with_attributes(mut self, names: IdempotencyAttributes) -> Self {
        self.names = Arc::new(names);
        self
    }

    /// The attribute names.
    pub fn attributes(&self) -> &IdempotencyAttributes {
        &self.names
    }

    /// The same store reading time from `clock` (tests move a manual clock).
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// The store's fault-injection hook (see [`Faults`]).
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The record as stored, even if expired (TTL deletes up to ~48 h late): for the cleanup
    /// job and diagnostics. Handlers use [`IdempotencyStore::get`].
    pub async fn get_including_expired(
        &self,
        key: &RecordKey,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(&*self.names.key, s(key.as_str()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|error| backend("get", key.as_str(), error))?;
        output
            .item()
            .map(|item| read_record(item, &self.names))
            .transpose()
    }

    fn check_faults(&self, key: &RecordKey) -> Result<(), StoreError> {
        if self.faults.take_conflict() {
            return Err(StoreError::Conflict {
                item: key.to_string(),
            });
        }
        if self.faults.take_backend_failure() {
            return Err(StoreError::Backend {
                operation: "an injected fault",
                source: "the request failed on the way (injected)".into(),
            });
        }
        Ok(())
    }
}

/// Reads an item of payonce's layout back into a record (the payment paths' reads).
#[cfg(feature = "payments")]
pub(crate) fn record_from_item(item: &Item) -> Result<IdempotencyRecord, StoreError> {
    read_record(item, &DEFAULT_ATTRIBUTES)
}

/// Reads an item back into a record, its attributes named `names`.
fn read_record(
    item: &Item,
    names: &IdempotencyAttributes,
) -> Result<IdempotencyRecord, StoreError> {
    let key = string(item, &names.key).unwrap_or_default();
    let corrupt = |reason: AttributeError| StoreError::Corrupt {
        key: key.clone(),
        reason: reason.to_string(),
    };
    let status = string(item, &names.status).map_err(corrupt)?;
    let state = match RecordStatus::parse(&status) {
        Some(RecordStatus::InProgress) => RecordState::InProgress {
            lease: Lease {
                token: LeaseToken::from_stored(string(item, LEASE_TOKEN).map_err(corrupt)?),
                until_ms: number(item, &names.in_progress_expiry).map_err(corrupt)?,
            },
        },
        Some(RecordStatus::Completed) => RecordState::Completed {
            result: string(item, &names.data).map_err(corrupt)?,
        },
        None => return Err(corrupt(AttributeError::unknown(&names.status, status))),
    };
    Ok(IdempotencyRecord {
        key: RecordKey::from_stored(key.clone()),
        state,
        fingerprint: Fingerprint::from_stored(string(item, &names.validation).map_err(corrupt)?),
        attempt_id: string(item, ATTEMPT_ID).map_err(corrupt)?,
        created_at_ms: number(item, CREATED_AT_MS).map_err(corrupt)?,
        expires_at_s: number(item, &names.expiry).map_err(corrupt)?,
        request_id: string(item, REQUEST_ID).ok(),
    })
}

#[async_trait]
impl IdempotencyStore for DynamoIdempotencyStore {
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn claim(&self, claim: &Claim) -> Result<ClaimOutcome, StoreError> {
        self.check_faults(&claim.key)?;
        let now_ms = self.now_ms();
        let record = claim.record(now_ms);
        let sent = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(write_record(&record, &self.names)))
            .condition_expression("attribute_not_exists(#pk) OR #expires_at < :now_s")
            .expression_attribute_names("#pk", &*self.names.key)
            .expression_attribute_names("#expires_at", &*self.names.expiry)
            .expression_attribute_values(":now_s", n(now_ms.div_euclid(1000)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match sent {
            Ok(_) => Ok(ClaimOutcome::Claimed(record)),
            Err(error) if is_condition_failure(&error) => {
                let existing = existing_item(&error, |e| {
                    match e {
                    aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException(c) => c.item(),
                    _ => None,
                }
                });
                match existing {
                    Some(item) => Ok(ClaimOutcome::refused(
                        claim,
                        read_record(item, &self.names)?,
                    )),
                    None => Err(StoreError::Corrupt {
                        key: claim.key.to_string(),
                        reason: "the claim's condition failed but no existing item was returned"
                            .into(),
                    }),
                }
            }
            Err(error) => Err(backend("claim", claim.key.as_str(), error)),
        }
    }

    async fn take_over(
        &self,
        key: &RecordKey,
        seen: &LeaseToken,
        lease: &Lease,
        expires_at_s: i64,
    ) -> Result<TakeoverOutcome, StoreError> {
        self.check_faults(key)?;
        let sent = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(&*self.names.key, s(key.as_str()))
            .update_expression(
                "SET #lease_token = :new_token, #lease_until_ms = :until_ms, #expires_at = :expires_at",
            )
            .expression_attribute_names("#expires_at", &*self.names.expiry)
            .expression_attribute_values(":expires_at", n(expires_at_s))
            .condition_expression("#lease_token = :seen_token AND #status = :in_progress")
            .expression_attribute_names("#lease_token", LEASE_TOKEN)
            .expression_attribute_names("#lease_until_ms", &*self.names.in_progress_expiry)
            .expression_attribute_names("#status", &*self.names.status)
            .expression_attribute_values(":new_token", s(lease.token.as_str()))
            .expression_attribute_values(":until_ms", n(lease.until_ms))
            .expression_attribute_values(":seen_token", s(seen.as_str()))
            .expression_attribute_values(":in_progress", s(RecordStatus::InProgress.as_str()))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match sent {
            Ok(output) => match output.attributes() {
                Some(item) => Ok(TakeoverOutcome::TakenOver(read_record(item, &self.names)?)),
                None => Err(StoreError::Corrupt {
                    key: key.to_string(),
                    reason: "the takeover returned no attributes".into(),
                }),
            },
            Err(error) if is_condition_failure(&error) => {
                let current = existing_item(&error, |e| {
                    match e {
                    aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c) => c.item(),
                    _ => None,
                }
                });
                Ok(TakeoverOutcome::refused(
                    lease,
                    current
                        .map(|item| read_record(item, &self.names))
                        .transpose()?,
                ))
            }
            Err(error) => Err(backend("take_over", key.as_str(), error)),
        }
    }

    async fn complete(
        &self,
        key: &RecordKey,
        lease: &LeaseToken,
        result: &str,
        expires_at_s: i64,
    ) -> Result<(), StoreError> {
        check_completed_size_named(
            key,
            result,
            &CompletedNames {
                key: &self.names.key,
                status: &self.names.status,
                validation: &self.names.validation,
                data: &self.names.data,
                expiry: &self.names.expiry,
            },
        )?;
        self.check_faults(key)?;
        let sent = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(&*self.names.key, s(key.as_str()))
            // The token stays on the completed record: a completion whose answer was lost knows
            // its own write by it when the SDK's retry is refused.
            .update_expression("SET #status = :completed, #result = :result, #expires_at = :expires_at REMOVE #lease_until_ms")
            .condition_expression("#lease_token = :mine AND #status = :in_progress")
            .expression_attribute_names("#status", &*self.names.status)
            .expression_attribute_names("#result", &*self.names.data)
            .expression_attribute_names("#expires_at", &*self.names.expiry)
            .expression_attribute_names("#lease_token", LEASE_TOKEN)
            .expression_attribute_names("#lease_until_ms", &*self.names.in_progress_expiry)
            .expression_attribute_values(":completed", s(RecordStatus::Completed.as_str()))
            .expression_attribute_values(":result", s(result))
            .expression_attribute_values(":expires_at", n(expires_at_s))
            .expression_attribute_values(":mine", s(lease.as_str()))
            .expression_attribute_values(":in_progress", s(RecordStatus::InProgress.as_str()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(error) if is_condition_failure(&error) => {
                let current = existing_item(&error, |e| {
                    match e {
                    aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c) => c.item(),
                    _ => None,
                }
                });
                // Completed under this lease with this result: this completion's earlier try.
                let own = current.is_some_and(|item| {
                    string(item, &self.names.status).ok().as_deref()
                        == Some(RecordStatus::Completed.as_str())
                        && string(item, LEASE_TOKEN).ok().as_deref() == Some(lease.as_str())
                        && string(item, &self.names.data).ok().as_deref() == Some(result)
                });
                if own && !crate::idempotency::own_writes_forgotten() {
                    return Ok(());
                }
                Err(StoreError::LeaseLost { key: key.clone() })
            }
            Err(error) => Err(backend("complete", key.as_str(), error)),
        }
    }

    async fn release(&self, key: &RecordKey, lease: &LeaseToken) -> Result<(), StoreError> {
        self.check_faults(key)?;
        // Handed back, not deleted: the attempt id and fingerprint stay, and the next request
        // takes the attempt over at once. Sent again after a lost answer, it meets its own
        // write (the token is still ours) and succeeds the same way.
        let sent = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(&*self.names.key, s(key.as_str()))
            .update_expression("SET #lease_until_ms = :released")
            .condition_expression("#lease_token = :mine AND #status = :in_progress")
            .expression_attribute_names("#lease_token", LEASE_TOKEN)
            .expression_attribute_names("#status", &*self.names.status)
            .expression_attribute_names("#lease_until_ms", &*self.names.in_progress_expiry)
            .expression_attribute_values(":released", n(Lease::RELEASED_UNTIL_MS))
            .expression_attribute_values(":mine", s(lease.as_str()))
            .expression_attribute_values(":in_progress", s(RecordStatus::InProgress.as_str()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(error) if is_condition_failure(&error) => {
                let current = existing_item(&error, |e| {
                    match e {
                    aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c) => c.item(),
                    _ => None,
                }
                });
                // Gone (expired and deleted by TTL): nothing is left to hand back.
                if current.is_none() && !crate::idempotency::own_writes_forgotten() {
                    return Ok(());
                }
                Err(StoreError::LeaseLost { key: key.clone() })
            }
            Err(error) => Err(backend("release", key.as_str(), error)),
        }
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.check_faults(key)?;
        let record = self.get_including_expired(key).await?;
        let now_ms = self.now_ms();
        Ok(record.filter(|r| !r.is_expired_at(now_ms)))
    }
}

/// The ALL_OLD item DynamoDB returns with a failed condition.
fn existing_item<'a, E, R>(
    error: &'a SdkError<E, R>,
    item: impl Fn(&'a E) -> Option<&'a Item>,
) -> Option<&'a Item> {
    error.as_service_error().and_then(item)
}

/// Writes a record as an item of payonce's layout (the payment paths' transactions).
#[cfg(feature = "payments")]
pub(crate) fn item_from_record(record: &IdempotencyRecord) -> Item {
    write_record(record, &DEFAULT_ATTRIBUTES)
}

/// Writes a record as an item, its attributes named `names`.
fn write_record(record: &IdempotencyRecord, names: &IdempotencyAttributes) -> Item {
    let mut item = Item::with_capacity(8);
    item.insert(names.key.to_string(), s(record.key.as_str()));
    item.insert(names.status.to_string(), s(record.status().as_str()));
    item.insert(names.validation.to_string(), s(record.fingerprint.as_str()));
    item.insert(ATTEMPT_ID.into(), s(&record.attempt_id));
    item.insert(CREATED_AT_MS.into(), n(record.created_at_ms));
    item.insert(names.expiry.to_string(), n(record.expires_at_s));
    if let Some(request_id) = &record.request_id {
        item.insert(REQUEST_ID.into(), s(request_id));
    }
    match &record.state {
        RecordState::InProgress { lease } => {
            item.insert(LEASE_TOKEN.into(), s(lease.token.as_str()));
            item.insert(names.in_progress_expiry.to_string(), n(lease.until_ms));
        }
        RecordState::Completed { result } => {
            item.insert(names.data.to_string(), s(result));
        }
    }
    item
}

/// Key of the cleanup job's checkpoint item (it has no `expires_at`, so it is never swept).
#[cfg(feature = "payments")]
const CHECKPOINT_PK: &str = "cleanup#checkpoint";

#[cfg(feature = "payments")]
#[async_trait]
impl ExpiredSweep for DynamoIdempotencyStore {
    async fn scan_expired(
        &self,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<(Vec<String>, Option<String>), StoreError> {
        let start = cursor.as_deref().map(decode_cursor).transpose()?;
        let page = self
            .client
            .scan()
            .table_name(&self.table)
            .filter_expression("#expires_at < :now_s")
            .projection_expression("#pk")
            .expression_attribute_names("#expires_at", EXPIRES_AT)
            .expression_attribute_names("#pk", PK)
            .expression_attribute_values(":now_s", n(self.clock.now_s()))
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| backend("scan_expired", &self.table, e))?;
        let keys = page
            .items()
            .iter()
            .filter_map(|item| string(item, PK).ok())
            .collect();
        Ok((keys, page.last_evaluated_key().map(encode_cursor)))
    }

    async fn delete_expired(&self, key: &str) -> Result<bool, StoreError> {
        let now_ms = self.clock.now_ms();
        let sent = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(PK, s(key))
            .condition_expression("#expires_at < :now_s AND (attribute_not_exists(#lease_until_ms) OR #lease_until_ms < :now_ms)")
            .expression_attribute_names("#expires_at", EXPIRES_AT)
            .expression_attribute_names("#lease_until_ms", LEASE_UNTIL_MS)
            .expression_attribute_values(":now_s", n(now_ms.div_euclid(1000)))
            .expression_attribute_values(":now_ms", n(now_ms))
            .send()
            .await;
        match sent {
            Ok(_) => Ok(true),
            Err(error) if is_condition_failure(&error) => Ok(false),
            Err(error) => Err(backend("delete_expired", key, error)),
        }
    }

    async fn load_checkpoint(&self) -> Result<Option<String>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(PK, s(CHECKPOINT_PK))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| backend("load_checkpoint", CHECKPOINT_PK, e))?;
        Ok(output.item().and_then(|item| string(item, "cursor").ok()))
    }

    async fn save_checkpoint(&self, cursor: Option<&str>) -> Result<(), StoreError> {
        match cursor {
            Some(cursor) => self
                .client
                .put_item()
                .table_name(&self.table)
                .item(PK, s(CHECKPOINT_PK))
                .item("cursor", s(cursor))
                .item("saved_at_ms", n(self.clock.now_ms()))
                .send()
                .await
                .map(|_| ())
                .map_err(|e| backend("save_checkpoint", CHECKPOINT_PK, e)),
            None => self
                .client
                .delete_item()
                .table_name(&self.table)
                .key(PK, s(CHECKPOINT_PK))
                .send()
                .await
                .map(|_| ())
                .map_err(|e| backend("save_checkpoint", CHECKPOINT_PK, e)),
        }
    }
}
