//! The test stack shared by the integration tests: clients for the emulators that
//! `scripts/test` starts, fresh tables per test, and the harness that lets one conformance
//! suite run against every store backend.

pub mod logs;
pub mod lost_answers;
pub mod queue;
pub mod stack;
pub mod stores;
pub mod webhook_sink;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use payonce::adapters::dynamodb::{
    create_idempotency_table_with, DynamoIdempotencyStore, IdempotencyAttributes, RequestCounter,
};
use payonce::adapters::faults::Faults;
use payonce::adapters::memory::MemoryIdempotencyStore;
use payonce::clock::ManualClock;
use payonce::idempotency::{IdempotencyRecord, RecordKey};
use std::sync::Arc;

/// The DynamoDB Local endpoint `scripts/test` exported.
pub fn dynamodb_endpoint() -> String {
    std::env::var("PAYONCE_TEST_DYNAMODB_ENDPOINT").unwrap_or_else(|_| {
        panic!("PAYONCE_TEST_DYNAMODB_ENDPOINT is not set: run the tests through scripts/test, which starts DynamoDB Local")
    })
}

/// A DynamoDB client for DynamoDB Local, counting its requests into `counter`.
pub fn dynamodb_client(counter: &RequestCounter) -> Client {
    client_for(&dynamodb_endpoint(), counter)
}

/// A DynamoDB client for an endpoint nothing listens on (a closed loopback port), without
/// retries: every request fails fast, as during an outage.
pub fn unreachable_dynamodb_client(counter: &RequestCounter) -> Client {
    let config = client_for("http://127.0.0.1:9", counter)
        .config()
        .to_builder()
        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
        .build();
    Client::from_conf(config)
}

/// A DynamoDB client for DynamoDB Local, counting its requests into `counter`, that loses the
/// answers `lost` is armed to lose.
pub fn dynamodb_client_losing(
    counter: &RequestCounter,
    lost: &lost_answers::LostAnswers,
) -> Client {
    let config = dynamodb_client(counter)
        .config()
        .to_builder()
        .interceptor(lost.clone())
        .build();
    Client::from_conf(config)
}

fn client_for(endpoint: &str, counter: &RequestCounter) -> Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test",
            "test",
            None,
            None,
            "payonce-tests",
        ))
        .endpoint_url(endpoint)
        .interceptor(counter.clone())
        .build();
    Client::from_conf(config)
}

/// A table name no other test uses (DynamoDB Local keeps every table for the whole run).
pub fn unique_table(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

pub use payonce::testkit::StoreHarness;

/// The embedded store on a manual clock.
pub struct MemoryHarness {
    store: MemoryIdempotencyStore,
    clock: Arc<ManualClock>,
}

/// A fresh embedded store.
pub fn memory_harness() -> MemoryHarness {
    let clock = ManualClock::at_system_time();
    MemoryHarness {
        store: MemoryIdempotencyStore::new(clock.clone()),
        clock,
    }
}

#[async_trait]
impl StoreHarness for MemoryHarness {
    type Store = MemoryIdempotencyStore;
    const NAME: &'static str = "embedded";
    fn store(&self) -> &Self::Store {
        &self.store
    }
    fn clock(&self) -> &ManualClock {
        &self.clock
    }
    fn faults(&self) -> &Faults {
        self.store.faults()
    }
    async fn raw(&self, key: &RecordKey) -> Option<IdempotencyRecord> {
        self.store.raw(key)
    }
    fn requests(&self) -> u64 {
        0
    }
}

/// The DynamoDB store on a fresh table in DynamoDB Local, on a manual clock.
pub struct DynamoHarness {
    store: DynamoIdempotencyStore,
    clock: Arc<ManualClock>,
    counter: RequestCounter,
    inspector: DynamoIdempotencyStore,
}

/// A DynamoDB store on a new table.
pub async fn dynamo_harness() -> DynamoHarness {
    dynamo_harness_with(IdempotencyAttributes::default()).await
}

/// A DynamoDB store on a new table laid out as Powertools for AWS Lambda's idempotency utility
/// lays out its own (`id`, `expiration`, `in_progress_expiration`, `status`, `data`,
/// `validation`).
pub async fn dynamo_harness_powertools_layout() -> DynamoHarness {
    dynamo_harness_with(IdempotencyAttributes {
        key: "id".into(),
        expiry: "expiration".into(),
        in_progress_expiry: "in_progress_expiration".into(),
        status: "status".into(),
        data: "data".into(),
        validation: "validation".into(),
    })
    .await
}

/// A DynamoDB store on a new table whose attributes are named `names`.
pub async fn dynamo_harness_with(names: IdempotencyAttributes) -> DynamoHarness {
    let counter = RequestCounter::new();
    let client = dynamodb_client(&counter);
    let table = unique_table("idem");
    create_idempotency_table_with(&client, &table, &names)
        .await
        .expect("create the idempotency table in DynamoDB Local");
    counter.reset();
    let clock = ManualClock::at_system_time();
    DynamoHarness {
        inspector: DynamoIdempotencyStore::new(dynamodb_client(&RequestCounter::new()), &table)
            .with_attributes(names.clone()),
        store: DynamoIdempotencyStore::new(client, table)
            .with_attributes(names)
            .with_clock(clock.clone()),
        clock,
        counter,
    }
}

impl DynamoHarness {
    /// The request counter of the store's client.
    pub fn counter(&self) -> &RequestCounter {
        &self.counter
    }
}

#[async_trait]
impl StoreHarness for DynamoHarness {
    type Store = DynamoIdempotencyStore;
    const NAME: &'static str = "dynamodb";
    fn store(&self) -> &Self::Store {
        &self.store
    }
    fn clock(&self) -> &ManualClock {
        &self.clock
    }
    fn faults(&self) -> &Faults {
        self.store.faults()
    }
    async fn raw(&self, key: &RecordKey) -> Option<IdempotencyRecord> {
        // Through an uncounted client: reading for an assertion is not the code under test.
        self.inspector
            .get_including_expired(key)
            .await
            .expect("read the raw record")
    }
    fn requests(&self) -> u64 {
        self.counter.total()
    }
}
