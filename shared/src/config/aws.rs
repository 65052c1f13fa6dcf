//! The AWS SDK configuration of a function, from what Lambda puts in its environment.
//!
//! `aws_config::load_from_env` resolves credentials and settings through the whole default
//! chain: profile files, SSO, STS web identity, ECS and EC2 metadata. A Lambda function uses none
//! of them (Lambda hands the execution role's credentials over in environment variables), yet
//! linking them costs about a fifth of a function's binary and part of its cold start. This reads
//! only what a function needs:
//!
//! - the region: `AWS_REGION` (or `AWS_DEFAULT_REGION`);
//! - the credentials: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`, read
//!   when a client first signs;
//! - endpoints, for local runs (DynamoDB Local, moto): `AWS_ENDPOINT_URL_<SERVICE>` (e.g.
//!   `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_SECRETS_MANAGER`), else `AWS_ENDPOINT_URL`,
//!   as the SDK names them.

use aws_config::environment::EnvironmentVariableCredentialsProvider;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::SharedCredentialsProvider;
use aws_types::service_config::{LoadServiceConfig, ServiceConfigKey};

/// The SDK configuration of a Lambda function (see the module's documentation).
pub fn lambda_aws() -> SdkConfig {
    lambda_aws_with(&|name| std::env::var(name).ok())
}

/// [`lambda_aws`] over the variables `env` gives.
fn lambda_aws_with(env: &dyn Fn(&str) -> Option<String>) -> SdkConfig {
    let region = ["AWS_REGION", "AWS_DEFAULT_REGION"]
        .into_iter()
        .find_map(|name| env(name).filter(|v| !v.is_empty()));
    let mut builder = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(region.map(Region::new))
        .credentials_provider(SharedCredentialsProvider::new(
            EnvironmentVariableCredentialsProvider::new(),
        ))
        .service_config(EnvEndpoints::from(env));
    if let Some(url) = env("AWS_ENDPOINT_URL").filter(|v| !v.is_empty()) {
        builder = builder.endpoint_url(url);
    }
    builder.build()
}

/// Per-service settings from the environment: `<VARIABLE>_<SERVICE ID>` (the service id in
/// capitals, spaces as underscores), else `<VARIABLE>`. Captured once, at start-up.
#[derive(Debug)]
struct EnvEndpoints {
    variables: Vec<(String, String)>,
}

impl EnvEndpoints {
    fn from(env: &dyn Fn(&str) -> Option<String>) -> Self {
        let names = ["DYNAMODB", "SQS", "SECRETS_MANAGER"]
            .into_iter()
            .map(|service| format!("AWS_ENDPOINT_URL_{service}"))
            .chain(std::iter::once("AWS_ENDPOINT_URL".to_owned()));
        Self {
            variables: names
                .filter_map(|name| env(&name).filter(|v| !v.is_empty()).map(|v| (name, v)))
                .collect(),
        }
    }

    fn get(&self, name: &str) -> Option<String> {
        self.variables
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.clone())
    }
}

impl LoadServiceConfig for EnvEndpoints {
    fn load_config(&self, key: ServiceConfigKey<'_>) -> Option<String> {
        let service = key.service_id().to_ascii_uppercase().replace(' ', "_");
        self.get(&format!("{}_{service}", key.env()))
            .or_else(|| self.get(key.env()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> SdkConfig {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        lambda_aws_with(&|name| vars.get(name).cloned())
    }

    /// The endpoint the SDK takes for `service_id` (as its clients ask: the service's own
    /// variable, else the shared one, else the config's own).
    fn endpoint(aws: &SdkConfig, service_id: &str) -> Option<String> {
        let key = ServiceConfigKey::builder()
            .service_id(service_id)
            .env("AWS_ENDPOINT_URL")
            .profile("endpoint_url")
            .build()
            .unwrap();
        aws.service_config()
            .and_then(|c| c.load_config(key))
            .or_else(|| aws.endpoint_url().map(str::to_owned))
    }

    #[test]
    fn the_region_and_the_service_endpoints_come_from_the_environment() {
        let aws = config(&[
            ("AWS_REGION", "ap-southeast-1"),
            ("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000"),
            ("AWS_ENDPOINT_URL_SECRETS_MANAGER", "http://127.0.0.1:5000"),
        ]);
        assert_eq!(aws.region().map(Region::as_ref), Some("ap-southeast-1"));
        assert!(aws.credentials_provider().is_some());
        assert_eq!(
            endpoint(&aws, "DynamoDB").as_deref(),
            Some("http://127.0.0.1:8000")
        );
        assert_eq!(
            endpoint(&aws, "Secrets Manager").as_deref(),
            Some("http://127.0.0.1:5000")
        );
        assert_eq!(endpoint(&aws, "SQS"), None);
    }

    #[test]
    fn the_shared_endpoint_serves_services_without_their_own_and_nothing_means_aws() {
        let aws = config(&[
            ("AWS_DEFAULT_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:4566"),
            ("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:5000"),
        ]);
        assert_eq!(aws.region().map(Region::as_ref), Some("us-east-1"));
        assert_eq!(
            endpoint(&aws, "DynamoDB").as_deref(),
            Some("http://127.0.0.1:4566")
        );
        assert_eq!(
            endpoint(&aws, "SQS").as_deref(),
            Some("http://127.0.0.1:5000")
        );
        let plain = config(&[("AWS_REGION", "us-east-1")]);
        assert_eq!(endpoint(&plain, "DynamoDB"), None);
    }
}
