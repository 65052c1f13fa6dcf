//! Secrets Manager: the PSP API secret and the webhook secret, read at start-up and again after
//! their TTL (see [`crate::secrets`]; never logged, never in the template).

use crate::config::{split_list, PspSecrets};

/// Reads the secret `arn` (its JSON: see [`parse_psp_secrets`]).
pub async fn load_psp_secrets(
    aws: &aws_config::SdkConfig,
    arn: &str,
) -> Result<PspSecrets, String> {
    load_psp_secrets_with(&aws_sdk_secretsmanager::Client::new(aws), arn).await
}

/// [`load_psp_secrets`] with a client built once (the secret is re-read after its TTL).
pub async fn load_psp_secrets_with(
    client: &aws_sdk_secretsmanager::Client,
    arn: &str,
) -> Result<PspSecrets, String> {
    let output = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| {
            format!(
                "cannot read the secret: {}",
                aws_sdk_secretsmanager::error::DisplayErrorContext(e)
            )
        })?;
    let text = output
        .secret_string()
        .ok_or("the secret has no string value")?;
    parse_psp_secrets(text)
}

/// Parses the secret's JSON object: `api_key`, `secret_key`, `merchant_id` (strings) and
/// `webhook_secrets` (a comma-separated string, blanks skipped, or an array of strings), each
/// optional here; which ones the configured PSP needs is checked by
/// [`PspSecrets::check_api`](crate::config::PspSecrets::check_api) and
/// [`PspSecrets::check_webhook`](crate::config::PspSecrets::check_webhook). A field that is not a string reads as
/// absent; an array entry that is not a string reads as an empty entry (refused by that check).
/// An error never echoes the text: it may be the secret itself.
pub fn parse_psp_secrets(text: &str) -> Result<PspSecrets, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|_| "the secret is not JSON".to_owned())?;
    if !value.is_object() {
        return Err("the secret is not a JSON object".to_owned());
    }
    let webhook_secrets = match &value["webhook_secrets"] {
        serde_json::Value::String(list) => split_list(list),
        serde_json::Value::Array(items) => items
            .iter()
            .map(|i| i.as_str().unwrap_or_default().trim().to_owned())
            .collect(),
        _ => Vec::new(),
    };
    let text = |field: &str| value[field].as_str().map(str::to_owned);
    Ok(PspSecrets {
        api_key: text("api_key"),
        secret_key: text("secret_key"),
        merchant_id: text("merchant_id"),
        webhook_secrets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_list_forms_and_never_echoes_a_malformed_secret() {
        let a = parse_psp_secrets(r#"{"api_key":"sk_1","webhook_secrets":"whsec_a, whsec_b"}"#)
            .unwrap();
        assert_eq!(
            (a.api_key.as_deref(), a.webhook_secrets.len()),
            (Some("sk_1"), 2)
        );
        let b = parse_psp_secrets(r#"{"webhook_secrets":["whsec_a", "", 7]}"#).unwrap();
        assert_eq!(
            (b.api_key, b.webhook_secrets),
            (
                None,
                vec!["whsec_a".to_owned(), String::new(), String::new()]
            ),
            "empty and non-text entries are kept, for the shape check to refuse"
        );
        let c = parse_psp_secrets(r#"{"merchant_id":"JT01","secret_key":"k2c2p"}"#).unwrap();
        assert_eq!(
            (c.merchant_id.as_deref(), c.secret_key.as_deref()),
            (Some("JT01"), Some("k2c2p"))
        );
        assert!(!format!("{c:?}").contains("k2c2p"), "Debug redacts the key");
        assert!(parse_psp_secrets(r#""sk_live_in_a_string""#).is_err());
        let error = parse_psp_secrets("sk_live_secret_value").unwrap_err();
        assert!(!error.contains("sk_live"));
        assert!(!format!("{a:?}").contains("sk_1"), "Debug redacts the key");
    }
}
