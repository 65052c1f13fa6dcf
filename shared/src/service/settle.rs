//! Applying what a source learned about an attempt (a webhook, reconcile's PSP lookup) through
//! the one transition function, exactly once, whatever races it.

use crate::domain::{transition, Payment, Settlement, Transition};
use crate::idempotency::StoreError;
use crate::ports::{ChargeStore, PspLookup, SettleOutcome};
use std::time::Duration;

/// How often a settlement re-reads a payment that moved under it before giving up (the caller
/// retries later: SQS redelivers, reconcile runs again).
const MAX_ROUNDS: u32 = 5;

/// What applying a settlement came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The payment moved (to the state returned).
    Moved(Payment),
    /// The payment was already there, or the settlement would move it backwards.
    Unchanged(Payment),
    /// No such payment (yet).
    NotFound,
}

/// Applies `settlement` to the payment `payment_id`: read, decide with [`transition`], write
/// payment, order and idempotency mirror in one transaction conditioned on the state read;
/// on a race, read again and decide again.
pub async fn apply_settlement<S: ChargeStore + ?Sized>(
    store: &S,
    payment_id: &str,
    settlement: &Settlement,
    retention: Duration,
) -> Result<Applied, StoreError> {
    for _ in 0..MAX_ROUNDS {
        let Some(payment) = store.get_payment(payment_id).await? else {
            return Ok(Applied::NotFound);
        };
        let step = transition(&payment, settlement);
        if step == Transition::Unchanged {
            return Ok(Applied::Unchanged(payment));
        }
        match store.settle(&payment, &step, retention).await? {
            SettleOutcome::Settled(after) => return Ok(Applied::Moved(*after)),
            SettleOutcome::Moved => continue,
        }
    }
    Err(StoreError::Conflict {
        item: payment_id.to_owned(),
    })
}

/// The settlement a PSP lookup implies, if any (a pending or unknown charge implies none).
pub fn settlement_of(lookup: PspLookup) -> Option<Settlement> {
    match lookup {
        PspLookup::Succeeded {
            provider_payment_id,
        } => Some(Settlement::Succeeded {
            provider_payment_id,
        }),
        PspLookup::Declined {
            provider_payment_id,
            decline_code,
        } => Some(Settlement::Declined {
            provider_payment_id: Some(provider_payment_id),
            decline_code,
        }),
        PspLookup::Pending { .. } | PspLookup::NotFound => None,
    }
}
