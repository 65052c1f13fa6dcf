//! Which PSP a deployment charges through, and what that PSP will charge: the per-currency
//! limits orders are checked against, one table per PSP, so an order is never created that the
//! PSP would refuse to charge.

use super::Currency;

/// The PSP a deployment uses (one per deployment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PspKind {
    /// Stripe (the default).
    #[default]
    Stripe,
    /// Omise (Opn Payments).
    Omise,
    /// 2C2P.
    TwoC2p,
    /// Square.
    Square,
    /// PayPal.
    PayPal,
}

impl PspKind {
    /// Every PSP payonce speaks, in the order the template lists them.
    pub const ALL: [PspKind; 5] = [
        PspKind::Stripe,
        PspKind::Omise,
        PspKind::TwoC2p,
        PspKind::Square,
        PspKind::PayPal,
    ];

    /// Whether payonce refunds through this PSP whatever its secrets hold: all but 2C2P, whose
    /// refunds need its Payment Maintenance API's exchanged keys (a deployment says whether it
    /// has them: `config::refunds_through_payonce`). What a late duplicate becomes
    /// ([`crate::domain::LateDuplicates::for_refunds`]).
    pub fn refunds_through_payonce(self) -> bool {
        self != Self::TwoC2p
    }

    /// Whether payonce can authorize now and capture later through this PSP whatever its
    /// account: Stripe (`capture_method=manual`), Omise (`capture=false`, captured whole) and
    /// Square (`autocomplete: false`, completed whole) and PayPal (intent `AUTHORIZE`, with a
    /// vaulted payment method); not 2C2P, which documents no per-payment authorization: there
    /// it takes an account that settles manually (a setting 2C2P makes) and the Payment
    /// Maintenance keys to settle with, which a deployment states
    /// ([`crate::ports::Psp::captures_later`]). Elsewhere `capture: "manual"` is answered 409
    /// `capture-not-supported` before anything is claimed.
    pub fn captures_later(self) -> bool {
        matches!(
            self,
            Self::Stripe | Self::Omise | Self::Square | Self::PayPal
        )
    }

    /// The smallest total this PSP charges in `currency`, in minor units; `None` if it does not
    /// charge in `currency` at all. Each order currency is treated as its own settlement
    /// currency (no exchange rates).
    ///
    /// - Stripe: its minimum charge per settlement currency (Stripe docs, "Minimum and maximum
    ///   charge amounts"); below it Stripe answers `amount_too_small`.
    /// - Omise: its minimum by account country (Omise docs, "Currency and amount": ¥100,
    ///   S$1.00, ฿20.00). Omise charges other currencies only through conversion into the
    ///   account's, with the minimum applied after conversion, which payonce cannot know in
    ///   advance: USD, EUR and GBP are not offered on Omise.
    /// - 2C2P documents no minimum: any positive amount (the order total is never zero).
    /// - Square documents none beyond a positive amount ("as low as 1 cent" in the US and
    ///   Canada; UNCONFIRMED elsewhere), and charges only in its seller's country's currency:
    ///   payonce knows four of those (USD, EUR, GBP, JPY; not THB or SGD, where Square does not
    ///   take payments).
    /// - PayPal documents none beyond a positive amount (UNCONFIRMED); payonce offers the
    ///   currencies it knows that PayPal takes: all six (THB and SGD among PayPal's).
    pub fn minimum_charge_minor(self, currency: Currency) -> Option<i64> {
        match self {
            PspKind::Stripe => Some(match currency {
                Currency::Jpy | Currency::Usd | Currency::Eur | Currency::Sgd => 50,
                Currency::Gbp => 30,
                Currency::Thb => 1000,
            }),
            PspKind::Omise => match currency {
                Currency::Jpy | Currency::Sgd => Some(100),
                Currency::Thb => Some(2000),
                Currency::Usd | Currency::Eur | Currency::Gbp => None,
            },
            PspKind::TwoC2p => Some(1),
            PspKind::Square => match currency {
                Currency::Jpy | Currency::Usd | Currency::Eur | Currency::Gbp => Some(1),
                Currency::Thb | Currency::Sgd => None,
            },
            PspKind::PayPal => Some(1),
        }
    }

    /// Whether `token` has the shape of a payment method this PSP charges: what the checkout's
    /// PSP library hands the browser, never card data (that is refused before this is asked).
    ///
    /// - Stripe: a PaymentMethod id, `pm_` and letters, digits or `_`.
    /// - Omise: a card token, `tokn_` and letters, digits or `_`; `pm_…` test tokens are
    ///   accepted too (the sandbox's; the real Omise refuses them as unknown, definitively).
    /// - 2C2P: a `securePayToken` from its secure fields, an opaque string of letters, digits
    ///   and `+ / = _ . -`, at most 2048 characters.
    /// - Square: a payment token of its Web Payments SDK (`cnon:…`) or a card on file
    ///   (`ccof:…`), letters, digits, `_` or `-` after the colon; `pm_…` test tokens are
    ///   accepted too (the sandbox's).
    /// - PayPal: `paypal` (the buyer approves at PayPal, which needs a `return_url`), a vaulted
    ///   PayPal wallet `paypal_vault:<id>` or card `card_vault:<id>` (PayPal's vault ids:
    ///   letters, digits, `_` or `-`), and the sandbox's `pm_…` test tokens (vaulted cards).
    pub fn accepts_payment_method(self, token: &str) -> bool {
        let word = |rest: &str| {
            !rest.is_empty()
                && token.len() <= 255
                && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        };
        match self {
            PspKind::Stripe => token.strip_prefix("pm_").is_some_and(word),
            PspKind::Omise => token
                .strip_prefix("tokn_")
                .or_else(|| token.strip_prefix("pm_"))
                .is_some_and(word),
            PspKind::TwoC2p => {
                (4..=2048).contains(&token.len())
                    && token
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"+/=_.-".contains(&b))
            }
            PspKind::Square => {
                let square = |rest: &str| {
                    !rest.is_empty()
                        && token.len() <= 255
                        && rest
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                };
                token
                    .strip_prefix("cnon:")
                    .or_else(|| token.strip_prefix("ccof:"))
                    .is_some_and(square)
                    || token.strip_prefix("pm_").is_some_and(word)
            }
            PspKind::PayPal => {
                let vault = |rest: &str| {
                    !rest.is_empty()
                        && token.len() <= 255
                        && rest
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                };
                token == "paypal"
                    || token
                        .strip_prefix("paypal_vault:")
                        .or_else(|| token.strip_prefix("card_vault:"))
                        .is_some_and(vault)
                    || token.strip_prefix("pm_").is_some_and(word)
            }
        }
    }

    /// Whether a payment with `token` can be authorized alone, for a manual capture: PayPal
    /// authorizes only a vaulted source (the buyer's approval at PayPal, `paypal`, cannot be
    /// held); every other PSP authorizes any token it accepts.
    pub fn authorizes_alone(self, token: &str) -> bool {
        !(self == PspKind::PayPal && token == "paypal")
    }

    /// What [`PspKind::accepts_payment_method`] accepts, as the ECMA-262 regular expression the
    /// API document's `payment_method.pattern` states for a deployment on this PSP.
    pub fn payment_method_pattern(self) -> &'static str {
        match self {
            PspKind::Stripe => "^pm_[A-Za-z0-9_]{1,252}$",
            PspKind::Omise => "^(tokn_[A-Za-z0-9_]{1,250}|pm_[A-Za-z0-9_]{1,252})$",
            PspKind::TwoC2p => "^[A-Za-z0-9+/=_.-]{4,2048}$",
            PspKind::Square => "^((cnon|ccof):[A-Za-z0-9_-]{1,250}|pm_[A-Za-z0-9_]{1,252})$",
            PspKind::PayPal => {
                "^(paypal|(paypal_vault|card_vault):[A-Za-z0-9_-]{1,242}|pm_[A-Za-z0-9_]{1,252})$"
            }
        }
    }

    /// What [`PspKind::accepts_payment_method`] accepts, in words (for a 400's detail).
    pub fn payment_method_shape(self) -> &'static str {
        match self {
            PspKind::Stripe => "a Stripe PaymentMethod id: pm_ followed by letters, digits or _",
            PspKind::Omise => "an Omise card token: tokn_ followed by letters, digits or _",
            PspKind::TwoC2p => "a 2C2P securePayToken: up to 2048 letters, digits or + / = _ . -",
            PspKind::Square => {
                "a Square payment token (cnon:…) or card on file (ccof:…): letters, digits, _ or - after the colon"
            }
            PspKind::PayPal => {
                "paypal (the buyer approves at PayPal), or a vaulted paypal_vault:<id> or card_vault:<id>"
            }
        }
    }

    /// [`PspKind::currencies`] as text: `jpy, thb, sgd`.
    pub fn currency_list(self) -> String {
        self.currencies()
            .iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The currencies this PSP charges in, in [`Currency::ALL`] order.
    pub fn currencies(self) -> Vec<Currency> {
        Currency::ALL
            .into_iter()
            .filter(|currency| self.minimum_charge_minor(*currency).is_some())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripe_charges_every_currency_above_its_minimum() {
        let minimums: Vec<_> = Currency::ALL
            .into_iter()
            .map(|c| (c.as_str(), PspKind::Stripe.minimum_charge_minor(c)))
            .collect();
        assert_eq!(
            minimums,
            [
                ("jpy", Some(50)),
                ("usd", Some(50)),
                ("eur", Some(50)),
                ("gbp", Some(30)),
                ("thb", Some(1000)),
                ("sgd", Some(50)),
            ]
        );
    }

    #[test]
    fn omise_charges_yen_baht_and_singapore_dollars_above_its_own_minimums() {
        assert_eq!(
            PspKind::Omise.currencies(),
            [Currency::Jpy, Currency::Thb, Currency::Sgd]
        );
        assert_eq!(
            PspKind::Omise.minimum_charge_minor(Currency::Jpy),
            Some(100)
        );
        assert_eq!(
            PspKind::Omise.minimum_charge_minor(Currency::Thb),
            Some(2000)
        );
        assert_eq!(
            PspKind::Omise.minimum_charge_minor(Currency::Sgd),
            Some(100)
        );
    }

    #[test]
    fn each_psp_accepts_its_own_payment_method_tokens() {
        let accepts = |psp: PspKind, token: &str| psp.accepts_payment_method(token);
        assert!(accepts(PspKind::Stripe, "pm_card_visa"));
        assert!(!accepts(PspKind::Stripe, "tokn_test_5xuy4w91xdz7ky4jnqc"));
        assert!(!accepts(PspKind::Stripe, "tok_visa"));
        assert!(!accepts(PspKind::Stripe, "pm_"));
        assert!(!accepts(PspKind::Stripe, "pm_<script>"));
        assert!(!accepts(
            PspKind::Stripe,
            &format!("pm_{}", "a".repeat(253))
        ));
        assert!(accepts(PspKind::Omise, "tokn_test_5xuy4w91xdz7ky4jnqc"));
        assert!(accepts(PspKind::Omise, "pm_card_visa"));
        assert!(!accepts(PspKind::Omise, "src_test_1"));
        assert!(accepts(PspKind::TwoC2p, "00acjaU3eCzG9Xtw9+/aB_c.d-e=="));
        assert!(accepts(PspKind::TwoC2p, "pm_card_visa"));
        assert!(!accepts(PspKind::TwoC2p, "abc"));
        assert!(!accepts(PspKind::TwoC2p, "a b c d"));
        assert!(!accepts(PspKind::TwoC2p, &"a".repeat(2049)));
    }

    #[test]
    fn twoc2p_charges_every_currency_and_any_positive_amount() {
        assert_eq!(PspKind::TwoC2p.currencies(), Currency::ALL);
        assert!(Currency::ALL
            .into_iter()
            .all(|c| PspKind::TwoC2p.minimum_charge_minor(c) == Some(1)));
    }
}
