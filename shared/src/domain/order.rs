//! Orders: what is being paid for. A version's amount never changes; editing the items
//! makes a new version.

use super::money::{Currency, MAX_AMOUNT_MINOR};
use super::PspKind;
use serde::{Deserialize, Serialize};

/// Most line items one order may hold.
pub const MAX_ITEMS: usize = 100;
/// Most units of one line item.
pub const MAX_QUANTITY: i64 = 10_000;
/// Longest SKU, in characters.
pub const MAX_SKU_LEN: usize = 64;

/// One line of an order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineItem {
    /// Stock-keeping unit: 1–64 characters of `A-Z a-z 0-9 - _ .`.
    pub sku: String,
    /// Units, 1–10 000.
    #[serde(deserialize_with = "super::money::integer")]
    pub quantity: i64,
    /// Price of one unit in the currency's minor unit, 0 up to [`MAX_AMOUNT_MINOR`].
    #[serde(deserialize_with = "super::money::integer")]
    pub unit_amount: i64,
}

/// A validated request for a new order (or a new version's items).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewOrder {
    /// The order's currency.
    pub currency: Currency,
    /// Its items.
    pub items: Vec<LineItem>,
    /// The total in minor units, computed with overflow checks.
    pub amount: i64,
}

/// Why an order was refused; each names the rule broken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    /// The currency is not the lowercase ISO code of one the deployment's PSP charges in.
    #[error("currency must be one of {} (lowercase ISO 4217)", .psp.currency_list())]
    UnsupportedCurrency {
        /// The PSP whose currencies apply.
        psp: PspKind,
    },
    /// No items, or too many.
    #[error("an order needs 1 to {MAX_ITEMS} items, got {0}")]
    ItemCount(usize),
    /// A SKU is empty, too long or has other characters.
    #[error("item {index}: sku must be 1 to {MAX_SKU_LEN} characters of A-Z a-z 0-9 - _ .")]
    BadSku {
        /// Position of the item.
        index: usize,
    },
    /// A quantity is out of range.
    #[error("item {index}: quantity must be 1 to {MAX_QUANTITY}")]
    BadQuantity {
        /// Position of the item.
        index: usize,
    },
    /// A unit amount is out of range.
    #[error("item {index}: unit_amount must be 0 to {MAX_AMOUNT_MINOR} minor units")]
    BadUnitAmount {
        /// Position of the item.
        index: usize,
    },
    /// The total overflows or exceeds the maximum chargeable amount.
    #[error("the order total exceeds {MAX_AMOUNT_MINOR} minor units")]
    TotalTooLarge,
    /// The total is zero: nothing to charge.
    #[error("the order total must be above zero")]
    TotalZero,
    /// The total is below the PSP's minimum charge for the currency, which the PSP would refuse.
    #[error("the order total must be at least {minimum} minor units of {currency}")]
    TotalTooSmall {
        /// The minimum, in minor units.
        minimum: i64,
        /// The order's currency.
        currency: Currency,
    },
}

impl NewOrder {
    /// Validates items and computes the total with overflow checks, against the charge limits
    /// of `psp`, the PSP that will charge the order.
    pub fn validate(
        currency: &str,
        items: Vec<LineItem>,
        psp: PspKind,
    ) -> Result<Self, OrderError> {
        let (currency, minimum) = Currency::parse(currency)
            .and_then(|c| Some((c, psp.minimum_charge_minor(c)?)))
            .ok_or(OrderError::UnsupportedCurrency { psp })?;
        if items.is_empty() || items.len() > MAX_ITEMS {
            return Err(OrderError::ItemCount(items.len()));
        }
        let mut amount: i64 = 0;
        for (index, item) in items.iter().enumerate() {
            let sku_ok = !item.sku.is_empty()
                && item.sku.chars().count() <= MAX_SKU_LEN
                && item
                    .sku
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            if !sku_ok {
                return Err(OrderError::BadSku { index });
            }
            if !(1..=MAX_QUANTITY).contains(&item.quantity) {
                return Err(OrderError::BadQuantity { index });
            }
            if !(0..=MAX_AMOUNT_MINOR).contains(&item.unit_amount) {
                return Err(OrderError::BadUnitAmount { index });
            }
            amount = item
                .unit_amount
                .checked_mul(item.quantity)
                .and_then(|line| amount.checked_add(line))
                .filter(|total| *total <= MAX_AMOUNT_MINOR)
                .ok_or(OrderError::TotalTooLarge)?;
        }
        if amount == 0 {
            return Err(OrderError::TotalZero);
        }
        if amount < minimum {
            return Err(OrderError::TotalTooSmall { minimum, currency });
        }
        Ok(Self {
            currency,
            items,
            amount,
        })
    }
}

/// Where an order stands with respect to payment (the order guard).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderPaymentState {
    /// No attempt holds it: it can be paid or edited.
    Unpaid,
    /// One attempt is processing; no other may start, and it cannot be edited. Stored, it
    /// also means paid once that attempt has succeeded: see [`Order::settled_by`].
    Processing,
    /// Paid by one attempt; final.
    Paid,
    /// An authorized (manual-capture) attempt holds it: no new attempt, no edit, until it is
    /// captured (paid) or canceled (unpaid). Never stored: an order stored `processing` under
    /// an authorized attempt reads so ([`Order::settled_by`]).
    Authorized,
}

impl OrderPaymentState {
    /// The stored and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unpaid => "unpaid",
            Self::Processing => "processing",
            Self::Paid => "paid",
            Self::Authorized => "authorized",
        }
    }

    /// Parses the stored spelling.
    pub fn parse(raw: &str) -> Option<Self> {
        [Self::Unpaid, Self::Processing, Self::Paid, Self::Authorized]
            .into_iter()
            .find(|s| s.as_str() == raw)
    }
}

/// An order, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// `ord_<uuid>`.
    pub order_id: String,
    /// The user (JWT `sub`) who created it; only they can see, edit or pay it.
    pub owner: String,
    /// Starts at 1; each edit of the items adds one.
    pub version: i64,
    /// The currency.
    pub currency: Currency,
    /// The current version's items.
    pub items: Vec<LineItem>,
    /// The current version's total, minor units.
    pub amount: i64,
    /// Payment state (the order guard).
    pub payment_state: OrderPaymentState,
    /// The attempt that holds the order while processing, or paid it.
    pub payment_id: Option<String>,
    /// Epoch milliseconds.
    pub created_at_ms: i64,
    /// Epoch milliseconds of the last change.
    pub updated_at_ms: i64,
}

/// The order as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderView {
    /// Id.
    pub order_id: String,
    /// Version.
    pub version: i64,
    /// Total, minor units.
    pub amount: i64,
    /// Currency.
    pub currency: Currency,
    /// Items.
    pub items: Vec<LineItem>,
    /// unpaid / processing / authorized / paid.
    pub payment_state: OrderPaymentState,
}

impl Order {
    /// The order as its readers see it, given `holder`, the attempt it is stored `processing`
    /// under (read only then): paid if that attempt succeeded, authorized while it is. A charge
    /// that succeeds or authorizes while it holds its order leaves the order stored `processing`
    /// under it (one write fewer, see [`crate::domain::completion_leaves_order`] and
    /// [`crate::domain::OrderEffect::Hold`]), so every reader settles it here.
    pub fn settled_by(mut self, holder: Option<&crate::domain::Payment>) -> Self {
        use crate::domain::PaymentStatus;
        let held = holder.filter(|p| {
            self.payment_state == OrderPaymentState::Processing
                && Some(&p.payment_id) == self.payment_id.as_ref()
        });
        match held.map(|p| p.status) {
            Some(PaymentStatus::Succeeded) => self.payment_state = OrderPaymentState::Paid,
            Some(PaymentStatus::Authorized) => self.payment_state = OrderPaymentState::Authorized,
            _ => {}
        }
        self
    }

    /// Whether a new attempt may still reserve this order as it was `read`: same owner, same
    /// version, unpaid (the order guard of `ChargeStore::begin_attempt`).
    pub fn reservable_as_read(&self, read: &Order) -> bool {
        self.owner == read.owner
            && self.version == read.version
            && self.payment_state == OrderPaymentState::Unpaid
    }

    /// The attempt to read for [`Self::settled_by`]: the one it is stored `processing` under.
    pub fn holder_to_read(&self) -> Option<&str> {
        (self.payment_state == OrderPaymentState::Processing)
            .then_some(self.payment_id.as_deref())
            .flatten()
    }

    /// The API representation.
    pub fn view(&self) -> OrderView {
        OrderView {
            order_id: self.order_id.clone(),
            version: self.version,
            amount: self.amount,
            currency: self.currency,
            items: self.items.clone(),
            payment_state: self.payment_state,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(sku: &str, quantity: i64, unit_amount: i64) -> LineItem {
        LineItem {
            sku: sku.into(),
            quantity,
            unit_amount,
        }
    }

    #[test]
    fn computes_the_total_in_minor_units() {
        let order = NewOrder::validate(
            "jpy",
            vec![item("A1", 2, 1500), item("B-2", 1, 999)],
            PspKind::Stripe,
        )
        .unwrap();
        assert_eq!(order.amount, 3999);
        assert_eq!(order.currency, Currency::Jpy);
    }

    #[test]
    fn refuses_overflow_and_out_of_range_values() {
        assert_eq!(
            NewOrder::validate(
                "jpy",
                vec![item("A", 10_000, MAX_AMOUNT_MINOR)],
                PspKind::Stripe
            ),
            Err(OrderError::TotalTooLarge)
        );
        assert_eq!(
            NewOrder::validate("jpy", vec![item("A", 1, i64::MAX)], PspKind::Stripe),
            Err(OrderError::BadUnitAmount { index: 0 })
        );
        assert_eq!(
            NewOrder::validate("jpy", vec![item("A", -1, 5)], PspKind::Stripe),
            Err(OrderError::BadQuantity { index: 0 })
        );
        assert_eq!(
            NewOrder::validate("jpy", vec![item("A", 1, -5)], PspKind::Stripe),
            Err(OrderError::BadUnitAmount { index: 0 })
        );
        assert_eq!(
            NewOrder::validate("jpy", vec![item("A", 1, 0)], PspKind::Stripe),
            Err(OrderError::TotalZero)
        );
        assert_eq!(
            NewOrder::validate("JPY", vec![item("A", 1, 1)], PspKind::Stripe),
            Err(OrderError::UnsupportedCurrency {
                psp: PspKind::Stripe
            })
        );
        assert_eq!(
            NewOrder::validate("jpy", vec![], PspKind::Stripe),
            Err(OrderError::ItemCount(0))
        );
        assert_eq!(
            NewOrder::validate("jpy", vec![item("a b", 1, 1)], PspKind::Stripe),
            Err(OrderError::BadSku { index: 0 })
        );
        let many = (0..50)
            .map(|i| item(&format!("S{i}"), MAX_QUANTITY, MAX_AMOUNT_MINOR / 100))
            .collect();
        assert_eq!(
            NewOrder::validate("usd", many, PspKind::Stripe),
            Err(OrderError::TotalTooLarge)
        );
    }

    #[test]
    fn each_psp_refuses_what_it_would_not_charge() {
        let at =
            |psp, currency, amount| NewOrder::validate(currency, vec![item("A", 1, amount)], psp);
        // Omise: ¥100 and ฿20.00, above Stripe's ¥50 and ฿10.00.
        assert_eq!(
            at(PspKind::Omise, "jpy", 99),
            Err(OrderError::TotalTooSmall {
                minimum: 100,
                currency: Currency::Jpy
            })
        );
        assert_eq!(at(PspKind::Omise, "jpy", 100).map(|o| o.amount), Ok(100));
        assert_eq!(at(PspKind::Stripe, "jpy", 50).map(|o| o.amount), Ok(50));
        assert_eq!(
            at(PspKind::Omise, "thb", 1999),
            Err(OrderError::TotalTooSmall {
                minimum: 2000,
                currency: Currency::Thb
            })
        );
        assert_eq!(at(PspKind::Stripe, "thb", 1999).map(|o| o.amount), Ok(1999));
        // Omise does not charge dollars here; 2C2P takes any positive amount.
        let refused = at(PspKind::Omise, "usd", 5000);
        assert_eq!(
            refused,
            Err(OrderError::UnsupportedCurrency {
                psp: PspKind::Omise
            })
        );
        assert_eq!(
            refused.unwrap_err().to_string(),
            "currency must be one of jpy, thb, sgd (lowercase ISO 4217)"
        );
        assert_eq!(at(PspKind::TwoC2p, "usd", 1).map(|o| o.amount), Ok(1));
        assert_eq!(
            at(PspKind::Stripe, "usd", 49),
            Err(OrderError::TotalTooSmall {
                minimum: 50,
                currency: Currency::Usd
            })
        );
    }

    #[test]
    fn an_order_held_by_the_attempt_that_paid_it_reads_as_paid() {
        let order = Order {
            order_id: "ord_1".into(),
            owner: "u".into(),
            version: 1,
            currency: Currency::Jpy,
            items: vec![item("A1", 1, 100)],
            amount: 100,
            payment_state: OrderPaymentState::Processing,
            payment_id: Some("pay_1".into()),
            created_at_ms: 0,
            updated_at_ms: 0,
        };
        let holder = |payment_id: &str, status| crate::domain::Payment {
            payment_id: payment_id.into(),
            ..crate::domain::payment::test_payment(status, None)
        };
        use crate::domain::PaymentStatus::{Authorized, Canceled, Failed, Processing, Succeeded};
        let state = |order: &Order, holder: Option<&crate::domain::Payment>| {
            order.clone().settled_by(holder).payment_state
        };
        assert_eq!(order.holder_to_read(), Some("pay_1"));
        assert_eq!(
            state(&order, Some(&holder("pay_1", Succeeded))),
            OrderPaymentState::Paid
        );
        assert_eq!(
            state(&order, Some(&holder("pay_1", Authorized))),
            OrderPaymentState::Authorized
        );
        // Still processing, or its attempt not read, or another attempt: as stored.
        for (read, expected) in [
            (
                Some(holder("pay_1", Processing)),
                OrderPaymentState::Processing,
            ),
            (Some(holder("pay_1", Failed)), OrderPaymentState::Processing),
            (
                Some(holder("pay_1", Canceled)),
                OrderPaymentState::Processing,
            ),
            (
                Some(holder("pay_2", Authorized)),
                OrderPaymentState::Processing,
            ),
            (
                Some(holder("pay_2", Succeeded)),
                OrderPaymentState::Processing,
            ),
            (None, OrderPaymentState::Processing),
        ] {
            assert_eq!(state(&order, read.as_ref()), expected, "{read:?}");
        }
        // An unpaid or paid order is as stored, and needs no read.
        for stored in [OrderPaymentState::Unpaid, OrderPaymentState::Paid] {
            let other = Order {
                payment_state: stored,
                ..order.clone()
            };
            assert_eq!(other.holder_to_read(), None);
            assert_eq!(state(&other, Some(&holder("pay_1", Succeeded))), stored);
        }
    }
}
