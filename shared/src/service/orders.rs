//! The minimal order service: create (optionally idempotent), read, revise — owner-scoped.

use crate::domain::order::OrderView;
use crate::domain::{LineItem, NewOrder, Order, OrderError, OrderPaymentState, PspKind};
use crate::idempotency::{
    Fingerprint, Idempotency, IdempotencyKey, IdempotencyStore, Outcome, RunError, RunRequest,
    StoreError,
};
use crate::ports::{OrderStore, ReviseOutcome};
use std::time::Duration;

/// The idempotency scope of POST /orders.
pub const CREATE_ORDER_SCOPE: &str = "orders.create";

/// Why an order request was refused, or failed.
#[derive(Debug, thiserror::Error)]
pub enum OrdersError {
    /// The order breaks a rule.
    #[error(transparent)]
    Invalid(#[from] OrderError),
    /// Not found, or not the caller's.
    #[error("order not found")]
    NotFound,
    /// The client revised a version that is no longer current.
    #[error("the order is at version {current}")]
    VersionMismatch {
        /// The current version.
        current: i64,
    },
    /// An attempt is processing the order.
    #[error("a payment for this order is in progress")]
    PaymentInProgress,
    /// The order is paid.
    #[error("the order is already paid")]
    AlreadyPaid,
    /// An authorized payment holds the order until it is captured or canceled.
    #[error("the order is held by an authorized payment")]
    AlreadyAuthorized,
    /// The idempotency key was used with another body.
    #[error("the idempotency key was used with a different request")]
    KeyMismatch,
    /// Another request with the key is in flight.
    #[error("a request with this idempotency key is in progress")]
    KeyInUse {
        /// When to retry.
        retry_after: Duration,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Orders over an order store, with the generic idempotency layer for creation.
pub struct OrderService<O, I> {
    orders: O,
    idempotency: Idempotency<I>,
    psp: PspKind,
}

/// A created order: fresh, or replayed for a repeated key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// Created now.
    Fresh(OrderView),
    /// Created by an earlier request with the same key.
    Replayed(OrderView),
}

impl<O: OrderStore, I: IdempotencyStore> OrderService<O, I> {
    /// The service, for orders Stripe charges (see [`OrderService::for_psp`]).
    pub fn new(orders: O, idempotency: Idempotency<I>) -> Self {
        Self {
            orders,
            idempotency,
            psp: PspKind::Stripe,
        }
    }

    /// Checks orders against the charge limits of `psp`, the PSP that charges them: its
    /// currencies and its minimum per currency.
    pub fn for_psp(mut self, psp: PspKind) -> Self {
        self.psp = psp;
        self
    }

    /// The PSP that charges these orders.
    pub fn psp(&self) -> PspKind {
        self.psp
    }

    /// The service's notion of now, epoch milliseconds.
    pub fn now_ms(&self) -> i64 {
        self.idempotency.store().now_ms()
    }

    /// Creates an order for `user`; with a key, a repeat returns the first order instead.
    pub async fn create(
        &self,
        user: &str,
        key: Option<&IdempotencyKey>,
        currency: &str,
        items: Vec<LineItem>,
        deadline_ms: i64,
    ) -> Result<Created, OrdersError> {
        let new = NewOrder::validate(currency, items, self.psp)?;
        let Some(key) = key else {
            let order_id = format!("ord_{}", crate::ids::new_uuid().simple());
            return Ok(Created::Fresh(self.insert(user, &order_id, &new).await?));
        };
        let fingerprint = Fingerprint::of_value(
            &serde_json::json!({"currency": new.currency, "items": new.items}),
        );
        let request = RunRequest {
            scope: CREATE_ORDER_SCOPE,
            user,
            key,
            fingerprint,
            deadline_ms,
        };
        let outcome = self
            .idempotency
            // The order is named after the attempt, which a takeover keeps: an invocation that
            // crashed after inserting it and before completing the record leaves the order the
            // takeover finds and answers, not a second one no client ever sees.
            .run(request, |attempt| async move {
                let order_id = format!("ord_{}", attempt.attempt_id.replace('-', ""));
                self.insert(user, &order_id, &new).await
            })
            .await
            .map_err(|e| match e {
                RunError::Work(e) => e,
                RunError::Store(e) => OrdersError::Store(e),
                RunError::UnreadableResult { key, source } => {
                    OrdersError::Store(StoreError::Corrupt {
                        key: key.to_string(),
                        reason: source.to_string(),
                    })
                }
                RunError::UnserialisableResult(source) => OrdersError::Store(StoreError::Backend {
                    operation: "encode order",
                    source: Box::new(source),
                }),
            })?;
        match outcome {
            Outcome::Fresh(view) => Ok(Created::Fresh(view)),
            Outcome::Replayed(view) => Ok(Created::Replayed(view)),
            Outcome::InProgress { retry_after } => Err(OrdersError::KeyInUse { retry_after }),
            Outcome::Mismatch => Err(OrdersError::KeyMismatch),
            // An order's answer is bounded by the 64 KiB request body: never near the item limit.
            Outcome::TooLargeToReplay { size_bytes } => {
                Err(OrdersError::Store(StoreError::Corrupt {
                    key: CREATE_ORDER_SCOPE.to_owned(),
                    reason: format!("an order's stored answer cannot be {size_bytes} bytes"),
                }))
            }
        }
    }

    /// Inserts the order `order_id`; if it exists already as this user's order — inserted by an
    /// earlier invocation of the same attempt — that order is the answer.
    async fn insert(
        &self,
        user: &str,
        order_id: &str,
        new: &NewOrder,
    ) -> Result<OrderView, OrdersError> {
        let now_ms = self.now_ms();
        let order = Order {
            order_id: order_id.to_owned(),
            owner: user.to_owned(),
            version: 1,
            currency: new.currency,
            items: new.items.clone(),
            amount: new.amount,
            payment_state: OrderPaymentState::Unpaid,
            payment_id: None,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
        };
        match self.orders.create_order(&order).await {
            Ok(()) => Ok(order.view()),
            Err(error) => match self.orders.get_order(order_id).await {
                Ok(Some(existing)) if existing.owner == user => {
                    tracing::info!(
                        order_id,
                        "the order of this attempt exists already (takeover)"
                    );
                    Ok(existing.view())
                }
                _ => Err(error.into()),
            },
        }
    }

    /// The order, if it is `user`'s.
    pub async fn get(&self, user: &str, order_id: &str) -> Result<OrderView, OrdersError> {
        Ok(self.owned(user, order_id).await?.view())
    }

    /// Replaces the items of `user`'s order, making version `expected_version + 1`; refused
    /// while an attempt is processing it or once it is paid.
    pub async fn revise(
        &self,
        user: &str,
        order_id: &str,
        expected_version: Option<i64>,
        items: Vec<LineItem>,
    ) -> Result<OrderView, OrdersError> {
        let read = self.owned(user, order_id).await?;
        check_revisable(&read, expected_version)?;
        let new = NewOrder::validate(read.currency.as_str(), items, self.psp)?;
        let next = Order {
            version: read.version + 1,
            items: new.items,
            amount: new.amount,
            updated_at_ms: self.now_ms(),
            ..read.clone()
        };
        match self.orders.revise_order(&read, &next).await? {
            ReviseOutcome::Revised => Ok(next.view()),
            ReviseOutcome::Changed(Some(now)) => {
                let now = settled(&self.orders, now).await?;
                check_revisable(&now, Some(read.version))?;
                Err(OrdersError::VersionMismatch {
                    current: now.version,
                })
            }
            ReviseOutcome::Changed(None) => Err(OrdersError::NotFound),
        }
    }

    async fn owned(&self, user: &str, order_id: &str) -> Result<Order, OrdersError> {
        let order = self
            .orders
            .get_order(order_id)
            .await?
            .filter(|o| o.owner == user)
            .ok_or(OrdersError::NotFound)?;
        Ok(settled(&self.orders, order).await?)
    }
}

/// `order` as its readers see it ([`Order::settled_by`]): one more read, only for an order
/// stored `processing`.
pub async fn settled<S: OrderStore + ?Sized>(store: &S, order: Order) -> Result<Order, StoreError> {
    let holder = match order.holder_to_read() {
        Some(payment_id) => store.get_holder(payment_id).await?,
        None => None,
    };
    Ok(order.settled_by(holder.as_ref()))
}

fn check_revisable(order: &Order, expected_version: Option<i64>) -> Result<(), OrdersError> {
    match order.payment_state {
        OrderPaymentState::Paid => return Err(OrdersError::AlreadyPaid),
        OrderPaymentState::Processing => return Err(OrdersError::PaymentInProgress),
        OrderPaymentState::Authorized => return Err(OrdersError::AlreadyAuthorized),
        OrderPaymentState::Unpaid => {}
    }
    match expected_version {
        Some(v) if v != order.version => Err(OrdersError::VersionMismatch {
            current: order.version,
        }),
        _ => Ok(()),
    }
}
