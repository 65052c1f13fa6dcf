//! The second step of a charge at a PSP that only authorizes it (Square approves every payment,
//! `autocomplete: false`, and moves money when payonce completes it): the payment's PSP id is
//! stored first, then the payment is completed.
//!
//! The order is the guarantee. A completed payment is one payonce can always look up (by the
//! id it stored), so the PSP's fence — voiding whatever the key made — is a proof for every
//! attempt whose id was never stored: nothing under its key can have moved money, nor ever will,
//! since nobody completes a payment whose id is not stored. The charge path and reconcile
//! complete through here; the webhook processor only stores the id (the transition function's
//! fill-in) and leaves the completion to them.

use crate::domain::{transition, OperationKind, Payment, PaymentStatus, Settlement, Transition};
use crate::idempotency::StoreError;
use crate::mutations::{active, Mutation};
use crate::ports::{ChargeStore, OperationOutcome, OperationRequest, Psp, SettleOutcome};
use std::time::Duration;

/// How often storing the id re-reads a payment that moved under it before giving up.
const MAX_ROUNDS: u32 = 5;

/// Whether `settlement` is a PSP's authorization of `payment`, which it was asked to capture at
/// once: the authorization is then only the first step, and a completion must follow.
pub fn needs_completion(payment: &Payment, settlement: &Settlement) -> bool {
    matches!(settlement, Settlement::Authorized { .. }) && !payment.capture_is_manual()
}

/// Stores the PSP id `authorized` names on `payment` (the transition function's fill-in, one
/// write, the key's record left as it is), reading again when the payment moved under the
/// write: the payment as stored afterwards.
pub async fn store_authorized<S: ChargeStore + ?Sized>(
    store: &S,
    payment: Payment,
    authorized: &Settlement,
) -> Result<Payment, StoreError> {
    if active(Mutation::CompleteBeforeStored) {
        // The planted hole: nothing stored before the completion.
        return Ok(payment);
    }
    let mut current = payment;
    for _ in 0..MAX_ROUNDS {
        let step = transition(&current, authorized);
        if step == Transition::Unchanged {
            return Ok(current);
        }
        match store.settle(&current, &step, None).await? {
            SettleOutcome::Settled(after) => return Ok(*after),
            SettleOutcome::Moved | SettleOutcome::Duplicate => {
                current = store
                    .get_payment(&current.payment_id)
                    .await?
                    .ok_or_else(|| StoreError::Corrupt {
                        key: current.payment_id.clone(),
                        reason: "the payment disappeared".into(),
                    })?;
            }
        }
    }
    Err(StoreError::Conflict {
        item: current.payment_id,
    })
}

/// The PSP payment to complete, if `stored` (as [`store_authorized`] left it) may be completed:
/// still processing — or waiting for a buyer the PSP says approved (PayPal) — under the very id
/// `authorized` names. Settled meanwhile (a fence gave the attempt up, a webhook, another
/// completion), or word about another payment: none.
pub fn completable(stored: &Payment, authorized: &Settlement) -> Option<String> {
    let named = authorized.provider_payment_id()?;
    let stored_under_it = stored.provider_payment_id.as_ref() == Some(named)
        || active(Mutation::CompleteBeforeStored);
    let open = matches!(
        stored.status,
        PaymentStatus::Processing | PaymentStatus::RequiresAction
    );
    (open && stored_under_it).then(|| named.clone())
}

/// Completes `payment`'s PSP payment `provider_payment_id` within `timeout` (a capture of all
/// of it, under the payment's capture key where the PSP takes one): what the PSP said when it is
/// final (captured, or canceled meanwhile); `None` while it is unknown or refused, which leaves
/// the payment processing for reconcile to complete.
pub async fn complete<P: Psp + ?Sized>(
    psp: &P,
    payment: &Payment,
    provider_payment_id: String,
    timeout: Duration,
) -> Option<Settlement> {
    let request = OperationRequest {
        kind: OperationKind::Capture,
        payment_id: payment.payment_id.clone(),
        provider_payment_id,
        amount: None,
        payment_amount: payment.amount,
        capture: payment.capture,
        currency: payment.currency,
        idempotency_key: OperationKind::Capture.psp_key(&payment.payment_id),
    };
    match psp.operate(&request, timeout).await {
        OperationOutcome::Answered(settlement) => Some(settlement),
        OperationOutcome::Refused { code } => {
            tracing::warn!(payment_id = %payment.payment_id, %code, "the PSP refused to complete the authorized payment; reconcile looks again");
            None
        }
        OperationOutcome::NotSent { reason } | OperationOutcome::Unknown { reason } => {
            tracing::warn!(payment_id = %payment.payment_id, %reason, "the payment's completion has no answer; reconcile completes it");
            None
        }
    }
}
