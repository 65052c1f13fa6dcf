//! Cleanup deletes what expired, never what is live, and resumes an interrupted sweep.

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use payonce::clock::Clock;
use payonce::ports::ExpiredSweep;
use payonce::service::cleanup::{sweep, CleanupConfig};
use payonce_tests::stack::PaymentStack;
use std::collections::HashMap;

fn item(pairs: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

#[tokio::test]
async fn expired_records_go_live_ones_stay_and_an_interrupted_sweep_resumes() {
    let stack = PaymentStack::start().await;
    let now_ms = stack.clock.now_ms();
    let now_s = now_ms / 1000;
    let mut items = Vec::new();
    // 1000 expired: 700 idempotency records (completed, or in progress with a lapsed lease), 300 webhook dedup records
    for i in 0..700 {
        let mut fields = vec![
            ("pk", s(format!("payments.create#u{i}#k{i}"))),
            ("fingerprint", s("f")),
            ("attempt_id", s(format!("pay_{i}"))),
            ("created_at_ms", n(now_ms - 90_000_000)),
            ("expires_at", n(now_s - 3600 - i)),
        ];
        if i % 2 == 0 {
            fields.extend([("status", s("COMPLETED")), ("result", s("{}"))]);
        } else {
            fields.extend([
                ("status", s("IN_PROGRESS")),
                ("lease_token", s("t")),
                ("lease_until_ms", n(now_ms - 80_000_000)),
            ]);
        }
        items.push(item(&fields));
    }
    for i in 0..300 {
        items.push(item(&[
            ("pk", s(format!("webhook#stripe#evt_{i}"))),
            ("kind", s("webhook-event")),
            ("expires_at", n(now_s - 10)),
        ]));
    }
    // 50 live: completed and unexpired, in progress under a live lease, and (the trap) expired
    // but still under a live lease
    let mut live = Vec::new();
    for i in 0..50 {
        let pk = format!("orders.create#live{i}#k");
        let mut fields = vec![
            ("pk", s(pk.clone())),
            ("fingerprint", s("f")),
            ("attempt_id", s(format!("a{i}"))),
            ("created_at_ms", n(now_ms)),
        ];
        match i % 3 {
            0 => fields.extend([
                ("status", s("COMPLETED")),
                ("result", s("{}")),
                ("expires_at", n(now_s + 86_400)),
            ]),
            1 => fields.extend([
                ("status", s("IN_PROGRESS")),
                ("lease_token", s("t")),
                ("lease_until_ms", n(now_ms + 30_000)),
                ("expires_at", n(now_s + 86_400)),
            ]),
            _ => fields.extend([
                ("status", s("IN_PROGRESS")),
                ("lease_token", s("t")),
                ("lease_until_ms", n(now_ms + 30_000)),
                ("expires_at", n(now_s - 5)),
            ]),
        }
        items.push(item(&fields));
        live.push(pk);
    }
    for chunk in items.chunks(25) {
        let requests = chunk
            .iter()
            .map(|i| {
                WriteRequest::builder()
                    .put_request(
                        PutRequest::builder()
                            .set_item(Some(i.clone()))
                            .build()
                            .unwrap(),
                    )
                    .build()
            })
            .collect();
        // BatchWriteItem may leave some unprocessed (a loaded machine): re-send those until none.
        let mut pending = HashMap::from([(stack.tables.idempotency.clone(), requests)]);
        for _ in 0..20 {
            let out = stack
                .inspector()
                .batch_write_item()
                .set_request_items(Some(pending))
                .send()
                .await
                .unwrap();
            pending = out.unprocessed_items.unwrap_or_default();
            pending.retain(|_, left| !left.is_empty());
            if pending.is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(pending.is_empty(), "every item written");
    }
    // DynamoDB Local runs TTL too, and may already have deleted some expired items (as AWS may,
    // up to days late): the sweep must delete every expired item still there, and only those.
    let before = stack.snapshot().await.0;
    let still_there = |prefix: &str| before.keys().filter(|pk| pk.starts_with(prefix)).count();
    let (expired_records, expired_events) = (
        u32::try_from(still_there("payments.create#")).unwrap(),
        u32::try_from(still_there("webhook#")).unwrap(),
    );
    assert!(
        expired_records + expired_events > 900,
        "most expired items are still there: {expired_records} + {expired_events}"
    );
    let live_before: Vec<_> = live.iter().map(|pk| before[pk].clone()).collect();

    // WHEN a bounded run stops part-way (as if interrupted), then the next runs resume
    let records = stack.records();
    let config = CleanupConfig {
        page_size: 100,
        max_pages: 4,
    };
    let first = sweep(&records, &config).await.unwrap();
    assert!(!first.finished);
    assert!(first.deleted_records + first.deleted_events > 0);
    assert!(
        records.load_checkpoint().await.unwrap().is_some(),
        "the cursor is checkpointed"
    );
    let mut reports = vec![first];
    while !reports.last().unwrap().finished {
        reports.push(sweep(&records, &config).await.unwrap());
        assert!(reports.len() < 10);
    }

    // THEN every expired record is gone, each counted once at most (DynamoDB Local's own TTL
    // may delete some between the snapshot and the sweep, on a loaded machine), and the live
    // ones are untouched
    let deleted_records: u32 = reports.iter().map(|r| r.deleted_records).sum();
    let deleted_events: u32 = reports.iter().map(|r| r.deleted_events).sum();
    assert!(
        deleted_records <= expired_records && deleted_events <= expired_events,
        "{reports:?}"
    );
    assert!(deleted_records + deleted_events > 900, "{reports:?}");
    let pages: u32 = reports.iter().map(|r| r.pages).sum();
    assert!(
        pages <= 1051 / 100 + 2,
        "resumed, not restarted: {pages} pages"
    );
    let after = stack.snapshot().await.0;
    assert_eq!(after.len(), 50, "only the live records remain");
    let live_after: Vec<_> = live.iter().map(|pk| after[pk].clone()).collect();
    assert_eq!(live_after, live_before);
    assert!(
        records.load_checkpoint().await.unwrap().is_none(),
        "a finished sweep clears its checkpoint"
    );
}
