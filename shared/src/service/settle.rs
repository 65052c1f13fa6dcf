//! Applying what a source learned about an attempt (a webhook, reconcile's PSP lookup) through
//! the one transition function, exactly once, whatever races it.

use crate::domain::{transition, NextAction, Payment, Settlement, Transition};
use crate::idempotency::StoreError;
use crate::ports::{
    ChargeStore, CheckedAmount, EventMark, PspLookup, PspOutcome, Read, SettleOutcome,
    AUTHENTICATION_FAILED_CODE, AUTHENTICATION_REQUIRED_CODE,
};

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
/// payment and order in one transaction conditioned on the state read;
/// on a race, read again and decide again.
pub async fn apply_settlement<S: ChargeStore + ?Sized>(
    store: &S,
    payment_id: &str,
    settlement: &Settlement,
) -> Result<Applied, StoreError> {
    for _ in 0..MAX_ROUNDS {
        let Some(payment) = store.get_payment(payment_id).await? else {
            return Ok(Applied::NotFound);
        };
        let step = transition(&payment, settlement);
        if step == Transition::Unchanged {
            return Ok(Applied::Unchanged(payment));
        }
        match store.settle(&payment, &step, None).await? {
            SettleOutcome::Settled(after) => return Ok(Applied::Moved(*after)),
            SettleOutcome::Moved | SettleOutcome::Duplicate => continue,
        }
    }
    Err(StoreError::Conflict {
        item: payment_id.to_owned(),
    })
}

/// Applies a PSP's word that money moved (succeeded, captured) which a writer could not write
/// under its own claim (its lease lost, the payment moved under it): without a lease, as a
/// webhook would, since states only rise. Any other word is left to whoever holds the payment.
pub async fn keep_money_word<S: ChargeStore + ?Sized>(
    store: &S,
    payment_id: &str,
    settlement: &Settlement,
) -> Result<(), StoreError> {
    if matches!(
        settlement,
        Settlement::Succeeded { .. } | Settlement::Captured { .. }
    ) {
        if let Applied::Moved(payment) = apply_settlement(store, payment_id, settlement).await? {
            tracing::info!(
                payment_id,
                status = payment.status.as_str(),
                "the PSP's success applied after the payment moved under its writer"
            );
        }
    }
    Ok(())
}

/// The settlement a PSP lookup implies, if any (a pending or unknown charge implies none). An
/// action the lookup finds open stays open until `action_expires_at_ms`.
pub fn settlement_of(lookup: PspLookup, action_expires_at_ms: i64) -> Option<Settlement> {
    match lookup {
        PspLookup::Captured {
            provider_payment_id,
            amount_captured,
            ..
        } => Some(Settlement::Captured {
            provider_payment_id,
            amount_captured,
        }),
        PspLookup::ActionRequired {
            provider_payment_id,
            redirect_url,
        } => Some(Settlement::ActionRequired {
            provider_payment_id,
            next_action: crate::domain::NextAction {
                url: redirect_url,
                expires_at_ms: action_expires_at_ms,
            },
        }),
        PspLookup::Authorized {
            provider_payment_id,
            amount_capturable,
            capture_before_ms,
        } => Some(Settlement::Authorized {
            provider_payment_id,
            amount_capturable,
            capture_before_ms,
        }),
        PspLookup::Succeeded {
            provider_payment_id,
            ..
        } => Some(Settlement::Succeeded {
            provider_payment_id,
        }),
        // A failed authentication is not a decline (it is neither the card's fault nor counted
        // against the attempt limits): the codes Stripe's last_payment_error gives it.
        PspLookup::Declined {
            provider_payment_id,
            decline_code,
            ..
        } if decline_code == AUTHENTICATION_REQUIRED_CODE => {
            Some(Settlement::AuthenticationRequired {
                provider_payment_id: Some(provider_payment_id),
            })
        }
        PspLookup::Declined {
            provider_payment_id,
            decline_code,
            ..
        } if decline_code == AUTHENTICATION_FAILED_CODE => Some(Settlement::AuthenticationFailed {
            provider_payment_id: Some(provider_payment_id),
        }),
        PspLookup::Declined {
            provider_payment_id,
            decline_code,
            ..
        } => Some(Settlement::Declined {
            provider_payment_id: Some(provider_payment_id),
            decline_code,
        }),
        // The key's only intent is cancelled: no charge can ever run under it.
        PspLookup::Canceled { .. } => Some(Settlement::Abandoned),
        PspLookup::Pending { .. } | PspLookup::NotFound => None,
    }
}

/// The settlement a PSP's answer to a create implies, if it is final or moves the attempt
/// (unknown and not-sent imply none). An action the PSP asks for stays open until
/// `action_expires_at_ms`.
pub fn settlement_of_outcome(outcome: PspOutcome, action_expires_at_ms: i64) -> Option<Settlement> {
    match outcome {
        PspOutcome::Approved {
            provider_payment_id,
        } => Some(Settlement::Succeeded {
            provider_payment_id,
        }),
        PspOutcome::ActionRequired {
            provider_payment_id,
            redirect_url,
        } => Some(Settlement::ActionRequired {
            provider_payment_id,
            next_action: NextAction {
                url: redirect_url,
                expires_at_ms: action_expires_at_ms,
            },
        }),
        PspOutcome::Authorized {
            provider_payment_id,
            amount_capturable,
            capture_before_ms,
        } => Some(Settlement::Authorized {
            provider_payment_id,
            amount_capturable,
            capture_before_ms,
        }),
        PspOutcome::AuthenticationRequired {
            provider_payment_id,
        } => Some(Settlement::AuthenticationRequired {
            provider_payment_id,
        }),
        PspOutcome::Declined {
            provider_payment_id,
            decline_code,
        } => Some(Settlement::Declined {
            provider_payment_id,
            decline_code,
        }),
        PspOutcome::Pending {
            provider_payment_id,
        } => Some(Settlement::Pending {
            provider_payment_id,
        }),
        PspOutcome::Rejected { .. } => Some(Settlement::Rejected),
        PspOutcome::Refused { .. } => Some(Settlement::Refused),
        PspOutcome::NotSent { .. } | PspOutcome::Unknown { .. } => None,
    }
}

/// What processing one webhook event came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventApplied {
    /// The event moved the payment (its dedup record written in the same transaction).
    Moved(Box<Payment>),
    /// The event changes nothing (already there, or it would move backwards); nothing written,
    /// so a redelivery answers the same.
    Unchanged(Box<Payment>),
    /// The event was processed before (it moved the payment, or was rejected); nothing written.
    Duplicate,
    /// The event's amount or currency is not the payment's: nothing applied, the event
    /// recorded as processed, an alarm raised.
    Rejected(Box<Payment>),
}

/// Whether what an event reports (if it reports it) is not the `amount` in `currency` payonce
/// holds: such an event is never applied.
pub fn amount_mismatch(
    reported: Option<&CheckedAmount>,
    amount: i64,
    currency: crate::domain::Currency,
) -> bool {
    reported.is_some_and(|r| r.minor != amount || r.currency != currency.as_str())
}

/// Whether what an event reports disagrees with `payment`: its amount and currency, except that
/// a capture of a manual payment (staff may capture part of it) reports what it captured, which
/// must be the capture's own amount, in the payment's currency, and no more than the payment.
fn event_amount_mismatch(
    reported: Option<&CheckedAmount>,
    payment: &crate::domain::Payment,
    settlement: &Settlement,
) -> bool {
    match (settlement, reported) {
        (
            Settlement::Captured {
                amount_captured, ..
            },
            Some(reported),
        ) if payment.capture_is_manual() => {
            reported.currency != payment.currency.as_str()
                || reported.minor != *amount_captured
                || reported.minor > payment.amount
        }
        _ => amount_mismatch(reported, payment.amount, payment.currency),
    }
}

/// Errors of [`apply_event`].
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// The event names an attempt payonce does not hold (yet): retry, then dead-letter.
    #[error("payment {0} not found")]
    PaymentNotFound(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Applies a webhook event's settlement exactly once: the dedup record and the transition are
/// written in one transaction, so a crash can never mark an event done without its effect, and
/// a duplicate delivery — sequential or concurrent — finds the dedup record and writes nothing.
/// An event that changes nothing is read and acknowledged, with no write at all.
/// An event whose `reported` amount or currency is not the payment's, or that names another PSP
/// payment than the one it holds, applies nothing: it is recorded as processed, with an alarm.
pub async fn apply_event<S: ChargeStore + ?Sized>(
    store: &S,
    payment_id: &str,
    settlement: &Settlement,
    event: &EventMark,
    reported: Option<&CheckedAmount>,
) -> Result<EventApplied, EventError> {
    // A recent read first, at half the cost: what it decides is fenced by the settlement's
    // condition on the status read, or changes nothing. An event that changes nothing on a
    // final payment as it was a moment ago changes nothing on it now (final states only move to
    // a success, which nothing moves); on an open one it may (word that only fills in what an
    // open state holds, such as an action completed, meets the state it fills in only once that
    // state is written), so it is read again, consistently, before it is let go. A payment the
    // recent read misses is read again, consistently, before the event waits.
    let mut read = Read::Recent;
    for _ in 0..MAX_ROUNDS {
        let payment = match store.read_payment(payment_id, read).await? {
            Some(payment) => payment,
            None if read == Read::Recent => {
                read = Read::Latest;
                continue;
            }
            None => return Err(EventError::PaymentNotFound(payment_id.to_owned())),
        };
        if crate::domain::names_another_payment(&payment, settlement) {
            tracing::error!(payment_id, event_id = %event.event_id, provider = %event.provider,
                stored = ?payment.provider_payment_id, alarm = "webhook-mismatch",
                "a webhook names our payment but another PSP payment than the one it holds; nothing applied");
            return Ok(if store.record_event(event).await? {
                EventApplied::Rejected(Box::new(payment))
            } else {
                EventApplied::Duplicate
            });
        }
        if event_amount_mismatch(reported, &payment, settlement) {
            tracing::error!(payment_id, event_id = %event.event_id, provider = %event.provider,
                reported = ?reported, amount = payment.amount, currency = payment.currency.as_str(),
                alarm = "webhook-mismatch", "a webhook reports another amount or currency than the payment's; nothing applied");
            return Ok(if store.record_event(event).await? {
                EventApplied::Rejected(Box::new(payment))
            } else {
                EventApplied::Duplicate
            });
        }
        let step = transition(&payment, settlement);
        if step == Transition::Unchanged && read == Read::Recent && !payment.status.is_final() {
            read = Read::Latest;
            continue;
        }
        if step == Transition::Unchanged {
            // States only move forward, so an event that changes nothing now changes nothing
            // on any later delivery either: it needs no dedup record, and costs no write (the
            // webhook confirming a charge that already recorded its success is this case).
            return Ok(EventApplied::Unchanged(Box::new(payment)));
        }
        match store.settle(&payment, &step, Some(event)).await? {
            SettleOutcome::Settled(after) => return Ok(EventApplied::Moved(after)),
            SettleOutcome::Duplicate => return Ok(EventApplied::Duplicate),
            SettleOutcome::Moved => read = Read::Latest,
        }
    }
    Err(StoreError::Conflict {
        item: payment_id.to_owned(),
    }
    .into())
}
