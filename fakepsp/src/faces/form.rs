//! Form-encoded request parameters (`application/x-www-form-urlencoded`, bracket syntax), as the
//! Stripe and Omise faces take them.
//!
//! Parameters are kept as a sorted map of the flattened names (`metadata[payment_id]` stays one
//! name), which is also what an idempotency key is compared on: two requests are "the same"
//! when they carry the same parameter set, whatever their byte order or percent-encoding.

use std::collections::BTreeMap;

/// Flattened request parameters, name → value; the last occurrence of a name wins.
pub(crate) type Params = BTreeMap<String, String>;

/// Parses an `application/x-www-form-urlencoded` body or query string.
pub(crate) fn parse_form(input: &[u8]) -> Params {
    url::form_urlencoded::parse(input).into_owned().collect()
}

/// Collects `metadata[<k>]=<v>` into a map (the bracket syntax both faces take); `Err` names
/// the first `metadata...` parameter that is not of that form.
pub(crate) fn collect_metadata(params: &Params) -> Result<BTreeMap<String, String>, &str> {
    let mut metadata = BTreeMap::new();
    for (name, value) in params {
        let Some(rest) = name.strip_prefix("metadata") else {
            continue;
        };
        // `metadata=` (empty) is Stripe's way of saying "no metadata"; nothing to collect.
        if rest.is_empty() && value.is_empty() {
            continue;
        }
        match rest.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            Some(key) if !key.is_empty() && !key.contains(['[', ']']) => {
                metadata.insert(key.to_owned(), value.clone());
            }
            _ => return Err(name),
        }
    }
    Ok(metadata)
}
