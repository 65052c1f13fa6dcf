//! Secrets that are re-read after a TTL, so a rotation takes effect without recycling instances.
//!
//! A function reads its secret once at start-up ([`Refreshing::load`]: a missing, unreadable or
//! ill-shaped secret fails the start, naming the secret and the field) and builds what it needs
//! from it (the PSP adapter, or the webhook scheme). After `SECRETS_TTL_SECONDS` (default 300)
//! the next use re-reads the secret and, if it changed, rebuilds. A failed re-read, or a new
//! value that does not pass the shape check, keeps the last good value and logs a warning: a
//! function never drops to no secret, and retries after [`RETRY_AFTER_FAILURE`] (or the TTL, if
//! shorter).
//!
//! [`RefreshingPsp`] is the [`Psp`] the charge, refund and reconcile services take;
//! [`RefreshingScheme`] the [`WebhookScheme`] of the receiver (and of the 2C2P processor), which
//! verifies synchronously, so its entry point calls [`RefreshingScheme::refresh_if_stale`] before
//! each invocation.

use crate::clock::{duration_ms, SharedClock};
use crate::config::{optional, ConfigError, EnvError, PspSecrets, SecretRole};
use crate::domain::{PspKind, RefundSettlement};
use crate::ports::{
    ChargeRequest, Fence, OperationOutcome, OperationRequest, Psp, PspError, PspEvent, PspLookup,
    PspOutcome, RefundOutcome, RefundRequest, SignatureError, WebhookScheme,
};
use crate::service::webhooks::Providers;
use async_trait::async_trait;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

/// How long a secret is used before it is re-read, unless `SECRETS_TTL_SECONDS` says otherwise.
pub const DEFAULT_SECRETS_TTL: Duration = Duration::from_secs(300);

/// After a failed re-read, the next attempt waits this long (or the TTL, if shorter), so a
/// Secrets Manager outage costs one call per half minute, not one per invocation.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);

/// `SECRETS_TTL_SECONDS` (whole seconds; `0` re-reads on every use), else [`DEFAULT_SECRETS_TTL`].
pub fn ttl_from_env() -> Result<Duration, ConfigError> {
    match optional("SECRETS_TTL_SECONDS") {
        None => Ok(DEFAULT_SECRETS_TTL),
        Some(raw) => raw.parse::<u64>().map(Duration::from_secs).map_err(|e| {
            ConfigError::Env(EnvError::Invalid {
                name: "SECRETS_TTL_SECONDS",
                reason: e.to_string(),
            })
        }),
    }
}

/// Where a secret's current value is read from.
#[async_trait]
pub trait SecretRead: Send + Sync {
    /// The secret's fields as they are now (never logged; errors never carry a value).
    async fn read(&self) -> Result<PspSecrets, ConfigError>;
}

/// A Secrets Manager secret, read on every [`SecretRead::read`].
pub struct SecretsManagerSecret {
    client: aws_sdk_secretsmanager::Client,
    arn: String,
    role: SecretRole,
}

impl SecretsManagerSecret {
    /// The secret `arn`, playing `role`.
    pub fn new(aws: &aws_config::SdkConfig, arn: String, role: SecretRole) -> Self {
        Self {
            client: aws_sdk_secretsmanager::Client::new(aws),
            arn,
            role,
        }
    }
}

#[async_trait]
impl SecretRead for SecretsManagerSecret {
    async fn read(&self) -> Result<PspSecrets, ConfigError> {
        let invalid = |reason: String| {
            ConfigError::Env(EnvError::Invalid {
                name: self.role.arn_variable(),
                reason,
            })
        };
        let text = crate::adapters::secrets::load_secret_string(&self.client, &self.arn)
            .await
            .map_err(|e| invalid(e.to_string()))?;
        crate::config::parse_psp_secrets(&text).map_err(invalid)
    }
}

/// A secret fixed at start-up (local runs: the JSON in an environment variable, or Stripe's
/// test variables); re-reading it returns the same value.
pub struct FixedSecret(pub PspSecrets);

#[async_trait]
impl SecretRead for FixedSecret {
    async fn read(&self) -> Result<PspSecrets, ConfigError> {
        Ok(self.0.clone())
    }
}

/// Builds the value a function uses from a secret's fields, checking their shape.
pub type Build<T> = Box<dyn Fn(&PspSecrets) -> Result<T, ConfigError> + Send + Sync>;

/// A value built from a secret and rebuilt once the secret is older than the TTL and has
/// changed. Clones share one cache.
pub struct Refreshing<T> {
    inner: Arc<Inner<T>>,
}

impl<T> Clone for Refreshing<T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Inner<T> {
    role: SecretRole,
    source: Box<dyn SecretRead>,
    build: Build<T>,
    clock: SharedClock,
    ttl: Duration,
    state: RwLock<State<T>>,
    /// Held while one caller re-reads, so concurrent callers keep the current value instead of
    /// all calling Secrets Manager at once.
    refreshing: tokio::sync::Mutex<()>,
}

struct State<T> {
    value: Arc<T>,
    secrets: PspSecrets,
    next_read_ms: i64,
}

impl<T: Send + Sync + 'static> Refreshing<T> {
    /// Reads the secret and builds its value: the start-up read, whose failure (the secret
    /// unreadable, or a field missing, empty or unusable) is the function's failure to start.
    pub async fn load(
        role: SecretRole,
        source: Box<dyn SecretRead>,
        build: Build<T>,
        clock: SharedClock,
        ttl: Duration,
    ) -> Result<Self, ConfigError> {
        let secrets = source.read().await?;
        let value = Arc::new(build(&secrets)?);
        let next_read_ms = clock.now_ms().saturating_add(duration_ms(ttl));
        Ok(Self {
            inner: Arc::new(Inner {
                role,
                source,
                build,
                clock,
                ttl,
                state: RwLock::new(State {
                    value,
                    secrets,
                    next_read_ms,
                }),
                refreshing: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// The value in use now, without re-reading.
    pub fn latest(&self) -> Arc<T> {
        let state = self
            .inner
            .state
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        Arc::clone(&state.value)
    }

    /// The value to use: re-read first if the secret is older than the TTL.
    pub async fn current(&self) -> Arc<T> {
        self.refresh_if_stale().await;
        self.latest()
    }

    fn stale(&self) -> bool {
        let state = self
            .inner
            .state
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        self.inner.clock.now_ms() >= state.next_read_ms
    }

    /// Re-reads the secret if it is older than the TTL; rebuilds the value if the secret
    /// changed. On failure keeps the last good value and logs a warning (the error names the
    /// secret and field, never a value). If another caller is already re-reading, returns at
    /// once (that caller's result is used from then on).
    pub async fn refresh_if_stale(&self) {
        if !self.stale() {
            return;
        }
        let Ok(_guard) = self.inner.refreshing.try_lock() else {
            return;
        };
        if !self.stale() {
            return;
        }
        let inner = &self.inner;
        let outcome = match inner.source.read().await {
            Ok(secrets) => {
                let unchanged = {
                    let state = inner.state.read().unwrap_or_else(PoisonError::into_inner);
                    state.secrets == secrets
                };
                if unchanged {
                    Ok(None)
                } else {
                    (inner.build)(&secrets).map(|value| Some((Arc::new(value), secrets)))
                }
            }
            Err(e) => Err(e),
        };
        let now_ms = inner.clock.now_ms();
        let mut state = inner.state.write().unwrap_or_else(PoisonError::into_inner);
        match outcome {
            Ok(rebuilt) => {
                if let Some((value, secrets)) = rebuilt {
                    state.value = value;
                    state.secrets = secrets;
                    tracing::info!(secret = %inner.role, "secret changed: now in use");
                }
                state.next_read_ms = now_ms.saturating_add(duration_ms(inner.ttl));
            }
            Err(error) => {
                tracing::warn!(
                    secret = %inner.role,
                    error = %error,
                    "secret re-read failed: keeping the last good value"
                );
                let retry = inner.ttl.min(RETRY_AFTER_FAILURE);
                state.next_read_ms = now_ms.saturating_add(duration_ms(retry));
            }
        }
    }
}

/// The PSP adapter rebuilt from the PSP API secret after the TTL: every call re-reads first if
/// the secret is stale, then goes to the adapter built from the latest good secret. Clones
/// share one cache.
pub struct RefreshingPsp<P> {
    name: String,
    kind: PspKind,
    cache: Refreshing<P>,
}

impl<P> Clone for RefreshingPsp<P> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            kind: self.kind,
            cache: self.cache.clone(),
        }
    }
}

impl<P: Psp + 'static> RefreshingPsp<P> {
    /// The adapter in `cache` (its name and kind never change between rebuilds: one PSP per
    /// deployment).
    pub fn new(cache: Refreshing<P>) -> Self {
        let first = cache.latest();
        Self {
            name: first.name().to_owned(),
            kind: first.kind(),
            cache,
        }
    }

    /// The cache, shared with this adapter.
    pub fn cache(&self) -> &Refreshing<P> {
        &self.cache
    }
}

#[async_trait]
impl<P: Psp + 'static> Psp for RefreshingPsp<P> {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> PspKind {
        self.kind
    }

    fn supports_refunds(&self) -> bool {
        self.cache.latest().supports_refunds()
    }

    async fn create_charge(&self, request: &ChargeRequest, timeout: Duration) -> PspOutcome {
        self.cache
            .current()
            .await
            .create_charge(request, timeout)
            .await
    }

    async fn lookup(&self, payment_id: &str) -> Result<PspLookup, PspError> {
        self.cache.current().await.lookup(payment_id).await
    }

    async fn lookup_payment(
        &self,
        payment: &crate::domain::Payment,
    ) -> Result<PspLookup, PspError> {
        self.cache.current().await.lookup_payment(payment).await
    }

    async fn fence(&self, request: &ChargeRequest) -> Result<Fence, PspError> {
        self.cache.current().await.fence(request).await
    }

    fn charge_keys_kept(&self) -> std::time::Duration {
        self.cache.latest().charge_keys_kept()
    }

    async fn cancel(&self, provider_payment_id: &str) -> Result<(), PspError> {
        self.cache.current().await.cancel(provider_payment_id).await
    }

    fn captures_later(&self) -> bool {
        self.cache.latest().captures_later()
    }

    fn moves_money_only_under_a_stored_id(&self) -> bool {
        self.cache.latest().moves_money_only_under_a_stored_id()
    }

    fn captures_partially(&self) -> bool {
        self.cache.latest().captures_partially()
    }

    async fn operate(&self, request: &OperationRequest, timeout: Duration) -> OperationOutcome {
        self.cache.current().await.operate(request, timeout).await
    }

    async fn create_refund(&self, request: &RefundRequest, timeout: Duration) -> RefundOutcome {
        self.cache
            .current()
            .await
            .create_refund(request, timeout)
            .await
    }

    async fn lookup_refund(
        &self,
        provider_payment_id: &str,
        refund_id: &str,
    ) -> Result<Option<RefundSettlement>, PspError> {
        self.cache
            .current()
            .await
            .lookup_refund(provider_payment_id, refund_id)
            .await
    }

    async fn create_refund_among(
        &self,
        request: &RefundRequest,
        siblings: &dyn crate::ports::SiblingSource,
        timeout: Duration,
    ) -> RefundOutcome {
        self.cache
            .current()
            .await
            .create_refund_among(request, siblings, timeout)
            .await
    }

    async fn lookup_refund_among(
        &self,
        request: &RefundRequest,
        siblings: &dyn crate::ports::SiblingSource,
    ) -> Result<Option<RefundSettlement>, PspError> {
        self.cache
            .current()
            .await
            .lookup_refund_among(request, siblings)
            .await
    }
}

/// A verifying webhook scheme rebuilt from the webhook secret after the TTL. Verifying is
/// synchronous, so it uses the latest good scheme; the entry point calls
/// [`RefreshingScheme::refresh_if_stale`] before each invocation. Clones share one cache.
#[derive(Clone)]
pub struct RefreshingScheme {
    provider: String,
    cache: Refreshing<Arc<dyn WebhookScheme>>,
}

impl RefreshingScheme {
    /// The scheme in `cache` (its provider name never changes between rebuilds).
    pub fn new(cache: Refreshing<Arc<dyn WebhookScheme>>) -> Self {
        Self {
            provider: cache.latest().provider().to_owned(),
            cache,
        }
    }

    /// Re-reads the webhook secret if it is older than the TTL (see [`Refreshing`]).
    pub async fn refresh_if_stale(&self) {
        self.cache.refresh_if_stale().await;
    }

    /// Providers holding only this scheme, under its provider name.
    pub fn providers(&self) -> Providers {
        Providers::new().with(self.clone())
    }
}

#[async_trait::async_trait]
impl WebhookScheme for RefreshingScheme {
    fn provider(&self) -> &str {
        &self.provider
    }

    async fn fetch_keys(
        &self,
        headers: &lambda_http::http::HeaderMap,
    ) -> Result<(), SignatureError> {
        let scheme = self.cache.latest();
        scheme.fetch_keys(headers).await
    }

    fn verify(
        &self,
        headers: &lambda_http::http::HeaderMap,
        body: &[u8],
        now_s: i64,
    ) -> Result<(), SignatureError> {
        self.cache.latest().verify(headers, body, now_s)
    }

    fn parse(&self, body: &[u8]) -> Result<PspEvent, serde_json::Error> {
        self.cache.latest().parse(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::config::parse_psp_secrets;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    /// A secret whose value the test sets, counting reads; `None` makes reads fail.
    #[derive(Default)]
    struct FakeSecret {
        value: Mutex<Option<PspSecrets>>,
        reads: AtomicUsize,
    }

    impl FakeSecret {
        fn holding(json: &str) -> Arc<Self> {
            let fake = Arc::new(Self::default());
            fake.set(Some(json));
            fake
        }

        fn set(&self, json: Option<&str>) {
            *self.value.lock().unwrap() = json.map(|j| parse_psp_secrets(j).unwrap());
        }

        fn reads(&self) -> usize {
            self.reads.load(Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl SecretRead for Arc<FakeSecret> {
        async fn read(&self) -> Result<PspSecrets, ConfigError> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.value
                .lock()
                .unwrap()
                .clone()
                .ok_or(ConfigError::Env(EnvError::Invalid {
                    name: "PSP_WEBHOOK_SECRET_ARN",
                    reason: "cannot read the secret: throttled".into(),
                }))
        }
    }

    const TTL: Duration = Duration::from_secs(300);

    /// The Stripe webhook scheme's secrets, as the "value" built from the secret.
    async fn cache(
        fake: &Arc<FakeSecret>,
        clock: &Arc<ManualClock>,
    ) -> Result<Refreshing<Vec<String>>, ConfigError> {
        Refreshing::load(
            SecretRole::Webhook,
            Box::new(Arc::clone(fake)),
            Box::new(|s: &PspSecrets| {
                s.check_webhook(PspKind::Stripe)?;
                Ok(s.webhook_secrets.clone())
            }),
            clock.clone(),
            TTL,
        )
        .await
    }

    #[tokio::test]
    async fn the_secret_is_re_read_after_the_ttl_and_not_before() {
        // GIVEN a cache loaded at start-up
        let clock = ManualClock::at_ms(1_000_000);
        let fake = FakeSecret::holding(r#"{"webhook_secrets":"whsec_old"}"#);
        let cache = cache(&fake, &clock).await.unwrap();
        assert_eq!(fake.reads(), 1);
        // WHEN the secret rotates, before the TTL
        fake.set(Some(r#"{"webhook_secrets":"whsec_new"}"#));
        clock.advance(TTL - Duration::from_millis(1));
        // THEN the old value is still used, without a read
        assert_eq!(*cache.current().await, ["whsec_old"]);
        assert_eq!(fake.reads(), 1);
        // WHEN the TTL passes
        clock.advance(Duration::from_millis(1));
        // THEN the rotation is picked up, with one read
        assert_eq!(*cache.current().await, ["whsec_new"]);
        assert_eq!(fake.reads(), 2);
        // AND the next read waits another TTL
        clock.advance(TTL / 2);
        cache.current().await;
        assert_eq!(fake.reads(), 2);
    }

    #[tokio::test]
    async fn a_failed_or_refused_re_read_keeps_the_last_good_value() {
        let clock = ManualClock::at_ms(0);
        let fake = FakeSecret::holding(r#"{"webhook_secrets":"whsec_old"}"#);
        let cache = cache(&fake, &clock).await.unwrap();
        // GIVEN Secrets Manager failing after the TTL
        fake.set(None);
        clock.advance(TTL);
        // THEN the last good value is kept
        assert_eq!(*cache.current().await, ["whsec_old"]);
        assert_eq!(fake.reads(), 2);
        // AND the read is retried after RETRY_AFTER_FAILURE, not on every use
        cache.current().await;
        assert_eq!(fake.reads(), 2);
        clock.advance(RETRY_AFTER_FAILURE);
        // WHEN the secret now reads, but with an empty webhook secret (anyone could sign)
        fake.set(Some(r#"{"webhook_secrets":["whsec_next", ""]}"#));
        // THEN it is refused and the last good value still verifies
        assert_eq!(*cache.current().await, ["whsec_old"]);
        assert_eq!(fake.reads(), 3);
        // AND once the secret is fixed, it is used
        fake.set(Some(r#"{"webhook_secrets":"whsec_next,whsec_old"}"#));
        clock.advance(RETRY_AFTER_FAILURE);
        assert_eq!(*cache.current().await, ["whsec_next", "whsec_old"]);
    }

    #[tokio::test]
    async fn start_up_fails_on_a_missing_or_empty_secret_naming_it() {
        let clock = ManualClock::at_ms(0);
        let fake = Arc::new(FakeSecret::default());
        let error = cache(&fake, &clock).await.err().unwrap().to_string();
        assert!(error.contains("PSP_WEBHOOK_SECRET_ARN"), "{error}");
        fake.set(Some(r#"{"webhook_secrets":""}"#));
        let error = cache(&fake, &clock).await.err().unwrap().to_string();
        assert!(
            error.contains("PSP_WEBHOOK_SECRET_ARN") && error.contains("`webhook_secrets`"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn the_receiver_s_scheme_verifies_with_the_rotated_secret() {
        use hmac::{KeyInit, Mac};
        // GIVEN the receiver's Stripe scheme, loaded with the old signing secret
        let clock = ManualClock::at_ms(0);
        let fake = FakeSecret::holding(r#"{"webhook_secrets":"whsec_old"}"#);
        let cache = Refreshing::load(
            SecretRole::Webhook,
            Box::new(Arc::clone(&fake)),
            Box::new(|s: &PspSecrets| crate::config::verifying_scheme(PspKind::Stripe, s)),
            clock.clone(),
            TTL,
        )
        .await
        .unwrap();
        let scheme = RefreshingScheme::new(cache);
        assert_eq!(scheme.provider(), "stripe");
        let body = br#"{"id":"evt_1"}"#;
        let signed = |secret: &str| {
            let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
            mac.update(format!("{}.", clock.now_s()).as_bytes());
            mac.update(body);
            let signature = hex::encode(mac.finalize().into_bytes());
            let mut headers = lambda_http::http::HeaderMap::new();
            headers.insert(
                "stripe-signature",
                format!("t={},v1={signature}", clock.now_s())
                    .parse()
                    .unwrap(),
            );
            headers
        };
        assert!(scheme
            .verify(&signed("whsec_old"), body, clock.now_s())
            .is_ok());
        assert!(scheme
            .verify(&signed("whsec_new"), body, clock.now_s())
            .is_err());
        // WHEN the secret rotates and the TTL passes
        fake.set(Some(r#"{"webhook_secrets":"whsec_new"}"#));
        clock.advance(TTL);
        scheme.refresh_if_stale().await;
        // THEN the new secret verifies and the old one no longer does
        assert!(scheme
            .verify(&signed("whsec_new"), body, clock.now_s())
            .is_ok());
        assert!(scheme
            .verify(&signed("whsec_old"), body, clock.now_s())
            .is_err());
    }

    /// A production adapter is the refreshing wrapper over the configured one: it must answer
    /// every capability question as the adapter it holds does (a wrapper that guessed once
    /// let a partial Square capture complete the whole authorization).
    #[tokio::test]
    async fn a_refreshing_psp_answers_as_the_adapter_it_holds_for_every_psp() {
        use crate::config::{psp_with, PspSettings};
        use crate::ports::Psp;
        let secrets = |kind: PspKind| -> &'static str {
            match kind {
                PspKind::Stripe => r#"{"api_key":"sk_test_1"}"#,
                PspKind::Omise => r#"{"secret_key":"skey_test_1"}"#,
                PspKind::TwoC2p => r#"{"merchant_id":"JT01","secret_key":"k"}"#,
                PspKind::Square => r#"{"access_token":"EAAA1"}"#,
                PspKind::PayPal => r#"{"client_id":"A1","client_secret":"s"}"#,
            }
        };
        for kind in PspKind::ALL {
            let inner = psp_with(
                &PspSettings::defaults(kind),
                &parse_psp_secrets(secrets(kind)).unwrap(),
            )
            .unwrap();
            let cache = Refreshing::load(
                SecretRole::Api,
                Box::new(FixedSecret(parse_psp_secrets(secrets(kind)).unwrap())),
                Box::new(move |s: &PspSecrets| psp_with(&PspSettings::defaults(kind), s)),
                ManualClock::at_ms(0),
                TTL,
            )
            .await
            .unwrap();
            let outer = RefreshingPsp::new(cache);
            assert_eq!(
                (
                    outer.name(),
                    outer.kind(),
                    outer.supports_refunds(),
                    outer.captures_partially()
                ),
                (
                    inner.name(),
                    inner.kind(),
                    inner.supports_refunds(),
                    inner.captures_partially()
                ),
                "{kind:?}"
            );
        }
    }
}
