//! The one transition function every path uses (the charge, captures and cancels, webhooks,
//! reconcile): what a source learned about an attempt, decided on the payment as it was read,
//! and only ever raising its status ([`PaymentStatus::rank`]).

use super::payment::{
    CancellationReason, Failure, FailureKind, NextAction, OrderEffect, Payment, PaymentStatus,
    Progress,
};

/// What a source (the PSP's answer, a webhook, reconcile) learned about an attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settlement {
    /// The PSP charged (captured).
    Succeeded {
        /// The PSP's id.
        provider_payment_id: String,
    },
    /// The PSP captured `amount_captured` of an authorized payment (a capture's answer, or word
    /// of a success that states the amount received).
    Captured {
        /// The PSP's id.
        provider_payment_id: String,
        /// What was captured, minor units.
        amount_captured: i64,
    },
    /// The PSP waits for the customer: they must follow `next_action`.
    ActionRequired {
        /// The PSP's id.
        provider_payment_id: String,
        /// Where to send the customer, and until when.
        next_action: NextAction,
    },
    /// The PSP is processing the payment after the customer acted.
    ActionCompleted {
        /// The PSP's id.
        provider_payment_id: String,
    },
    /// The PSP made the payment and has not decided it: nothing moves but its id, filled in on
    /// a processing payment that has none (a PSP without a lookup by our reference needs it).
    Pending {
        /// The PSP's id.
        provider_payment_id: String,
    },
    /// The PSP authorized a manual-capture payment: the money is held.
    Authorized {
        /// The PSP's id.
        provider_payment_id: String,
        /// What may be captured, minor units.
        amount_capturable: i64,
        /// When the authorization lapses (epoch milliseconds), if the PSP said.
        capture_before_ms: Option<i64>,
    },
    /// The issuer declined.
    Declined {
        /// The PSP's id, if it created one.
        provider_payment_id: Option<String>,
        /// The decline code.
        decline_code: String,
    },
    /// The PSP refused the payment method.
    Rejected,
    /// The PSP refused the request for another reason (validation, e.g. `amount_too_small`).
    Refused,
    /// The PSP needs the customer to authenticate, and there is no `return_url` to bring them
    /// back to: the PSP failed the attempt.
    AuthenticationRequired {
        /// The PSP's id, if it created one.
        provider_payment_id: Option<String>,
    },
    /// The customer failed or refused the PSP's authentication.
    AuthenticationFailed {
        /// The PSP's id, if it created one.
        provider_payment_id: Option<String>,
    },
    /// The PSP confirmed a cancel, or that the authorization lapsed.
    Canceled {
        /// The PSP's id, if it created one.
        provider_payment_id: Option<String>,
        /// Why.
        reason: CancellationReason,
    },
    /// The PSP provably never ran the attempt; payonce gives it up.
    Abandoned,
}

impl Settlement {
    /// The PSP payment the settlement is about, if it names one.
    pub fn provider_payment_id(&self) -> Option<&String> {
        match self {
            Self::Succeeded {
                provider_payment_id,
            }
            | Self::Captured {
                provider_payment_id,
                ..
            }
            | Self::ActionRequired {
                provider_payment_id,
                ..
            }
            | Self::ActionCompleted {
                provider_payment_id,
            }
            | Self::Pending {
                provider_payment_id,
            }
            | Self::Authorized {
                provider_payment_id,
                ..
            } => Some(provider_payment_id),
            Self::Declined {
                provider_payment_id,
                ..
            }
            | Self::AuthenticationRequired {
                provider_payment_id,
            }
            | Self::AuthenticationFailed {
                provider_payment_id,
            }
            | Self::Canceled {
                provider_payment_id,
                ..
            } => provider_payment_id.as_ref(),
            Self::Rejected | Self::Refused | Self::Abandoned => None,
        }
    }
}

/// The decision of [`transition`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Move the payment to this status (with this failure, PSP id and progress); the order
    /// follows ([`PaymentStatus::order_effect`]): held, paid or released.
    Apply {
        /// New status.
        status: PaymentStatus,
        /// Failure detail, if failed.
        failure: Option<Failure>,
        /// The PSP id to record (kept if already known).
        provider_payment_id: Option<String>,
        /// The customer action and authorization after the move.
        progress: Progress,
    },
    /// Nothing changes: the payment is already there, or the settlement would move it backwards.
    Unchanged,
}

impl Transition {
    /// The status the payment moves to, if it moves.
    pub fn status(&self) -> Option<PaymentStatus> {
        match self {
            Self::Apply { status, .. } => Some(*status),
            Self::Unchanged => None,
        }
    }

    /// Whether the move writes the order too (pays or releases it); a move that keeps holding
    /// it writes none ([`OrderEffect::Hold`]).
    pub fn writes_order(&self) -> bool {
        self.status()
            .is_some_and(|status| status.order_effect() != OrderEffect::Hold)
    }
}

/// Whether the charge's own completion of `read` with `transition` leaves the order as it is:
/// an attempt that succeeds while it holds its order (it reserved it, under the lease the
/// completion is fenced on, and only a failure of the attempt itself releases it) leaves the
/// order stored `processing` under it, which reads as paid ([`crate::domain::Order::settled_by`]).
/// A move that keeps holding the order writes none on any path ([`OrderEffect::Hold`]).
/// Webhooks and reconcile still write the order of a success.
pub fn completion_leaves_order(read: &Payment, transition: &Transition) -> bool {
    read.status.order_effect() == OrderEffect::Hold
        && transition.status() == Some(PaymentStatus::Succeeded)
}

/// The one transition function. A payment only rises ([`PaymentStatus::rank`]):
/// - `processing → requires_action → authorized → succeeded`, and any status not final to
///   `failed` (a decline, a refusal, failed authentication) or `canceled` (PSP-confirmed; an
///   authorization the PSP declines is canceled: nothing can be captured any more);
///   only a payment with a `return_url` waits for a customer action;
/// - a PSP-confirmed success beats any failure or cancellation (the customer's money moved,
///   which is the truth the books must show), in particular one payonce inferred;
/// - a payment captured at once that the PSP only authorized stays `processing`: its PSP id
///   is filled in, once, for the completion that follows;
/// - within `requires_action`, a PSP that is processing after the customer acted sets the
///   one-way `action_completed` flag; within `authorized`, the authorization's lapse fills in
///   one that did not state it; within `succeeded`, a capture's amount fills in a success that
///   did not state it. Nothing else moves a payment within its status.
///
/// Word about another PSP payment than the one held moves nothing ([`names_another_payment`]).
pub fn transition(current: &Payment, settlement: &Settlement) -> Transition {
    // Word about another PSP payment than the one we hold (another integration on the same
    // account, a Dashboard user) says nothing about ours, however it is signed.
    if names_another_payment(current, settlement) || about_a_request_only(current, settlement) {
        return Transition::Unchanged;
    }
    use PaymentStatus as S;
    let status = current.status;
    let progress = &current.progress;
    let named = settlement.provider_payment_id();
    let to =
        |status: PaymentStatus, failure: Option<Failure>, progress: Progress| Transition::Apply {
            status,
            failure,
            provider_payment_id: named
                .cloned()
                .or_else(|| current.provider_payment_id.clone()),
            progress,
        };
    // Leaving for a final status closes what was open.
    let closed = |cancellation_reason, amount_captured| Progress {
        next_action: None,
        amount_capturable: 0,
        cancellation_reason,
        amount_captured,
        ..progress.clone()
    };
    let failed = |kind, decline_code: Option<&String>| {
        to(
            S::Failed,
            Some(Failure {
                kind,
                decline_code: decline_code.cloned(),
            }),
            closed(None, None),
        )
    };
    // Before the PSP authorized or charged: a failure still ends the attempt.
    let open = matches!(status, S::Processing | S::RequiresAction);
    match settlement {
        Settlement::Succeeded { .. } if status != S::Succeeded => {
            to(S::Succeeded, None, closed(None, None))
        }
        Settlement::Captured {
            amount_captured, ..
        } => match status {
            S::Succeeded if progress.amount_captured.is_none() && current.capture_is_manual() => {
                to(
                    S::Succeeded,
                    None,
                    Progress {
                        amount_captured: Some(*amount_captured),
                        ..progress.clone()
                    },
                )
            }
            S::Succeeded => Transition::Unchanged,
            _ => to(S::Succeeded, None, closed(None, Some(*amount_captured))),
        },
        Settlement::Succeeded { .. } => Transition::Unchanged,
        // Only a payment with somewhere to bring the customer back waits for them; for any
        // other an action is unreachable, and the PSP fails or times it out.
        Settlement::ActionRequired { next_action, .. }
            if status == S::Processing && current.return_url.is_some() =>
        {
            to(
                S::RequiresAction,
                None,
                Progress {
                    next_action: Some(next_action.clone()),
                    ..progress.clone()
                },
            )
        }
        Settlement::ActionCompleted { .. }
            if status == S::RequiresAction && !progress.action_completed =>
        {
            to(
                S::RequiresAction,
                None,
                Progress {
                    action_completed: true,
                    ..progress.clone()
                },
            )
        }
        Settlement::ActionRequired { .. } | Settlement::ActionCompleted { .. } => {
            Transition::Unchanged
        }
        // Undecided at the PSP: its id, once, and nothing else.
        Settlement::Pending {
            provider_payment_id,
        } => {
            if status == S::Processing && current.provider_payment_id.is_none() {
                Transition::Apply {
                    status,
                    failure: None,
                    provider_payment_id: Some(provider_payment_id.clone()),
                    progress: progress.clone(),
                }
            } else {
                Transition::Unchanged
            }
        }
        // A payment captured at once, which the PSP only authorized (Square approves every
        // payment, and moves money when payonce completes it): no status of its own. Its PSP
        // id is stored, once, and the payment stays processing until completed — which only a
        // payment whose id is stored ever is.
        Settlement::Authorized {
            provider_payment_id,
            ..
        } if !current.capture_is_manual() => {
            if status == S::Processing && current.provider_payment_id.is_none() {
                Transition::Apply {
                    status,
                    failure: None,
                    provider_payment_id: Some(provider_payment_id.clone()),
                    progress: progress.clone(),
                }
            } else {
                Transition::Unchanged
            }
        }
        Settlement::Authorized {
            amount_capturable,
            capture_before_ms,
            ..
        } if open => to(
            S::Authorized,
            None,
            Progress {
                next_action: None,
                amount_capturable: *amount_capturable,
                capture_before_ms: *capture_before_ms,
                ..progress.clone()
            },
        ),
        // The authorization's lapse, once: a webhook's unexpanded charge does not state it, the
        // create's answer does.
        Settlement::Authorized {
            capture_before_ms: Some(at),
            ..
        } if status == S::Authorized && progress.capture_before_ms.is_none() => to(
            S::Authorized,
            None,
            Progress {
                capture_before_ms: Some(*at),
                ..progress.clone()
            },
        ),
        Settlement::Authorized { .. } => Transition::Unchanged,
        // A processing attempt canceled at the PSP never charged: on Stripe it is the fence's
        // own cancel of the intent it created to block the key (payonce cancels nothing else
        // while processing); on 2C2P a cancelled (`0003`) transaction, which paid nothing.
        // Either way the attempt ends as abandoned, and the order is free.
        Settlement::Canceled { .. } if status == S::Processing => {
            failed(FailureKind::Abandoned, None)
        }
        Settlement::Canceled { reason, .. } if !status.is_final() => {
            to(S::Canceled, None, closed(Some(*reason), None))
        }
        Settlement::Canceled { .. } => Transition::Unchanged,
        // The PSP's decline of the very payment it had authorized: nothing can be captured any
        // more (an authorization that lapsed or failed, however the PSP words it), so it ends
        // canceled and its order is free. (A decline naming no payment moves none.)
        Settlement::Declined { .. } if status == S::Authorized => to(
            S::Canceled,
            None,
            closed(Some(CancellationReason::Expired), None),
        ),
        // Failures: only while nothing is authorized or charged, and they never stack.
        _ if !open => Transition::Unchanged,
        Settlement::Declined { decline_code, .. } => {
            failed(FailureKind::Declined, Some(decline_code))
        }
        Settlement::Rejected => failed(FailureKind::Rejected, None),
        Settlement::Refused => failed(FailureKind::Refused, None),
        // A payment with somewhere to bring the customer back asked for 3-D Secure: if the PSP
        // still says authentication is required (2C2P's `0004` answers both), it failed.
        Settlement::AuthenticationRequired { .. } if current.return_url.is_some() => {
            failed(FailureKind::AuthenticationFailed, None)
        }
        Settlement::AuthenticationRequired { .. } => {
            failed(FailureKind::AuthenticationRequired, None)
        }
        Settlement::AuthenticationFailed { .. } => failed(FailureKind::AuthenticationFailed, None),
        // Proof that the PSP never ran the attempt cannot hold once the PSP asked the customer
        // to act on it.
        Settlement::Abandoned if status == S::Processing => failed(FailureKind::Abandoned, None),
        Settlement::Abandoned => Transition::Unchanged,
    }
}

/// Whether `settlement` is a refusal or decline that names no PSP payment while `payment` holds
/// one: word about a request (a re-send the PSP answered afresh, having forgotten its key), not
/// about the payment the PSP made, which only its own word moves. (A fence's abandonment is not
/// one: it is decided on a read without an id, and the stores refuse it once one is stored.)
fn about_a_request_only(payment: &Payment, settlement: &Settlement) -> bool {
    payment.provider_payment_id.is_some()
        && settlement.provider_payment_id().is_none()
        && matches!(
            settlement,
            Settlement::Declined { .. }
                | Settlement::Rejected
                | Settlement::Refused
                | Settlement::AuthenticationRequired { .. }
                | Settlement::AuthenticationFailed { .. }
        )
}

/// Whether `settlement` names a PSP payment other than the one `payment` holds (once the PSP's
/// id is stored, only word about that very payment may move it).
pub fn names_another_payment(payment: &Payment, settlement: &Settlement) -> bool {
    matches!(
        (&payment.provider_payment_id, settlement.provider_payment_id()),
        (Some(ours), Some(theirs)) if ours != theirs
    )
}

impl Payment {
    /// Whether the payment is captured later (`capture: "manual"`).
    pub fn capture_is_manual(&self) -> bool {
        self.capture == super::payment::CaptureMethod::Manual
    }
}

#[cfg(test)]
mod tests;
