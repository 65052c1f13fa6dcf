//! The whole-system simulation of payonce.
//!
//! The real services — orders, charge, the webhook processor, reconcile — run in one process on
//! virtual time against the embedded store and the PSP model — speaking Stripe's, Omise's or
//! 2C2P's wire format to the matching adapter (see [`face`]) — each behind a fault layer.
//! Shoppers double-click, retry, open new tabs and edit orders; invocations die between any two
//! calls; the network to the PSP fails before and after the PSP applied a request; webhooks are
//! delayed, duplicated, reordered and lost. One seed determines a run. When the shoppers are
//! done the faults stop, the system is given a bounded time to settle, and the invariants are
//! checked against the PSP's ledger (see [`check`]).

pub mod alarms;
pub mod check;
pub mod face;
pub mod faults;
pub mod run;
pub mod shrink;
pub mod world;

mod actors;
mod daemons;
mod system;

pub use run::{run, Outcome};
pub use world::{FaultKind, Schedule};

use payonce::config::PspKind;
use payonce::mutations::Mutation;

/// Every planted hole (a fixed hole put back at run time), with the PSP whose model the mutation
/// check runs it on: each must break an invariant within the check's seeds. Most are found on
/// Stripe; `one-reconcile-at-a-time` needs a PSP that does not deduplicate refunds by key, which
/// only the Omise model can be (per seed). A hole that matters on several PSPs is listed once per
/// PSP it is checked on (`operation-under-client-key`: Stripe, and PayPal's authorization
/// captures).
pub const PLANTED_HOLES: [(Mutation, PspKind); 18] = [
    (Mutation::ReleaseOnAnyNotSent, PspKind::Stripe),
    (Mutation::FenceWithConfirmOnlyParameter, PspKind::Stripe),
    (Mutation::RefusalIsUnknown, PspKind::Stripe),
    (Mutation::ForgetWebhookEvents, PspKind::Stripe),
    (Mutation::CancelRefundOnAnyNotSent, PspKind::Stripe),
    (Mutation::UnwatchedRefunds, PspKind::Stripe),
    (Mutation::TrustRecentReads, PspKind::Stripe),
    (Mutation::ReconcileIgnoresRefundLease, PspKind::Stripe),
    (Mutation::OneReconcileAtATime, PspKind::Omise),
    (Mutation::ReconcileFinishLeavesOrder, PspKind::Stripe),
    (Mutation::LostAnswerIsARefusal, PspKind::Stripe),
    (Mutation::OperationUnderClientKey, PspKind::Stripe),
    (Mutation::ReleaseOnUnknownCancel, PspKind::Stripe),
    (Mutation::TwoC2pNamesByTranRef, PspKind::TwoC2p),
    (Mutation::CompleteBeforeStored, PspKind::Square),
    (Mutation::TwoC2pRefundResentBlind, PspKind::TwoC2p),
    (Mutation::OperationUnderClientKey, PspKind::PayPal),
    (Mutation::TwoC2pSettledIsRefused, PspKind::TwoC2p),
];
