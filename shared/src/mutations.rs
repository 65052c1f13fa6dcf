//! Switches that put known holes back at run time, so the simulation can prove it finds them
//! (its mutation check). They exist only with the `faults` feature; without it every switch
//! reads as off and compiles away.

/// A hole that was found in review and fixed; switching it on reverts the fix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mutation {
    /// The charge path releases the order on any call that could not connect, even after a
    /// takeover of a holder that may have charged.
    ReleaseOnAnyNotSent,
    /// Fencing sends the confirm-only `error_on_requires_action` with `confirm=false`.
    FenceWithConfirmOnlyParameter,
    /// A validation 400 that does not name the payment method is an unknown outcome, and a
    /// fence refused by validation proves nothing.
    RefusalIsUnknown,
    /// The embedded store forgets which webhook events it processed (no dedup).
    ForgetWebhookEvents,
    /// The refund path cancels a refund on any call that could not connect, even after a
    /// takeover of a holder that may have refunded.
    CancelRefundOnAnyNotSent,
    /// Reconcile stops looking at a refund once it succeeded, so a later failure whose webhook
    /// is lost is never seen.
    UnwatchedRefunds,
    /// The charge path answers from its recent (eventually consistent) read as if it were a
    /// consistent one.
    TrustRecentReads,
    /// Reconcile acts on a pending refund without taking its sender lease, so it re-sends while
    /// the staff request that holds the lease is mid-call.
    ReconcileIgnoresRefundLease,
    /// Reconcile takes a refund's sender lease only from a holder whose lease lapsed, as if
    /// reconcile never ran twice at once: two overlapping runs both send a refund nobody holds.
    OneReconcileAtATime,
    /// Reconcile's finish of a taken-over attempt leaves the order as the charge's own finish
    /// does, though reconcile's lease never reserved it.
    ReconcileFinishLeavesOrder,
    /// A single-item write refused because its own earlier try (whose answer was lost) already
    /// applied it counts as refused.
    LostAnswerIsARefusal,
    /// A capture or cancel is sent under a key derived from the client's `Idempotency-Key`, not
    /// from the payment alone.
    OperationUnderClientKey,
    /// A cancel whose answer is unknown counts as confirmed: the payment is canceled and its
    /// order released.
    ReleaseOnUnknownCancel,
    /// 2C2P names a payment by the `tranRef` of an answer that carries one, else by its invoice
    /// number, so two answers about one payment may name it differently.
    TwoC2pNamesByTranRef,
    /// A payment captured at once that the PSP only authorized (Square) is completed before
    /// its PSP id is stored: a completion whose holder dies leaves a payment that moved money
    /// but that payonce cannot look up, and the fence may then void nothing and "prove" it.
    CompleteBeforeStored,
    /// A 2C2P refund is sent again without reading the refund status first (2C2P keys no refund
    /// by an id of ours, so a re-send after a lost answer is a second refund).
    TwoC2pRefundResentBlind,
    /// A 2C2P settle answered "already settled" (`39`) is a refusal, not the capture it is: a
    /// settle sent again after a lost answer never books the money 2C2P took.
    TwoC2pSettledIsRefused,
}

#[cfg(feature = "faults")]
impl Mutation {
    /// Every mutation.
    pub const ALL: [Mutation; 17] = [
        Self::ReleaseOnAnyNotSent,
        Self::FenceWithConfirmOnlyParameter,
        Self::RefusalIsUnknown,
        Self::ForgetWebhookEvents,
        Self::CancelRefundOnAnyNotSent,
        Self::UnwatchedRefunds,
        Self::TrustRecentReads,
        Self::ReconcileIgnoresRefundLease,
        Self::OneReconcileAtATime,
        Self::ReconcileFinishLeavesOrder,
        Self::LostAnswerIsARefusal,
        Self::OperationUnderClientKey,
        Self::ReleaseOnUnknownCancel,
        Self::TwoC2pNamesByTranRef,
        Self::CompleteBeforeStored,
        Self::TwoC2pRefundResentBlind,
        Self::TwoC2pSettledIsRefused,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::ReleaseOnAnyNotSent => "release-on-any-not-sent",
            Self::FenceWithConfirmOnlyParameter => "fence-with-confirm-only-parameter",
            Self::RefusalIsUnknown => "refusal-is-unknown",
            Self::ForgetWebhookEvents => "forget-webhook-events",
            Self::CancelRefundOnAnyNotSent => "cancel-refund-on-any-not-sent",
            Self::UnwatchedRefunds => "unwatched-refunds",
            Self::TrustRecentReads => "trust-recent-reads",
            Self::ReconcileIgnoresRefundLease => "reconcile-ignores-refund-lease",
            Self::OneReconcileAtATime => "one-reconcile-at-a-time",
            Self::ReconcileFinishLeavesOrder => "reconcile-finish-leaves-order",
            Self::LostAnswerIsARefusal => "lost-answer-is-a-refusal",
            Self::OperationUnderClientKey => "operation-under-client-key",
            Self::ReleaseOnUnknownCancel => "release-on-unknown-cancel",
            Self::TwoC2pNamesByTranRef => "2c2p-names-by-tran-ref",
            Self::CompleteBeforeStored => "complete-before-stored",
            Self::TwoC2pRefundResentBlind => "2c2p-refund-resent-blind",
            Self::TwoC2pSettledIsRefused => "2c2p-settled-is-refused",
        }
    }

    /// Parses [`Mutation::name`].
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// Whether `mutation` is switched on for this thread.
#[inline(always)]
pub fn active(mutation: Mutation) -> bool {
    #[cfg(feature = "faults")]
    {
        switches::ACTIVE.with(|active| active.borrow().contains(&mutation))
    }
    #[cfg(not(feature = "faults"))]
    {
        let _ = mutation;
        false
    }
}

#[cfg(feature = "faults")]
mod switches {
    use super::Mutation;
    use std::cell::RefCell;
    use std::collections::BTreeSet;

    thread_local! {
        pub(super) static ACTIVE: RefCell<BTreeSet<Mutation>> = const { RefCell::new(BTreeSet::new()) };
    }

    /// Switches exactly `mutations` on for this thread.
    pub fn set(mutations: &[Mutation]) {
        ACTIVE.with(|active| *active.borrow_mut() = mutations.iter().copied().collect());
    }
}

#[cfg(feature = "faults")]
pub use switches::set;
