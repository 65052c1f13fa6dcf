//! The request fingerprint: SHA-256 over a canonical JSON form of what the client sent.
//!
//! Canonical form: objects with keys sorted by code point, no insignificant whitespace,
//! strings and numbers as serde_json writes them. The same logical request therefore hashes
//! the same whatever its field order or spacing; `null` and an absent field stay different,
//! as do `1` and `1.0`, because a client that sends them means different things.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt;

/// Lowercase hex SHA-256 of a request's canonical form.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// Fingerprint of raw JSON bytes, as received on the wire: key order and whitespace do not
    /// count, values do.
    ///
    /// ```
    /// use payonce::idempotency::Fingerprint;
    /// let a = Fingerprint::of_json(br#"{"amount": 100, "currency": "usd"}"#).unwrap();
    /// let b = Fingerprint::of_json(br#"{"currency":"usd","amount":100}"#).unwrap();
    /// let c = Fingerprint::of_json(br#"{"currency":"usd","amount":101}"#).unwrap();
    /// assert_eq!(a, b);
    /// assert_ne!(a, c);
    /// ```
    pub fn of_json(raw: &[u8]) -> Result<Self, serde_json::Error> {
        let value: Value = serde_json::from_slice(raw)?;
        Ok(Self::of_value(&value))
    }

    /// Fingerprint of any serialisable request (a typed body, or a tuple of the fields that matter).
    pub fn of<T: Serialize + ?Sized>(request: &T) -> Result<Self, serde_json::Error> {
        Ok(Self::of_value(&serde_json::to_value(request)?))
    }

    /// Fingerprint of a JSON value.
    pub fn of_value(value: &Value) -> Self {
        let mut canonical = Vec::with_capacity(128);
        write_canonical(value, &mut canonical);
        Self(hex::encode(Sha256::digest(&canonical)))
    }

    /// Wraps a fingerprint read back from the store.
    pub fn from_stored(hex: String) -> Self {
        Self(hex)
    }

    /// The hex digest.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Writes `value` canonically; sorting is explicit so the result does not depend on
/// whether serde_json's `preserve_order` feature is enabled anywhere in the build.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (name, field)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(&Value::String(name.clone()), out);
                out.push(b':');
                write_canonical(field, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

fn write_scalar(value: &Value, out: &mut Vec<u8>) {
    // Serialising a scalar Value into a Vec cannot fail.
    let _ = serde_json::to_writer(out, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_order_and_whitespace_do_not_matter() {
        let a = Fingerprint::of_json(br#"{"order_id":"o1","order_version":2,"payment_method":"pm_card_visa","meta":{"x":1,"y":[1,2]}}"#).unwrap();
        let b = Fingerprint::of_json(
            b"{ \"payment_method\" : \"pm_card_visa\",\n\t\"meta\": {\"y\": [1, 2], \"x\": 1},\r\n \"order_version\":2, \"order_id\":\"o1\" }",
        )
        .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.as_str().len(), 64);
    }

    #[test]
    fn different_requests_differ() {
        let base = Fingerprint::of_json(br#"{"a":1}"#).unwrap();
        for other in [
            &br#"{"a":2}"#[..],
            br#"{"a":"1"}"#,
            br#"{"a":null}"#,
            br#"{}"#,
            br#"{"a":1,"b":null}"#,
            br#"{"a":[1]}"#,
        ] {
            assert_ne!(
                base,
                Fingerprint::of_json(other).unwrap(),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
        // Array order is meaningful.
        assert_ne!(
            Fingerprint::of_json(b"[1,2]").unwrap(),
            Fingerprint::of_json(b"[2,1]").unwrap()
        );
    }

    #[test]
    fn typed_and_raw_forms_agree() {
        #[derive(Serialize)]
        struct Pay<'a> {
            payment_method: &'a str,
            order_id: &'a str,
        }
        let typed = Fingerprint::of(&Pay {
            payment_method: "pm_x",
            order_id: "o1",
        })
        .unwrap();
        let raw = Fingerprint::of_json(br#"{"order_id":"o1","payment_method":"pm_x"}"#).unwrap();
        assert_eq!(typed, raw);
    }

    #[test]
    fn known_vector() {
        // sha256 of the canonical bytes {"a":1,"b":"x"}
        let fp = Fingerprint::of_json(br#"{"b":"x", "a":1}"#).unwrap();
        assert_eq!(
            fp.as_str(),
            hex::encode(Sha256::digest(br#"{"a":1,"b":"x"}"#))
        );
    }

    #[test]
    fn malformed_json_is_an_error() {
        assert!(Fingerprint::of_json(b"{\"a\":").is_err());
    }
}
