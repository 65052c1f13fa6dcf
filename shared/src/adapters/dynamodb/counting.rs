//! Counts the requests an SDK client sends, per operation: the request budgets (see docs/benchmarks.md)
//! are asserted with it, and the benchmarks report it.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// An SDK interceptor counting every request put on the wire (retries included), by operation.
///
/// Register it with `aws_sdk_dynamodb::config::Builder::interceptor(counter.clone())`.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl RequestCounter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requests sent so far, by operation name (`PutItem`, `TransactWriteItems`, ...).
    pub fn by_operation(&self) -> BTreeMap<String, u64> {
        self.lock().clone()
    }

    /// All requests sent so far.
    pub fn total(&self) -> u64 {
        self.lock().values().sum()
    }

    /// Sets every count back to zero.
    pub fn reset(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u64>> {
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "payonce.RequestCounter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        *self.lock().entry(super::operation_name(cfg)).or_insert(0) += 1;
        Ok(())
    }
}
