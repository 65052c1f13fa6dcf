//! Reading typed values out of a DynamoDB item, with errors that name the attribute.

use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;

/// A DynamoDB item.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// Why an attribute of a stored item cannot be read (a store reports it as a corrupt item).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AttributeError {
    /// The item lacks it.
    #[error("attribute {0} is missing")]
    Missing(String),
    /// It has another type.
    #[error("attribute {name} is not {expected}")]
    WrongType {
        /// The attribute.
        name: String,
        /// What it must be ("a string", "a number").
        expected: &'static str,
    },
    /// A number that is not an i64.
    #[error("attribute {name} is not an integer: {value}")]
    NotAnInteger {
        /// The attribute.
        name: String,
        /// What it holds.
        value: String,
    },
    /// A value none of the attribute's known values (a status, a currency...).
    #[error("attribute {name} holds an unknown value: {value}")]
    Unknown {
        /// The attribute.
        name: String,
        /// What it holds.
        value: String,
    },
    /// A value that does not parse (a JSON attribute).
    #[cfg(feature = "payments")]
    #[error("attribute {name} does not parse: {reason}")]
    Unreadable {
        /// The attribute.
        name: String,
        /// Why.
        reason: String,
    },
}

impl AttributeError {
    /// `name` holds `value`, which it may not.
    pub(crate) fn unknown(name: &str, value: impl Into<String>) -> Self {
        Self::Unknown {
            name: name.to_owned(),
            value: value.into(),
        }
    }
}

/// The string attribute `name`.
pub(crate) fn string(item: &Item, name: &str) -> Result<String, AttributeError> {
    match item.get(name) {
        Some(AttributeValue::S(value)) => Ok(value.clone()),
        Some(_) => Err(AttributeError::WrongType {
            name: name.to_owned(),
            expected: "a string",
        }),
        None => Err(AttributeError::Missing(name.to_owned())),
    }
}

/// The number attribute `name` as an i64.
pub(crate) fn number(item: &Item, name: &str) -> Result<i64, AttributeError> {
    match item.get(name) {
        Some(AttributeValue::N(value)) => value.parse().map_err(|_| AttributeError::NotAnInteger {
            name: name.to_owned(),
            value: value.clone(),
        }),
        Some(_) => Err(AttributeError::WrongType {
            name: name.to_owned(),
            expected: "a number",
        }),
        None => Err(AttributeError::Missing(name.to_owned())),
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
