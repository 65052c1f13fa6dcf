//! The harness of the payment store conformance suite: a fresh payment store and the
//! idempotency store it shares its records with, on one manual clock, for DynamoDB Local and
//! for the embedded store alike, so one generic suite runs against both.

use crate::{dynamodb_client, unique_table};
use async_trait::async_trait;
use payonce::adapters::dynamodb::{
    create_idempotency_table, create_payments_table, CapacityMeter, DynamoIdempotencyStore,
    DynamoPaymentStore, RequestCounter, Tables,
};
use payonce::adapters::faults::Faults;
use payonce::adapters::memory::{MemoryIdempotencyStore, MemoryPaymentStore};
use payonce::clock::ManualClock;
use payonce::idempotency::{IdempotencyRecord, IdempotencyStore, RecordKey};
use payonce::ports::{
    ChargeStore, ExpiredSweep, InflightScan, OperationStore, OrderStore, RefundStore,
};
use std::sync::Arc;

/// What the payment store suite needs from a backend: the two stores under test, sharing the
/// idempotency records, the clock both read, the payment store's fault hook, and a look at a
/// record exactly as stored.
#[async_trait]
pub trait PaymentStoreHarness: Send + Sync + 'static {
    /// The payment store under test.
    type Payments: OrderStore
        + ChargeStore
        + RefundStore
        + OperationStore
        + InflightScan
        + Clone
        + 'static;
    /// The idempotency store whose records the payment store shares.
    type Records: IdempotencyStore + ExpiredSweep + Clone + 'static;
    /// Backend name, for messages.
    const NAME: &'static str;
    /// How many tries of one transaction armed conflicts can fail before the store reports
    /// `Conflict`: the DynamoDB adapter sends a transaction cancelled by a conflict again (three
    /// times), the embedded store reports the first one.
    const TRIES_PER_TRANSACTION: u32;
    /// The payment store.
    fn payments(&self) -> &Self::Payments;
    /// The idempotency store over the same records.
    fn records(&self) -> &Self::Records;
    /// The clock both stores read.
    fn clock(&self) -> &ManualClock;
    /// The payment store's fault hook.
    fn faults(&self) -> &Faults;
    /// The idempotency table's record exactly as stored, even if expired (`None` once deleted).
    async fn raw_table_record(&self, key: &RecordKey) -> Option<IdempotencyRecord>;
    /// The same stores, their late duplicates handled by `policy`.
    fn with_late_duplicates(self, policy: payonce::domain::LateDuplicates) -> Self;
    /// The record exactly as stored, even if expired (`None` once deleted): a charge's from
    /// its payment, any other from the idempotency table.
    async fn raw_record(&self, key: &RecordKey) -> Option<IdempotencyRecord> {
        match self.raw_table_record(key).await {
            Some(record) => Some(record),
            None => self
                .payments()
                .charge_record(key)
                .await
                .expect("read the charge record"),
        }
    }
}

/// The embedded stores on a manual clock.
pub struct MemoryStores {
    payments: MemoryPaymentStore,
    records: MemoryIdempotencyStore,
    clock: Arc<ManualClock>,
}

/// Fresh embedded stores: a payment store built on a new idempotency store.
pub fn memory_stores() -> MemoryStores {
    let clock = ManualClock::at_system_time();
    let records = MemoryIdempotencyStore::new(clock.clone());
    MemoryStores {
        payments: MemoryPaymentStore::new(records.clone(), clock.clone()),
        records,
        clock,
    }
}

#[async_trait]
impl PaymentStoreHarness for MemoryStores {
    type Payments = MemoryPaymentStore;
    type Records = MemoryIdempotencyStore;
    const NAME: &'static str = "embedded";
    const TRIES_PER_TRANSACTION: u32 = 1;
    fn payments(&self) -> &Self::Payments {
        &self.payments
    }
    fn records(&self) -> &Self::Records {
        &self.records
    }
    fn clock(&self) -> &ManualClock {
        &self.clock
    }
    fn faults(&self) -> &Faults {
        self.payments.faults()
    }
    async fn raw_table_record(&self, key: &RecordKey) -> Option<IdempotencyRecord> {
        self.records.raw(key)
    }
    fn with_late_duplicates(self, policy: payonce::domain::LateDuplicates) -> Self {
        Self {
            payments: self.payments.with_late_duplicates(policy),
            ..self
        }
    }
}

/// The DynamoDB stores on fresh tables in DynamoDB Local, on a manual clock.
pub struct DynamoStores {
    payments: DynamoPaymentStore,
    records: DynamoIdempotencyStore,
    clock: Arc<ManualClock>,
}

/// DynamoDB stores on two new tables (idempotency, payments).
pub async fn dynamo_stores() -> DynamoStores {
    dynamo_stores_on(dynamodb_client(&RequestCounter::new())).await
}

/// DynamoDB stores on two new tables, whose client reports every answer's consumed capacity to
/// `meter`.
pub async fn metered_dynamo_stores(meter: &CapacityMeter) -> DynamoStores {
    let client = dynamodb_client(&RequestCounter::new());
    let config = client
        .config()
        .to_builder()
        .interceptor(meter.clone())
        .build();
    dynamo_stores_on(aws_sdk_dynamodb::Client::from_conf(config)).await
}

async fn dynamo_stores_on(client: aws_sdk_dynamodb::Client) -> DynamoStores {
    let tables = Tables {
        idempotency: unique_table("idem"),
        payments: unique_table("pay"),
    };
    create_idempotency_table(&client, &tables.idempotency)
        .await
        .expect("create the idempotency table in DynamoDB Local");
    create_payments_table(&client, &tables.payments)
        .await
        .expect("create the payments table in DynamoDB Local");
    let clock = ManualClock::at_system_time();
    DynamoStores {
        records: DynamoIdempotencyStore::new(client.clone(), &tables.idempotency)
            .with_clock(clock.clone()),
        payments: DynamoPaymentStore::new(client, tables).with_clock(clock.clone()),
        clock,
    }
}

#[async_trait]
impl PaymentStoreHarness for DynamoStores {
    type Payments = DynamoPaymentStore;
    type Records = DynamoIdempotencyStore;
    const NAME: &'static str = "dynamodb";
    const TRIES_PER_TRANSACTION: u32 = 4;
    fn payments(&self) -> &Self::Payments {
        &self.payments
    }
    fn records(&self) -> &Self::Records {
        &self.records
    }
    fn clock(&self) -> &ManualClock {
        &self.clock
    }
    fn faults(&self) -> &Faults {
        self.payments.faults()
    }
    async fn raw_table_record(&self, key: &RecordKey) -> Option<IdempotencyRecord> {
        self.records
            .get_including_expired(key)
            .await
            .expect("read the raw record")
    }
    fn with_late_duplicates(self, policy: payonce::domain::LateDuplicates) -> Self {
        Self {
            payments: self.payments.with_late_duplicates(policy),
            ..self
        }
    }
}
