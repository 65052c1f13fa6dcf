//! The faces' rules, tested through the model as the server and the simulation call it: one
//! module per face, named after it, and the helpers they share.

mod omise;
mod paypal;
mod square;
mod stripe;
mod twoc2p;

use serde_json::Value;

use super::{FakeModel, ModelConfig, ModelEvent, WireAnswer};

/// Some moment in 2027, epoch ms.
const T0: i64 = 1_800_000_000_000;
const HOUR_MS: i64 = 60 * 60 * 1000;

fn model_with(config: ModelConfig) -> FakeModel {
    FakeModel::new(config, 7)
}

fn json(answer: &WireAnswer) -> Value {
    serde_json::from_str(&answer.body).unwrap_or(Value::Null)
}

fn kinds(events: &[ModelEvent]) -> Vec<&str> {
    events.iter().map(|event| event.kind.as_str()).collect()
}
