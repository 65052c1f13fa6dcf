//! [`CapacityMeter`]: what DynamoDB requests cost, for benchmarks and load runs (`scripts/bench`,
//! `payonce-local --count-dynamodb`), without touching the adapters. The interceptor asks
//! DynamoDB for `ReturnConsumedCapacity = INDEXES` on every request it sends, reads the units from
//! every answer (in total, and by table and index), and notes which items each write request
//! targets, by kind, so the cost of each item is visible. No function installs it: their clients
//! ask for no capacity.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    AfterDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextMut,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// What the meter has counted since its last reset.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// (requests, capacity units) by API operation.
    pub by_operation: BTreeMap<String, (u64, f64)>,
    /// Capacity units by table or index (`<table>`, `<table>/<index>`).
    pub by_table: BTreeMap<String, f64>,
    /// Item writes by item kind and how they were written (`payment (transaction)`, …).
    pub writes_by_item: BTreeMap<String, u64>,
}

/// Requests and capacity units, by operation, table and item kind.
#[derive(Debug, Clone, Default)]
pub struct CapacityMeter {
    inner: Arc<Mutex<Counts>>,
}

impl CapacityMeter {
    /// Sets every count to zero.
    pub fn reset(&self) {
        *self.lock() = Counts::default();
    }

    /// Everything counted since the last reset.
    pub fn counts(&self) -> Counts {
        self.lock().clone()
    }

    /// Total (requests, capacity units).
    pub fn total(&self) -> (u64, f64) {
        self.lock()
            .by_operation
            .values()
            .fold((0, 0.0), |(r, c), (r2, c2)| (r + r2, c + c2))
    }

    /// The counts as JSON: `requests`, `capacity_units`, `by_operation` (`{"PutItem":
    /// {"requests", "capacity_units"}}`), `by_table` and `writes_by_item`.
    pub fn to_json(&self) -> Value {
        let counts = self.counts();
        let (requests, units) = self.total();
        serde_json::json!({
            "requests": requests,
            "capacity_units": units,
            "by_operation": counts.by_operation.iter()
                .map(|(k, (n, u))| (k.clone(), serde_json::json!({"requests": n, "capacity_units": u})))
                .collect::<serde_json::Map<_, _>>(),
            "by_table": counts.by_table,
            "writes_by_item": counts.writes_by_item,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The kind of item a partition key names: the prefix of the payments table's keys, of webhook
/// marks and of users' attempt counters, or `record` for an idempotency record
/// (`<scope>#<user>#<key>`).
fn item_kind(pk: &str) -> &'static str {
    match pk.split_once('#').map(|(prefix, _)| prefix) {
        Some("order") => "order",
        Some("payment") => "payment",
        Some("refund") => "refund",
        Some("webhook") => "webhook event mark",
        Some("limit") => "user's attempt counter",
        _ => "idempotency record",
    }
}

fn key_pk(value: &Value) -> Option<&str> {
    value["pk"]["S"].as_str()
}

/// The items a write request targets, with the verb used: (kind, verb).
fn written_items(operation: &str, body: &serde_json::Map<String, Value>) -> Vec<(String, String)> {
    let single = |verb: &str, value: &Value| {
        key_pk(value).map(|pk| (item_kind(pk).to_owned(), verb.to_owned()))
    };
    match operation {
        "PutItem" => single("put", &body["Item"]).into_iter().collect(),
        "UpdateItem" => single("update", &body["Key"]).into_iter().collect(),
        "DeleteItem" => single("delete", &body["Key"]).into_iter().collect(),
        "TransactWriteItems" => body["TransactItems"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| {
                        let (verb, value) = if item["Put"].is_object() {
                            ("put in a transaction", &item["Put"]["Item"])
                        } else if item["Update"].is_object() {
                            ("update in a transaction", &item["Update"]["Key"])
                        } else if item["Delete"].is_object() {
                            ("delete in a transaction", &item["Delete"]["Key"])
                        } else {
                            (
                                "condition check in a transaction",
                                &item["ConditionCheck"]["Key"],
                            )
                        };
                        single(verb, value)
                    })
                    .collect()
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

fn units(value: &Value) -> f64 {
    match value {
        Value::Array(items) => items.iter().map(units).sum(),
        Value::Object(map) => map
            .get("CapacityUnits")
            .and_then(Value::as_f64)
            .unwrap_or(0.0),
        _ => 0.0,
    }
}

fn by_table(consumed: &Value, into: &mut BTreeMap<String, f64>) {
    let entries = match consumed {
        Value::Array(items) => items.iter().collect(),
        Value::Object(_) => vec![consumed],
        _ => Vec::new(),
    };
    for entry in entries {
        let table = entry["TableName"].as_str().unwrap_or("?").to_owned();
        let own = entry["Table"]["CapacityUnits"]
            .as_f64()
            .unwrap_or_else(|| units(entry));
        *into.entry(table.clone()).or_default() += own;
        if let Some(indexes) = entry["GlobalSecondaryIndexes"].as_object() {
            for (index, used) in indexes {
                *into.entry(format!("{table}/{index}")).or_default() += units(used);
            }
        }
    }
}

impl Intercept for CapacityMeter {
    fn name(&self) -> &'static str {
        "payonce.CapacityMeter"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let operation = super::operation_name(cfg);
        self.lock()
            .by_operation
            .entry(operation.clone())
            .or_default()
            .0 += 1;
        let request = context.request_mut();
        let Some(bytes) = request.body().bytes() else {
            return Ok(());
        };
        let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(bytes) else {
            return Ok(());
        };
        {
            let mut counts = self.lock();
            for (kind, verb) in written_items(&operation, &body) {
                *counts
                    .writes_by_item
                    .entry(format!("{kind}: {verb}"))
                    .or_default() += 1;
            }
        }
        body.insert("ReturnConsumedCapacity".into(), "INDEXES".into());
        let new = serde_json::to_vec(&body)?;
        request
            .headers_mut()
            .insert("content-length", new.len().to_string());
        *request.body_mut() = SdkBody::from(new);
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let operation = super::operation_name(cfg);
        let Some(bytes) = context.response().body().bytes() else {
            return Ok(());
        };
        if let Ok(body) = serde_json::from_slice::<Value>(bytes) {
            let mut counts = self.lock();
            counts.by_operation.entry(operation).or_default().1 += units(&body["ConsumedCapacity"]);
            by_table(&body["ConsumedCapacity"], &mut counts.by_table);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn units_add_up_single_and_per_table_entries_and_their_indexes() {
        assert_eq!(units(&json!({"TableName": "t", "CapacityUnits": 2.5})), 2.5);
        assert_eq!(
            units(&json!([{"CapacityUnits": 2.0}, {"CapacityUnits": 4.0}])),
            6.0
        );
        assert_eq!(units(&json!(null)), 0.0);
        let mut tables = BTreeMap::new();
        by_table(
            &json!([{"TableName": "pay", "CapacityUnits": 6.0, "Table": {"CapacityUnits": 4.0},
                     "GlobalSecondaryIndexes": {"inflight": {"CapacityUnits": 2.0}}},
                    {"TableName": "idem", "CapacityUnits": 2.0}]),
            &mut tables,
        );
        assert_eq!(
            tables,
            BTreeMap::from([
                ("idem".to_owned(), 2.0),
                ("pay".to_owned(), 4.0),
                ("pay/inflight".to_owned(), 2.0)
            ])
        );
    }

    #[test]
    fn writes_are_told_apart_by_item_kind_and_how_they_are_written() {
        let body = json!({"TransactItems": [
            {"Put": {"Item": {"pk": {"S": "payments.create#alice#k1"}}}},
            {"Update": {"Key": {"pk": {"S": "order#o1"}}}},
            {"ConditionCheck": {"Key": {"pk": {"S": "payment#p1"}}}},
            {"Update": {"Key": {"pk": {"S": "limit#user#alice#493000"}}}},
        ]});
        let Value::Object(body) = body else {
            unreachable!()
        };
        assert_eq!(
            written_items("TransactWriteItems", &body),
            vec![
                (
                    "idempotency record".to_owned(),
                    "put in a transaction".to_owned()
                ),
                ("order".to_owned(), "update in a transaction".to_owned()),
                (
                    "payment".to_owned(),
                    "condition check in a transaction".to_owned()
                ),
                (
                    "user's attempt counter".to_owned(),
                    "update in a transaction".to_owned()
                ),
            ]
        );
        let put = json!({"Item": {"pk": {"S": "webhook#stripe#evt_1"}}});
        let Value::Object(put) = put else {
            unreachable!()
        };
        assert_eq!(
            written_items("PutItem", &put),
            vec![("webhook event mark".to_owned(), "put".to_owned())]
        );
    }
}
