//! HS256 JWTs, as the sandbox's stand-in for API Gateway's JWT authorizer: only `alg: HS256`
//! is accepted (never `none`), the signature is checked in constant time, `exp` is required.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::{json, Map, Value};
use sha2::Sha256;

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtError {
    /// Not three base64url JSON parts.
    Malformed,
    /// `alg` is not HS256 (e.g. `none`).
    Algorithm,
    /// The signature does not match the secret.
    Signature,
    /// `exp` is missing or past.
    Expired,
    /// `sub` is missing.
    NoSubject,
}

fn mac(secret: &str) -> Hmac<Sha256> {
    // HMAC accepts keys of any length.
    Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes any key"))
}

/// A token for `sub`, valid for `ttl_s` seconds from `now_s`.
pub fn sign(secret: &str, sub: &str, now_s: i64, ttl_s: i64) -> String {
    let header = URL_SAFE_NO_PAD.encode(json!({"alg": "HS256", "typ": "JWT"}).to_string());
    let claims = URL_SAFE_NO_PAD.encode(json!({"sub": sub, "iat": now_s, "exp": now_s + ttl_s, "iss": "payonce-local", "aud": "payonce"}).to_string());
    let signing_input = format!("{header}.{claims}");
    let mut mac = mac(secret);
    mac.update(signing_input.as_bytes());
    format!(
        "{signing_input}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}

/// Verifies `token` and returns its claims as strings (as API Gateway passes them on).
pub fn verify(secret: &str, token: &str, now_s: i64) -> Result<Map<String, Value>, JwtError> {
    let mut parts = token.split('.');
    let (Some(header), Some(claims), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwtError::Malformed);
    };
    let decode = |part: &str| -> Result<Value, JwtError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|_| JwtError::Malformed)?;
        serde_json::from_slice(&bytes).map_err(|_| JwtError::Malformed)
    };
    if decode(header)?["alg"] != "HS256" {
        return Err(JwtError::Algorithm);
    }
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| JwtError::Signature)?;
    let mut mac = mac(secret);
    mac.update(header.as_bytes());
    mac.update(b".");
    mac.update(claims.as_bytes());
    mac.verify_slice(&signature)
        .map_err(|_| JwtError::Signature)?;
    let Value::Object(claims) = decode(claims)? else {
        return Err(JwtError::Malformed);
    };
    match claims.get("exp").and_then(Value::as_i64) {
        Some(exp) if exp > now_s => {}
        _ => return Err(JwtError::Expired),
    }
    if !claims.get("sub").is_some_and(Value::is_string) {
        return Err(JwtError::NoSubject);
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_token_verifies_and_every_forgery_fails() {
        let token = sign("secret", "alice", 1_000, 60);
        assert_eq!(verify("secret", &token, 1_010).unwrap()["sub"], "alice");
        assert_eq!(verify("other", &token, 1_010), Err(JwtError::Signature));
        assert_eq!(verify("secret", &token, 1_061), Err(JwtError::Expired));
        let parts: Vec<&str> = token.split('.').collect();
        let none = URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#);
        assert_eq!(
            verify("secret", &format!("{none}.{}.", parts[1]), 1_010),
            Err(JwtError::Algorithm)
        );
        let forged_claims = URL_SAFE_NO_PAD.encode(r#"{"sub":"mallory","exp":99999999999}"#);
        assert_eq!(
            verify(
                "secret",
                &format!("{}.{forged_claims}.{}", parts[0], parts[2]),
                1_010
            ),
            Err(JwtError::Signature)
        );
        assert_eq!(
            verify("secret", "not-a-token", 1_010),
            Err(JwtError::Malformed)
        );
    }
}
