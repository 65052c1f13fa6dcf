//! Where the attempt-limit counters live in DynamoDB, and their writes.
//!
//! - A user's counter is an item of the idempotency table, `limit#user#<sub>#<window>`, holding
//!   `attempts`, `declines` and `expires_at`: TTL and the cleanup sweep forget it like an
//!   expired record.
//! - An order's counter is two attributes of the order's own item, `attempts_<window>` and
//!   `declines_<window>`. The transaction that begins an attempt updates the order anyway, so
//!   counting there costs no write of its own (a successful payment: 10 WRU with the limits on
//!   instead of 12). The same update removes the previous window's pair; a pair left from an
//!   older window (an order tried again hours later) stays on the item, a few dozen bytes, and
//!   goes with it.
//!
//! A counter's name holds its window, so it is never read past it. Each is counted by a
//! conditional update: an attempt only while both its attempts and its declines are under their
//! limits (a counter a decline created holds no attempts yet); a decline unconditionally.

use super::attributes::{n, s};
use super::expr::update_item;
use super::schema::{order_pk, EXPIRES_AT, PK};
use super::{backend, is_condition_failure};
use crate::adapters::user_counter_key;
use crate::idempotency::StoreError;
use crate::ports::{AttemptCount, Counter};
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};
use aws_sdk_dynamodb::Client;

/// The names of an order's counter attributes in `window`: attempts, declines.
fn order_counter_names(window: i64) -> (String, String) {
    (format!("attempts_{window}"), format!("declines_{window}"))
}

/// The condition that a counter whose attributes are `#attempts` and `#declines` admits one more
/// attempt under `:max_attempts` and `:max_declines`.
fn admits(attempts: &str, declines: &str) -> String {
    format!(
        "(attribute_not_exists(#{attempts}) OR #{attempts} < :max_attempts) \
         AND (attribute_not_exists(#{declines}) OR #{declines} < :max_declines)"
    )
}

fn limit_values(count: &AttemptCount) -> [(&'static str, AttributeValue); 4] {
    [
        (":zero", n(0)),
        (":one", n(1)),
        (":max_attempts", n(i64::from(count.max_attempts))),
        (":max_declines", n(i64::from(count.max_declines))),
    ]
}

/// An order's counter folded into the update that reserves the order: what to add to its
/// update and its condition, with the names and values they use.
#[derive(Debug, Default)]
pub(super) struct OnOrder {
    /// Appended to the update's `SET` clause (starts with `, `), then its `REMOVE` clause.
    pub(super) update: String,
    /// Appended to the condition (starts with ` AND `).
    pub(super) condition: String,
    pub(super) names: Vec<String>,
    pub(super) values: Vec<(&'static str, AttributeValue)>,
}

/// The counts of a new attempt on `order_id`, split by where they are written: the order's
/// counter into the order's update (and its index in `counts`), the users' as items of their
/// own (with theirs).
#[allow(clippy::type_complexity)]
pub(super) fn split_counts(
    idempotency_table: &str,
    order_id: &str,
    counts: &[AttemptCount],
) -> Result<(Option<(usize, OnOrder)>, Vec<(usize, TransactWriteItem)>), StoreError> {
    let mut on_order = None;
    let mut items = Vec::new();
    for (index, count) in counts.iter().enumerate() {
        match &count.counter {
            Counter::User { user, window } => items.push((
                index,
                count_attempt(idempotency_table, &user_counter_key(user, *window), count)?,
            )),
            Counter::Order {
                order_id: counted,
                window,
            } if counted == order_id && on_order.is_none() => {
                let (attempts, declines) = order_counter_names(*window);
                let (attempts_before, declines_before) = order_counter_names(window - 1);
                on_order = Some((
                    index,
                    OnOrder {
                        update: format!(
                            ", #{attempts} = if_not_exists(#{attempts}, :zero) + :one \
                             REMOVE #{attempts_before}, #{declines_before}"
                        ),
                        condition: format!(" AND {}", admits(&attempts, &declines)),
                        names: vec![attempts, declines, attempts_before, declines_before],
                        values: limit_values(count).into(),
                    },
                ));
            }
            Counter::Order {
                order_id: counted, ..
            } => {
                return Err(StoreError::Corrupt {
                    key: order_pk(order_id),
                    reason: format!("an attempt on {order_id} counted against order {counted}"),
                })
            }
        }
    }
    Ok((on_order, items))
}

/// Counts a new attempt on the user's counter item `pk`, unless it is full.
fn count_attempt(
    table: &str,
    pk: &str,
    count: &AttemptCount,
) -> Result<TransactWriteItem, StoreError> {
    let mut values = Vec::from(limit_values(count));
    values.push((":exp", n(count.expires_at_s)));
    update_item(
        table,
        pk,
        "SET #attempts = if_not_exists(#attempts, :zero) + :one, #expires_at = :exp",
        &admits("attempts", "declines"),
        &["attempts", "declines", EXPIRES_AT],
        values,
    )
}

/// Counts one decline on `counter`: the user's item (created if need be), or the order's
/// attributes (an order that no longer exists is not created again).
pub(super) async fn count_decline(
    client: &Client,
    idempotency_table: &str,
    payments_table: &str,
    counter: &Counter,
    expires_at_s: i64,
) -> Result<(), StoreError> {
    match counter {
        Counter::User { user, window } => {
            let pk = user_counter_key(user, *window);
            client
                .update_item()
                .table_name(idempotency_table)
                .key(PK, s(&pk))
                .update_expression("ADD #declines :one SET #expires_at = :exp")
                .expression_attribute_names("#declines", "declines")
                .expression_attribute_names("#expires_at", EXPIRES_AT)
                .expression_attribute_values(":one", n(1))
                .expression_attribute_values(":exp", n(expires_at_s))
                .send()
                .await
                .map(|_| ())
                .map_err(|e| backend("count_decline", &pk, e))
        }
        Counter::Order { order_id, window } => {
            let pk = order_pk(order_id);
            let (_, declines) = order_counter_names(*window);
            let sent = client
                .update_item()
                .table_name(payments_table)
                .key(PK, s(&pk))
                .update_expression("ADD #declines :one")
                .condition_expression("attribute_exists(#pk)")
                .expression_attribute_names("#declines", declines)
                .expression_attribute_names("#pk", PK)
                .expression_attribute_values(":one", n(1))
                .send()
                .await;
            match sent {
                Ok(_) => Ok(()),
                Err(error) if is_condition_failure(&error) => Ok(()),
                Err(error) => Err(backend("count_decline", &pk, error)),
            }
        }
    }
}
