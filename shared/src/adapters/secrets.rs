//! Secrets Manager: reads a secret's text (the PSP API secret and the webhook secret, read at
//! start-up and again after their TTL: see [`crate::secrets`]; never logged, never in the
//! template). What the text must hold, and its parsing, are the configuration's
//! ([`crate::config::parse_psp_secrets`]): this adapter knows no secret's shape.

/// Why a secret's text could not be read; never carries the value.
#[derive(Debug, thiserror::Error)]
pub enum SecretReadError {
    /// Secrets Manager refused or failed the request (its error, with its context).
    #[error("cannot read the secret: {0}")]
    Read(String),
    /// The secret holds binary data, not a string.
    #[error("the secret has no string value")]
    NotAString,
}

/// Reads the string value of the secret `arn` with `client` (built once: the secret is re-read
/// after its TTL).
pub async fn load_secret_string(
    client: &aws_sdk_secretsmanager::Client,
    arn: &str,
) -> Result<String, SecretReadError> {
    let output = client
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| {
            SecretReadError::Read(aws_sdk_secretsmanager::error::DisplayErrorContext(e).to_string())
        })?;
    output
        .secret_string()
        .map(str::to_owned)
        .ok_or(SecretReadError::NotAString)
}
