//! Square's webhook signature: `x-square-hmacsha256-signature` holds the standard base64 of
//! HMAC-SHA256, keyed with the subscription's signature key (its text as UTF-8 bytes), over the
//! subscription's notification URL followed by the raw body. The URL is ours, from
//! configuration, byte for byte as registered with Square: never one a request names. Square
//! signs no timestamp, so there is no staleness check; replays are harmless through event
//! dedup (`event_id`) and the cross-checks every settlement passes. The legacy
//! `x-square-signature` (HMAC-SHA1 over the same string) is not accepted.
//!
//! Errors map as for the other schemes: no header → [`SignatureError::Missing`] (400); a header
//! that is not text or not base64 → `Malformed` (400); a signature that does not match →
//! `NoValidSignature` (401). The comparison is in constant time.
//!
//! This is the verifier alone: the Square adapter, its event parsing and its place among the
//! deployment's PSPs come with it (not yet built).

use super::b64::{self, Alphabet};
use crate::ports::SignatureError;
use hmac::{Hmac, KeyInit, Mac};
use lambda_http::http::HeaderMap;
use sha2::Sha256;

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "x-square-hmacsha256-signature";

/// Why a Square signature key or notification URL was refused at construction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SquareSignatureSetupError {
    /// No signature key: nothing could ever verify.
    #[error("no Square webhook signature key is configured")]
    NoKey,
    /// No notification URL: the signed string would not be the subscription's.
    #[error("no Square webhook notification URL is configured")]
    NoUrl,
}

/// Verifies Square notifications for one subscription.
pub struct SquareSignature {
    key: Vec<u8>,
    notification_url: String,
}

impl std::fmt::Debug for SquareSignature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SquareSignature")
            .field("notification_url", &self.notification_url)
            .field("key", &"<redacted>")
            .finish()
    }
}

impl SquareSignature {
    /// The verifier for the subscription at `notification_url` (exactly as registered with
    /// Square) with its `signature_key`. Neither may be empty.
    pub fn new(
        signature_key: &str,
        notification_url: &str,
    ) -> Result<Self, SquareSignatureSetupError> {
        if signature_key.is_empty() {
            return Err(SquareSignatureSetupError::NoKey);
        }
        if notification_url.is_empty() {
            return Err(SquareSignatureSetupError::NoUrl);
        }
        Ok(Self {
            key: signature_key.as_bytes().to_vec(),
            notification_url: notification_url.to_owned(),
        })
    }

    /// Whether `headers` carry Square's signature of `body` for our subscription.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), SignatureError> {
        let header = headers
            .get(SIGNATURE_HEADER)
            .ok_or(SignatureError::Missing)?;
        let text = header.to_str().map_err(|_| SignatureError::Malformed)?;
        let signature = b64::decode(text.trim(), Alphabet::Standard)
            .filter(|bytes| !bytes.is_empty())
            .ok_or(SignatureError::Malformed)?;
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(self.notification_url.as_bytes());
        mac.update(body);
        // verify_slice compares in constant time (and refuses any other length).
        mac.verify_slice(&signature)
            .map_err(|_| SignatureError::NoValidSignature)
    }

    /// The signature Square would send for `body` (for the fake PSP and tests).
    pub fn sign(&self, body: &[u8]) -> String {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(self.notification_url.as_bytes());
        mac.update(body);
        b64::encode(&mac.finalize().into_bytes(), Alphabet::Standard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lambda_http::http::HeaderValue;
    use serde_json::Value;

    fn headers(signature: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(signature) = signature {
            headers.insert(SIGNATURE_HEADER, HeaderValue::from_str(signature).unwrap());
        }
        headers
    }

    /// Every vector of testdata/square-webhook-signatures.json, computed independently of this
    /// code (a copy of the steering repository's shared/testdata, checked against it when that
    /// folder sits beside the repository, as in CI).
    #[test]
    fn passes_the_independent_vectors() {
        let here = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/square-webhook-signatures.json"
        );
        let text = std::fs::read_to_string(here).expect("the vendored test vectors");
        let upstream = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/testdata/square-webhook-signatures.json"
        );
        if let Ok(original) = std::fs::read_to_string(upstream) {
            assert_eq!(
                original, text,
                "the vendored vectors drifted from shared/testdata"
            );
        }
        let vectors: Value = serde_json::from_str(&text).unwrap();
        let verifier = SquareSignature::new(
            vectors["signature_key"].as_str().unwrap(),
            vectors["notification_url"].as_str().unwrap(),
        )
        .unwrap();
        let cases = vectors["cases"].as_array().unwrap();
        assert!(cases.len() >= 9);
        for case in cases {
            let name = &case["name"];
            let body = case["body"].as_str().unwrap().as_bytes();
            let signature = case["signature"].as_str().unwrap();
            let outcome = verifier.verify(&headers(Some(signature)), body);
            let valid = case["valid"].as_bool().unwrap();
            assert_eq!(outcome.is_ok(), valid, "{name}: {outcome:?}");
            if valid {
                assert_eq!(verifier.sign(body), signature, "{name}");
            } else {
                let expected = match case["name"].as_str().unwrap_or("") {
                    // An empty header is no signature; hex digits are not base64 of 32 bytes.
                    "empty" => SignatureError::Malformed,
                    _ => SignatureError::NoValidSignature,
                };
                assert_eq!(outcome, Err(expected), "{name}");
            }
        }
    }

    #[test]
    fn a_missing_or_unreadable_header_is_refused_and_setup_needs_a_key_and_a_url() {
        let verifier =
            SquareSignature::new("k", "https://api.example.com/webhooks/square").unwrap();
        assert_eq!(
            verifier.verify(&headers(None), b"{}"),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verifier.verify(&headers(Some("not base64!")), b"{}"),
            Err(SignatureError::Malformed)
        );
        let signed = verifier.sign(b"{}");
        assert_eq!(verifier.verify(&headers(Some(&signed)), b"{}"), Ok(()));
        assert_eq!(
            verifier.verify(&headers(Some(&signed)), b"{ }"),
            Err(SignatureError::NoValidSignature)
        );
        assert_eq!(
            SquareSignature::new("", "https://x").unwrap_err(),
            SquareSignatureSetupError::NoKey
        );
        assert_eq!(
            SquareSignature::new("k", "").unwrap_err(),
            SquareSignatureSetupError::NoUrl
        );
        assert!(!format!("{verifier:?}").contains("\"k\""));
    }
}
