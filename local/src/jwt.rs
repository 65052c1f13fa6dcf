//! HS256 JWTs, as the sandbox's stand-in for API Gateway's JWT authorizer: only `alg: HS256`
//! is accepted (never `none`), the signature is checked in constant time, `exp` is required.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
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

/// A token for `sub`, valid for `ttl_s` seconds from `now_s`, with the OAuth `scopes` (as one
/// space-separated `scope` claim, omitted when there are none).
pub fn sign(secret: &str, sub: &str, now_s: i64, ttl_s: i64, scopes: &[String]) -> String {
    let header = URL_SAFE_NO_PAD.encode(json!({"alg": "HS256", "typ": "JWT"}).to_string());
    let mut claims = json!({"sub": sub, "iat": now_s, "exp": now_s + ttl_s, "iss": "payonce-local", "aud": "payonce"});
    if !scopes.is_empty() {
        claims["scope"] = Value::String(scopes.join(" "));
    }
    let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signing_input = format!("{header}.{claims}");
    let mut mac = mac(secret);
    mac.update(signing_input.as_bytes());
    format!(
        "{signing_input}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}

/// The token's OAuth scopes, as API Gateway's JWT authorizer reads them: the `scope` claim
/// split on spaces, or else `scp` (a space-separated string or an array of strings).
pub fn scopes(claims: &Map<String, Value>) -> Vec<String> {
    let split =
        |text: &str| -> Vec<String> { text.split_whitespace().map(str::to_owned).collect() };
    match (claims.get("scope"), claims.get("scp")) {
        (Some(Value::String(scope)), _) => split(scope),
        (_, Some(Value::String(scp))) => split(scp),
        (_, Some(Value::Array(items))) => items
            .iter()
            .filter_map(Value::as_str)
            .flat_map(split)
            .collect(),
        _ => Vec::new(),
    }
}

/// Verifies `token` and returns its claims (API Gateway passes them on as strings).
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
        let token = sign("secret", "alice", 1_000, 60, &[]);
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

    #[test]
    fn scopes_come_from_scope_or_scp_as_api_gateway_reads_them() {
        let staff = sign(
            "secret",
            "bob",
            1_000,
            60,
            &["payments:refund".to_owned(), "openid".to_owned()],
        );
        let claims = verify("secret", &staff, 1_010).unwrap();
        assert_eq!(claims["scope"], "payments:refund openid");
        assert_eq!(scopes(&claims), ["payments:refund", "openid"]);
        let customer = verify("secret", &sign("secret", "alice", 1_000, 60, &[]), 1_010).unwrap();
        assert!(customer.get("scope").is_none());
        assert!(scopes(&customer).is_empty());
        let scp = |value: Value| {
            let mut claims = Map::new();
            claims.insert("scp".into(), value);
            scopes(&claims)
        };
        assert_eq!(scp(json!("a b")), ["a", "b"]);
        assert_eq!(
            scp(json!(["payments:refund", "x"])),
            ["payments:refund", "x"]
        );
        assert!(scp(json!(42)).is_empty());
    }
}
