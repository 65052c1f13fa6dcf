//! The tables that map a `payment_method` token to what the fake PSP does with a confirmed
//! PaymentIntent, and with refunds of its charge. Both faces use them: on the Omise face the
//! same token comes as `card`.
//!
//! The card tokens are Stripe's own test tokens, so code written against the fake behaves the
//! same against Stripe's test mode; the `pm_fake_*` tokens produce what Stripe's test cards
//! cannot give with payonce's create parameters (a lost response, a 500, a hang, a PaymentIntent
//! that stays `processing` or `requires_action` for a while, a refund that stays `pending`).
//! Omise has no named test tokens at all (its `tokn_test_...` tokens are made from test card
//! numbers), so its face borrows these names.

/// A card decline: what ends up in `last_payment_error` and in the 402 body (Stripe), or in the
/// failed charge's `failure_code` and `failure_message` (Omise).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decline {
    /// Stripe's `decline_code`.
    pub(crate) decline_code: &'static str,
    /// The human-readable message Stripe sends with that decline code.
    pub(crate) message: &'static str,
    /// Omise's `failure_code` for the same decline: one its test cards produce ("Testing" page,
    /// docs.omise.co/api-testing: `insufficient_fund`, `stolen_or_lost_card`,
    /// `failed_processing`, `payment_rejected`).
    pub(crate) omise_failure_code: &'static str,
    /// The `failure_message` sent with it: the fake's wording (the Omise pages seen do not
    /// show the messages; payonce reads only the code).
    pub(crate) omise_failure_message: &'static str,
}

/// What happens when a PaymentIntent is confirmed with a given token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Behaviour {
    /// The charge succeeds and is answered at once.
    Approve,
    /// The card is declined (402).
    Decline(Decline),
    /// The charge succeeds and is stored under the idempotency key, but the connection is closed
    /// before any response is written: the client cannot tell whether it was charged.
    LostResponse,
    /// The PSP fails before charging (500); nothing is created or stored, so a retry runs again.
    ErrorBeforeCharge,
    /// The charge succeeds and is stored at once, but answered only after the slow delay, so a
    /// client with a shorter timeout gives up on a charge that did happen.
    Slow,
    /// The PaymentIntent goes to `processing` (200) and succeeds once the model's
    /// `processing_for` has passed, like an asynchronous payment method.
    Processing,
    /// The PaymentIntent goes to `requires_action` (200) and, since nobody ever authenticates,
    /// falls back to `requires_payment_method` with `authentication_required` once the model's
    /// `requires_action_for` has passed.
    RequiresAction,
    /// The token names no PaymentMethod (400 `resource_missing`).
    Unknown,
}

/// Every token with a behaviour other than [`Behaviour::Unknown`].
const TABLE: &[(&str, Behaviour)] = &[
    ("pm_card_visa", Behaviour::Approve),
    ("pm_card_mastercard", Behaviour::Approve),
    // Stripe's test card whose charge succeeds and whose refunds fail; refunds come later, the
    // charge is an ordinary approval.
    ("pm_card_refundFail", Behaviour::Approve),
    (
        "pm_card_visa_chargeDeclined",
        Behaviour::Decline(Decline {
            decline_code: "generic_decline",
            message: "Your card was declined.",
            // Omise's Magento plugin mapping (omise_error_mapping.xml): "rejected by issuer".
            omise_failure_code: "payment_rejected",
            omise_failure_message: "payment was rejected by the issuer",
        }),
    ),
    (
        "pm_card_chargeDeclinedInsufficientFunds",
        Behaviour::Decline(Decline {
            decline_code: "insufficient_funds",
            message: "Your card has insufficient funds.",
            omise_failure_code: "insufficient_fund",
            omise_failure_message: "insufficient funds in the account or the card has reached \
                                    the credit limit",
        }),
    ),
    ("pm_fake_lost_response", Behaviour::LostResponse),
    ("pm_fake_error_before_charge", Behaviour::ErrorBeforeCharge),
    ("pm_fake_slow", Behaviour::Slow),
    ("pm_fake_processing", Behaviour::Processing),
    ("pm_fake_requires_action", Behaviour::RequiresAction),
    // Charges like a good card; its refunds stay `pending` for a while (see `RefundBehaviour`).
    ("pm_fake_refund_pending", Behaviour::Approve),
];

/// What happens to a refund of a charge made with a given token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RefundBehaviour {
    /// The refund is `succeeded` at once and stays so.
    Succeed,
    /// Stripe's `pm_card_refundFail` ("Testing" → "Refunds", asynchronous failure): the refund is
    /// answered `succeeded`, then fails with `expired_or_canceled_card` once the model's
    /// `refund_fail_after` has passed.
    FailLater,
    /// `pm_fake_refund_pending`: the refund stays `pending` for the model's `refund_pending_for`,
    /// then succeeds.
    PendingThenSucceed,
}

/// Looks up what a refund of a charge made with `token` does.
pub(crate) fn refund_behaviour_for(token: &str) -> RefundBehaviour {
    match token {
        "pm_card_refundFail" => RefundBehaviour::FailLater,
        "pm_fake_refund_pending" => RefundBehaviour::PendingThenSucceed,
        _ => RefundBehaviour::Succeed,
    }
}

/// Looks up what confirming a PaymentIntent with `token` does.
pub(crate) fn behaviour_for(token: &str) -> Behaviour {
    TABLE
        .iter()
        .find(|(known, _)| *known == token)
        .map_or(Behaviour::Unknown, |(_, behaviour)| *behaviour)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_tokens_map_to_their_behaviour() {
        assert_eq!(behaviour_for("pm_card_visa"), Behaviour::Approve);
        assert_eq!(behaviour_for("pm_card_mastercard"), Behaviour::Approve);
        assert!(matches!(
            behaviour_for("pm_card_chargeDeclinedInsufficientFunds"),
            Behaviour::Decline(Decline {
                decline_code: "insufficient_funds",
                ..
            })
        ));
        assert_eq!(behaviour_for("pm_fake_slow"), Behaviour::Slow);
        assert_eq!(behaviour_for("pm_card_refundFail"), Behaviour::Approve);
        assert_eq!(behaviour_for("pm_fake_processing"), Behaviour::Processing);
        assert_eq!(
            behaviour_for("pm_fake_requires_action"),
            Behaviour::RequiresAction
        );
        assert_eq!(behaviour_for("pm_fake_refund_pending"), Behaviour::Approve);
    }

    #[test]
    fn refund_behaviour_follows_the_charge_token() {
        assert_eq!(
            refund_behaviour_for("pm_card_refundFail"),
            RefundBehaviour::FailLater
        );
        assert_eq!(
            refund_behaviour_for("pm_fake_refund_pending"),
            RefundBehaviour::PendingThenSucceed
        );
        assert_eq!(
            refund_behaviour_for("pm_card_visa"),
            RefundBehaviour::Succeed
        );
    }

    #[test]
    fn anything_else_is_unknown_including_near_misses() {
        assert_eq!(behaviour_for("pm_card_amex"), Behaviour::Unknown);
        assert_eq!(behaviour_for("PM_CARD_VISA"), Behaviour::Unknown);
        assert_eq!(behaviour_for(""), Behaviour::Unknown);
    }
}
