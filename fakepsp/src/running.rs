//! Starting and stopping the fake PSP, and the handle tests use to inspect and steer it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::config::{FakePspConfig, WebhookKnobs};
use crate::conn::{ConnHandle, SeverableListener};
use crate::ledger::{FakeCharge, FakeRefund};
use crate::model::{FakeModel, ModelConfig};
use crate::paypal_signing::{PayPalSigner, PAYPAL_CERT_PATH};
use crate::provider::Provider;
use crate::server::{self, now_ms, App};
use crate::twoc2p_keys::{TwoC2pMaintenanceKeys, TwoC2pMerchantKeys};
use crate::webhooks::{Signer, Webhooks};
use crate::TwoC2pAction;

/// How long [`RunningFakePsp::shutdown`] lets in-flight requests finish before cutting them off.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Per-attempt timeout for webhook deliveries, so a stuck receiver cannot stall the queue.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the ticker sleeps when no time-driven transition is pending (a request wakes it).
const TICKER_IDLE: Duration = Duration::from_secs(60);

/// Entry point: starts a fake PSP.
#[derive(Debug)]
pub struct FakePsp;

impl FakePsp {
    /// Binds `addr` (usually `127.0.0.1:0`, i.e. any free port) and serves the fake PSP, with
    /// the face `config.provider`, from a background task until the returned handle is shut down
    /// or dropped.
    ///
    /// Fails with [`InvalidInput`](std::io::ErrorKind::InvalidInput) for an Omise face whose
    /// webhook secret is not base64, a PayPal face whose signing key PEM is not an RSA
    /// private key, or a 2C2P face whose maintenance keys are not usable RSA keys. Must be
    /// called within a Tokio runtime.
    pub async fn start(config: FakePspConfig, addr: SocketAddr) -> std::io::Result<RunningFakePsp> {
        let twoc2p_manual_settlement =
            config.provider == Provider::TwoC2p && config.twoc2p_manual_settlement;
        let invalid =
            |reason: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, reason);
        // The PayPal face signs with an RSA key, whose certificate names this very listener;
        // the key is read (or made) before binding, so that a bad one fails fast.
        let paypal_signer = match config.provider {
            Provider::PayPal => Some(Arc::new(paypal_signer(config.paypal_signing_key_pem)?)),
            _ => None,
        };
        // The 2C2P face's maintenance keys, made (or checked) before binding as well.
        let twoc2p_maintenance_keys = match config.provider {
            Provider::TwoC2p => {
                let keys = match config.twoc2p_maintenance_keys {
                    Some(keys) => keys,
                    None => TwoC2pMaintenanceKeys::generate()
                        .map_err(|error| invalid(error.to_string()))?,
                };
                keys.parse().map_err(|error| invalid(error.to_string()))?;
                Some(keys)
            }
            _ => None,
        };
        let secret_signer = match config.provider {
            Provider::PayPal => None,
            provider => Some(Signer::new(provider, config.webhook_secret).map_err(invalid)?),
        };
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        let base_url = format!("http://{local_addr}");
        let signer = match (secret_signer, &paypal_signer) {
            (Some(signer), _) => signer,
            (None, Some(signer)) => Signer::PayPal {
                signer: Arc::clone(signer),
                webhook_id: config.paypal_webhook_id,
                cert_url: format!("{base_url}{PAYPAL_CERT_PATH}"),
            },
            // Every provider gets one of the two above; kept total.
            (None, None) => Signer::new(config.provider, String::new()).map_err(invalid)?,
        };

        let client = reqwest::Client::builder()
            .timeout(WEBHOOK_TIMEOUT)
            .build()
            .map_err(std::io::Error::other)?;
        let (webhooks, webhook_task) =
            Webhooks::start(client, signer, config.webhook_url, config.webhooks);

        let (stop, stopping) = watch::channel(false);
        let model_config = ModelConfig {
            provider: config.provider,
            omise_honours_idempotency_key: config.omise_honours_idempotency_key,
            twoc2p_merchant_id: config.twoc2p_merchant_id,
            twoc2p_maintenance_keys,
            twoc2p_settle_after: config.twoc2p_settle_after,
            twoc2p_manual_settlement: config.twoc2p_manual_settlement,
            api_key: config.api_key,
            search_lag_max: config.search_lag_max,
            processing_for: config.processing_for,
            requires_action_for: config.requires_action_for,
            slow_delay: config.slow_delay,
            refund_fail_after: config.refund_fail_after,
            refund_pending_for: config.refund_pending_for,
            authorization_expires_after: config.authorization_expires_after,
            // Where the customer-facing pages are served: this very listener.
            base_url,
            paypal_client_id: config.paypal_client_id,
            paypal_token_lifetime: config.paypal_token_lifetime,
            paypal_request_id_ttl: config.paypal_request_id_ttl,
            paypal_one_step_vault: config.paypal_one_step_vault,
            paypal_unique_invoice_id: config.paypal_unique_invoice_id,
            ..ModelConfig::default()
        };
        // The real clock and a fresh seed: determinism is the simulation's business.
        let model = Arc::new(FakeModel::new(model_config, fastrand::u64(..)));
        let ticker = Arc::new(Notify::new());
        let ticker_task = tokio::spawn(run_ticker(
            Arc::clone(&model),
            Arc::clone(&webhooks),
            Arc::clone(&ticker),
        ));
        let app = App {
            model,
            webhooks,
            ticker,
            stopping: stopping.clone(),
            paypal_signer,
        };
        let service =
            server::router(app.clone()).into_make_service_with_connect_info::<ConnHandle>();
        let mut stopping_signal = stopping;
        let server_task = tokio::spawn(async move {
            let served = axum::serve(SeverableListener::new(listener), service)
                .with_graceful_shutdown(async move {
                    // An error means the handle is gone, which is a reason to stop as well.
                    let _ = stopping_signal.wait_for(|stopping| *stopping).await;
                })
                .await;
            if let Err(error) = served {
                tracing::error!(%error, "fake PSP server stopped with an error");
            }
        });
        tracing::info!(%local_addr, provider = config.provider.as_str(), "fake PSP started");

        Ok(RunningFakePsp {
            local_addr,
            twoc2p_manual_settlement,
            app,
            stop,
            server_task: Some(server_task),
            webhook_task: Some(webhook_task),
            ticker_task: Some(ticker_task),
        })
    }
}

/// The PayPal face's signing key: the PEM given, or an RSA-2048 key made now.
fn paypal_signer(pem: Option<String>) -> std::io::Result<PayPalSigner> {
    let signer = match pem {
        Some(pem) => PayPalSigner::from_pem(&pem),
        None => PayPalSigner::generate(),
    };
    signer.map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidInput, error.to_string()))
}

/// Applies the model's time-driven transitions (`processing` → `succeeded`, `requires_action`
/// → `requires_payment_method`, authorizations that lapse, refunds that succeed or fail later) as they fall due and sends their webhooks. Sleeps until the next
/// one is due, or until a request (which may have scheduled an earlier one) wakes it.
async fn run_ticker(model: Arc<FakeModel>, webhooks: Arc<Webhooks>, wake: Arc<Notify>) {
    loop {
        webhooks.send(model.tick(now_ms()));
        let wait = model.next_transition_ms().map_or(TICKER_IDLE, |due_ms| {
            let wait_ms = u64::try_from(due_ms.saturating_sub(now_ms())).unwrap_or(0);
            Duration::from_millis(wait_ms).min(TICKER_IDLE)
        });
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = wake.notified() => {}
        }
    }
}

/// A running fake PSP. Dropping it stops the server at once; [`shutdown`](Self::shutdown)
/// stops it gracefully.
#[derive(Debug)]
pub struct RunningFakePsp {
    local_addr: SocketAddr,
    /// The 2C2P face's account settles manually.
    twoc2p_manual_settlement: bool,
    app: App,
    stop: watch::Sender<bool>,
    server_task: Option<JoinHandle<()>>,
    webhook_task: Option<JoinHandle<()>>,
    ticker_task: Option<JoinHandle<()>>,
}

impl RunningFakePsp {
    /// The base URL to point the face's PSP client (Stripe, Omise, 2C2P, Square or PayPal) at,
    /// e.g. `http://127.0.0.1:PORT` (no trailing slash).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.local_addr)
    }

    /// The wire format this instance speaks.
    pub fn provider(&self) -> Provider {
        self.app.model.provider()
    }

    /// PayPal face only: the key its webhook deliveries are signed with (its certificate is
    /// [`PayPalSigner::certificate_pem`]); `None` on the other faces.
    pub fn paypal_signer(&self) -> Option<Arc<PayPalSigner>> {
        self.app.paypal_signer.clone()
    }

    /// PayPal face only: where its certificate is served (`PAYPAL-CERT-URL`,
    /// `<base_url>/_fake/paypal/cert.pem`); `None` on the other faces.
    pub fn paypal_cert_url(&self) -> Option<String> {
        self.app
            .paypal_signer
            .as_ref()
            .map(|_| format!("{}{PAYPAL_CERT_PATH}", self.base_url()))
    }

    /// 2C2P face only: the merchant's side of the Payment Maintenance API's keys and the action
    /// endpoint's absolute URL, as `GET /_fake/2c2p/keys` serves them (test keys only); `None`
    /// on the other faces.
    pub fn twoc2p_keys(&self) -> Option<TwoC2pMerchantKeys> {
        self.app.model.twoc2p_keys()
    }

    /// 2C2P face only: whether its merchant account settles manually
    /// ([`FakePspConfig::twoc2p_manual_settlement`]); `false` on the other faces.
    pub fn twoc2p_manual_settlement(&self) -> bool {
        self.twoc2p_manual_settlement
    }

    /// 2C2P face only: every Payment Maintenance API call so far, in order, as
    /// `GET /_fake/2c2p/actions` lists them; `None` on the other faces.
    pub fn twoc2p_actions(&self) -> Option<Vec<TwoC2pAction>> {
        self.app.model.twoc2p_actions()
    }

    /// The address the server is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Every PaymentIntent created so far, in creation order, with its status as it is now;
    /// the same data as `GET /_fake/charges`.
    pub fn charges(&self) -> Vec<FakeCharge> {
        self.app.model.charges()
    }

    /// Every Refund created so far, in creation order, with its status as it is now; the same
    /// data as `GET /_fake/refunds`.
    pub fn refunds(&self) -> Vec<FakeRefund> {
        self.app.model.refunds()
    }

    /// How many PaymentIntents (charges) succeeded with `metadata.payment_id == payment_id`:
    /// the number exactly-once tests assert to be 1.
    pub fn succeeded_charges_for(&self, payment_id: &str) -> usize {
        self.charges()
            .iter()
            .filter(|charge| {
                charge.outcome == "succeeded" && charge.payment_id.as_deref() == Some(payment_id)
            })
            .count()
    }

    /// The model behind the server, e.g. to hold an idempotency key in flight
    /// ([`FakeModel::begin_in_flight`]) so that requests with it get 409.
    pub fn model(&self) -> &FakeModel {
        &self.app.model
    }

    /// Changes how events produced from now on are delivered.
    pub fn set_webhook_knobs(&self, knobs: WebhookKnobs) {
        self.app.webhooks.set_knobs(knobs);
    }

    /// Changes where events produced from now on are delivered; `None` stops webhooks.
    pub fn set_webhook_url(&self, url: Option<String>) {
        self.app.webhooks.set_url(url);
    }

    /// Every HTTP request received on `/v1/*` (Stripe; on the other faces, every request but
    /// `/_fake/*`, PayPal's token calls included) so far, whatever its outcome (including 401s and requests whose response was
    /// dropped), for "the PSP saw nothing" assertions.
    pub fn requests_seen(&self) -> u64 {
        self.app.model.requests_seen()
    }

    /// Stops accepting connections, lets in-flight requests finish (a held-back `pm_fake_slow`
    /// answer is released at once), then stops. Undelivered webhooks are dropped.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(server) = self.server_task.take() {
            let abort = server.abort_handle();
            if tokio::time::timeout(SHUTDOWN_GRACE, server).await.is_err() {
                tracing::warn!("fake PSP did not stop within the grace period; aborting");
                abort.abort();
            }
        }
        self.stop_background_tasks();
        tracing::info!(local_addr = %self.local_addr, "fake PSP stopped");
    }
}

impl Drop for RunningFakePsp {
    fn drop(&mut self) {
        // No await possible here, so no grace period: aborting the server task closes the
        // listener and drops axum's shutdown signal, which makes every open connection close
        // once its in-flight request is answered; `stop` releases held-back slow answers.
        if let Some(server) = self.server_task.take() {
            self.stop.send_replace(true);
            server.abort();
        }
        self.stop_background_tasks();
    }
}

impl RunningFakePsp {
    /// Stops webhook delivery and the ticker; undelivered webhooks are dropped.
    fn stop_background_tasks(&mut self) {
        for task in [self.webhook_task.take(), self.ticker_task.take()]
            .into_iter()
            .flatten()
        {
            task.abort();
        }
    }
}
