//! Reading typed values out of a DynamoDB item, with errors that name the attribute.

use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;

/// A DynamoDB item.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// The string attribute `name`, or a description of what is wrong.
pub(crate) fn string(item: &Item, name: &str) -> Result<String, String> {
    match item.get(name) {
        Some(AttributeValue::S(value)) => Ok(value.clone()),
        Some(_) => Err(format!("attribute {name} is not a string")),
        None => Err(format!("attribute {name} is missing")),
    }
}

/// The number attribute `name` as an i64, or a description of what is wrong.
pub(crate) fn number(item: &Item, name: &str) -> Result<i64, String> {
    match item.get(name) {
        Some(AttributeValue::N(value)) => value
            .parse()
            .map_err(|_| format!("attribute {name} is not an integer: {value}")),
        Some(_) => Err(format!("attribute {name} is not a number")),
        None => Err(format!("attribute {name} is missing")),
    }
}

/// A string attribute value.
pub(crate) fn s(value: impl Into<String>) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// A number attribute value.
pub(crate) fn n(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}
