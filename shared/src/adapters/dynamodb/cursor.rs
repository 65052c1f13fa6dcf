//! Paging cursors: a DynamoDB start key as an opaque string, and back.

use crate::idempotency::StoreError;
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;

/// A DynamoDB start key as an opaque cursor (string and number attributes only).
pub(crate) fn encode_cursor(key: &HashMap<String, AttributeValue>) -> String {
    let map: serde_json::Map<String, serde_json::Value> = key
        .iter()
        .filter_map(|(name, value)| match value {
            AttributeValue::S(v) => Some((name.clone(), serde_json::json!({"S": v}))),
            AttributeValue::N(v) => Some((name.clone(), serde_json::json!({"N": v}))),
            _ => None,
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// Reads a cursor made by [`encode_cursor`].
pub(crate) fn decode_cursor(raw: &str) -> Result<HashMap<String, AttributeValue>, StoreError> {
    parse_cursor_object(raw)?
        .into_iter()
        .map(|(name, typed)| {
            let attribute = match (typed["S"].as_str(), typed["N"].as_str()) {
                (Some(v), _) => AttributeValue::S(v.to_owned()),
                (_, Some(v)) => AttributeValue::N(v.to_owned()),
                _ => return Err(corrupt_cursor(format!("attribute {name}"))),
            };
            Ok((name, attribute))
        })
        .collect()
}

/// A cursor as the JSON object it must be.
pub(crate) fn parse_cursor_object(
    raw: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, StoreError> {
    match serde_json::from_str(raw).map_err(|e| corrupt_cursor(e.to_string()))? {
        serde_json::Value::Object(object) => Ok(object),
        _ => Err(corrupt_cursor("not an object".into())),
    }
}

/// The error of a cursor that does not decode.
pub(crate) fn corrupt_cursor(reason: String) -> StoreError {
    StoreError::Corrupt {
        key: "cursor".into(),
        reason,
    }
}
