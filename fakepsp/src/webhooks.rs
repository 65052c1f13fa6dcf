//! Webhook delivery: signing events the way the face's PSP does (Stripe, Omise, Square or
//! PayPal; 2C2P signs inside the body) and sending them
//! from a background task, so that an API answer is never held up by a webhook receiver. The
//! events themselves come from the [model](crate::model), already in the face's format.
//!
//! Events go through one queue and one delivery task, so with the default knobs they arrive in
//! the order they happened. The [`WebhookKnobs`] make delivery misbehave on purpose: extra
//! copies, a delay, reversed order. A test can also hold delivery (`POST /_fake/webhooks/hold`)
//! and let it go (`POST /_fake/webhooks/release`), to see what payonce answers before any webhook
//! has arrived, whatever the scheduling.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::WebhookKnobs;
use crate::ledger::ModelEvent;
use crate::paypal_signing::{sign_paypal_webhook, PayPalSigner, PAYPAL_AUTH_ALGO};
use crate::provider::Provider;

/// Retries after the first attempt when the receiver fails or answers non-2xx.
const RETRIES: u32 = 3;

/// Wait before the first retry; doubled for each further one. Short, because the receivers are
/// local test servers and tests should not wait long for a retried event.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// Computes the `Stripe-Signature` header value for a webhook body:
/// `t=<timestamp>,v1=<lowercase hex HMAC-SHA256(secret, "<timestamp>.<payload>")>`.
///
/// Receivers verify a delivery by recomputing this over the exact body bytes and the `t` from
/// the header, and comparing.
pub fn sign_webhook(secret: &str, timestamp: i64, payload: &[u8]) -> String {
    // HMAC accepts keys of any length, so this cannot fail; the fallback only keeps the
    // function total without an unwrap.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return format!("t={timestamp},v1=");
    };
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(payload);
    let signature = hex::encode(mac.finalize().into_bytes());
    format!("t={timestamp},v1={signature}")
}

/// Computes the `Omise-Signature` value for a webhook body sent with
/// `Omise-Signature-Timestamp: <timestamp>`: the lowercase hex HMAC-SHA256 of
/// `<timestamp>.<payload>`, keyed with `key`, the **base64-decoded** webhook secret (the
/// scheme of payonce's `omise_webhook::signature`, which reproduces the independent vectors of
/// `shared/testdata/omise-webhook-signatures.json`). The fake sends one signature, no rotation.
pub fn sign_omise_webhook(key: &[u8], timestamp: &str, payload: &[u8]) -> String {
    // HMAC accepts keys of any length, so this cannot fail; the fallback only keeps the
    // function total without an unwrap.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return String::new();
    };
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(payload);
    hex::encode(mac.finalize().into_bytes())
}

/// Computes the `x-square-hmacsha256-signature` value for a webhook body delivered to
/// `notification_url`: standard base64 (padded) of HMAC-SHA256 keyed with the subscription's
/// `signature_key` (as text) over the notification URL followed by the raw body (Square, "Validate
/// notifications"; its SDKs' `webhooks_helper`). Receivers recompute it over the URL they are
/// subscribed with and the exact body bytes, and compare.
pub fn sign_square_webhook(signature_key: &str, notification_url: &str, body: &[u8]) -> String {
    use base64::Engine as _;
    // HMAC accepts keys of any length, so this cannot fail; the fallback only keeps the
    // function total without an unwrap.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(signature_key.as_bytes()) else {
        return String::new();
    };
    mac.update(notification_url.as_bytes());
    mac.update(body);
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// The header a Square delivery carries its signature in.
const SQUARE_SIGNATURE_HEADER: &str = "x-square-hmacsha256-signature";

/// How deliveries are signed: the face's scheme with its secret.
#[derive(Clone)]
pub(crate) enum Signer {
    /// `Stripe-Signature: t=...,v1=...` with the secret as it is.
    Stripe(String),
    /// `Omise-Signature` and `Omise-Signature-Timestamp`, with the decoded secret.
    Omise(Vec<u8>),
    /// No header: a 2C2P notification's body is a JWT the model signed with the merchant key.
    TwoC2p,
    /// `x-square-hmacsha256-signature` over the delivery URL and the body, with the signature
    /// key as it is.
    Square(String),
    /// PayPal's `PAYPAL-TRANSMISSION-*` headers: a fresh transmission id and time per attempt,
    /// signed SHA256withRSA with the key for the subscription `webhook_id`, the certificate at
    /// `cert_url`.
    PayPal {
        signer: Arc<PayPalSigner>,
        webhook_id: String,
        cert_url: String,
    },
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Stripe(_) => "Signer::Stripe(<secret>)",
            Self::Omise(_) => "Signer::Omise(<secret>)",
            Self::TwoC2p => "Signer::TwoC2p",
            Self::Square(_) => "Signer::Square(<signature key>)",
            Self::PayPal { .. } => "Signer::PayPal(<RSA key>)",
        })
    }
}

impl Signer {
    /// The signer of `provider`'s face with `secret` as configured; for Omise the secret must be
    /// standard, padded base64 of a non-empty key, as Omise shows its secrets. PayPal signs
    /// with a key, not a secret: its signer is [`Signer::PayPal`], built by the caller.
    pub(crate) fn new(provider: Provider, secret: String) -> Result<Self, String> {
        match provider {
            Provider::PayPal => {
                Err("the PayPal face signs with an RSA key, not a webhook secret".to_owned())
            }
            Provider::Stripe => Ok(Self::Stripe(secret)),
            Provider::TwoC2p => Ok(Self::TwoC2p),
            Provider::Square => Ok(Self::Square(secret)),
            Provider::Omise => {
                use base64::Engine as _;
                match base64::engine::general_purpose::STANDARD.decode(secret.as_bytes()) {
                    Ok(key) if !key.is_empty() => Ok(Self::Omise(key)),
                    _ => Err(
                        "the Omise webhook secret must be standard base64 of a non-empty key"
                            .to_owned(),
                    ),
                }
            }
        }
    }

    /// The signature headers for `body` sent to `url` at `now_s`.
    fn headers(&self, now_s: i64, url: &str, body: &[u8]) -> Vec<(&'static str, String)> {
        match self {
            Self::Square(key) => {
                vec![(SQUARE_SIGNATURE_HEADER, sign_square_webhook(key, url, body))]
            }
            Self::Stripe(secret) => vec![("Stripe-Signature", sign_webhook(secret, now_s, body))],
            Self::Omise(key) => {
                let timestamp = now_s.to_string();
                vec![
                    ("Omise-Signature", sign_omise_webhook(key, &timestamp, body)),
                    ("Omise-Signature-Timestamp", timestamp),
                ]
            }
            Self::TwoC2p => Vec::new(),
            Self::PayPal {
                signer,
                webhook_id,
                cert_url,
            } => {
                // A new transmission at each attempt, as a retry is a new transmission.
                let transmission_id = uuid::Uuid::new_v4().to_string();
                let transmission_time = crate::faces::iso8601(now_s);
                let signature = sign_paypal_webhook(
                    signer,
                    &transmission_id,
                    &transmission_time,
                    webhook_id,
                    body,
                );
                vec![
                    ("PAYPAL-TRANSMISSION-ID", transmission_id),
                    ("PAYPAL-TRANSMISSION-TIME", transmission_time),
                    ("PAYPAL-TRANSMISSION-SIG", signature),
                    ("PAYPAL-CERT-URL", cert_url.clone()),
                    ("PAYPAL-AUTH-ALGO", PAYPAL_AUTH_ALGO.to_owned()),
                ]
            }
        }
    }
}

/// The events produced by one API request, with the knobs in force when it was made.
#[derive(Debug)]
struct Batch {
    url: String,
    events: Vec<ModelEvent>,
    due: Instant,
    copies: u32,
    reorder: bool,
}

/// The sending side of webhook delivery, shared by the request handlers.
#[derive(Debug)]
pub(crate) struct Webhooks {
    queue: mpsc::UnboundedSender<Batch>,
    url: Mutex<Option<String>>,
    knobs: Mutex<WebhookKnobs>,
    /// `true` while delivery is held: batches fall due but wait until it turns `false`.
    held: watch::Sender<bool>,
}

impl Webhooks {
    /// Starts the delivery task; the handle lets the owner stop it.
    pub(crate) fn start(
        client: reqwest::Client,
        signer: Signer,
        url: Option<String>,
        knobs: WebhookKnobs,
    ) -> (Arc<Self>, JoinHandle<()>) {
        let (queue, batches) = mpsc::unbounded_channel();
        let (held, holds) = watch::channel(false);
        let worker = tokio::spawn(deliver_all(batches, holds, client, signer));
        let webhooks = Self {
            queue,
            url: Mutex::new(url),
            knobs: Mutex::new(knobs),
            held,
        };
        (Arc::new(webhooks), worker)
    }

    /// Replaces the delivery knobs for events produced from now on.
    pub(crate) fn set_knobs(&self, knobs: WebhookKnobs) {
        *self.knobs.lock().unwrap_or_else(PoisonError::into_inner) = knobs;
    }

    /// Holds delivery (`true`): nothing is sent, queued or new, until it is let go (`false`);
    /// then everything held goes out in order, as it would have.
    pub(crate) fn hold(&self, held: bool) {
        self.held.send_replace(held);
    }

    /// Replaces the receiver URL for events produced from now on; `None` stops webhooks.
    pub(crate) fn set_url(&self, url: Option<String>) {
        *self.url.lock().unwrap_or_else(PoisonError::into_inner) = url;
    }

    /// Queues the events one request produced. The URL and knobs are read now, so a test that
    /// changes them affects only later events, deterministically.
    pub(crate) fn send(&self, events: Vec<ModelEvent>) {
        if events.is_empty() {
            return;
        }
        let Some(url) = self
            .url
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            tracing::debug!(count = events.len(), "no webhook URL; events not sent");
            return;
        };
        let knobs = self
            .knobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let batch = Batch {
            url,
            events,
            due: Instant::now() + knobs.delay,
            copies: knobs.duplicates.saturating_add(1),
            reorder: knobs.reorder,
        };
        if self.queue.send(batch).is_err() {
            tracing::warn!("webhook delivery task has stopped; events dropped");
        }
    }
}

/// The delivery task: takes batches in the order they were queued, waits until each is due,
/// and sends its events one at a time (each copy, each retry) so that order is kept.
async fn deliver_all(
    mut batches: mpsc::UnboundedReceiver<Batch>,
    mut holds: watch::Receiver<bool>,
    client: reqwest::Client,
    signer: Signer,
) {
    while let Some(first) = batches.recv().await {
        tokio::time::sleep_until(first.due).await;
        // The sender lives as long as the batches' sender, so an error here means the same as
        // `recv` returning `None`: the fake is stopping.
        if holds.wait_for(|held| !held).await.is_err() {
            return;
        }
        let mut group = vec![first];
        if group[0].reorder {
            // Everything that happened while the first batch was held back is delivered with
            // it, newest first: that is how one request's events, or a decline and a later
            // success, end up swapped.
            while let Ok(next) = batches.try_recv() {
                group.push(next);
            }
        }
        let mut deliveries: Vec<(&str, &ModelEvent, u32)> = group
            .iter()
            .flat_map(|batch| {
                batch
                    .events
                    .iter()
                    .map(|event| (batch.url.as_str(), event, batch.copies))
            })
            .collect();
        if group[0].reorder {
            deliveries.reverse();
        }
        for (url, event, copies) in deliveries {
            for _ in 0..copies {
                deliver(&client, &signer, url, event).await;
            }
        }
    }
}

/// Sends one copy of an event, retrying with backoff on a connection error or non-2xx answer.
async fn deliver(client: &reqwest::Client, signer: &Signer, url: &str, event: &ModelEvent) {
    let mut backoff = FIRST_BACKOFF;
    for attempt in 0..=RETRIES {
        if attempt > 0 {
            tokio::time::sleep(backoff).await;
            backoff *= 2;
        }
        // Signed at each attempt, as Stripe does: the timestamp is the time of sending.
        let mut request = client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        for (name, value) in signer.headers(now_epoch_s(), url, event.body.as_bytes()) {
            request = request.header(name, value);
        }
        let sent = request.body(event.body.clone()).send().await;
        match sent {
            Ok(response) if response.status().is_success() => {
                tracing::debug!(event = %event.id, kind = %event.kind, attempt, "webhook delivered");
                return;
            }
            Ok(response) => {
                tracing::info!(event = %event.id, status = %response.status(), attempt, "webhook refused");
            }
            Err(error) => {
                tracing::info!(event = %event.id, %error, attempt, "webhook delivery failed");
            }
        }
    }
    tracing::warn!(event = %event.id, kind = %event.kind, url, "webhook given up after retries");
}

/// Now, in epoch seconds: the `t` of a signature is the time of sending.
fn now_epoch_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_the_shared_vector() {
        let payload = br#"{"id":"evt_1","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","object":"payment_intent","amount":3000,"currency":"jpy","status":"succeeded","metadata":{"payment_id":"pay_1"}}}}"#;
        assert_eq!(
            sign_webhook("whsec_test_payonce_vectors_5f1c", 1_796_000_000, payload),
            "t=1796000000,v1=05fe02612a1be95f1b5dfcb6c80485c86703acd6ef077bbc34643b481efe6071"
        );
    }

    /// The Omise scheme reproduces the "valid" case of the independent vectors
    /// (`shared/testdata/omise-webhook-signatures.json`), read from the repository.
    #[test]
    fn omise_signature_matches_the_independent_vector() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/testdata/omise-webhook-signatures.json"
        );
        let text = std::fs::read_to_string(path).expect("the shared test vectors");
        let vectors: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        let secret = vectors["secret_base64"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let Ok(Signer::Omise(key)) = Signer::new(Provider::Omise, secret) else {
            panic!("the vector secret is base64");
        };
        let payload = vectors["payload"].as_str().unwrap_or_default();
        let valid = vectors["cases"]
            .as_array()
            .and_then(|cases| cases.iter().find(|case| case["name"] == "valid"))
            .expect("a valid case");
        let timestamp = valid["timestamp"].as_str().unwrap_or_default();
        assert_eq!(
            sign_omise_webhook(&key, timestamp, payload.as_bytes()),
            valid["signature"].as_str().unwrap_or_default()
        );
        // The headers the fake sends carry it with the timestamp.
        let now: i64 = timestamp.parse().unwrap_or_default();
        let headers =
            Signer::Omise(key).headers(now, "http://127.0.0.1:9/hook", payload.as_bytes());
        assert_eq!(
            headers,
            vec![
                (
                    "Omise-Signature",
                    valid["signature"].as_str().unwrap_or_default().to_owned()
                ),
                ("Omise-Signature-Timestamp", timestamp.to_owned()),
            ]
        );
    }

    #[test]
    fn an_omise_secret_must_be_base64_of_a_key() {
        for bad in ["whsec_payonce_fake", "", "c2VjcmV0"] {
            let signer = Signer::new(Provider::Omise, bad.to_owned());
            // "c2VjcmV0" is valid base64 ("secret") and accepted; the others are not.
            assert_eq!(signer.is_ok(), bad == "c2VjcmV0", "{bad:?}");
        }
        assert!(Signer::new(
            Provider::Omise,
            crate::provider::DEFAULT_OMISE_WEBHOOK_SECRET.into()
        )
        .is_ok());
        assert!(Signer::new(Provider::Stripe, "anything".into()).is_ok());
    }

    /// The vector of square/square-nodejs-sdk's `tests/integration/webhooks.test.ts`
    /// (re-verified with Python's hmac, `docs/psp-research-square.md` §8).
    #[test]
    fn square_signature_matches_the_sdk_vector() {
        let body = br#"{"data":{"type":"webhooks","id":"fake_id"}}"#;
        let url = "https://webhook.site/webhooks";
        assert_eq!(
            sign_square_webhook("signature-key", url, body),
            "W3FlCNk5IA3ZQ2LHTWoajvzfaDu/OwY2tNHIHC3IUOA="
        );
        // The fake sends it over the URL it delivers to, under Square's header.
        let headers = Signer::new(Provider::Square, "signature-key".into())
            .map(|signer| signer.headers(1, url, body))
            .unwrap_or_default();
        assert_eq!(
            headers,
            vec![(
                "x-square-hmacsha256-signature",
                "W3FlCNk5IA3ZQ2LHTWoajvzfaDu/OwY2tNHIHC3IUOA=".to_owned()
            )]
        );
        // Another URL, key or body signs differently.
        assert_ne!(
            sign_square_webhook("signature-key", "https://webhook.site/other", body),
            sign_square_webhook("signature-key", url, body)
        );
        assert_ne!(
            sign_square_webhook("other-key", url, body),
            sign_square_webhook("signature-key", url, body)
        );
    }

    #[test]
    fn signature_depends_on_secret_time_and_every_byte() {
        let base = sign_webhook("s", 1, b"{}");
        assert_ne!(base, sign_webhook("t", 1, b"{}"));
        assert_ne!(base, sign_webhook("s", 2, b"{}"));
        assert_ne!(base, sign_webhook("s", 1, b"{ }"));
    }
}
