//! The API contract: docs/openapi.json held to the code it documents — the route table the
//! functions and the sandbox dispatch on (`payonce::http::ROUTES`), the problem table
//! (`ProblemType`), and the request bodies the handlers accept (their `deny_unknown_fields`
//! structs, through the real handlers). A route, a problem type or a body field in one and not
//! the other fails here. (The template's routes are held to the same table in `template.rs`.)

use payonce::adapters::memory::{MemoryIdempotencyStore, MemoryPaymentStore};
use payonce::clock::ManualClock;
use payonce::domain::PspKind;
use payonce::http::{Access, ApiRoute, Operation, ProblemType, Server, ROUTES};
use payonce::idempotency::{Idempotency, IdempotencyConfig};
use payonce::service::OrderService;
use payonce_tests::stack::{api_event, scoped_api_event, PaymentStack, Reply, STAFF_SCOPES};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn document() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    let text = std::fs::read_to_string(path).expect("docs/openapi.json");
    serde_json::from_str(&text).expect("docs/openapi.json is JSON")
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Every operation of the document by (METHOD, path).
fn operations(doc: &Value) -> BTreeMap<(String, String), Value> {
    let mut found = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS {
            if let Some(operation) = item.get(method) {
                found.insert((method.to_uppercase(), path.clone()), operation.clone());
            }
        }
    }
    found
}

/// Follows a local `$ref` (`#/components/...`).
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value["$ref"].as_str() {
        Some(pointer) => resolve(
            doc,
            doc.pointer(pointer.trim_start_matches('#'))
                .unwrap_or_else(|| panic!("{pointer} resolves")),
        ),
        None => value,
    }
}

fn route_of(operation: Operation) -> &'static ApiRoute {
    ROUTES
        .iter()
        .find(|r| r.operation == operation)
        .expect("every operation is routed")
}

#[test]
fn the_document_and_the_route_table_name_the_same_routes() {
    // GIVEN the document's operations and the route table the functions and sandbox use
    let doc = document();
    let documented = operations(&doc);
    let routed: BTreeMap<(String, String), &ApiRoute> = ROUTES
        .iter()
        .map(|r| ((r.method.to_owned(), r.path.to_owned()), r))
        .collect();
    // THEN each has every route the other has
    let only_documented: Vec<_> = documented
        .keys()
        .filter(|k| !routed.contains_key(*k))
        .collect();
    let only_routed: Vec<_> = routed
        .keys()
        .filter(|k| !documented.contains_key(*k))
        .collect();
    assert!(
        only_documented.is_empty() && only_routed.is_empty(),
        "documented but not routed: {only_documented:?}; routed but not documented: {only_routed:?}"
    );
    for ((method, path), route) in &routed {
        let operation = &documented[&(method.clone(), path.clone())];
        // AND each is the same operation, served by the same server, behind the same access
        assert_eq!(
            operation["operationId"],
            route.operation.id(),
            "{method} {path}"
        );
        let server = match route.server {
            Server::Api => "api",
            Server::Sandbox => "sandbox",
        };
        assert_eq!(operation["x-payonce-server"], server, "{method} {path}");
        let security = operation.get("security").unwrap_or(&doc["security"]);
        let expected = match route.access {
            Access::Bearer => json!([{"bearerAuth": []}]),
            Access::BearerWithScope(scope) => json!([{ "bearerAuth": [scope] }]),
            Access::Signed | Access::Public => json!([]),
        };
        assert_eq!(security, &expected, "{method} {path}");
        // AND its path parameters are the template's
        let template_params: BTreeSet<String> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(str::to_owned)
            .collect();
        let item = &doc["paths"][path.as_str()];
        let declared: BTreeSet<String> = item["parameters"]
            .as_array()
            .into_iter()
            .chain(operation["parameters"].as_array())
            .flatten()
            .map(|p| resolve(&doc, p))
            .filter(|p| p["in"] == "path")
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(declared, template_params, "{method} {path}");
    }
}

/// Every problem `type` a response of the document allows, with the response's status.
fn documented_problem_answers(doc: &Value) -> Vec<(String, String, u16)> {
    let mut answers = Vec::new();
    for ((method, path), operation) in operations(doc) {
        for (status, response) in operation["responses"].as_object().unwrap() {
            let response = resolve(doc, response);
            let Some(schema) = response["content"]["application/problem+json"].get("schema") else {
                continue;
            };
            let types = schema["allOf"][1]["properties"]["type"]["enum"]
                .as_array()
                .unwrap_or_else(|| panic!("{method} {path} {status}: the types it may answer"));
            for kind in types {
                answers.push((
                    format!("{method} {path}"),
                    kind.as_str().unwrap().to_owned(),
                    status.parse().unwrap(),
                ));
            }
        }
    }
    answers
}

#[test]
fn every_problem_type_is_documented_with_its_status_and_meaning_and_no_other() {
    // GIVEN the document's list of problem types and the one table in the code
    let doc = document();
    let listed: BTreeMap<String, &Value> = doc["components"]["schemas"]["ProblemType"]["oneOf"]
        .as_array()
        .expect("ProblemType lists its types")
        .iter()
        .map(|entry| (entry["const"].as_str().unwrap().to_owned(), entry))
        .collect();
    let table: BTreeMap<String, ProblemType> = ProblemType::ALL
        .iter()
        .map(|kind| (kind.uri(), *kind))
        .collect();
    // THEN they list the same types
    assert_eq!(
        listed.keys().collect::<Vec<_>>(),
        table.keys().collect::<Vec<_>>(),
        "the document's problem types and ProblemType::ALL"
    );
    // AND each with the table's status, title, meaning and advice, word for word
    for (uri, kind) in &table {
        let entry = listed[uri];
        assert_eq!(
            (
                entry["x-status"].as_u64(),
                entry["title"].as_str(),
                entry["description"].as_str(),
                entry["x-client-action"].as_str()
            ),
            (
                Some(u64::from(kind.status().as_u16())),
                Some(kind.title()),
                Some(kind.meaning()),
                Some(kind.advice())
            ),
            "{uri}: the document says what the table says"
        );
    }
    // AND every problem a response may carry is one of them, under its own status
    let answers = documented_problem_answers(&doc);
    for (operation, uri, status) in &answers {
        let kind = table
            .get(uri)
            .unwrap_or_else(|| panic!("{operation}: {uri} is no problem type"));
        assert_eq!(
            kind.status().as_u16(),
            *status,
            "{operation}: {uri} documented under another status"
        );
    }
    // AND every type is answered by some route, but the 405 a function gives only when invoked
    // directly (behind API Gateway or the sandbox, a method no route has is a 404), and the
    // generic layer's result-too-large, which no payonce route can give (its answers are small)
    let answered: BTreeSet<&str> = answers.iter().map(|(_, uri, _)| uri.as_str()).collect();
    for (uri, kind) in &table {
        assert_eq!(
            answered.contains(uri.as_str()),
            !matches!(
                kind,
                ProblemType::MethodNotAllowed | ProblemType::IdempotencyResultTooLarge
            ),
            "{uri}"
        );
    }
}

/// The documented properties of an operation's JSON body, and its first example.
fn body_schema(doc: &Value, operation: &Value) -> (BTreeSet<String>, Value, Value) {
    let schema = resolve(
        doc,
        &operation["requestBody"]["content"]["application/json"]["schema"],
    );
    assert_eq!(
        schema["additionalProperties"], false,
        "{}: a body refuses unknown fields",
        operation["operationId"]
    );
    let properties = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    (properties, schema["examples"][0].clone(), schema.clone())
}

/// The fields a refusal's detail says the handler's struct takes: serde names them all
/// ("expected `a`", "expected `a` or `b`", "expected one of `a`, `b`, `c`").
fn fields_named(detail: &str) -> BTreeSet<String> {
    let (_, expected) = detail
        .split_once("expected ")
        .unwrap_or_else(|| panic!("{detail}: names what it expects"));
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// Sends `body` to `operation` through its function's real handler, with the ids `ids` puts
/// in the path, as a staff user (who may call every route).
async fn send(
    stack: &PaymentStack,
    operation: Operation,
    ids: &Ids,
    key: &str,
    body: &Value,
) -> Reply {
    let route = route_of(operation);
    let path = route.path.replace("{order_id}", &ids.order_id).replace(
        "{payment_id}",
        if operation == Operation::CapturePayment {
            &ids.authorized_id
        } else {
            &ids.payment_id
        },
    );
    let headers = [("idempotency-key", key)];
    let event = match route.access {
        Access::BearerWithScope(_) => scoped_api_event(
            route.method,
            &path,
            Some(USER),
            STAFF_SCOPES,
            &headers,
            &body.to_string(),
        ),
        _ => api_event(route.method, &path, Some(USER), &headers, &body.to_string()),
    };
    match operation {
        Operation::CreateOrder | Operation::GetOrder | Operation::ReviseOrder => {
            stack.orders_request(event).await
        }
        Operation::CreatePayment | Operation::GetPayment => stack.charge_request(event).await,
        Operation::CreateRefund | Operation::CapturePayment | Operation::CancelPayment => {
            stack.refund_request(event).await
        }
        other => panic!("{other:?} takes no JSON body of ours"),
    }
}

const USER: &str = "contract-user";

/// The ids a body's operation needs to succeed: an unpaid order at version 1, a paid payment
/// and an authorized one.
struct Ids {
    order_id: String,
    payment_id: String,
    authorized_id: String,
}

impl Ids {
    async fn fresh(stack: &PaymentStack, round: &str) -> Self {
        let payment_id = stack
            .paid_payment(USER, &format!("contract-paid-{round}"), "pm_card_visa")
            .await;
        let authorized_id = stack
            .authorized_payment(USER, &format!("contract-authorized-{round}"))
            .await;
        Self {
            order_id: stack.create_order(USER).await,
            payment_id,
            authorized_id,
        }
    }

    /// `example` with its id fields pointing at these.
    fn fill(&self, mut example: Value) -> Value {
        if example.get("order_id").is_some() {
            example["order_id"] = json!(self.order_id);
        }
        example
    }
}

#[tokio::test]
async fn every_documented_body_field_is_accepted_and_an_undocumented_one_refused() {
    let stack = PaymentStack::start().await;
    let doc = document();
    let operations = operations(&doc);
    let with_bodies: Vec<(Operation, Value)> = ROUTES
        .iter()
        .filter_map(|route| {
            let operation = &operations[&(route.method.to_owned(), route.path.to_owned())];
            operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                .is_string()
                .then(|| (route.operation, operation.clone()))
        })
        .collect();
    assert_eq!(
        with_bodies.iter().map(|(op, _)| *op).collect::<Vec<_>>(),
        [
            Operation::CreateOrder,
            Operation::ReviseOrder,
            Operation::CreatePayment,
            Operation::CreateRefund,
            Operation::CapturePayment
        ],
        "the operations whose bodies the handlers parse into their own structs"
    );
    for (i, (operation, documented)) in with_bodies.iter().enumerate() {
        let (properties, example, schema) = body_schema(&doc, documented);
        // GIVEN the document's example, which sends every documented field
        let sent: BTreeSet<String> = example.as_object().unwrap().keys().cloned().collect();
        assert_eq!(
            sent, properties,
            "{operation:?}: the example sends every field"
        );

        // WHEN it is sent (with ids that exist) THEN the handler accepts every field
        let ids = Ids::fresh(&stack, &i.to_string()).await;
        let body = ids.fill(example.clone());
        let accepted = send(&stack, *operation, &ids, &format!("contract-{i}"), &body).await;
        assert!(
            matches!(accepted.status, 200 | 201),
            "{operation:?} refused its documented body {body}: {}",
            accepted.body
        );

        // WHEN a field the document does not list is added THEN it is refused, nothing
        // written, and the refusal names exactly the documented fields
        let before = stack.snapshot().await;
        let mut extra = ids.fill(example.clone());
        extra["undocumented"] = json!(1);
        let refused = send(&stack, *operation, &ids, &format!("contract-x{i}"), &extra).await;
        assert_eq!(
            (refused.status, refused.problem_type()),
            (400, "/problems/invalid-request"),
            "{operation:?}: {}",
            refused.body
        );
        let detail = refused.json["detail"].as_str().unwrap();
        assert_eq!(
            fields_named(detail),
            properties,
            "{operation:?}: the handler's body struct and the document"
        );
        assert_eq!(stack.snapshot().await, before, "{operation:?}");

        // AND the same holds for the line items of an order's body
        if let Some(items) = schema["properties"].get("items") {
            let item_schema = resolve(&doc, &items["items"]);
            let item_fields: BTreeSet<String> = item_schema["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            let mut nested = ids.fill(example.clone());
            nested["items"][0]["undocumented"] = json!(1);
            let refused = send(&stack, *operation, &ids, &format!("contract-n{i}"), &nested).await;
            assert_eq!(refused.status, 400, "{operation:?}: {}", refused.body);
            assert_eq!(
                fields_named(refused.json["detail"].as_str().unwrap()),
                item_fields,
                "{operation:?}: LineItem and the document"
            );
        }
    }
}

#[tokio::test]
async fn the_orders_function_serves_the_documentation_problem_types_resolve_to_without_a_token() {
    // GIVEN the deployed stack's orders function, and a caller with no token
    let stack = PaymentStack::start().await;
    // WHEN it asks for the API document and the page of a problem type
    let document = stack
        .orders_request(api_event("GET", "/openapi.json", None, &[], ""))
        .await;
    let page = stack
        .orders_request(api_event(
            "GET",
            "/problems/idempotency-key-mismatch",
            None,
            &[],
            "",
        ))
        .await;
    let unknown = stack
        .orders_request(api_event("GET", "/problems/no-such-problem", None, &[], ""))
        .await;
    // THEN both are answered, as the committed document and the table's page
    assert_eq!(document.status, 200);
    assert_eq!(document.headers["content-type"], "application/json");
    assert_eq!(
        document.body,
        payonce::http::openapi_document(payonce::domain::PspKind::Stripe)
    );
    assert_eq!(page.status, 200);
    assert!(page.headers["content-type"].starts_with("text/html"));
    assert_eq!(page.body, ProblemType::IdempotencyKeyMismatch.page());
    assert_eq!(
        page.headers["content-security-policy"],
        "default-src 'none'"
    );
    // AND an unknown slug is a problem, itself resolvable
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.problem_type(), "/problems/not-found");
}

/// The `payment_method.pattern` of the document a deployment on `psp` serves, from its orders
/// function.
async fn served_payment_method_pattern(psp: PspKind) -> (String, Value) {
    let clock = ManualClock::at_system_time();
    let idempotency = MemoryIdempotencyStore::new(clock.clone());
    let orders = OrderService::new(
        MemoryPaymentStore::new(idempotency.clone(), clock),
        Idempotency::new(idempotency, IdempotencyConfig::default()),
    )
    .for_psp(psp);
    let reply = Reply::from(
        payonce_orders::handler::handle(&orders, api_event("GET", "/openapi.json", None, &[], ""))
            .await,
    );
    assert_eq!(reply.status, 200);
    let served: Value = serde_json::from_str(&reply.body).expect("the served document is JSON");
    let pattern = served["components"]["schemas"]["CreatePaymentRequest"]["properties"]
        ["payment_method"]["pattern"]
        .as_str()
        .expect("payment_method has a pattern")
        .to_owned();
    (pattern, served)
}

/// Tokens near every edge of the PSPs' shapes, and a deterministic spray of others.
fn payment_method_corpus() -> Vec<String> {
    let mut corpus: Vec<String> = [
        "",
        "0",
        "000",
        "0000",
        "pm_",
        "pm_card_visa",
        "pm_card_visa_chargeDeclined",
        "tokn_",
        "tokn_test_5xuy4w91xqz7d1w9u0t",
        "tok_visa",
        "pm_a-b",
        "pm_a.b",
        "pm_<script>",
        "pm_é",
        "tokn_a+b",
        "4242424242424242",
        "abc+/=_.-",
        "a b c d",
        "pm_card_visa\n",
        "\npm_x",
        "PM_CARD",
        "pm__",
        "tokn__",
        "x\u{0}yz",
    ]
    .iter()
    .map(|token| token.to_string())
    .collect();
    for n in [251, 252, 253, 254, 255, 256] {
        corpus.push(format!("pm_{}", "a".repeat(n - 3)));
        corpus.push(format!("tokn_{}", "b".repeat(n - 5)));
    }
    for n in [2047, 2048, 2049] {
        corpus.push("c".repeat(n));
    }
    let alphabet: Vec<char> = "pmtokn_aZ09+/=.- é\n".chars().collect();
    let prefixes = ["", "pm_", "tokn_", "pm", "tok"];
    let mut state: u64 = 0x2026_1203;
    let mut next = |bound: usize| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) as usize) % bound
    };
    for _ in 0..3000 {
        let mut token = prefixes[next(prefixes.len())].to_owned();
        for _ in 0..next(12) {
            token.push(alphabet[next(alphabet.len())]);
        }
        corpus.push(token);
    }
    corpus
}

#[tokio::test]
async fn the_served_payment_method_pattern_is_the_rule_the_deployment_enforces() {
    let committed = document();
    for psp in PspKind::ALL {
        // GIVEN the document a deployment on this PSP serves
        let (pattern, served) = served_payment_method_pattern(psp).await;
        let regex = regex_lite::Regex::new(&pattern).expect("the pattern compiles");
        // THEN a token matches its pattern exactly when the PSP's rule accepts it
        for token in payment_method_corpus() {
            assert_eq!(
                regex.is_match(&token),
                psp.accepts_payment_method(&token),
                "{psp:?}: {token:?} against {pattern}"
            );
        }
        // AND it differs from the committed document in that pattern only
        let mut narrowed = committed.clone();
        narrowed["components"]["schemas"]["CreatePaymentRequest"]["properties"]["payment_method"]
            ["pattern"] = Value::from(pattern);
        assert_eq!(served, narrowed, "{psp:?}");
    }
    // AND the committed pattern admits every PSP's tokens (a deployment only narrows it)
    let any = regex_lite::Regex::new(
        committed["components"]["schemas"]["CreatePaymentRequest"]["properties"]["payment_method"]
            ["pattern"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    for token in payment_method_corpus() {
        if PspKind::ALL
            .iter()
            .any(|psp| psp.accepts_payment_method(&token))
        {
            assert!(any.is_match(&token), "{token:?}");
        }
    }
}
