//! Counts requests and consumed capacity per operation, without touching the adapters: the
//! interceptor asks DynamoDB for `ReturnConsumedCapacity = TOTAL` on every request it sends,
//! and reads the units from every answer.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::{
    AfterDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextMut,
};
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Requests and capacity units, by operation.
#[derive(Debug, Clone, Default)]
pub struct CapacityMeter {
    inner: Arc<Mutex<BTreeMap<String, (u64, f64)>>>,
}

impl CapacityMeter {
    /// Sets every count to zero.
    pub fn reset(&self) {
        self.lock().clear();
    }

    /// (requests, capacity units) by operation.
    pub fn by_operation(&self) -> BTreeMap<String, (u64, f64)> {
        self.lock().clone()
    }

    /// Total (requests, capacity units).
    pub fn total(&self) -> (u64, f64) {
        self.lock()
            .values()
            .fold((0, 0.0), |(r, c), (r2, c2)| (r + r2, c + c2))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (u64, f64)>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn units(value: &serde_json::Value) -> f64 {
    match value {
        serde_json::Value::Array(items) => items.iter().map(units).sum(),
        serde_json::Value::Object(map) => map
            .get("CapacityUnits")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0),
        _ => 0.0,
    }
}

impl Intercept for CapacityMeter {
    fn name(&self) -> &'static str {
        "payonce-bench.CapacityMeter"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let operation = cfg
            .load::<Metadata>()
            .map_or_else(String::new, |m| m.name().to_owned());
        self.lock().entry(operation).or_default().0 += 1;
        let request = context.request_mut();
        let Some(bytes) = request.body().bytes() else {
            return Ok(());
        };
        let Ok(serde_json::Value::Object(mut body)) =
            serde_json::from_slice::<serde_json::Value>(bytes)
        else {
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
        let operation = cfg
            .load::<Metadata>()
            .map_or_else(String::new, |m| m.name().to_owned());
        let Some(bytes) = context.response().body().bytes() else {
            return Ok(());
        };
        if let Ok(body) = serde_json::from_slice::<serde_json::Value>(bytes) {
            self.lock().entry(operation).or_default().1 += units(&body["ConsumedCapacity"]);
        }
        Ok(())
    }
}
