//! Dates as the faces write them.

/// Epoch seconds as ISO 8601 UTC (`2015-01-15T05:00:29Z`), as Omise writes `created_at`.
pub(crate) fn iso8601(epoch_s: i64) -> String {
    let (days, seconds) = (epoch_s.div_euclid(86_400), epoch_s.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (H. Hinnant's `civil_from_days`).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        seconds / 3_600,
        seconds % 3_600 / 60,
        seconds % 60
    )
}

/// Epoch milliseconds as RFC 3339 UTC with milliseconds (`2021-10-13T21:14:29.577Z`), as Square
/// writes its timestamps.
pub(crate) fn rfc3339_ms(epoch_ms: i64) -> String {
    let seconds = iso8601(epoch_ms.div_euclid(1000));
    let whole = seconds.strip_suffix('Z').unwrap_or(&seconds);
    format!("{whole}.{:03}Z", epoch_ms.rem_euclid(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_at_is_iso_8601_utc() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00Z");
        // omise-go's charges-post fixture.
        assert_eq!(iso8601(1_421_298_029), "2015-01-15T05:00:29Z");
        assert_eq!(iso8601(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso8601(-86_401), "1969-12-30T23:59:59Z");
    }

    #[test]
    fn square_timestamps_carry_milliseconds() {
        // Square's CreatePayment example: "2021-10-13T21:14:29.577Z".
        assert_eq!(rfc3339_ms(1_634_159_669_577), "2021-10-13T21:14:29.577Z");
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
    }
}
