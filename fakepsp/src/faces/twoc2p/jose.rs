//! The Payment Maintenance API's envelope, as 2C2P documents it (notes §12, "Payment requests
//! and responses are encrypted using JWE — JWE algorithm = RSA-OAEP + A256GCM — The signature
//! uses JWS PS256"): a compact JWS (PS256: RSASSA-PSS, SHA-256, MGF1-SHA-256, 32-byte salt)
//! whose payload is the ASCII of a compact JWE (`RSA-OAEP`: RSAES-OAEP with SHA-1 and
//! MGF1-SHA-1, empty label, of a 32-byte content encryption key; `A256GCM`: AES-256-GCM, 12-byte
//! IV, 16-byte tag, AAD the ASCII of the JWE's first segment as sent).
//!
//! Every segment must be strict unpadded base64url. Headers are read as JSON objects: the JWS's
//! `alg` must be `PS256` (`typ`, if present, `JWT`), the JWE's `alg` `RSA-OAEP` and `enc`
//! `A256GCM`; `crit` or `zip`, or any member beyond `alg`, `enc`, `typ`, `cty` and `kid`, is
//! refused. The primitives are aws-lc-rs's; the randomness (PSS salt, OAEP padding, content key,
//! IV) is aws-lc's own, so an envelope's bytes differ from one call to the next even where the
//! model is otherwise deterministic.

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use aws_lc_rs::rand::{fill, SystemRandom};
use aws_lc_rs::rsa::OAEP_SHA1_MGF1SHA1;
use aws_lc_rs::signature::RSA_PSS_SHA256;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{Map, Value};

use crate::twoc2p_keys::MaintenanceKeys;

/// The JWS protected header 2C2P's answers carry.
pub(crate) const JWS_HEADER: &str = r#"{"alg":"PS256","typ":"JWT"}"#;

/// The JWE protected header 2C2P's answers carry.
pub(crate) const JWE_HEADER: &str = r#"{"alg":"RSA-OAEP","enc":"A256GCM"}"#;

/// AES-256 key length.
const CEK_LEN: usize = 32;

/// AES-GCM IV length.
const IV_LEN: usize = 12;

/// AES-GCM tag length.
const TAG_LEN: usize = 16;

/// The header members the fake reads past; any other is refused.
const KNOWN_HEADER_MEMBERS: &[&str] = &["alg", "enc", "typ", "cty", "kid"];

/// Why an envelope was refused (answered 401) or could not be made (500); the text is the
/// fake's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EnvelopeError(pub(crate) &'static str);

/// The plaintext inside a request `body`: the JWS verified with the merchant's public key first,
/// then its payload decrypted with 2C2P's private key.
pub(crate) fn open_request(keys: &MaintenanceKeys, body: &[u8]) -> Result<Vec<u8>, EnvelopeError> {
    let body = std::str::from_utf8(body).map_err(|_| EnvelopeError("the body is not a JWS"))?;
    let jws = body.trim();
    let segments: Vec<&str> = jws.split('.').collect();
    let [header, payload, signature] = segments.as_slice() else {
        return Err(EnvelopeError("the body is not a compact JWS"));
    };
    let header = decode_header(header).ok_or(EnvelopeError("the JWS header is not JSON"))?;
    if !header_is(&header, &[("alg", "PS256")], &[("typ", "JWT")]) {
        return Err(EnvelopeError("the JWS header is not PS256"));
    }
    let signature = decode(signature).ok_or(EnvelopeError("the JWS signature is not base64url"))?;
    let signing_input = format!("{}.{payload}", segments[0]);
    keys.merchant_verifier()
        .verify(signing_input.as_bytes(), &signature)
        .map_err(|_| EnvelopeError("the JWS signature does not verify"))?;
    let jwe = decode(payload).ok_or(EnvelopeError("the JWS payload is not base64url"))?;
    let jwe =
        std::str::from_utf8(&jwe).map_err(|_| EnvelopeError("the JWS payload is not a JWE"))?;
    decrypt(keys, jwe)
}

/// `plaintext` encrypted to the merchant's public key, then signed with 2C2P's private key: an
/// answer's body.
pub(crate) fn seal_answer(
    keys: &MaintenanceKeys,
    plaintext: &[u8],
) -> Result<String, EnvelopeError> {
    let jwe = encrypt(keys, plaintext)?;
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(JWS_HEADER),
        URL_SAFE_NO_PAD.encode(jwe.as_bytes())
    );
    let mut signature = vec![0; keys.signing.public_modulus_len()];
    keys.signing
        .sign(
            &RSA_PSS_SHA256,
            &SystemRandom::new(),
            signing_input.as_bytes(),
            &mut signature,
        )
        .map_err(|_| EnvelopeError("signing failed"))?;
    Ok(format!(
        "{signing_input}.{}",
        URL_SAFE_NO_PAD.encode(signature)
    ))
}

/// A compact JWE (`RSA-OAEP`, `A256GCM`) decrypted with 2C2P's private key.
fn decrypt(keys: &MaintenanceKeys, jwe: &str) -> Result<Vec<u8>, EnvelopeError> {
    let segments: Vec<&str> = jwe.split('.').collect();
    let [header_b64, encrypted_key, iv, ciphertext, tag] = segments.as_slice() else {
        return Err(EnvelopeError("the JWS payload is not a compact JWE"));
    };
    let header = decode_header(header_b64).ok_or(EnvelopeError("the JWE header is not JSON"))?;
    if !header_is(&header, &[("alg", "RSA-OAEP"), ("enc", "A256GCM")], &[]) {
        return Err(EnvelopeError("the JWE header is not RSA-OAEP with A256GCM"));
    }
    let bad = || EnvelopeError("the JWE cannot be decrypted");
    let (Some(encrypted_key), Some(iv), Some(mut sealed), Some(tag)) = (
        decode(encrypted_key),
        decode(iv),
        decode(ciphertext),
        decode(tag),
    ) else {
        return Err(bad());
    };
    if iv.len() != IV_LEN || tag.len() != TAG_LEN {
        return Err(bad());
    }
    let mut cek = vec![0; keys.decrypting.min_output_size()];
    let cek = keys
        .decrypting
        .decrypt(&OAEP_SHA1_MGF1SHA1, &encrypted_key, &mut cek, None)
        .map_err(|_| bad())?;
    if cek.len() != CEK_LEN {
        return Err(bad());
    }
    let key = UnboundKey::new(&AES_256_GCM, cek).map_err(|_| bad())?;
    let nonce = Nonce::try_assume_unique_for_key(&iv).map_err(|_| bad())?;
    sealed.extend_from_slice(&tag);
    let plaintext = LessSafeKey::new(key)
        .open_in_place(nonce, Aad::from(header_b64.as_bytes()), &mut sealed)
        .map_err(|_| bad())?;
    Ok(plaintext.to_vec())
}

/// `plaintext` as a compact JWE to the merchant's public key, with a fresh key and IV.
fn encrypt(keys: &MaintenanceKeys, plaintext: &[u8]) -> Result<String, EnvelopeError> {
    let failed = || EnvelopeError("encryption failed");
    let mut cek = [0_u8; CEK_LEN];
    let mut iv = [0_u8; IV_LEN];
    fill(&mut cek).map_err(|_| failed())?;
    fill(&mut iv).map_err(|_| failed())?;
    let mut encrypted_key = vec![0; keys.encrypting.ciphertext_size()];
    let encrypted_key = keys
        .encrypting
        .encrypt(&OAEP_SHA1_MGF1SHA1, &cek, &mut encrypted_key, None)
        .map_err(|_| failed())?;
    let header_b64 = URL_SAFE_NO_PAD.encode(JWE_HEADER);
    let key = UnboundKey::new(&AES_256_GCM, &cek).map_err(|_| failed())?;
    let mut sealed = plaintext.to_vec();
    let tag = LessSafeKey::new(key)
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(iv),
            Aad::from(header_b64.as_bytes()),
            &mut sealed,
        )
        .map_err(|_| failed())?;
    Ok(format!(
        "{header_b64}.{}.{}.{}.{}",
        URL_SAFE_NO_PAD.encode(encrypted_key),
        URL_SAFE_NO_PAD.encode(iv),
        URL_SAFE_NO_PAD.encode(sealed),
        URL_SAFE_NO_PAD.encode(tag.as_ref())
    ))
}

/// Strict unpadded base64url.
fn decode(segment: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(segment).ok()
}

/// A protected header: a base64url JSON object.
fn decode_header(segment: &str) -> Option<Map<String, Value>> {
    decode(segment).and_then(|bytes| serde_json::from_slice(&bytes).ok())
}

/// Whether `header` has each `required` member with its value, each `optional` one (if
/// present) with its value, and no member the fake does not know (`crit`, `zip`, ...).
fn header_is(
    header: &Map<String, Value>,
    required: &[(&str, &str)],
    optional: &[(&str, &str)],
) -> bool {
    let has = |name: &str, value: &str| header.get(name).and_then(Value::as_str) == Some(value);
    required.iter().all(|(name, value)| has(name, value))
        && optional
            .iter()
            .all(|(name, value)| !header.contains_key(*name) || has(name, value))
        && header
            .keys()
            .all(|name| KNOWN_HEADER_MEMBERS.contains(&name.as_str()))
        && (required.iter().any(|(name, _)| *name == "enc") || !header.contains_key("enc"))
}
