//! The in-flight index: payments still `processing` and refunds still `pending` carry an
//! `inflight` partition value and a `check_at_ms` sort key, the keys of the sparse, keys-only GSI
//! reconcile reads; an attempt leaves it by dropping `inflight`.
//!
//! The partition value is sharded: `processing#<n>`, `n` a stable hash of the item's id modulo
//! [`INFLIGHT_SHARDS`]. One partition value would funnel every index write through one index
//! partition (about 1,000 write units a second); shards spread them. Reading the index means one
//! Query per shard, merged by check time, so the scan still yields the most overdue first. The
//! unsharded value `processing` (items written before shards) is read too.

use super::attributes::{n, s, string};
use super::schema::{
    payment_pk, refund_pk, CHECK_AT, INFLIGHT, INFLIGHT_PARTITION, INFLIGHT_SHARDS, PK,
};
use super::{backend, is_condition_failure, DynamoPaymentStore};
use crate::domain::is_refund_id;
use crate::idempotency::StoreError;
use crate::ports::InflightScan;
use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::{BTreeMap, HashMap};

pub use super::tables::INFLIGHT_INDEX;

/// Every partition value the scan reads: the shards, and the unsharded value.
fn partitions() -> Vec<String> {
    std::iter::once(INFLIGHT_PARTITION.to_owned())
        .chain((0..INFLIGHT_SHARDS).map(|i| format!("{INFLIGHT_PARTITION}#{i}")))
        .collect()
}

/// Where the scan is in each partition: the start key of its next Query, or `None` once read to
/// the end. A partition absent from the map has not been read yet.
type Positions = BTreeMap<String, Option<HashMap<String, AttributeValue>>>;

/// One entry read from the index.
struct Entry {
    partition: String,
    check_at_ms: i64,
    pk: String,
}

impl Entry {
    fn start_key(&self) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (PK.to_owned(), s(&self.pk)),
            (INFLIGHT.to_owned(), s(&self.partition)),
            (CHECK_AT.to_owned(), n(self.check_at_ms)),
        ])
    }
}

impl DynamoPaymentStore {
    /// Up to `limit` item keys (`payment#…`, `refund#…`) due at `due_at_ms`, most overdue first,
    /// after `cursor`, and the cursor of the rest, if any: one Query per partition not yet read
    /// to its end, merged by check time.
    pub(super) async fn scan_inflight(
        &self,
        due_at_ms: i64,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<(Vec<String>, Option<String>), StoreError> {
        let mut positions = match cursor {
            Some(raw) => decode_positions(&raw)?,
            None => Positions::new(),
        };
        // Each partition's entries in the order the index returned them (by check time; ties in
        // the index's own order, which the start keys follow).
        let mut read: Vec<std::collections::VecDeque<Entry>> = Vec::new();
        // Partitions that hold more due entries than this page read from them.
        let mut more = BTreeMap::new();
        for partition in partitions() {
            let start = match positions.get(&partition) {
                Some(None) => continue,
                Some(Some(key)) => Some(key.clone()),
                None => None,
            };
            let page = self
                .client
                .query()
                .table_name(&self.tables.payments)
                .index_name(INFLIGHT_INDEX)
                .key_condition_expression("#inflight = :partition AND #check_at_ms <= :due")
                .expression_attribute_names("#inflight", INFLIGHT)
                .expression_attribute_names("#check_at_ms", CHECK_AT)
                .expression_attribute_values(":partition", s(&partition))
                .expression_attribute_values(":due", n(due_at_ms))
                .limit(i32::try_from(limit).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| backend("list_inflight", INFLIGHT_INDEX, e))?;
            more.insert(partition.clone(), page.last_evaluated_key().is_some());
            read.push(
                page.items()
                    .iter()
                    .map(|item| Entry {
                        partition: partition.clone(),
                        check_at_ms: super::attributes::number(item, CHECK_AT).unwrap_or(0),
                        pk: string(item, PK).unwrap_or_default(),
                    })
                    .collect(),
            );
        }
        // Merge: the most overdue head first, so what is taken from each partition is a prefix of
        // what it returned.
        let mut entries = Vec::new();
        while entries.len() < limit as usize {
            let next = read
                .iter()
                .enumerate()
                .filter_map(|(i, queue)| queue.front().map(|e| (e.check_at_ms, i)))
                .min();
            let Some((_, i)) = next else { break };
            entries.extend(read[i].pop_front());
        }
        let taken = entries.len();
        entries.extend(read.into_iter().flatten());
        // Each partition goes on after the last entry taken from it (or from where it was, if
        // none was taken); one whose entries were all taken and that has no more is done.
        for (partition, has_more) in &more {
            let last_taken = entries[..taken]
                .iter()
                .rev()
                .find(|e| &e.partition == partition);
            let left = entries[taken..].iter().any(|e| &e.partition == partition);
            if !left && !has_more {
                positions.insert(partition.clone(), None);
            } else if let Some(entry) = last_taken {
                positions.insert(partition.clone(), Some(entry.start_key()));
            }
        }
        let keys = entries
            .into_iter()
            .take(taken)
            .map(|entry| entry.pk)
            .collect();
        let all_done = partitions()
            .iter()
            .all(|p| matches!(positions.get(p), Some(None)));
        Ok((keys, (!all_done).then(|| encode_positions(&positions))))
    }
}

fn encode_positions(positions: &Positions) -> String {
    let map: serde_json::Map<String, serde_json::Value> = positions
        .iter()
        .map(|(partition, key)| {
            let value = match key {
                Some(key) => serde_json::Value::String(super::cursor::encode_cursor(key)),
                None => serde_json::Value::Null,
            };
            (partition.clone(), value)
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}

fn decode_positions(raw: &str) -> Result<Positions, StoreError> {
    use super::cursor::{corrupt_cursor, decode_cursor, parse_cursor_object};
    parse_cursor_object(raw)?
        .into_iter()
        .map(|(partition, key)| {
            let key = match key {
                serde_json::Value::Null => None,
                serde_json::Value::String(raw) => Some(decode_cursor(&raw)?),
                _ => return Err(corrupt_cursor(format!("partition {partition}"))),
            };
            Ok((partition, key))
        })
        .collect()
}

#[async_trait]
impl InflightScan for DynamoPaymentStore {
    async fn list_inflight(
        &self,
        due_at_ms: i64,
        limit: u32,
        cursor: Option<String>,
    ) -> Result<(Vec<String>, Option<String>), StoreError> {
        let (keys, next) = self.scan_inflight(due_at_ms, limit, cursor).await?;
        let ids = keys
            .iter()
            .filter_map(|pk| {
                pk.strip_prefix("payment#")
                    .or_else(|| pk.strip_prefix("refund#"))
                    .map(str::to_owned)
            })
            .collect();
        Ok((ids, next))
    }

    async fn defer_check(&self, payment_id: &str, check_at_ms: i64) -> Result<(), StoreError> {
        let pk = if is_refund_id(payment_id) {
            refund_pk(payment_id)
        } else {
            payment_pk(payment_id)
        };
        let sent = self
            .client
            .update_item()
            .table_name(&self.tables.payments)
            .key(PK, s(&pk))
            .update_expression("SET #check_at_ms = :at")
            // Only while in flight: a settled payment must not re-enter the sparse index.
            .condition_expression("attribute_exists(#inflight)")
            .expression_attribute_names("#check_at_ms", CHECK_AT)
            .expression_attribute_names("#inflight", "inflight")
            .expression_attribute_values(":at", n(check_at_ms))
            .send()
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(error) if is_condition_failure(&error) => Ok(()),
            Err(error) => Err(backend("defer_check", &pk, error)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::schema::inflight_shard;
    use super::*;

    #[test]
    fn shards_are_stable_and_spread() {
        assert_eq!(inflight_shard("pay_0"), inflight_shard("pay_0"));
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..200 {
            let shard = inflight_shard(&format!("pay_{i:032x}"));
            assert!(shard.starts_with("processing#"), "{shard}");
            seen.insert(shard);
        }
        assert_eq!(seen.len(), INFLIGHT_SHARDS as usize);
    }
}
