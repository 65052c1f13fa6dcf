//! X-Ray: every DynamoDB operation and every PSP call of a traced invocation reaches the daemon
//! as one subsegment of the function's segment, and nothing secret travels with it.

use payonce::adapters::dynamodb::{
    create_idempotency_table, DynamoIdempotencyStore, RequestCounter,
};
use payonce::adapters::psp::transport::{HttpTransport, PspTransport, WireBody, WireCall};
use payonce::idempotency::{
    Claim, Fingerprint, IdempotencyKey, IdempotencyStore, LeaseToken, RecordKey,
};
use payonce::xray::{XRay, XRayInterceptor};
use payonce_fake_psp::{FakePsp, FakePspConfig, DEFAULT_API_KEY};
use payonce_tests::{dynamodb_endpoint, unique_table};
use serde_json::Value;
use std::net::UdpSocket;
use std::time::Duration;

const TRACE_HEADER: &str =
    "Root=1-67891233-abcdef012345678912345678;Parent=53995c3f42cd8ad8;Sampled=1";

/// A stand-in for the X-Ray daemon on a free loopback port, and a recorder sending to it under
/// a sampled invocation.
fn daemon() -> (UdpSocket, XRay) {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind the daemon");
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let xray = XRay::to_daemon(socket.local_addr().expect("address"), || {
        Some(TRACE_HEADER.to_owned())
    });
    (socket, xray)
}

/// Every datagram received until the daemon has been quiet for a moment, as raw text.
fn drain(socket: &UdpSocket) -> Vec<String> {
    let mut buffer = [0u8; 65_536];
    let mut datagrams = Vec::new();
    while let Ok((n, _)) = socket.recv_from(&mut buffer) {
        datagrams.push(String::from_utf8(buffer[..n].to_vec()).expect("utf-8"));
    }
    datagrams
}

/// The subsegment document of a datagram (after its `{"format":"json","version":1}` line).
fn subsegment(datagram: &str) -> Value {
    let (header, body) = datagram.split_once('\n').expect("a header line");
    assert_eq!(header, r#"{"format":"json","version":1}"#);
    serde_json::from_str(body).expect("a JSON document")
}

fn assert_under_the_function_segment(document: &Value) {
    assert_eq!(document["type"], "subsegment");
    assert_eq!(document["trace_id"], "1-67891233-abcdef012345678912345678");
    assert_eq!(document["parent_id"], "53995c3f42cd8ad8");
    assert!(document["end_time"].as_f64() >= document["start_time"].as_f64());
}

#[tokio::test]
async fn each_dynamodb_operation_is_one_subsegment_named_by_its_operation() {
    let (socket, xray) = daemon();
    let counter = RequestCounter::new();
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
        .endpoint_url(dynamodb_endpoint())
        .interceptor(counter.clone())
        .interceptor(XRayInterceptor::new("DynamoDB", xray))
        .build();
    let client = aws_sdk_dynamodb::Client::from_conf(config);
    let table = unique_table("xray");
    create_idempotency_table(&client, &table)
        .await
        .expect("create the table");
    let store = DynamoIdempotencyStore::new(client, &table);
    let key = RecordKey::new(
        "things.create",
        "alice",
        &IdempotencyKey::parse("key-1").unwrap(),
    );
    let claim = Claim {
        key: key.clone(),
        fingerprint: Fingerprint::of_json(b"{}").unwrap(),
        attempt_id: "attempt-1".into(),
        lease_token: LeaseToken::generate(),
        lease_until_ms: store.now_ms() + 10_000,
        expires_at_s: store.now_ms() / 1000 + 3600,
        request_id: None,
    };
    store.claim(&claim).await.expect("first claim");
    store.claim(&claim).await.expect("duplicate claim");

    let documents: Vec<Value> = drain(&socket).iter().map(|d| subsegment(d)).collect();
    let operations: Vec<&str> = documents
        .iter()
        .map(|d| d["aws"]["operation"].as_str().unwrap_or("?"))
        .collect();
    // One subsegment per request the client sent: create table, its TTL, two claims.
    assert_eq!(documents.len() as u64, counter.total(), "{operations:?}");
    assert_eq!(
        operations,
        ["CreateTable", "UpdateTimeToLive", "PutItem", "PutItem"]
    );
    for document in &documents {
        assert_under_the_function_segment(document);
        assert_eq!(document["name"], "DynamoDB");
        assert_eq!(document["namespace"], "aws");
        assert_eq!(
            document["http"]["response"]["status"]
                .as_u64()
                .map(|s| s < 500),
            Some(true)
        );
    }
    // The duplicate's claim is refused by its condition: a client error, not a fault.
    assert_eq!(documents[3]["http"]["response"]["status"], 400);
    assert_eq!(documents[3]["error"], true);
    assert!(documents[2].get("error").is_none() && documents[2].get("fault").is_none());
}

#[tokio::test]
async fn each_psp_call_is_one_remote_subsegment_without_query_credentials_or_card_data() {
    let (socket, xray) = daemon();
    let psp = FakePsp::start(FakePspConfig::default(), ([127, 0, 0, 1], 0).into())
        .await
        .expect("start the fake PSP");
    let transport = HttpTransport::new(
        psp.base_url(),
        Duration::from_secs(2),
        Duration::from_secs(5),
    )
    .expect("client")
    .with_xray(xray);
    let call = WireCall {
        method: "POST",
        path: "/v1/payment_intents".into(),
        query: vec![("expand[]".into(), "latest_charge".into())],
        headers: vec![
            ("Authorization".into(), format!("Bearer {DEFAULT_API_KEY}")),
            ("Idempotency-Key".into(), "pay_1-charge".into()),
        ],
        body: WireBody::Form(vec![
            ("amount".into(), "1000".into()),
            ("currency".into(), "usd".into()),
            ("payment_method".into(), "pm_card_visa".into()),
            ("confirm".into(), "true".into()),
        ]),
    };
    let reply = transport
        .send(&call, Duration::from_secs(5))
        .await
        .expect("an answer");

    let datagrams = drain(&socket);
    assert_eq!(datagrams.len(), 1, "one call, one subsegment");
    for secret in [
        DEFAULT_API_KEY,
        "pm_card_visa",
        "latest_charge",
        "pay_1-charge",
    ] {
        assert!(!datagrams[0].contains(secret), "{secret} was sent to X-Ray");
    }
    let document = subsegment(&datagrams[0]);
    assert_under_the_function_segment(&document);
    let host = psp.base_url().trim_start_matches("http://").to_owned();
    assert_eq!(document["name"], host);
    assert_eq!(document["namespace"], "remote");
    assert_eq!(document["http"]["request"]["method"], "POST");
    assert_eq!(
        document["http"]["request"]["url"],
        format!("{}/v1/payment_intents", psp.base_url())
    );
    assert_eq!(document["http"]["response"]["status"], reply.status);

    // A PSP that cannot be reached: still one subsegment, a fault without a status.
    psp.shutdown().await;
    assert!(transport.send(&call, Duration::from_secs(2)).await.is_err());
    let datagrams = drain(&socket);
    assert_eq!(datagrams.len(), 1);
    let unreachable = subsegment(&datagrams[0]);
    assert_eq!(unreachable["fault"], true);
    assert!(unreachable["http"].get("response").is_none());
}
