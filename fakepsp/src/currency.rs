//! The currencies the fake PSP charges in, with Stripe's charge limits for each.
//!
//! Follows Stripe's "Supported currencies" page, section "Minimum and maximum charge amounts"
//! (docs.stripe.com/currencies#minimum-and-maximum-charge-amounts). Stripe applies the minimum of
//! the *settlement* currency after conversion; the fake has no exchange rates, so it treats every
//! charge currency as its own settlement currency and knows exactly the currencies that table
//! lists. Any other code is refused as an invalid currency rather than charged against a guessed
//! minimum: a kinder PSP than production is the one thing the fake must never be.

/// Stripe's documented minimum charge per currency, in the currency's minor unit.
const MINIMUM_CHARGE_MINOR: &[(&str, i64)] = &[
    ("aed", 200),
    ("aud", 50),
    ("bgn", 100),
    ("brl", 50),
    ("cad", 50),
    ("chf", 50),
    ("czk", 1500),
    ("dkk", 250),
    ("eur", 50),
    ("gbp", 30),
    ("hkd", 400),
    ("huf", 17500),
    ("inr", 50),
    ("jpy", 50),
    ("mxn", 1000),
    ("myr", 200),
    ("nok", 300),
    ("nzd", 50),
    ("pln", 200),
    ("ron", 200),
    ("sek", 300),
    ("sgd", 50),
    ("thb", 1000),
    ("usd", 50),
];

/// The largest amount Stripe accepts: "The amount value supports up to eight digits"
/// (PaymentIntent create, parameter `amount`).
pub(crate) const MAXIMUM_CHARGE_MINOR: i64 = 99_999_999;

/// Stripe's zero-decimal currencies ("Supported currencies", section "Zero-decimal
/// currencies"): the amount is in whole units.
const ZERO_DECIMAL: &[&str] = &[
    "bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv",
    "xaf", "xof", "xpf",
];

/// The minimum charge for a lowercase currency code, or `None` if the fake does not charge in it.
pub(crate) fn minimum_charge_minor(currency: &str) -> Option<i64> {
    MINIMUM_CHARGE_MINOR
        .iter()
        .find(|(code, _)| *code == currency)
        .map(|(_, minimum)| *minimum)
}

/// Omise's minimum and maximum charge per currency, in the currency's smallest unit, by the
/// country the account is registered in ("Currency and amount", omise.co/en/currency-and-amount:
/// Japan ¥100 to ¥6,000,000; Malaysia RM1.00 to RM100,000.00; Singapore S$1.00 to S$20,000.00;
/// Thailand ฿20.00 to ฿150,000.00). As on the Stripe face, each currency is its own settlement
/// currency (no exchange rates), and any other currency is refused: Omise's multi-currency
/// limits are measured after conversion, which the fake cannot do.
const OMISE_LIMITS_MINOR: &[(&str, i64, i64)] = &[
    ("jpy", 100, 6_000_000),
    ("myr", 100, 10_000_000),
    ("sgd", 100, 2_000_000),
    ("thb", 2_000, 15_000_000),
];

/// Omise's `(minimum, maximum)` charge for a lowercase currency code, or `None` if the Omise face
/// does not charge in it.
pub(crate) fn omise_limits_minor(currency: &str) -> Option<(i64, i64)> {
    OMISE_LIMITS_MINOR
        .iter()
        .find(|(code, _, _)| *code == currency)
        .map(|(_, minimum, maximum)| (*minimum, *maximum))
}

/// Whether a lowercase currency code has no minor unit.
pub(crate) fn is_zero_decimal(currency: &str) -> bool {
    ZERO_DECIMAL.contains(&currency)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payonce_currencies_have_stripes_minimums() {
        for (currency, minimum) in [
            ("usd", 50),
            ("eur", 50),
            ("gbp", 30),
            ("sgd", 50),
            ("thb", 1000),
            ("jpy", 50),
        ] {
            assert_eq!(minimum_charge_minor(currency), Some(minimum), "{currency}");
        }
        assert_eq!(minimum_charge_minor("xyz"), None);
        assert_eq!(
            minimum_charge_minor("USD"),
            None,
            "codes are lowercase here"
        );
    }

    #[test]
    fn table_is_sorted_and_without_duplicates() {
        assert!(MINIMUM_CHARGE_MINOR.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(OMISE_LIMITS_MINOR.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn omise_limits_are_the_account_country_ones() {
        // Omise, "Currency and amount": by the country the account is registered in.
        assert_eq!(omise_limits_minor("thb"), Some((2_000, 15_000_000)));
        assert_eq!(omise_limits_minor("jpy"), Some((100, 6_000_000)));
        assert_eq!(omise_limits_minor("sgd"), Some((100, 2_000_000)));
        assert_eq!(omise_limits_minor("myr"), Some((100, 10_000_000)));
        assert_eq!(omise_limits_minor("usd"), None);
        assert_eq!(omise_limits_minor("THB"), None, "codes are lowercase here");
    }
}
