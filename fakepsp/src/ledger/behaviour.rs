//! The tables that map a `payment_method` token to what the fake PSP does with a confirmed
//! PaymentIntent, and with refunds of its charge. Every face uses them: on the Omise face the
//! same token comes as `card`, on the 2C2P face as `securePayToken`.
//!
//! The card tokens are Stripe's own test tokens, so code written against the fake behaves the
//! same against Stripe's test mode; the `pm_fake_*` tokens produce what Stripe's test cards
//! cannot give with payonce's create parameters (a lost response, a 500, a hang, a PaymentIntent
//! that stays `processing` or `requires_action` for a while, a refund that stays `pending`).
//! Omise has no named test tokens at all (its `tokn_test_...` tokens are made from test card
//! numbers), so its face borrows these names.

/// Why a card was declined, as the ledger keeps it; each face words it its own way (Stripe's
/// `decline_code` and message, Omise's `failure_code` and `failure_message`, 2C2P's issuer code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decline {
    /// Declined, no reason given (Stripe's `generic_decline`).
    Generic,
    /// Not enough funds or credit (Stripe's `insufficient_funds`).
    InsufficientFunds,
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
    /// Stripe's `pm_card_threeDSecure2Required` and `pm_card_authenticationRequired` ("Testing"
    /// → "3D Secure authentication"): the card asks for authentication on every charge. The
    /// attempt fails with `authentication_required` when the request says it cannot handle an
    /// action (Stripe's `error_on_requires_action`); otherwise the PaymentIntent waits in
    /// `requires_action`, with no time limit, until the customer completes or fails the
    /// authentication on the fake's page, or the merchant cancels it.
    Authenticate,
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
        Behaviour::Decline(Decline::Generic),
    ),
    (
        "pm_card_chargeDeclinedInsufficientFunds",
        Behaviour::Decline(Decline::InsufficientFunds),
    ),
    ("pm_fake_lost_response", Behaviour::LostResponse),
    ("pm_fake_error_before_charge", Behaviour::ErrorBeforeCharge),
    ("pm_fake_slow", Behaviour::Slow),
    ("pm_fake_processing", Behaviour::Processing),
    ("pm_fake_requires_action", Behaviour::RequiresAction),
    ("pm_card_threeDSecure2Required", Behaviour::Authenticate),
    ("pm_card_authenticationRequired", Behaviour::Authenticate),
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

/// Whether confirming with `token` asks for a customer action (`pm_fake_requires_action` and
/// the 3-D Secure cards), for a face that must know before it attempts anything.
pub(crate) fn asks_for_action(token: &str) -> bool {
    matches!(
        behaviour_for(token),
        Behaviour::RequiresAction | Behaviour::Authenticate
    )
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
        assert_eq!(
            behaviour_for("pm_card_chargeDeclinedInsufficientFunds"),
            Behaviour::Decline(Decline::InsufficientFunds)
        );
        assert_eq!(behaviour_for("pm_fake_slow"), Behaviour::Slow);
        assert_eq!(behaviour_for("pm_card_refundFail"), Behaviour::Approve);
        assert_eq!(behaviour_for("pm_fake_processing"), Behaviour::Processing);
        assert_eq!(
            behaviour_for("pm_fake_requires_action"),
            Behaviour::RequiresAction
        );
        assert_eq!(behaviour_for("pm_fake_refund_pending"), Behaviour::Approve);
        assert_eq!(
            behaviour_for("pm_card_threeDSecure2Required"),
            Behaviour::Authenticate
        );
        assert_eq!(
            behaviour_for("pm_card_authenticationRequired"),
            Behaviour::Authenticate
        );
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
    fn only_the_action_tokens_ask_for_an_action() {
        assert!(asks_for_action("pm_fake_requires_action"));
        assert!(asks_for_action("pm_card_threeDSecure2Required"));
        assert!(asks_for_action("pm_card_authenticationRequired"));
        for token in [
            "pm_card_visa",
            "pm_fake_processing",
            "pm_card_visa_chargeDeclined",
            "x",
        ] {
            assert!(!asks_for_action(token), "{token}");
        }
    }

    #[test]
    fn anything_else_is_unknown_including_near_misses() {
        assert_eq!(behaviour_for("pm_card_amex"), Behaviour::Unknown);
        assert_eq!(behaviour_for("PM_CARD_VISA"), Behaviour::Unknown);
        assert_eq!(behaviour_for(""), Behaviour::Unknown);
    }
}
