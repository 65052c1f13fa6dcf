//! Building the requests of a transaction: expression attribute names and values, and the
//! conditional `Update` and `Put` items every store's transactions are made of.

use super::attributes::{s, Item};
use super::schema::PK;
use crate::idempotency::StoreError;
use aws_sdk_dynamodb::types::{
    AttributeValue, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use std::collections::HashMap;

pub(super) fn build_error(error: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Backend {
        operation: "build request",
        source: Box::new(error),
    }
}

/// Expression attribute names for every attribute these expressions use.
pub(super) fn names(pairs: &[&str]) -> Option<HashMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|name| (format!("#{name}"), (*name).to_owned()))
            .collect(),
    )
}

pub(super) fn values(
    pairs: Vec<(&str, AttributeValue)>,
) -> Option<HashMap<String, AttributeValue>> {
    Some(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

pub(super) fn update_item(
    table: &str,
    pk: &str,
    update: &str,
    condition: &str,
    attribute_names: &[&str],
    attribute_values: Vec<(&str, AttributeValue)>,
) -> Result<TransactWriteItem, StoreError> {
    let update = Update::builder()
        .table_name(table)
        .key(PK, s(pk))
        .update_expression(update)
        .condition_expression(condition)
        .set_expression_attribute_names(names(attribute_names))
        .set_expression_attribute_values(values(attribute_values))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(build_error)?;
    Ok(TransactWriteItem::builder().update(update).build())
}

pub(super) fn put_item(
    table: &str,
    item: Item,
    condition: &str,
    attribute_names: &[&str],
    attribute_values: Vec<(&str, AttributeValue)>,
) -> Result<TransactWriteItem, StoreError> {
    let put = Put::builder()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression(condition)
        .set_expression_attribute_names(names(attribute_names))
        .set_expression_attribute_values(if attribute_values.is_empty() {
            None
        } else {
            values(attribute_values)
        })
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(build_error)?;
    Ok(TransactWriteItem::builder().put(put).build())
}
