//! Bad input gets a clear problem and changes nothing: each case checks its exact status and
//! problem type, that neither table changed, and that the PSP saw nothing.

use payonce_tests::stack::{api_event, refund_event, PaymentStack, STAFF, STAFF_SCOPES};
use serde_json::json;

struct Case {
    name: &'static str,
    method: &'static str,
    sub: Option<&'static str>,
    headers: Vec<(&'static str, String)>,
    body: String,
    status: u16,
    problem: &'static str,
}

fn case(
    name: &'static str,
    key: Option<&str>,
    body: String,
    status: u16,
    problem: &'static str,
) -> Case {
    let headers = key
        .map(|k| vec![("idempotency-key", k.to_owned())])
        .unwrap_or_default();
    Case {
        name,
        method: "POST",
        sub: Some("alice"),
        headers,
        body,
        status,
        problem,
    }
}

#[tokio::test]
async fn every_bad_request_is_refused_precisely_and_writes_nothing() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let good = |field: &str, value: serde_json::Value| {
        let mut body =
            json!({"order_id": order, "order_version": 1, "payment_method": "pm_card_visa"});
        if value.is_null() && field.starts_with('-') {
            body.as_object_mut().unwrap().remove(&field[1..]);
        } else {
            body[field] = value;
        }
        body.to_string()
    };
    let ok = good("order_version", json!(1));
    const INVALID: &str = "/problems/invalid-request";
    const KEY_INVALID: &str = "/problems/idempotency-key-invalid";
    const RETURN_URL: &str = "/problems/return-url-not-allowed";

    let mut cases = vec![
        case("missing key", None, ok.clone(), 400, "/problems/idempotency-key-missing"),
        case("empty key", Some(""), ok.clone(), 400, KEY_INVALID),
        case("256-character key", Some(&"k".repeat(256)), ok.clone(), 400, KEY_INVALID),
        case("non-ASCII key", Some("cl\u{e9}-1"), ok.clone(), 400, KEY_INVALID),
        case("key with a space", Some("two words"), ok.clone(), 400, KEY_INVALID),
        case("key with a tab", Some("tab\there"), ok.clone(), 400, KEY_INVALID),
        case("malformed JSON", Some("k-1"), "{\"order_id\":".into(), 400, "/problems/malformed-json"),
        case("empty body", Some("k-2"), String::new(), 400, "/problems/malformed-json"),
        case("trailing garbage", Some("k-3"), format!("{ok} x"), 400, "/problems/malformed-json"),
        case("array instead of object", Some("k-4"), "[]".into(), 400, INVALID),
        case("unknown field amount", Some("k-5"), good("amount", json!(1)), 400, INVALID),
        case("unknown field user", Some("k-6"), good("user_id", json!("bob")), 400, INVALID),
        case("missing order_id", Some("k-7"), good("-order_id", json!(null)), 400, INVALID),
        case("missing payment_method", Some("k-8"), good("-payment_method", json!(null)), 400, INVALID),
        case("missing order_version", Some("k-9"), good("-order_version", json!(null)), 400, INVALID),
        case("order_version as a string", Some("k-10"), good("order_version", json!("1")), 400, INVALID),
        case("order_version as a float", Some("k-11"), good("order_version", json!(1.5)), 400, INVALID),
        case("negative order_version", Some("k-12"), good("order_version", json!(-1)), 400, INVALID),
        case("zero order_version", Some("k-13"), good("order_version", json!(0)), 400, INVALID),
        case("order_version past i64", Some("k-14"), ok.replace("\"order_version\":1", "\"order_version\":99999999999999999999"), 400, INVALID),
        case("order_id null", Some("k-15"), good("order_id", json!(null)), 400, INVALID),
        case("empty order_id", Some("k-16"), good("order_id", json!("")), 400, INVALID),
        case("order_id with #", Some("k-17"), good("order_id", json!("ord#1")), 400, INVALID),
        case("card number as payment_method", Some("k-18"), good("payment_method", json!("4242424242424242")), 400, INVALID),
        case("spaced card number", Some("k-19"), good("payment_method", json!("4242 4242 4242 4242")), 400, INVALID),
        case("empty payment_method", Some("k-20"), good("payment_method", json!("")), 400, INVALID),
        case("payment_method without pm_", Some("k-21"), good("payment_method", json!("tok_visa")), 400, INVALID),
        case("payment_method with markup", Some("k-22"), good("payment_method", json!("pm_<script>")), 400, INVALID),
        case("payment_method as an object", Some("k-23"), good("payment_method", json!({"number": "4242424242424242"})), 400, INVALID),
        case("duplicate field", Some("k-24"), format!("{{\"order_id\":\"{order}\",\"order_id\":\"x\",\"order_version\":1,\"payment_method\":\"pm_card_visa\"}}"), 400, INVALID),
        // serde reads a struct from an array too, field by field: an array must be refused.
        case("array body", Some("k-40"), format!("[\"{order}\",1,\"pm_card_visa\"]"), 400, INVALID),
        case("body over 64 KiB", Some("k-25"), good("padding", json!("x".repeat(65 * 1024))), 413, "/problems/body-too-large"),
        case("unknown order", Some("k-26"), good("order_id", json!("ord_doesnotexist")), 404, "/problems/not-found"),
        case("return_url on another origin", Some("k-41"), good("return_url", json!("https://evil.example/return")), 400, RETURN_URL),
        case("return_url on a look-alike host", Some("k-42"), good("return_url", json!("https://shop.example.evil.example/r")), 400, RETURN_URL),
        case("return_url with a user part", Some("k-43"), good("return_url", json!("https://shop.example@evil.example/r")), 400, RETURN_URL),
        case("return_url over plain http", Some("k-44"), good("return_url", json!("http://shop.example/return")), 400, RETURN_URL),
        case("relative return_url", Some("k-45"), good("return_url", json!("/return")), 400, RETURN_URL),
        case("return_url with a fragment", Some("k-46"), good("return_url", json!("https://shop.example/r#x")), 400, RETURN_URL),
        case("return_url as a number", Some("k-47"), good("return_url", json!(5)), 400, INVALID),
        case("unknown capture", Some("k-48"), good("capture", json!("later")), 400, INVALID),
        case("capture as a boolean", Some("k-49"), good("capture", json!(true)), 400, INVALID),
    ];
    cases.push(Case {
        name: "no token",
        method: "POST",
        sub: None,
        headers: vec![("idempotency-key", "k-27".into())],
        body: ok.clone(),
        status: 401,
        problem: "/problems/unauthorized",
    });
    cases.push(Case {
        name: "empty subject",
        method: "POST",
        sub: Some(""),
        headers: vec![("idempotency-key", "k-28".into())],
        body: ok.clone(),
        status: 401,
        problem: "/problems/unauthorized",
    });
    cases.push(Case {
        name: "subject with #",
        method: "POST",
        sub: Some("alice#admin"),
        headers: vec![("idempotency-key", "k-29".into())],
        body: ok.clone(),
        status: 401,
        problem: "/problems/unauthorized",
    });
    cases.push(Case {
        name: "text/plain body",
        method: "POST",
        sub: Some("alice"),
        headers: vec![
            ("idempotency-key", "k-30".into()),
            ("content-type", "text/plain".into()),
        ],
        body: ok.clone(),
        status: 415,
        problem: "/problems/unsupported-media-type",
    });
    cases.push(Case {
        name: "DELETE /payments",
        method: "DELETE",
        sub: Some("alice"),
        headers: vec![("idempotency-key", "k-31".into())],
        body: ok.clone(),
        status: 405,
        problem: "/problems/method-not-allowed",
    });
    assert!(cases.len() >= 25);

    let before = stack.snapshot().await;
    for case in &cases {
        let headers: Vec<(&str, &str)> =
            case.headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let reply = stack
            .charge_request(api_event(
                case.method,
                "/payments",
                case.sub,
                &headers,
                &case.body,
            ))
            .await;
        assert_eq!(
            (reply.status, reply.problem_type()),
            (case.status, case.problem),
            "{}: {}",
            case.name,
            reply.body
        );
        assert_eq!(
            reply.header("content-type"),
            Some("application/problem+json"),
            "{}",
            case.name
        );
        assert_eq!(reply.json["status"], case.status, "{}", case.name);
        assert!(
            reply.json["title"].is_string() && reply.json["detail"].is_string(),
            "{}",
            case.name
        );
        // AND a 405 names the methods the path takes (RFC 9110)
        if case.status == 405 {
            assert_eq!(reply.header("allow"), Some("POST"), "{}", case.name);
        }
        // AND its instance is the request id, the same as the x-request-id header
        assert!(reply.header("x-request-id").is_some(), "{}", case.name);
        assert_eq!(
            reply.json["instance"].as_str(),
            reply.header("x-request-id"),
            "{}",
            case.name
        );
        // (the request id is random hex, which may contain "4242" by chance: not looked at)
        let echoed = reply
            .body
            .replace(reply.header("x-request-id").unwrap_or_default(), "");
        assert!(
            !echoed.contains("4242"),
            "{}: card data must never be echoed",
            case.name
        );
    }
    assert_eq!(stack.snapshot().await, before, "no table changed");
    assert_eq!(stack.psp.requests_seen(), 0, "the PSP saw nothing");

    // The key refused for a bad body was not stored: it still works for a good request.
    let reply = stack
        .pay("alice", "k-5", serde_json::from_str(&ok).unwrap())
        .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
}

#[tokio::test]
async fn bad_order_input_is_refused_and_writes_nothing() {
    let stack = PaymentStack::start().await;
    let cases = [
        (
            json!({"currency": "JPY", "items": [{"sku": "A", "quantity": 1, "unit_amount": 500}]}),
            400,
        ),
        (
            json!({"currency": "xxx", "items": [{"sku": "A", "quantity": 1, "unit_amount": 500}]}),
            400,
        ),
        (json!({"currency": "jpy", "items": []}), 400),
        (
            json!({"currency": "jpy", "items": [{"sku": "A", "quantity": 1, "unit_amount": -1}]}),
            400,
        ),
        (
            json!({"currency": "jpy", "items": [{"sku": "A", "quantity": 0, "unit_amount": 500}]}),
            400,
        ),
        (
            json!({"currency": "jpy", "items": [{"sku": "A", "quantity": 10000, "unit_amount": 99999999}]}),
            400,
        ),
        (
            json!({"currency": "jpy", "items": [{"sku": "A", "quantity": 1, "unit_amount": 1.5}]}),
            400,
        ),
        (
            json!({"currency": "jpy", "amount": 1, "items": [{"sku": "A", "quantity": 1, "unit_amount": 500}]}),
            400,
        ),
        (
            json!({"currency": "jpy", "items": [{"sku": "A", "quantity": 1, "unit_amount": 500, "discount": 1}]}),
            400,
        ),
    ];
    let before = stack.snapshot().await;
    for (body, status) in cases {
        let reply = stack.post_order("alice", &body).await;
        assert_eq!(
            (reply.status, reply.problem_type()),
            (status, "/problems/invalid-request"),
            "{body}: {}",
            reply.body
        );
    }
    let unauthenticated = stack
        .orders_request(api_event("POST", "/orders", None, &[], "{}"))
        .await;
    assert_eq!(
        (unauthenticated.status, unauthenticated.problem_type()),
        (401, "/problems/unauthorized")
    );
    assert_eq!(stack.snapshot().await, before);
}

#[tokio::test]
async fn a_malformed_or_oversized_path_id_is_a_404_and_never_reaches_the_store() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let before = stack.snapshot().await;
    stack.counter.reset();
    let oversized = format!("ord_{}", "0".repeat(4096));
    for id in [oversized.as_str(), "ord.1", "ord_1%27--", "%00"] {
        for (method, path) in [
            ("GET", format!("/orders/{id}")),
            ("PATCH", format!("/orders/{id}")),
            ("GET", format!("/payments/{id}")),
        ] {
            let event = api_event(method, &path, Some("alice"), &[], "{}");
            let reply = if path.starts_with("/orders") {
                stack.orders_request(event).await
            } else {
                stack.charge_request(event).await
            };
            assert_eq!(
                (reply.status, reply.problem_type()),
                (404, "/problems/route-not-found"),
                "{method} {}: {}",
                &path[..path.len().min(40)],
                reply.body
            );
            assert!(reply.header("x-request-id").is_some());
        }
    }
    // No request reached DynamoDB, and nothing changed.
    assert_eq!(
        stack.counter.total(),
        0,
        "{:?}",
        stack.counter.by_operation()
    );
    assert_eq!(stack.snapshot().await, before);
    // A well-formed id is looked up as before.
    assert_eq!(stack.get_order("alice", &order).await.status, 200);
}

#[tokio::test]
async fn a_wrong_type_names_the_field_and_never_echoes_the_value() {
    let stack = PaymentStack::start().await;
    let order = stack.create_order("alice").await;
    let before = stack.snapshot().await;
    let body = json!({"order_id": order, "order_version": "4242424242424242", "payment_method": "pm_card_visa"});
    let reply = stack.pay("alice", "k-type", body).await;
    assert_eq!(
        (reply.status, reply.problem_type()),
        (400, "/problems/invalid-request"),
        "{}",
        reply.body
    );
    assert_eq!(reply.json["detail"], "`order_version` must be an integer");
    assert!(!reply.body.contains("4242"), "{}", reply.body);
    assert_eq!(stack.snapshot().await, before);
}

/// A number with no fractional part is an integer, as JSON Schema's `integer` says: an order of
/// `2.0 × 1500.0`, paid at version `1.0`, refunded `500.0`, is the order of `2 × 1500` paid at
/// version 1 (the same fingerprint: a retry with integers replays), and a fraction is refused.
#[tokio::test]
async fn integral_numbers_are_integers() {
    let stack = PaymentStack::start().await;
    let body = json!({"currency": "jpy", "items": [{"sku": "A1", "quantity": 2.0, "unit_amount": 1500.0}]});
    let created = stack.post_order("alice", &body).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.json["amount"], 3000);
    let order = created.json["order_id"].as_str().unwrap().to_owned();

    let first = stack
        .pay(
            "alice",
            "k-float",
            json!({"order_id": order, "order_version": 1.0, "payment_method": "pm_card_visa"}),
        )
        .await;
    assert_eq!(first.status, 201, "{}", first.body);
    let retry = stack
        .pay(
            "alice",
            "k-float",
            json!({"order_id": order, "order_version": 1, "payment_method": "pm_card_visa"}),
        )
        .await;
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert_eq!(retry.json["payment_id"], first.json["payment_id"]);
    let payment_id = first.json["payment_id"].as_str().unwrap().to_owned();

    let refund = stack
        .refund(&payment_id, "r-float", json!({"amount": 500.0}))
        .await;
    assert_eq!(refund.status, 201, "{}", refund.body);
    assert_eq!(refund.json["amount"], 500);

    let before = stack.snapshot().await;
    let fraction = stack
        .refund(&payment_id, "r-fraction", json!({"amount": 500.5}))
        .await;
    assert_eq!(
        (fraction.status, fraction.problem_type()),
        (400, "/problems/invalid-request"),
        "{}",
        fraction.body
    );
    assert_eq!(fraction.json["detail"], "`amount` must be an integer");
    // The number's text is read exactly: a fraction a float rounds to an integer is still a
    // fraction, and an integer past 2^53 written with a fraction is still that integer's.
    for (text, detail) in [
        ("499.99999999999999", "`amount` must be an integer"),
        ("5.0000000000000000001e2", "`amount` must be an integer"),
        ("1e400", "`amount` must be an integer"),
    ] {
        let reply = stack
            .refund_request(refund_event(
                &payment_id,
                Some(STAFF),
                STAFF_SCOPES,
                Some(&format!("r-{text}")),
                &format!("{{\"amount\": {text}}}"),
            ))
            .await;
        assert_eq!(
            (
                reply.status,
                reply.problem_type(),
                reply.json["detail"].as_str()
            ),
            (400, "/problems/invalid-request", Some(detail)),
            "{text}: {}",
            reply.body
        );
    }
    assert_eq!(stack.snapshot().await, before);
}
