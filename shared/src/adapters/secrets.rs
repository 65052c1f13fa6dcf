//! Secrets Manager: the PSP secrets, read once at start-up (never logged, never in the template).

use crate::config::{split_list, PspSecrets};

/// Reads the secret `arn` as JSON `{"api_key": "...", "webhook_secrets": "a,b" | ["a", "b"]}`.
pub async fn load_psp_secrets(
    aws: &aws_config::SdkConfig,
    arn: &str,
) -> Result<PspSecrets, String> {
    let client = aws_sdk_secretsmanager::Client::new(aws);
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

/// Parses the secret's JSON.
pub fn parse_psp_secrets(text: &str) -> Result<PspSecrets, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|_| "the secret is not JSON".to_owned())?;
    let webhook_secrets = match &value["webhook_secrets"] {
        serde_json::Value::String(list) => split_list(list),
        serde_json::Value::Array(items) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    Ok(PspSecrets {
        api_key: value["api_key"].as_str().map(str::to_owned),
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
        let b = parse_psp_secrets(r#"{"webhook_secrets":["whsec_a"]}"#).unwrap();
        assert_eq!(
            (b.api_key, b.webhook_secrets),
            (None, vec!["whsec_a".to_owned()])
        );
        let error = parse_psp_secrets("sk_live_secret_value").unwrap_err();
        assert!(!error.contains("sk_live"));
        assert!(!format!("{a:?}").contains("sk_1"), "Debug redacts the key");
    }
}
