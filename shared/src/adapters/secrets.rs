//! Secrets Manager: reads a secret's text (the PSP API secret and the webhook secret, read at
//! start-up and again after their TTL: see [`crate::secrets`]; never logged, never in the
//! template). What the text must hold, and its parsing, are the configuration's
//! ([`crate::config::parse_psp_secrets`]): this adapter knows no secret's shape.

/// Reads the string value of the secret `arn` with `client` (built once: the secret is re-read
/// after its TTL). An error never carries the value.
pub async fn load_secret_string(
    client: &aws_sdk_secretsmanager::Client,
    arn: &str,
) -> Result<String, String> {
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
    output
        .secret_string()
        .map(str::to_owned)
        .ok_or_else(|| "the secret has no string value".to_owned())
}
