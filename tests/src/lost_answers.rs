//! Loses DynamoDB's answer to a write that applied, as a dropped connection would: the SDK
//! sees a 500 in its place and sends the request again (a transaction under the same client
//! request token, so DynamoDB answers it as done), and gives up after its last try.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeDeserializationInterceptorContextMut;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::ConfigBag;
use std::sync::{Arc, Mutex};

/// An SDK interceptor that, once armed for an operation, turns the next successful answer to it
/// into DynamoDB's retryable `InternalServerError`. Unarmed, it changes nothing.
#[derive(Debug, Clone, Default)]
pub struct LostAnswers {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    armed: Vec<String>,
    lost: Vec<String>,
}

impl LostAnswers {
    /// Loses the answers of the next `times` requests of `operation` (`TransactWriteItems`,
    /// `UpdateItem`, ...) that succeed.
    pub fn lose_next(&self, operation: &str, times: usize) {
        let mut state = self.lock();
        for _ in 0..times {
            state.armed.push(operation.to_owned());
        }
    }

    /// The operations whose answers were lost so far.
    pub fn lost(&self) -> Vec<String> {
        self.lock().lost.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Intercept for LostAnswers {
    fn name(&self) -> &'static str {
        "payonce-tests.LostAnswers"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let operation = cfg
            .load::<Metadata>()
            .map_or("unknown", |m| m.name())
            .to_owned();
        let response = context.response_mut();
        if response.status().as_u16() != 200 {
            return Ok(());
        }
        let mut state = self.lock();
        let Some(at) = state.armed.iter().position(|armed| *armed == operation) else {
            return Ok(());
        };
        state.armed.remove(at);
        state.lost.push(operation);
        *response.status_mut() = 500.try_into()?;
        response.headers_mut().remove("x-amz-crc32");
        *response.body_mut() = SdkBody::from(
            r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"the answer was lost on the way"}"#,
        );
        Ok(())
    }
}
