//! How the PayPal face's webhook deliveries are signed, as PayPal signs them: the RSA key, its
//! self-signed certificate (served at `GET /_fake/paypal/cert.pem`), and the signature itself.
//!
//! PayPal's scheme (research §9: `notifications_webhooks_v1.json`'s `verify_webhook_signature`;
//! the official Python SDK's `WebhookEvent.verify`): `PAYPAL-TRANSMISSION-SIG` is the standard
//! base64 of an RSASSA-PKCS1-v1_5 SHA-256 signature (`PAYPAL-AUTH-ALGO: SHA256withRSA`) over
//! `<transmission id>|<transmission time>|<webhook id>|<crc32 of the raw body, unsigned
//! decimal>`, by the key of the certificate `PAYPAL-CERT-URL` names; the webhook id is the
//! receiver's own subscription's.
//!
//! RSA is aws-lc-rs's (already linked by the HTTP client's TLS, so no new build); the
//! certificate's ASN.1 is x509-cert's and der's; the CRC is crc32fast's. Nothing here implements
//! a cryptographic primitive.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rsa::{KeyPair, KeySize};
use aws_lc_rs::signature::{KeyPair as _, RSA_PKCS1_SHA256};
use base64::Engine as _;
use x509_cert::der::asn1::{Any, BitString, UtcTime};
use x509_cert::der::oid::ObjectIdentifier;
use x509_cert::der::{Decode, Encode};
use x509_cert::name::Name;
use x509_cert::serial_number::SerialNumber;
use x509_cert::spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};
use x509_cert::time::{Time, Validity};
use x509_cert::{Certificate, TbsCertificate, Version};

/// The webhook id the PayPal face signs with unless told otherwise
/// ([`FakePspConfig::paypal_webhook_id`](crate::FakePspConfig::paypal_webhook_id)): 17
/// upper-case letters and digits, like the ids PayPal gives a subscription.
pub const DEFAULT_PAYPAL_WEBHOOK_ID: &str = "PAYONCEFAKEWH0001";

/// The subject (and issuer) common name of the fake's certificate: PayPal's is
/// `messageverificationcerts.paypal.com` (UNCONFIRMED), and a receiver that only accepts names
/// under `.paypal.com` must be told to accept the fake's.
pub const PAYPAL_CERT_COMMON_NAME: &str = "messageverificationcerts.paypal.example";

/// The value of `PAYPAL-AUTH-ALGO` the fake sends.
pub const PAYPAL_AUTH_ALGO: &str = "SHA256withRSA";

/// Where the PayPal face serves its certificate, under its base URL (`PAYPAL-CERT-URL`).
pub const PAYPAL_CERT_PATH: &str = "/_fake/paypal/cert.pem";

/// `sha256WithRSAEncryption` (RFC 4055): the certificate's own signature algorithm.
const SHA256_WITH_RSA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11");

/// How long the certificate is valid: a year from a day before it is made.
const VALIDITY: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// How far before "now" the certificate's validity starts, so a receiver whose clock is a
/// little behind accepts it.
const BACKDATE: Duration = Duration::from_secs(24 * 60 * 60);

/// Why a [`PayPalSigner`] could not be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayPalKeyError(String);

impl fmt::Display for PayPalKeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PayPal signing key: {}", self.0)
    }
}

impl std::error::Error for PayPalKeyError {}

/// An RSA key that signs PayPal webhook deliveries, with the self-signed X.509 certificate a
/// receiver verifies them with. Cheap to share behind an `Arc`; its `Debug` shows no key.
pub struct PayPalSigner {
    key: KeyPair,
    certificate_pem: String,
}

impl fmt::Debug for PayPalSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PayPalSigner(<RSA key>)")
    }
}

impl PayPalSigner {
    /// A new RSA-2048 key, with a certificate valid from a day ago for a year.
    pub fn generate() -> Result<Self, PayPalKeyError> {
        let key = KeyPair::generate(KeySize::Rsa2048)
            .map_err(|_| PayPalKeyError("RSA key generation failed".to_owned()))?;
        Self::with_key(key, default_not_before_s())
    }

    /// The key in `pem`: PKCS#8 (`-----BEGIN PRIVATE KEY-----`, what `openssl genpkey` writes)
    /// or PKCS#1 (`-----BEGIN RSA PRIVATE KEY-----`), RSA of 2048 to 8192 bits, with a
    /// certificate valid from a day ago for a year.
    pub fn from_pem(pem: &str) -> Result<Self, PayPalKeyError> {
        let key = if let Some(der) = pem_body(pem, "PRIVATE KEY") {
            KeyPair::from_pkcs8(&der)
                .map_err(|e| PayPalKeyError(format!("not a PKCS#8 RSA private key: {e}")))?
        } else if let Some(der) = pem_body(pem, "RSA PRIVATE KEY") {
            KeyPair::from_der(&der)
                .map_err(|e| PayPalKeyError(format!("not a PKCS#1 RSA private key: {e}")))?
        } else {
            return Err(PayPalKeyError(
                "no PEM private key (BEGIN PRIVATE KEY or BEGIN RSA PRIVATE KEY)".to_owned(),
            ));
        };
        Self::with_key(key, default_not_before_s())
    }

    /// The same key with its certificate issued anew, valid from `not_before_s` (epoch seconds)
    /// for a year: for a receiver whose clock is not the machine's (the simulation's).
    pub fn valid_from(self, not_before_s: i64) -> Result<Self, PayPalKeyError> {
        Self::with_key(self.key, not_before_s)
    }

    /// The self-signed certificate of the key, PEM (`-----BEGIN CERTIFICATE-----`): subject and
    /// issuer `CN=`[`PAYPAL_CERT_COMMON_NAME`], `sha256WithRSAEncryption`.
    pub fn certificate_pem(&self) -> &str {
        &self.certificate_pem
    }

    /// The private key as PKCS#8 PEM, e.g. to hand a generated key to another process.
    pub fn private_key_pem(&self) -> Result<String, PayPalKeyError> {
        let der = self
            .key
            .as_der()
            .map_err(|_| PayPalKeyError("the key cannot be encoded".to_owned()))?;
        Ok(pem("PRIVATE KEY", der.as_ref()))
    }

    /// RSASSA-PKCS1-v1_5 SHA-256 of `message`, raw.
    fn sign_raw(&self, message: &[u8]) -> Result<Vec<u8>, PayPalKeyError> {
        let mut signature = vec![0; self.key.public_modulus_len()];
        let rng = aws_lc_rs::rand::SystemRandom::new();
        self.key
            .sign(&RSA_PKCS1_SHA256, &rng, message, &mut signature)
            .map_err(|_| PayPalKeyError("signing failed".to_owned()))?;
        Ok(signature)
    }

    /// A signer for `key` whose certificate is valid from `not_before_s` for a year.
    fn with_key(key: KeyPair, not_before_s: i64) -> Result<Self, PayPalKeyError> {
        let certificate_pem = self_signed_certificate(&key, not_before_s)?;
        Ok(Self {
            key,
            certificate_pem,
        })
    }
}

/// The string PayPal signs for a delivery: `<transmission_id>|<transmission_time>|<webhook_id>|
/// <CRC-32 of the raw body, unsigned decimal>`.
pub fn paypal_signed_string(
    transmission_id: &str,
    transmission_time: &str,
    webhook_id: &str,
    body: &[u8],
) -> String {
    format!(
        "{transmission_id}|{transmission_time}|{webhook_id}|{}",
        crc32fast::hash(body)
    )
}

/// Computes `PAYPAL-TRANSMISSION-SIG` for a delivery of `body` sent with these
/// `PAYPAL-TRANSMISSION-ID` and `PAYPAL-TRANSMISSION-TIME` to the subscription `webhook_id`:
/// standard base64 (padded) of the RSASSA-PKCS1-v1_5 SHA-256 signature of
/// [`paypal_signed_string`] by `signer`'s key. Receivers verify it with the public key of
/// [`PayPalSigner::certificate_pem`]. Empty only if the key cannot sign (it always can).
pub fn sign_paypal_webhook(
    signer: &PayPalSigner,
    transmission_id: &str,
    transmission_time: &str,
    webhook_id: &str,
    body: &[u8],
) -> String {
    let message = paypal_signed_string(transmission_id, transmission_time, webhook_id, body);
    signer
        .sign_raw(message.as_bytes())
        .map(|signature| base64::engine::general_purpose::STANDARD.encode(signature))
        .unwrap_or_default()
}

/// A day before now, epoch seconds.
fn default_not_before_s() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .saturating_sub(BACKDATE);
    i64::try_from(now.as_secs()).unwrap_or(0)
}

/// The self-signed certificate of `key`, valid from `not_before_s` for a year, PEM.
fn self_signed_certificate(key: &KeyPair, not_before_s: i64) -> Result<String, PayPalKeyError> {
    fn error(what: &'static str) -> impl Fn(x509_cert::der::Error) -> PayPalKeyError {
        move |e| PayPalKeyError(format!("{what}: {e}"))
    }
    let spki_der = key
        .public_key()
        .as_der()
        .map_err(|_| PayPalKeyError("the public key cannot be encoded".to_owned()))?;
    let subject_public_key_info =
        SubjectPublicKeyInfoOwned::from_der(spki_der.as_ref()).map_err(error("public key"))?;
    let name = Name::from_str(&format!("CN={PAYPAL_CERT_COMMON_NAME}")).map_err(error("name"))?;
    let not_before = Duration::from_secs(u64::try_from(not_before_s).unwrap_or(0));
    let validity = Validity {
        not_before: Time::UtcTime(UtcTime::from_unix_duration(not_before).map_err(error("time"))?),
        not_after: Time::UtcTime(
            UtcTime::from_unix_duration(not_before.saturating_add(VALIDITY))
                .map_err(error("time"))?,
        ),
    };
    let algorithm = AlgorithmIdentifierOwned {
        oid: SHA256_WITH_RSA,
        parameters: Some(Any::null()),
    };
    // A positive serial from the key's moment and modulus: distinct per key and start, with no
    // randomness needed.
    let serial = crc32fast::hash(spki_der.as_ref());
    let tbs_certificate = TbsCertificate {
        version: Version::V3,
        serial_number: SerialNumber::from((u64::from(serial) << 20) | 1),
        signature: algorithm.clone(),
        issuer: name.clone(),
        validity,
        subject: name,
        subject_public_key_info,
        issuer_unique_id: None,
        subject_unique_id: None,
        extensions: None,
    };
    let tbs_der = tbs_certificate.to_der().map_err(error("certificate"))?;
    let signature = {
        let mut signature = vec![0; key.public_modulus_len()];
        let rng = aws_lc_rs::rand::SystemRandom::new();
        key.sign(&RSA_PKCS1_SHA256, &rng, &tbs_der, &mut signature)
            .map_err(|_| PayPalKeyError("signing the certificate failed".to_owned()))?;
        signature
    };
    let certificate = Certificate {
        tbs_certificate,
        signature_algorithm: algorithm,
        signature: BitString::from_bytes(&signature).map_err(error("signature"))?,
    };
    let der = certificate.to_der().map_err(error("certificate"))?;
    Ok(pem("CERTIFICATE", &der))
}

/// `der` as PEM with this label, 64 characters a line.
fn pem(label: &str, der: &[u8]) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(der);
    let mut text = format!("-----BEGIN {label}-----\n");
    for line in encoded.as_bytes().chunks(64) {
        text.push_str(&String::from_utf8_lossy(line));
        text.push('\n');
    }
    text.push_str(&format!("-----END {label}-----\n"));
    text
}

/// The DER inside the first PEM block labelled exactly `label`, if there is one.
fn pem_body(pem: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = pem.find(&begin)? + begin.len();
    let stop = start + pem[start..].find(&end)?;
    let base64: String = pem[start..stop]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(base64)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::signature::{UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};

    /// The public key (PKCS#1 `RSAPublicKey`) of a PEM certificate, read with x509-cert.
    fn certificate_key(pem_text: &str) -> (Certificate, Vec<u8>) {
        let der = pem_body(pem_text, "CERTIFICATE").expect("a PEM certificate");
        let certificate = Certificate::from_der(&der).expect("X.509");
        let key = certificate
            .tbs_certificate
            .subject_public_key_info
            .subject_public_key
            .as_bytes()
            .expect("whole bytes")
            .to_vec();
        (certificate, key)
    }

    #[test]
    fn the_signed_string_is_paypals() {
        // crc32("hello") = 907060870 (0x3610a686), unsigned.
        assert_eq!(
            paypal_signed_string("t-id", "2027-01-01T00:00:00Z", "WH1", b"hello"),
            "t-id|2027-01-01T00:00:00Z|WH1|907060870"
        );
        // A CRC above 2^31 stays unsigned: crc32("a") = 3904355907.
        assert!(paypal_signed_string("i", "t", "w", b"a").ends_with("|3904355907"));
    }

    #[test]
    fn a_signature_verifies_with_the_certificates_key_over_the_exact_string() {
        let signer = PayPalSigner::generate().expect("a key");
        let body = br#"{"id":"WH-1","event_type":"PAYMENT.CAPTURE.COMPLETED"}"#;
        let signature = sign_paypal_webhook(&signer, "id-1", "2027-01-15T08:00:00Z", "WH1", body);
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&signature)
            .expect("base64");
        assert_eq!(raw.len(), 256, "RSA-2048");
        let (certificate, key) = certificate_key(signer.certificate_pem());
        let public = UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, &key);
        let signed = paypal_signed_string("id-1", "2027-01-15T08:00:00Z", "WH1", body);
        assert!(public.verify(signed.as_bytes(), &raw).is_ok());
        // Any other id, time, webhook id or body byte does not verify.
        for other in [
            paypal_signed_string("id-2", "2027-01-15T08:00:00Z", "WH1", body),
            paypal_signed_string("id-1", "2027-01-15T08:00:01Z", "WH1", body),
            paypal_signed_string("id-1", "2027-01-15T08:00:00Z", "WH2", body),
            paypal_signed_string("id-1", "2027-01-15T08:00:00Z", "WH1", b"{}"),
        ] {
            assert!(public.verify(other.as_bytes(), &raw).is_err(), "{other}");
        }
        // The certificate is self-signed with the same key, named as the brief says.
        let tbs = certificate.tbs_certificate.to_der().expect("DER");
        let own = certificate.signature.as_bytes().expect("whole bytes");
        assert!(public.verify(&tbs, own).is_ok());
        assert_eq!(
            certificate.tbs_certificate.subject.to_string(),
            format!("CN={PAYPAL_CERT_COMMON_NAME}")
        );
        assert_eq!(
            certificate.tbs_certificate.issuer,
            certificate.tbs_certificate.subject
        );
    }

    #[test]
    fn a_pem_key_round_trips_and_its_certificate_can_be_dated() {
        let signer = PayPalSigner::generate().expect("a key");
        let pem_text = signer.private_key_pem().expect("PKCS#8");
        assert!(pem_text.starts_with("-----BEGIN PRIVATE KEY-----\n"));
        let again = PayPalSigner::from_pem(&pem_text).expect("the same key");
        // RSASSA-PKCS1-v1_5 is deterministic: the same key signs the same bytes alike.
        assert_eq!(
            sign_paypal_webhook(&signer, "i", "t", "w", b"x"),
            sign_paypal_webhook(&again, "i", "t", "w", b"x")
        );
        // Validity: from the given moment for a year.
        let dated = again.valid_from(1_800_000_000).expect("re-issued");
        let (certificate, _) = certificate_key(dated.certificate_pem());
        let validity = certificate.tbs_certificate.validity;
        assert_eq!(
            validity.not_before.to_unix_duration().as_secs(),
            1_800_000_000
        );
        assert_eq!(
            validity.not_after.to_unix_duration().as_secs(),
            1_800_000_000 + 365 * 24 * 60 * 60
        );
        // By default, from a day ago.
        let now_s = i64::try_from(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
        )
        .unwrap_or(0);
        let (certificate, _) = certificate_key(signer.certificate_pem());
        let start = i64::try_from(
            certificate
                .tbs_certificate
                .validity
                .not_before
                .to_unix_duration()
                .as_secs(),
        )
        .unwrap_or(0);
        assert!((now_s - 86_400 - start).abs() < 60, "{start} vs {now_s}");
    }

    #[test]
    fn anything_but_an_rsa_private_key_is_refused() {
        for bad in [
            "",
            "not a key",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        ] {
            assert!(PayPalSigner::from_pem(bad).is_err(), "{bad:?}");
        }
    }
}
