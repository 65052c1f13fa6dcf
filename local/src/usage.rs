//! `--count-dynamodb`: counts the sandbox's DynamoDB requests and the capacity DynamoDB reports
//! for them, for load runs (`scripts/load`). An SDK interceptor on the sandbox's own client asks
//! for `ReturnConsumedCapacity = TOTAL` on every request and adds up the units of every answer;
//! `GET /_sandbox/dynamodb-usage` shows the totals by operation. Nothing of it exists in a Lambda:
//! the functions build their clients without it. (The same interceptor as `bench/src/capacity.rs`;
//! the sandbox is a binary crate the bench cannot share code with.)

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    AfterDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextMut,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Requests and capacity units by DynamoDB operation, since the sandbox started.
#[derive(Debug, Clone, Default)]
pub struct DynamoUsage {
    inner: Arc<Mutex<BTreeMap<String, (u64, f64)>>>,
}

impl DynamoUsage {
    /// `{"requests": n, "capacity_units": x, "by_operation": {"PutItem": {"requests", "capacity_units"}}}`.
    pub fn to_json(&self) -> Value {
        let counts = self.lock().clone();
        let (requests, units) = counts
            .values()
            .fold((0, 0.0), |(r, c), (r2, c2)| (r + r2, c + c2));
        let by_operation: serde_json::Map<String, Value> = counts
            .into_iter()
            .map(|(operation, (r, c))| (operation, json!({"requests": r, "capacity_units": c})))
            .collect();
        json!({"requests": requests, "capacity_units": units, "by_operation": by_operation})
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (u64, f64)>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn operation(cfg: &ConfigBag) -> String {
        cfg.load::<Metadata>()
            .map_or_else(String::new, |m| m.name().to_owned())
    }
}

/// The capacity units of a `ConsumedCapacity` value: one object, or a list (batch and
/// transaction operations report one entry per table).
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

impl Intercept for DynamoUsage {
    fn name(&self) -> &'static str {
        "payonce-local.DynamoUsage"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.lock().entry(Self::operation(cfg)).or_default().0 += 1;
        let request = context.request_mut();
        let Some(bytes) = request.body().bytes() else {
            return Ok(());
        };
        let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(bytes) else {
            return Ok(());
        };
        body.insert("ReturnConsumedCapacity".into(), "TOTAL".into());
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
        let Some(bytes) = context.response().body().bytes() else {
            return Ok(());
        };
        if let Ok(body) = serde_json::from_slice::<Value>(bytes) {
            let consumed = units(&body["ConsumedCapacity"]);
            self.lock().entry(Self::operation(cfg)).or_default().1 += consumed;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::units;
    use serde_json::json;

    #[test]
    fn units_add_up_single_and_per_table_entries() {
        assert_eq!(units(&json!({"TableName": "t", "CapacityUnits": 2.5})), 2.5);
        assert_eq!(
            units(&json!([{"CapacityUnits": 2.0}, {"CapacityUnits": 4.0}])),
            6.0
        );
        assert_eq!(units(&json!(null)), 0.0);
    }
}
