//! The tables' layout: attribute names and key prefixes, one place for every store.
//!
//! Idempotency table: records (`pk` = the record key), webhook dedup records and users' attempt
//! counters. Payments table: `order#<id>`, `payment#<id>` and `refund#<id>` items, and the keys
//! of the in-flight index on payments and refunds in flight (see `inflight.rs`).

#[cfg(feature = "payments")]
use super::attributes::{n, s, Item};

/// The idempotency records' attributes (payonce's own layout; see `IdempotencyAttributes`).
pub(crate) const PK: &str = "pk";
pub(crate) const STATUS: &str = "status";
pub(crate) const FINGERPRINT: &str = "fingerprint";
pub(crate) const ATTEMPT_ID: &str = "attempt_id";
pub(crate) const CREATED_AT_MS: &str = "created_at_ms";
pub(crate) const LEASE_TOKEN: &str = "lease_token";
pub(crate) const LEASE_UNTIL_MS: &str = "lease_until_ms";
pub(crate) const RESULT: &str = "result";
pub(crate) const EXPIRES_AT: &str = "expires_at";
pub(crate) const REQUEST_ID: &str = "request_id";

/// The in-flight index's sort key: when reconcile should next look at the attempt.
#[cfg(feature = "payments")]
pub(super) const CHECK_AT: &str = "check_at_ms";

/// The payment attribute saying a call under its PSP key may have reached the PSP.
#[cfg(feature = "payments")]
pub(super) const MAYBE_REACHED: &str = "psp_maybe_reached";

/// The payment's sum of succeeded refunds (absent: 0).
#[cfg(feature = "payments")]
pub(super) const REFUNDED: &str = "refunded";

/// The payment's sum of pending refunds (absent: 0).
#[cfg(feature = "payments")]
pub(super) const REFUND_PENDING: &str = "refund_pending";

/// How many refunds the refund API claimed on the payment (absent: 0).
#[cfg(feature = "payments")]
pub(super) const REFUND_COUNT: &str = "refund_count";

/// Set once the automatic refund of a late duplicate was created.
#[cfg(feature = "payments")]
pub(super) const DUPLICATE_REFUND: &str = "duplicate_refund";

/// Set once a late duplicate the PSP cannot refund was found (an operator refunds it).
#[cfg(feature = "payments")]
pub(super) const REFUND_REQUIRED: &str = "refund_required";

/// A payment's claimed capture or cancel (`capture` / `cancel`; absent: none).
#[cfg(feature = "payments")]
pub(super) const OP_KIND: &str = "op_kind";

/// A claimed capture's amount, minor units.
#[cfg(feature = "payments")]
pub(super) const OP_AMOUNT: &str = "op_amount";

/// The key of the idempotency record of the request that claimed the operation.
#[cfg(feature = "payments")]
pub(super) const OP_RECORD: &str = "op_record";

/// The claimed operation's number (its PSP key's).
#[cfg(feature = "payments")]
pub(super) const OP_SEQ: &str = "op_seq";

/// The payment's status when the operation was claimed.
#[cfg(feature = "payments")]
pub(super) const OP_FROM: &str = "op_from";

/// How many operations were ever claimed on the payment (absent: none); kept when one is
/// released.
#[cfg(feature = "payments")]
pub(super) const OP_COUNT: &str = "op_count";

#[cfg(feature = "payments")]
pub(super) fn order_pk(order_id: &str) -> String {
    format!("order#{order_id}")
}

#[cfg(feature = "payments")]
pub(super) fn payment_pk(payment_id: &str) -> String {
    format!("payment#{payment_id}")
}

#[cfg(feature = "payments")]
pub(super) fn refund_pk(refund_id: &str) -> String {
    format!("refund#{refund_id}")
}

/// The index's partition attribute.
#[cfg(feature = "payments")]
pub(super) const INFLIGHT: &str = "inflight";

/// The partition value of items written before the index was sharded (still read).
#[cfg(feature = "payments")]
pub const INFLIGHT_PARTITION: &str = "processing";

/// How many partition values the in-flight index spreads its entries over.
#[cfg(feature = "payments")]
pub const INFLIGHT_SHARDS: u32 = 8;

/// The in-flight partition value of the payment or refund `id`: a pure function of the id, so
/// every writer of the item computes the same one.
#[cfg(feature = "payments")]
pub fn inflight_shard(id: &str) -> String {
    // FNV-1a: stable across builds and platforms, unlike the standard library's hasher.
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{INFLIGHT_PARTITION}#{}", hash % u64::from(INFLIGHT_SHARDS))
}

/// Puts the in-flight index keys on `item` (a new payment or refund in flight).
#[cfg(feature = "payments")]
pub(super) fn mark_inflight(item: &mut Item, id: &str, check_at_ms: i64) {
    item.insert(INFLIGHT.into(), s(inflight_shard(id)));
    item.insert(CHECK_AT.into(), n(check_at_ms));
}
