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

    /// Digits after the decimal point in the currency's minor unit.
    pub fn minor_unit_digits(self) -> u32 {
        match self {
            Self::Jpy => 0,
            _ => 2,
        }
    }

    /// The ISO 4217 numeric code (some PSP payloads carry it instead of the alphabetic one).
    pub fn iso_numeric(self) -> u16 {
        match self {
            Self::Jpy => 392,
            Self::Usd => 840,
            Self::Eur => 978,
            Self::Gbp => 826,
            Self::Thb => 764,
            Self::Sgd => 702,
        }
    }

    /// Converts a decimal amount in major units, as PSPs such as 2C2P write it (`"230.87"`,
    /// `"000000002500.90000"`), to minor units, exactly: no binary floats are involved.
    ///
    /// Accepted: one or more ASCII digits (leading zeros allowed), optionally followed by `.` and
    /// one or more digits. At most [`Currency::minor_unit_digits`] fractional digits may be
    /// significant: fewer are padded (`"30.5"` USD is 3050), more are refused unless the extra
    /// ones are zeros (`"30.500"` USD is 3050, `"30.501"` is `None`). Refused as well: an empty
    /// string, a sign, exponent notation, whitespace, `"1."`, `".5"`, and anything above
    /// [`MAX_AMOUNT_MINOR`] (checked without overflow, whatever the length).
    pub fn minor_from_decimal(self, text: &str) -> Option<i64> {
        minor_from_decimal_digits(text, self.minor_unit_digits())
    }

    /// Writes `minor` units as a decimal in major units with exactly
    /// [`Currency::minor_unit_digits`] fractional digits: JPY 1500 is `"1500"`, USD 1999 is
    /// `"19.99"`, THB 5 is `"0.05"`. The inverse of [`Currency::minor_from_decimal`] on
    /// `0..=MAX_AMOUNT_MINOR`.
    pub fn decimal_from_minor(self, minor: i64) -> String {
        decimal_from_minor_digits(minor, self.minor_unit_digits())
    }
}

/// [`Currency::minor_from_decimal`] for a currency with `digits` fractional digits.
fn minor_from_decimal_digits(text: &str, digits: u32) -> Option<i64> {
    let (whole, fraction) = match text.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (text, None),
    };
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(whole) || fraction.is_some_and(|f| !all_digits(f)) {
        return None;
    }
    let fraction = fraction.unwrap_or("").as_bytes();
    let width = usize::try_from(digits).ok()?;
    let (kept, rest) = fraction.split_at(fraction.len().min(width));
    if rest.iter().any(|&b| b != b'0') {
        return None;
    }
    let mut minor: i64 = 0;
    let padding = std::iter::repeat_n(b'0', width - kept.len());
    for digit in whole.bytes().chain(kept.iter().copied()).chain(padding) {
        minor = minor
            .checked_mul(10)?
            .checked_add(i64::from(digit - b'0'))?;
        if minor > MAX_AMOUNT_MINOR {
            return None;
        }
    }
    Some(minor)
}

/// [`Currency::decimal_from_minor`] for a currency with `digits` fractional digits.
fn decimal_from_minor_digits(minor: i64, digits: u32) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let magnitude = minor.unsigned_abs();
    if digits == 0 {
        return format!("{sign}{magnitude}");
    }
    let scale = 10u64.pow(digits);
    let width = usize::try_from(digits).unwrap_or(0);
    format!(
        "{sign}{}.{:0width$}",
        magnitude / scale,
        magnitude % scale,
        width = width
    )
}

impl std::fmt::Display for Currency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_decimal_currencies_take_whole_units() {
        assert_eq!(Currency::Jpy.minor_from_decimal("1500"), Some(1500));
        assert_eq!(Currency::Jpy.minor_from_decimal("1500.000"), Some(1500));
        assert_eq!(Currency::Jpy.minor_from_decimal("0"), Some(0));
        assert_eq!(Currency::Jpy.minor_from_decimal("1500.5"), None);
        assert_eq!(Currency::Jpy.decimal_from_minor(1500), "1500");
        assert_eq!(Currency::Jpy.decimal_from_minor(0), "0");
    }

    #[test]
    fn two_decimal_currencies_scale_exactly() {
        for currency in [
            Currency::Usd,
            Currency::Eur,
            Currency::Gbp,
            Currency::Thb,
            Currency::Sgd,
        ] {
            assert_eq!(
                currency.minor_from_decimal("19.99"),
                Some(1999),
                "{currency}"
            );
            assert_eq!(
                currency.minor_from_decimal("30.0"),
                Some(3000),
                "{currency}"
            );
            assert_eq!(currency.minor_from_decimal("30"), Some(3000), "{currency}");
            assert_eq!(currency.minor_from_decimal("0.05"), Some(5), "{currency}");
            assert_eq!(currency.decimal_from_minor(1999), "19.99", "{currency}");
            assert_eq!(currency.decimal_from_minor(5), "0.05", "{currency}");
            assert_eq!(currency.decimal_from_minor(3000), "30.00", "{currency}");
        }
        // 2C2P's notification sample and its D(12,5) field format.
        assert_eq!(Currency::Thb.minor_from_decimal("230.87"), Some(23087));
        assert_eq!(Currency::Thb.minor_from_decimal("230.87000"), Some(23087));
        assert_eq!(
            Currency::Thb.minor_from_decimal("000000002500.90000"),
            Some(250090)
        );
        // Values that are inexact in binary floating point stay exact.
        assert_eq!(Currency::Usd.minor_from_decimal("0.29"), Some(29));
        assert_eq!(Currency::Usd.minor_from_decimal("1.15"), Some(115));
        assert_eq!(Currency::Usd.minor_from_decimal("4.35"), Some(435));
    }

    #[test]
    fn the_largest_amount_round_trips_and_one_more_is_refused() {
        for currency in Currency::ALL {
            let text = currency.decimal_from_minor(MAX_AMOUNT_MINOR);
            assert_eq!(
                currency.minor_from_decimal(&text),
                Some(MAX_AMOUNT_MINOR),
                "{currency}"
            );
            let above = currency.decimal_from_minor(MAX_AMOUNT_MINOR + 1);
            assert_eq!(currency.minor_from_decimal(&above), None, "{currency}");
            for minor in [0, 1, 9, 10, 99, 100, 101, 12_345, 9_999_999] {
                let text = currency.decimal_from_minor(minor);
                assert_eq!(currency.minor_from_decimal(&text), Some(minor), "{text}");
            }
        }
        assert_eq!(
            Currency::Jpy.decimal_from_minor(MAX_AMOUNT_MINOR),
            "99999999"
        );
        assert_eq!(
            Currency::Usd.decimal_from_minor(MAX_AMOUNT_MINOR),
            "999999.99"
        );
        assert_eq!(Currency::Usd.minor_from_decimal("1000000"), None);
        // Overflow is checked, whatever the length; leading zeros are only zeros.
        assert_eq!(
            Currency::Usd.minor_from_decimal("99999999999999999999999999.99"),
            None
        );
        assert_eq!(
            Currency::Usd.minor_from_decimal("00000000000000000000000000001.00"),
            Some(100)
        );
    }

    #[test]
    fn malformed_or_inexact_decimals_are_refused() {
        for text in [
            "", "1.234", "1.001", "-1", "+1", "1e3", "1E3", "1.", ".5", ".", "1..0", "1.0.0", " 1",
            "1 ", "1,000", "0x10", "NaN", "inf", "1_000", "１",
        ] {
            assert_eq!(Currency::Usd.minor_from_decimal(text), None, "{text:?}");
        }
        assert_eq!(Currency::Usd.minor_from_decimal("1.230"), Some(123));
    }

    #[test]
    fn negative_amounts_are_written_with_a_sign() {
        assert_eq!(Currency::Usd.decimal_from_minor(-5), "-0.05");
        assert_eq!(Currency::Jpy.decimal_from_minor(-5), "-5");
        assert_eq!(
            Currency::Usd.decimal_from_minor(i64::MIN),
            "-92233720368547758.08"
        );
    }

    /// No supported currency has three decimals (KWD, BHD...); the conversion is written for
    /// any exponent, checked here with three.
    #[test]
    fn three_decimal_exponents_convert_too() {
        assert_eq!(minor_from_decimal_digits("1.234", 3), Some(1234));
        assert_eq!(minor_from_decimal_digits("1.2", 3), Some(1200));
        assert_eq!(minor_from_decimal_digits("1.23450", 3), None);
        assert_eq!(minor_from_decimal_digits("1.23400", 3), Some(1234));
        assert_eq!(decimal_from_minor_digits(1234, 3), "1.234");
        assert_eq!(decimal_from_minor_digits(5, 3), "0.005");
        assert_eq!(
            minor_from_decimal_digits(&decimal_from_minor_digits(MAX_AMOUNT_MINOR, 3), 3),
            Some(MAX_AMOUNT_MINOR)
        );
    }

    #[test]
    fn numeric_codes_are_iso_4217() {
        let codes: Vec<u16> = Currency::ALL.iter().map(|c| c.iso_numeric()).collect();
        assert_eq!(codes, [392, 840, 978, 826, 764, 702]);
    }
}

/// An integer as a request carries it: a JSON integer, or a number with no fractional part
/// (`1500.0`, `1.5e3`), which JSON Schema's `integer` also admits. The number's text is read
/// exactly, never through a float, so `499.99999999999999` is a fraction (refused) although it
/// rounds to 500 as a float. Anything else, or an integer outside `i64`, is refused as "an
/// integer".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Integer(pub i64);

impl<'de> Deserialize<'de> for Integer {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{Error, Unexpected};
        let raw = Box::<serde_json::value::RawValue>::deserialize(deserializer)?;
        let text = raw.get().trim();
        let expected = &"an integer";
        match exact_integer(text) {
            Exact::Integer(v) => Ok(Integer(v)),
            Exact::Fraction => Err(D::Error::invalid_value(
                Unexpected::Other("a number with a fraction"),
                expected,
            )),
            Exact::OutOfRange => Err(D::Error::invalid_value(
                Unexpected::Other("a number outside the 64-bit integers"),
                expected,
            )),
            Exact::NotANumber => {
                let value: serde_json::Value =
                    serde_json::from_str(text).map_err(D::Error::custom)?;
                let unexpected = match &value {
                    serde_json::Value::Null => Unexpected::Unit,
                    serde_json::Value::Bool(b) => Unexpected::Bool(*b),
                    serde_json::Value::String(s) => Unexpected::Str(s),
                    serde_json::Value::Array(_) => Unexpected::Seq,
                    serde_json::Value::Object(_) => Unexpected::Map,
                    serde_json::Value::Number(_) => Unexpected::Other("a number"),
                };
                Err(D::Error::invalid_type(unexpected, expected))
            }
        }
    }
}

/// What the text of a JSON value is, read as an exact decimal.
#[derive(Debug, PartialEq, Eq)]
enum Exact {
    Integer(i64),
    Fraction,
    OutOfRange,
    NotANumber,
}

/// Reads a JSON number's text (`-?digits[.digits][e[+-]digits]`) exactly.
fn exact_integer(text: &str) -> Exact {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) => (&body[..at], Some(&body[at + 1..])),
        None => (body, None),
    };
    let (whole, fraction) = match mantissa.split_once('.') {
        Some((whole, fraction)) => (whole, fraction),
        None => (mantissa, ""),
    };
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (mantissa.contains('.') && !digits(fraction)) {
        return Exact::NotANumber;
    }
    let exponent: i64 = match exponent {
        None => 0,
        Some(raw) => {
            let unsigned = raw.strip_prefix(['+', '-']).unwrap_or(raw);
            if !digits(unsigned) {
                return Exact::NotANumber;
            }
            // An exponent past the text's own length plus 19 digits cannot be brought back
            // into range by the digits given, either way: clamped there, it still decides.
            let bound = text.len() as i64 + 20;
            let magnitude: i64 = unsigned.parse().unwrap_or(i64::MAX).min(bound);
            if raw.starts_with('-') {
                -magnitude
            } else {
                magnitude
            }
        }
    };
    // The value is `significand × 10^scale`, with no leading zeros in the significand.
    let all = format!("{whole}{fraction}");
    let significand = all.trim_start_matches('0');
    if significand.is_empty() {
        return Exact::Integer(0);
    }
    let scale = exponent - fraction.len() as i64;
    let integral: String = if scale >= 0 {
        if significand.len() as i64 + scale > 19 {
            return Exact::OutOfRange;
        }
        let zeros = usize::try_from(scale).unwrap_or(usize::MAX);
        format!("{significand}{}", "0".repeat(zeros))
    } else {
        let cut = usize::try_from(-scale).unwrap_or(usize::MAX);
        if cut >= significand.len() {
            return Exact::Fraction;
        }
        let (kept, dropped) = significand.split_at(significand.len() - cut);
        if dropped.bytes().any(|b| b != b'0') {
            return Exact::Fraction;
        }
        kept.to_owned()
    };
    let Ok(magnitude) = integral.parse::<i128>() else {
        return Exact::OutOfRange;
    };
    i64::try_from(if negative { -magnitude } else { magnitude })
        .map_or(Exact::OutOfRange, Exact::Integer)
}

/// `#[serde(deserialize_with = "integer")]` for an `i64` field: see [`Integer`].
pub fn integer<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    Integer::deserialize(deserializer).map(|Integer(v)| v)
}

/// [`integer`] for an `Option<i64>` field (`null` is `None`).
pub fn optional_integer<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<i64>, D::Error> {
    Option::<Integer>::deserialize(deserializer).map(|v| v.map(|Integer(v)| v))
}

#[cfg(test)]
mod integer_tests {
    use super::Integer;

    fn parse(json: &str) -> Result<i64, String> {
        serde_json::from_str::<Integer>(json)
            .map(|Integer(v)| v)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn integral_numbers_are_integers_and_fractions_are_not() {
        assert_eq!(parse("11873"), Ok(11873));
        assert_eq!(parse("11873.0"), Ok(11873));
        assert_eq!(parse("1.5e3"), Ok(1500));
        assert_eq!(parse("-2"), Ok(-2));
        assert_eq!(parse("9007199254740992.0"), Ok(9_007_199_254_740_992));
        // Read exactly, not through a float.
        assert_eq!(parse("9007199254740993.0"), Ok(9_007_199_254_740_993));
        assert_eq!(parse("1250e-1"), Ok(125));
        assert_eq!(parse("-0.0"), Ok(0));
        assert_eq!(parse("0e999999999999999999999"), Ok(0));
        assert_eq!(parse("9223372036854775807"), Ok(i64::MAX));
        assert_eq!(parse("-9223372036854775808"), Ok(i64::MIN));
        assert_eq!(parse("92233720368547758.07e2"), Ok(i64::MAX));
        for refused in [
            "1.5",
            "499.99999999999999",
            "500.00000000000001",
            "1e-1",
            "1e-99999999999999999999",
            "1e300",
            "1e99999999999999999999",
            "9223372036854775808",
            "\"1\"",
            "true",
            "null",
            "[1]",
            "{}",
            "18446744073709551615",
        ] {
            let error = parse(refused).expect_err(refused);
            assert!(error.contains("expected an integer"), "{refused}: {error}");
        }
    }

    #[test]
    fn a_long_fraction_meets_its_exponent_exactly() {
        // 0.000…05 with 99,999 zeros: its exponent decides however large it is.
        let tiny = format!("0.{}5", "0".repeat(99_999));
        assert_eq!(parse(&format!("{tiny}e100000")), Ok(5));
        assert_eq!(parse(&format!("{tiny}e100001")), Ok(50));
        assert!(parse(&format!("{tiny}e100000000000000000000")).is_err());
        assert!(parse(&format!("{tiny}e99999")).is_err());
    }
}
