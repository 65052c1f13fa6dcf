//! Options, stores and start-up: the embedded store and queue by default, or DynamoDB / SQS
//! (DynamoDB Local, moto, or AWS) when asked, created when absent.

use crate::psp::{PspSecrets, SandboxPsp};
use crate::sandbox::Sandbox;
use payonce::adapters::dynamodb::CapacityMeter;
use payonce::adapters::dynamodb::{
    create_idempotency_table, create_payments_table, DynamoIdempotencyStore, DynamoPaymentStore,
    Tables,
};
use payonce::adapters::memory::{MemoryIdempotencyStore, MemoryPaymentStore, MemoryQueue};
use payonce::adapters::sqs::{create_queue_with_dlq, SqsQueue};
use payonce::clock::{system_clock, Clock, SystemClock};
use payonce::idempotency::{Idempotency, IdempotencyConfig, IdempotencyStore};
use payonce::ports::{
    ChargeStore, ExpiredSweep, InflightScan, OperationStore, OrderStore, QueueReceive, QueueSend,
    RefundStore,
};
use payonce::service::limits::{AttemptLimiter, AttemptLimits};
use payonce::service::reconcile::{ReconcileConfig, Reconciler};
use payonce::service::reconcile_soon::QueuedRequests;
use payonce::service::webhooks::{
    ProcessorConfig, Providers, WebhookProcessor, WebhookReceiver, MAX_WEBHOOK_BYTES,
};
use payonce::service::{
    ChargeConfig, ChargeService, OperationConfig, OperationService, OrderService, RefundConfig,
    RefundService,
};
use payonce_fake_psp::FakePsp;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error>;

/// The server's options: its command-line flags, with the environment's fallbacks.
#[derive(Debug, Clone)]
pub struct Options {
    /// Address to serve the API on (loopback unless asked otherwise).
    pub host: String,
    /// Port of the API.
    pub port: u16,
    /// Port of the fake PSP (0: any free port).
    pub psp_port: u16,
    /// DynamoDB endpoint (`aws`: the default AWS endpoint), or the embedded store.
    pub dynamodb: Option<String>,
    /// SQS endpoint (`aws`: the default AWS endpoint), or the embedded queue.
    pub sqs: Option<String>,
    /// How often reconcile runs.
    pub reconcile_every: Duration,
    /// The PSP: payonce's adapter and the fake PSP's wire format.
    pub psp: SandboxPsp,
    /// `--allow-remote`: may listen off loopback or use AWS endpoints (with a JWT secret of the
    /// operator's own), and answers any `Host`.
    pub allow_remote: bool,
    /// Origins a browser checkout may call the API from (`--allowed-origin`, repeatable, or
    /// `PAYONCE_LOCAL_ALLOWED_ORIGINS`, comma-separated).
    pub allowed_origins: Vec<String>,
    /// `--count-dynamodb`: count DynamoDB requests and capacity, shown at
    /// `/_sandbox/dynamodb-usage` (load runs only; needs `--dynamodb-endpoint`, not
    /// `--allow-remote`).
    pub count_dynamodb: bool,
    /// 2C2P only: whether payonce's 2C2P adapter holds the fake PSP's Payment Maintenance keys
    /// and refunds through them, late duplicates refunded too, as a deployment with
    /// `TwoC2pRefunds=enabled` (the default); off with `--no-2c2p-refunds` or
    /// `PAYONCE_LOCAL_2C2P_REFUNDS=disabled`: refunds are answered 409 `refund-not-supported`
    /// and late duplicates marked `refund_required`.
    pub twoc2p_refunds: bool,
    /// 2C2P only: the fake's merchant account settles manually, and payonce with it, as a
    /// deployment with `TwoC2pSettlement=manual`: `capture: "manual"` works, and automatic
    /// payments are settled by payonce (`--2c2p-manual-settlement` or
    /// `PAYONCE_LOCAL_2C2P_SETTLEMENT=manual`; needs the refunds' maintenance keys).
    pub twoc2p_manual_settlement: bool,
}

/// The server's command-line flags, before the environment fills in what they leave out.
#[derive(Debug, Clone, clap::Args)]
pub struct Flags {
    /// Port to serve the API on.
    #[arg(long, default_value_t = 3000)]
    port: u16,
    /// The PSP: payonce's adapter and the fake PSP's wire format (default: PAYONCE_LOCAL_PSP, else stripe).
    #[arg(long, value_enum, ignore_case = true)]
    psp: Option<SandboxPsp>,
    /// Port of the fake PSP (0: any free port).
    #[arg(long, value_name = "PORT", default_value_t = 0)]
    psp_port: u16,
    /// DynamoDB endpoint, or aws for AWS itself (default: AWS_ENDPOINT_URL_DYNAMODB, else the embedded store).
    #[arg(long = "dynamodb-endpoint", value_name = "URL|aws")]
    dynamodb: Option<String>,
    /// SQS endpoint, or aws for AWS itself (default: AWS_ENDPOINT_URL_SQS, else the embedded queue).
    #[arg(long = "sqs-endpoint", value_name = "URL|aws")]
    sqs: Option<String>,
    /// An origin a browser checkout may call the API from (repeatable; PAYONCE_LOCAL_ALLOWED_ORIGINS adds more, comma-separated).
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    allowed_origins: Vec<String>,
    /// Address to listen on (anything but loopback needs --allow-remote).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    host: String,
    /// Allow listening off loopback and AWS endpoints, and answer any Host (needs your own PAYONCE_LOCAL_JWT_SECRET).
    #[arg(long)]
    allow_remote: bool,
    /// How often reconcile runs, in seconds.
    #[arg(
        long = "reconcile-every-seconds",
        value_name = "SECONDS",
        default_value_t = 30
    )]
    reconcile_every_seconds: u64,
    /// Count DynamoDB requests and capacity at /_sandbox/dynamodb-usage (needs --dynamodb-endpoint, no --allow-remote).
    #[arg(long)]
    count_dynamodb: bool,
    /// 2C2P: run without its Payment Maintenance API, as a deployment with TwoC2pRefunds=disabled (refunds answered 409 refund-not-supported, late duplicates marked refund_required; default: PAYONCE_LOCAL_2C2P_REFUNDS, else enabled).
    #[arg(long = "no-2c2p-refunds")]
    no_twoc2p_refunds: bool,
    /// 2C2P: the fake's account settles manually, as a deployment with TwoC2pSettlement=manual (capture "manual" works; automatic payments are settled by payonce; default: PAYONCE_LOCAL_2C2P_SETTLEMENT, else automatic).
    #[arg(long = "2c2p-manual-settlement")]
    twoc2p_manual_settlement: bool,
}

impl Options {
    /// The options of `flags`, with what they leave out taken from the environment (`env`):
    /// the endpoints from `AWS_ENDPOINT_URL_DYNAMODB` / `AWS_ENDPOINT_URL_SQS`, the PSP from
    /// `PAYONCE_LOCAL_PSP` (default `stripe`), more origins from
    /// `PAYONCE_LOCAL_ALLOWED_ORIGINS` (comma-separated), and whether 2C2P refunds from
    /// `PAYONCE_LOCAL_2C2P_REFUNDS` (`enabled`, the default, or `disabled`; `--no-2c2p-refunds`
    /// disables them whatever it says). Empty variables count as unset.
    pub fn from_flags(flags: Flags, env: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let env = |name: &str| env(name).filter(|v| !v.is_empty());
        let mut allowed_origins = flags.allowed_origins;
        if let Some(list) = env("PAYONCE_LOCAL_ALLOWED_ORIGINS") {
            allowed_origins.extend(payonce::config::split_list(&list));
        }
        let psp = match flags.psp {
            Some(psp) => psp,
            None => env("PAYONCE_LOCAL_PSP")
                .map(|name| SandboxPsp::from_name(&name))
                .transpose()?
                .unwrap_or_default(),
        };
        let dynamodb = flags.dynamodb.or_else(|| env("AWS_ENDPOINT_URL_DYNAMODB"));
        if flags.count_dynamodb && (dynamodb.is_none() || flags.allow_remote) {
            // The counts are a debug endpoint: only on loopback, and only with a DynamoDB to count.
            return Err("--count-dynamodb needs --dynamodb-endpoint and no --allow-remote".into());
        }
        let twoc2p_refunds = match env(TWOC2P_REFUNDS_VAR).as_deref().map(str::trim) {
            None | Some("enabled") => true,
            Some("disabled") => false,
            Some(other) => {
                return Err(format!(
                    "{TWOC2P_REFUNDS_VAR}={other:?} is neither `enabled` nor `disabled`"
                )
                .into())
            }
        } && !flags.no_twoc2p_refunds;
        let twoc2p_manual_settlement = flags.twoc2p_manual_settlement
            || match env(TWOC2P_SETTLEMENT_VAR).as_deref().map(str::trim) {
                None | Some("automatic") => false,
                Some("manual") => true,
                Some(other) => {
                    return Err(format!(
                        "{TWOC2P_SETTLEMENT_VAR}={other:?} is neither `automatic` nor `manual`"
                    )
                    .into())
                }
            };
        if twoc2p_manual_settlement && !twoc2p_refunds {
            return Err(
                "a 2C2P account that settles manually needs the maintenance keys: drop --no-2c2p-refunds"
                    .into(),
            );
        }
        Ok(Self {
            host: flags.host,
            port: flags.port,
            psp_port: flags.psp_port,
            dynamodb,
            sqs: flags.sqs.or_else(|| env("AWS_ENDPOINT_URL_SQS")),
            reconcile_every: Duration::from_secs(flags.reconcile_every_seconds),
            psp,
            allow_remote: flags.allow_remote,
            allowed_origins,
            count_dynamodb: flags.count_dynamodb,
            twoc2p_refunds,
            twoc2p_manual_settlement,
        })
    }

    /// Whether payonce refunds through the sandbox's PSP: every PSP but 2C2P, and 2C2P with
    /// [`Options::twoc2p_refunds`] (as `payonce::config::refunds_through_payonce` decides for a
    /// deployment). What a late duplicate becomes, and whether the 2C2P adapter gets the fake's
    /// maintenance keys.
    pub fn refunds_through_payonce(&self) -> bool {
        self.psp.kind().refunds_through_payonce()
            || (self.psp == SandboxPsp::TwoC2p && self.twoc2p_refunds)
    }
}

/// The environment variable that turns the sandbox's 2C2P refunds off (`disabled`) or on
/// (`enabled`, the default), as `TWOC2P_REFUNDS` does for a deployment.
pub const TWOC2P_REFUNDS_VAR: &str = "PAYONCE_LOCAL_2C2P_REFUNDS";

/// The environment variable that makes the sandbox's 2C2P account settle manually (`manual`)
/// or not (`automatic`, the default), as `TWOC2P_SETTLEMENT` does for a deployment.
pub const TWOC2P_SETTLEMENT_VAR: &str = "PAYONCE_LOCAL_2C2P_SETTLEMENT";

/// Readable logs on stderr: one access line per request, warnings from the rest.
pub fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("access=info,payonce=info,payonce_local=info,warn")
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .compact()
        .with_writer(std::io::stderr)
        .init();
}

async fn aws_config(endpoint: &str) -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err() {
        loader = loader.region(aws_config::Region::new("us-east-1"));
    }
    if endpoint != "aws" {
        loader = loader.endpoint_url(endpoint);
        if std::env::var("AWS_ACCESS_KEY_ID").is_err() {
            // Emulators accept any credentials.
            loader = loader.credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "local",
                "local",
                None,
                None,
                "payonce-local",
            ));
        }
    }
    loader.load().await
}

fn table_name(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// Starts everything and serves until Ctrl-C.
pub async fn run(
    options: Options,
    jwt_secret: String,
    default_jwt_secret: bool,
) -> Result<(), Error> {
    let started = Instant::now();
    crate::exposure::check(
        &options.host,
        &[options.dynamodb.as_deref(), options.sqs.as_deref()],
        options.allow_remote,
        default_jwt_secret,
    )?;
    let cors = crate::exposure::Cors::new(options.allowed_origins.clone())?;
    let listener = tokio::net::TcpListener::bind((options.host.as_str(), options.port)).await?;
    let api_url = format!("http://{}", listener.local_addr()?);
    let kind = options.psp;
    let set = |var: &str| std::env::var(var).ok().filter(|s| !s.is_empty());
    let webhook_secret = set(kind.webhook_secret_var());
    let merchant_id = kind.merchant_id_var().and_then(set);
    let webhook_secret_is_default = webhook_secret.is_none();
    let merchant_id_is_default = merchant_id.is_none();
    // PayPal's signing key: a PEM file named by its variable, else one generated at start.
    let signing_key_pem = match kind.signing_key_var().and_then(set) {
        Some(path) => Some(kind.read_signing_key(&path)?),
        None => None,
    };
    let defaults = kind.default_secrets();
    let secrets = PspSecrets {
        secret: webhook_secret.unwrap_or(defaults.secret),
        merchant_id: merchant_id.unwrap_or(defaults.merchant_id),
        signing_key_pem,
        twoc2p_manual_settlement: kind == SandboxPsp::TwoC2p && options.twoc2p_manual_settlement,
    };
    // Checked before the fake PSP starts: an unusable secret names its variable.
    kind.check_secrets(&secrets, &api_url)?;
    let psp = FakePsp::start(
        kind.fake_config(&api_url, &secrets),
        format!("127.0.0.1:{}", options.psp_port).parse()?,
    )
    .await?;
    // PayPal's verifier fetches its certificate from this fake, wherever it listens.
    let webhooks = kind.webhooks(&secrets, &api_url, &psp.base_url())?;
    // 2C2P refunds through the fake's Payment Maintenance API, with the test keys it made at
    // start, unless the sandbox runs without them.
    let refunds_through_payonce = options.refunds_through_payonce();
    let maintenance = if kind == SandboxPsp::TwoC2p && refunds_through_payonce {
        Some(crate::psp::twoc2p_maintenance(psp.twoc2p_keys())?)
    } else {
        None
    };
    let usage = options.count_dynamodb.then(CapacityMeter::default);
    let context = Context {
        cors,
        options: options.clone(),
        jwt_secret,
        webhooks,
        secrets,
        maintenance,
        webhook_secret_is_default,
        merchant_id_is_default,
        psp_url: psp.base_url(),
        api_url,
        started,
        usage: usage.clone(),
    };

    let memory_records = MemoryIdempotencyStore::new(system_clock());
    let memory_queue = || {
        MemoryQueue::with_dead_letter(
            system_clock(),
            MAX_WEBHOOK_BYTES,
            5,
            MemoryQueue::new(system_clock(), MAX_WEBHOOK_BYTES),
        )
    };
    // A late duplicate is refunded, or marked refund-required where the PSP cannot refund
    // (2C2P without its maintenance keys).
    let late_duplicates = payonce::domain::LateDuplicates::for_refunds(refunds_through_payonce);
    match (&options.dynamodb, &options.sqs) {
        (None, None) => {
            let store = MemoryPaymentStore::new(memory_records.clone(), system_clock())
                .with_late_duplicates(late_duplicates);
            serve(listener, context, store, memory_records, memory_queue()).await?
        }
        (Some(ddb), None) => {
            let (store, records) = dynamo(ddb, usage.clone()).await?;
            let store = store.with_late_duplicates(late_duplicates);
            serve(listener, context, store, records, memory_queue()).await?
        }
        (None, Some(sqs)) => {
            let store = MemoryPaymentStore::new(memory_records.clone(), system_clock())
                .with_late_duplicates(late_duplicates);
            serve(
                listener,
                context,
                store,
                memory_records,
                sqs_queue(sqs).await?,
            )
            .await?
        }
        (Some(ddb), Some(sqs)) => {
            let (store, records) = dynamo(ddb, usage.clone()).await?;
            let store = store.with_late_duplicates(late_duplicates);
            serve(listener, context, store, records, sqs_queue(sqs).await?).await?
        }
    }
    psp.shutdown().await;
    Ok(())
}

async fn dynamo(
    endpoint: &str,
    usage: Option<CapacityMeter>,
) -> Result<(DynamoPaymentStore, DynamoIdempotencyStore), Error> {
    let config = aws_sdk_dynamodb::config::Builder::from(&aws_config(endpoint).await);
    let client = aws_sdk_dynamodb::Client::from_conf(match usage {
        Some(usage) => config.interceptor(usage).build(),
        None => config.build(),
    });
    let tables = Tables {
        idempotency: table_name("PAYONCE_IDEMPOTENCY_TABLE", "payonce-idempotency"),
        payments: table_name("PAYONCE_PAYMENTS_TABLE", "payonce-payments"),
    };
    create_idempotency_table(&client, &tables.idempotency).await?;
    create_payments_table(&client, &tables.payments).await?;
    let records = DynamoIdempotencyStore::new(client.clone(), &tables.idempotency);
    Ok((DynamoPaymentStore::new(client, tables), records))
}

async fn sqs_queue(endpoint: &str) -> Result<SqsQueue, Error> {
    let client = aws_sdk_sqs::Client::new(&aws_config(endpoint).await);
    let name = table_name("PAYONCE_WEBHOOK_QUEUE", "payonce-webhooks");
    // 256 KiB: what moto keeps (AWS allows 1 MiB; bodies above it are refused with 413 here).
    let max_bytes = 262_144;
    let pair =
        create_queue_with_dlq(&client, &name, 5, Duration::from_secs(180), max_bytes).await?;
    Ok(SqsQueue::new(client, pair.queue_url, max_bytes))
}

struct Context {
    options: Options,
    /// The origins a browser checkout may call from.
    cors: crate::exposure::Cors,
    jwt_secret: String,
    /// The one webhook scheme accepted (the PSP's).
    webhooks: Providers,
    /// The PSP's secrets (the adapters of 2C2P sign with them; PayPal's key is the fake's).
    secrets: PspSecrets,
    /// 2C2P's Payment Maintenance API at the fake, with the test keys it made (every 2C2P
    /// adapter holds it, so refunds go through it); `None` without 2C2P refunds or on another PSP.
    maintenance: Option<payonce::adapters::psp::twoc2p::MaintenanceConfig>,
    /// Whether the webhook secret is the printed development default.
    webhook_secret_is_default: bool,
    /// Whether the merchant id (2C2P) is the printed development default.
    merchant_id_is_default: bool,
    psp_url: String,
    api_url: String,
    started: Instant,
    /// The DynamoDB counts (`--count-dynamodb`).
    usage: Option<CapacityMeter>,
}

async fn serve<S, I, Q>(
    listener: tokio::net::TcpListener,
    context: Context,
    store: S,
    records: I,
    queue: Q,
) -> Result<(), Error>
where
    S: ChargeStore + RefundStore + OperationStore + OrderStore + InflightScan + Clone + 'static,
    I: IdempotencyStore + ExpiredSweep + Clone + 'static,
    Q: QueueSend + QueueReceive + Clone + 'static,
{
    // One adapter per service (as each Lambda has its own), all of the one configured PSP.
    let adapter = || {
        context.options.psp.adapter(
            &context.psp_url,
            &context.secrets,
            context.maintenance.as_ref(),
        )
    };
    let providers = context.webhooks.clone();
    let reconcile_requests = MemoryQueue::new(system_clock(), 1024);
    let sandbox = Arc::new(Sandbox {
        orders: OrderService::new(
            store.clone(),
            Idempotency::new(records.clone(), IdempotencyConfig::default()),
        )
        .for_psp(context.options.psp.kind()),
        charge: ChargeService::new(
            store.clone(),
            adapter()?,
            ChargeConfig {
                // The demo checkout lives on the sandbox's own origin; other checkouts are the
                // allowed origins, as the template's CORS list.
                checkout_origins: own_origins(&context.api_url)
                    .into_iter()
                    .chain(context.options.allowed_origins.iter().cloned())
                    .collect(),
                ..ChargeConfig::default()
            },
        )
        .with_attempt_limits(AttemptLimiter::new(AttemptLimits::from_env()?)),
        refund: RefundService::new(store.clone(), adapter()?, RefundConfig::default()),
        operations: OperationService::new(store.clone(), adapter()?, OperationConfig::default()),
        receiver: WebhookReceiver::new(providers.clone(), queue.clone(), system_clock()),
        processor: WebhookProcessor::new(store.clone(), providers, ProcessorConfig::default())
            .with_reconcile_soon(Arc::new(QueuedRequests(reconcile_requests.clone()))),
        reconciler: Reconciler::new(
            store,
            adapter()?,
            ReconcileConfig {
                min_age: Duration::from_secs(30),
                ..ReconcileConfig::default()
            },
        ),
        records,
        queue,
        reconcile_requests,
        jwt_secret: context.jwt_secret.clone(),
        page: crate::sandbox_page(),
        page_csp: crate::exposure::page_csp(crate::sandbox_page()),
        cors: context.cors.clone(),
        allow_remote: context.options.allow_remote,
        psp_url: context.psp_url.clone(),
        psp_name: context.options.psp.name(),
        dynamodb_usage: context.usage.clone(),
    });
    let tasks = [
        tokio::spawn(sandbox.clone().process_queue_forever()),
        tokio::spawn(sandbox.clone().reconcile_on_request_forever()),
        tokio::spawn(
            sandbox
                .clone()
                .reconcile_forever(context.options.reconcile_every),
        ),
        tokio::spawn(sandbox.clone().cleanup_forever(Duration::from_secs(3600))),
    ];
    banner(&context);
    let app = sandbox.router();
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
            println!("\nshutting down: finishing requests in flight");
        })
        .await?;
    for task in tasks {
        task.abort();
    }
    Ok(())
}

fn banner(context: &Context) {
    let token = crate::jwt::sign(
        &context.jwt_secret,
        "demo-user",
        SystemClock.now_s(),
        24 * 3600,
        &[],
    );
    let store = context.options.dynamodb.as_deref().map_or_else(
        || "embedded (in memory)".to_owned(),
        |e| format!("DynamoDB at {e}"),
    );
    let queue = context.options.sqs.as_deref().map_or_else(
        || "embedded (in memory)".to_owned(),
        |e| format!("SQS at {e}"),
    );
    let api = &context.api_url;
    let kind = context.options.psp;
    // Only the development default is ever printed, never a secret that was set.
    let secret = if context.webhook_secret_is_default {
        format!(
            "{}{}, default {}",
            kind.webhook_secret_var(),
            match kind {
                SandboxPsp::Stripe => "",
                SandboxPsp::Omise => " in base64",
                SandboxPsp::TwoC2p => " (the merchant secret key)",
                SandboxPsp::Square => " (the signature key, over this webhook URL)",
                SandboxPsp::PayPal => "",
            },
            kind.default_webhook_secret()
        )
    } else {
        format!("{}, set", kind.webhook_secret_var())
    };
    // PayPal's RSA key: from its file, or generated now, its certificate served by the fake;
    // the webhook id is signed into every delivery.
    let secret = match kind.signing_key_var() {
        None => secret,
        Some(var) => format!(
            "{var}, {}, its certificate at {}{}; webhook id {secret}",
            if context.secrets.signing_key_pem.is_some() {
                "set"
            } else {
                "unset: a key generated at start"
            },
            context.psp_url,
            payonce_fake_psp::PAYPAL_CERT_PATH,
        ),
    };
    // 2C2P's merchant id, the same way: its default printed, a value set never.
    let secret = match kind.merchant_id_var() {
        None => secret,
        Some(var) if context.merchant_id_is_default => format!(
            "{secret}; merchant {var}, default {}",
            kind.default_merchant_id()
        ),
        Some(var) => format!("{secret}; merchant {var}, set"),
    };
    let refunds = refunds_line(
        kind,
        context.maintenance.as_ref(),
        context.options.twoc2p_manual_settlement,
    );
    println!(
        "payonce sandbox ready in {} ms\n\
         \n  API          {api}\n  checkout     {api}/\n  PSP          {psp_name}  (the fake PSP speaks {wire}; --psp {names} or PAYONCE_LOCAL_PSP)\n{refunds}  fake PSP     {psp}  (its charges: {psp}/_fake/charges)\n  webhooks     {api}/webhooks/{provider}  (signed with {secret})\n  store        {store}\n  queue        {queue}\n  JWT secret   PAYONCE_LOCAL_JWT_SECRET (HS256)\n  token        {token}  (user demo-user, 24 h; more: payonce-local token <user> [--scope payments:refund])\n\
         \nTry it:\n  TOKEN={token}\n  \
         curl -s -X POST {api}/orders -H \"authorization: Bearer $TOKEN\" -H 'content-type: application/json' \\\n      -d '{{\"currency\":\"jpy\",\"items\":[{{\"sku\":\"A1\",\"quantity\":2,\"unit_amount\":1500}}]}}'\n  \
         curl -s -X POST {api}/payments -H \"authorization: Bearer $TOKEN\" -H 'idempotency-key: demo-1' -H 'content-type: application/json' \\\n      -d '{{\"order_id\":\"<order_id>\",\"order_version\":1,\"payment_method\":\"pm_card_visa\"}}'\n\
         \nPress Ctrl-C to stop.",
        context.started.elapsed().as_millis(),
        psp = context.psp_url,
        psp_name = kind.name(),
        wire = kind.wire_format(),
        names = crate::psp::PSP_NAMES.replace(", ", "|"),
        provider = kind.provider(),
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();
}

/// The banner's line on 2C2P refunds (empty for the other PSPs, which always refund): on,
/// through the fake's action URL with the test keys it made at start, or off.
fn refunds_line(
    kind: SandboxPsp,
    maintenance: Option<&payonce::adapters::psp::twoc2p::MaintenanceConfig>,
    manual_settlement: bool,
) -> String {
    if kind != SandboxPsp::TwoC2p {
        return String::new();
    }
    let settlement = if manual_settlement {
        "  settlement   manual: capture \"manual\" is authorized, then settled (S) or voided (V) by staff; automatic payments are settled by payonce at once  (as TwoC2pSettlement=manual)\n".to_owned()
    } else {
        format!("  settlement   automatic: capture \"manual\" is answered 409 capture-not-supported  (manual: --2c2p-manual-settlement or {TWOC2P_SETTLEMENT_VAR}=manual)\n")
    };
    let refunds = match maintenance {
        Some(maintenance) => format!(
            "  refunds      on: 2C2P's Payment Maintenance API at {}  (with the fake's test keys, made at start, as TwoC2pRefunds=enabled; off: --no-2c2p-refunds or {TWOC2P_REFUNDS_VAR}=disabled)\n",
            maintenance.action_url
        ),
        None => format!(
            "  refunds      off: answered 409 refund-not-supported, late duplicates marked refund_required  (as TwoC2pRefunds=disabled: --no-2c2p-refunds or {TWOC2P_REFUNDS_VAR}=disabled)\n"
        ),
    };
    refunds + &settlement
}

/// The sandbox's own origin, as a browser may spell it: on loopback, `127.0.0.1` and
/// `localhost` are the one machine, so a demo checkout opened at either comes back to it.
fn own_origins(api_url: &str) -> Vec<String> {
    let mut origins = vec![api_url.to_owned()];
    for (from, to) in [
        ("http://127.0.0.1", "http://localhost"),
        ("http://localhost", "http://127.0.0.1"),
    ] {
        if let Some(port) = api_url.strip_prefix(from) {
            if port.is_empty() || port.starts_with(':') {
                origins.push(format!("{to}{port}"));
            }
        }
    }
    origins
}

#[cfg(test)]
mod tests {
    use super::{own_origins, refunds_line, Flags, Options, SandboxPsp};

    #[test]
    fn the_sandbox_comes_back_to_its_origin_however_loopback_is_spelled() {
        assert_eq!(
            own_origins("http://127.0.0.1:3000"),
            ["http://127.0.0.1:3000", "http://localhost:3000"]
        );
        assert_eq!(
            own_origins("http://localhost:3000"),
            ["http://localhost:3000", "http://127.0.0.1:3000"]
        );
        assert_eq!(own_origins("http://0.0.0.0:3000"), ["http://0.0.0.0:3000"]);
    }
    use clap::Parser;
    use std::time::Duration;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        flags: Flags,
    }

    /// The options of `args`, in an environment holding only `env`.
    fn options(args: &[&str], env: &[(&str, &str)]) -> Result<Options, String> {
        let cli =
            Cli::try_parse_from(["payonce-local"].iter().chain(args)).map_err(|e| e.to_string())?;
        Options::from_flags(cli.flags, |name| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_loopback_the_embedded_store_and_stripe() {
        let o = options(&[], &[]).unwrap();
        assert_eq!(
            (o.host.as_str(), o.port, o.psp_port),
            ("127.0.0.1", 3000, 0)
        );
        assert!(o.twoc2p_refunds && o.refunds_through_payonce());
        assert_eq!((o.dynamodb, o.sqs), (None, None));
        assert_eq!(o.psp, SandboxPsp::Stripe);
        assert_eq!(o.reconcile_every, Duration::from_secs(30));
        assert!(!o.allow_remote && !o.count_dynamodb && o.allowed_origins.is_empty());
    }

    #[test]
    fn flags_win_over_the_environment_which_fills_in_the_rest() {
        let env = [
            ("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000"),
            ("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:5000"),
            ("PAYONCE_LOCAL_PSP", "omise"),
            (
                "PAYONCE_LOCAL_ALLOWED_ORIGINS",
                "http://b.test, http://c.test",
            ),
        ];
        let o = options(&["--allowed-origin", "http://a.test"], &env).unwrap();
        assert_eq!(o.dynamodb.as_deref(), Some("http://127.0.0.1:8000"));
        assert_eq!(o.sqs.as_deref(), Some("http://127.0.0.1:5000"));
        assert_eq!(o.psp, SandboxPsp::Omise);
        assert_eq!(
            o.allowed_origins,
            ["http://a.test", "http://b.test", "http://c.test"]
        );
        let o = options(
            &[
                "--psp",
                "2C2P",
                "--dynamodb-endpoint",
                "aws",
                "--sqs-endpoint=aws",
                "--port=4000",
            ],
            &env,
        )
        .unwrap();
        assert_eq!((o.psp, o.port), (SandboxPsp::TwoC2p, 4000));
        assert_eq!(
            (o.dynamodb.as_deref(), o.sqs.as_deref()),
            (Some("aws"), Some("aws"))
        );
        for spelled in ["paypal", "PayPal"] {
            assert_eq!(
                options(&["--psp", spelled], &[]).unwrap().psp,
                SandboxPsp::PayPal
            );
        }
        assert_eq!(
            options(&[], &[("PAYONCE_LOCAL_PSP", "paypal")])
                .unwrap()
                .psp,
            SandboxPsp::PayPal
        );
        // An empty variable is unset.
        let o = options(
            &[],
            &[("PAYONCE_LOCAL_PSP", ""), ("AWS_ENDPOINT_URL_SQS", "")],
        )
        .unwrap();
        assert_eq!((o.psp, o.sqs), (SandboxPsp::Stripe, None));
        assert!(options(&[], &[("PAYONCE_LOCAL_PSP", "visa")])
            .unwrap_err()
            .contains("is not a PSP the sandbox speaks"));
    }

    #[test]
    fn twoc2p_refunds_are_on_unless_turned_off() {
        let o = options(&["--psp", "2c2p"], &[]).unwrap();
        assert!(o.twoc2p_refunds && o.refunds_through_payonce());
        for env in [
            [("PAYONCE_LOCAL_2C2P_REFUNDS", "enabled")],
            [("PAYONCE_LOCAL_2C2P_REFUNDS", "")],
        ] {
            assert!(options(&["--psp", "2c2p"], &env)
                .unwrap()
                .refunds_through_payonce());
        }
        // Off by the flag, or by the variable; the flag wins over `enabled`.
        let off = [
            options(&["--psp", "2c2p", "--no-2c2p-refunds"], &[]),
            options(
                &["--psp", "2c2p"],
                &[("PAYONCE_LOCAL_2C2P_REFUNDS", "disabled")],
            ),
            options(
                &["--psp", "2c2p", "--no-2c2p-refunds"],
                &[("PAYONCE_LOCAL_2C2P_REFUNDS", "enabled")],
            ),
            options(
                &[],
                &[
                    ("PAYONCE_LOCAL_PSP", "2c2p"),
                    ("PAYONCE_LOCAL_2C2P_REFUNDS", "disabled"),
                ],
            ),
        ];
        for o in off {
            let o = o.unwrap();
            assert_eq!(o.psp, SandboxPsp::TwoC2p);
            assert!(!o.twoc2p_refunds && !o.refunds_through_payonce());
        }
        // The other PSPs always refund; the switch is 2C2P's alone.
        for psp in ["stripe", "omise", "square", "paypal"] {
            let o = options(&["--psp", psp, "--no-2c2p-refunds"], &[]).unwrap();
            assert!(o.refunds_through_payonce(), "{psp}");
        }
        let error =
            options(&["--psp", "2c2p"], &[("PAYONCE_LOCAL_2C2P_REFUNDS", "off")]).unwrap_err();
        assert!(
            error.contains("PAYONCE_LOCAL_2C2P_REFUNDS") && error.contains("\"off\""),
            "{error}"
        );
        assert!(options(&["--no-2c2p-refunds=yes"], &[]).is_err());
    }

    #[test]
    fn the_banner_says_whether_2c2p_refunds_are_on() {
        let maintenance = payonce::adapters::psp::twoc2p::MaintenanceConfig {
            action_url: "http://127.0.0.1:4001/2C2PFrontend/PaymentAction/2.0/action".into(),
            merchant_private_key: vec![],
            twoc2p_public_key: vec![],
        };
        let on = refunds_line(SandboxPsp::TwoC2p, Some(&maintenance), false);
        assert!(on.contains("settlement   automatic"), "{on}");
        let manual = refunds_line(SandboxPsp::TwoC2p, Some(&maintenance), true);
        assert!(manual.contains("settlement   manual"), "{manual}");
        assert!(
            on.trim_start().starts_with("refunds      on")
                && on.contains(&maintenance.action_url)
                && on.contains("test keys")
                && on.ends_with('\n'),
            "{on}"
        );
        let off = refunds_line(SandboxPsp::TwoC2p, None, false);
        assert!(
            off.trim_start().starts_with("refunds      off")
                && off.contains("refund-not-supported")
                && off.contains("refund_required"),
            "{off}"
        );
        assert_eq!(
            refunds_line(SandboxPsp::Stripe, Some(&maintenance), false),
            ""
        );
        assert_eq!(refunds_line(SandboxPsp::PayPal, None, false), "");
    }

    #[test]
    fn counting_dynamodb_needs_a_dynamodb_on_loopback() {
        let endpoint = ["--dynamodb-endpoint", "http://127.0.0.1:8000"];
        let needs = "--count-dynamodb needs --dynamodb-endpoint and no --allow-remote";
        assert_eq!(options(&["--count-dynamodb"], &[]).unwrap_err(), needs);
        assert_eq!(
            options(
                &[&endpoint[..], &["--count-dynamodb", "--allow-remote"]].concat(),
                &[]
            )
            .unwrap_err(),
            needs
        );
        assert!(
            options(&[&endpoint[..], &["--count-dynamodb"]].concat(), &[])
                .unwrap()
                .count_dynamodb
        );
        let env = [("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000")];
        assert!(options(&["--count-dynamodb"], &env).unwrap().count_dynamodb);
    }

    #[test]
    fn unknown_flags_and_bad_values_are_refused() {
        for args in [
            &["--bogus"][..],
            &["--port", "http"],
            &["--port"],
            &["--psp", "visa"],
            &["--allowed-origin"],
            &["--reconcile-every-seconds", "-1"],
            &["--allow-remote", "yes"],
        ] {
            assert!(options(args, &[]).is_err(), "{args:?}");
        }
    }
}
