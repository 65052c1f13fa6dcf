//! Currencies and amounts in minor units.

use serde::{Deserialize, Serialize};

/// The largest amount payonce accepts, in minor units (Stripe's eight-digit limit).
pub const MAX_AMOUNT_MINOR: i64 = 99_999_999;

/// A supported ISO 4217 currency, written in lowercase on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Currency {
    /// Japanese yen (no minor unit).
    Jpy,
    /// US dollar (cents).
    Usd,
    /// Euro (cents).
    Eur,
    /// Pound sterling (pence).
    Gbp,
    /// Thai baht (satang).
    Thb,
    /// Singapore dollar (cents).
    Sgd,
}

impl Currency {
    /// Every supported currency.
    pub const ALL: [Currency; 6] = [
        Self::Jpy,
        Self::Usd,
        Self::Eur,
        Self::Gbp,
        Self::Thb,
        Self::Sgd,
    ];

    /// The lowercase ISO code.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Jpy => "jpy",
            Self::Usd => "usd",
            Self::Eur => "eur",
            Self::Gbp => "gbp",
            Self::Thb => "thb",
            Self::Sgd => "sgd",
        }
    }

    /// Parses a lowercase ISO code; anything else (including uppercase) is unsupported.
    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == code)
    }

    /// Stripe's minimum charge in this currency, in minor units (Stripe docs, "Minimum and
    /// maximum charge amounts"; each order currency is treated as its own settlement
    /// currency). Stripe refuses less with `amount_too_small`.
    pub fn stripe_minimum_minor(self) -> i64 {
        match self {
            Self::Jpy | Self::Usd | Self::Eur | Self::Sgd => 50,
            Self::Gbp => 30,
            Self::Thb => 1000,
        }
    }

    /// Digits after the decimal point in the currency's minor unit.
    pub fn minor_unit_digits(self) -> u32 {
        match self {
            Self::Jpy => 0,
            _ => 2,
        }
    }
}

impl std::fmt::Display for Currency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
