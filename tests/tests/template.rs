//! Reads infra/template.yaml and asserts the deployment guarantees: least privilege, TTL and
//! PITR, redrive, visibility, JWT on every order and payment route, the refund scope on the
//! refund route, alarms, no secret in the template, one PSP per deployment.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn template() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/template.yaml");
    let text = std::fs::read_to_string(path).expect("infra/template.yaml");
    serde_yaml_ng::from_str(&text).expect("the template is plain YAML (long-form intrinsics)")
}

fn resources(t: &Value) -> &serde_json::Map<String, Value> {
    t["Resources"].as_object().expect("Resources")
}

fn of_type<'a>(t: &'a Value, kind: &str) -> Vec<(&'a String, &'a Value)> {
    resources(t)
        .iter()
        .filter(|(_, r)| r["Type"] == kind)
        .collect()
}

/// A function's inline policies, each with the condition it is granted under (`Fn::If` with
/// `AWS::NoValue` as its other branch), or `None` for an unconditional one.
fn policies<'a>(function_name: &str, function: &'a Value) -> Vec<(Option<&'a str>, &'a Value)> {
    function["Properties"]["Policies"]
        .as_array()
        .unwrap_or_else(|| panic!("{function_name}: explicit policies"))
        .iter()
        .map(|policy| match policy["Fn::If"].as_array() {
            Some(branches) => {
                assert_eq!(
                    branches[2],
                    serde_json::json!({"Ref": "AWS::NoValue"}),
                    "{function_name}: a conditional policy is granted or absent"
                );
                (branches[0].as_str(), &branches[1])
            }
            None => (None, policy),
        })
        .collect()
}

fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|i| strings(i, out)),
        Value::Object(map) => map.iter().for_each(|(k, v)| {
            out.push(k.clone());
            strings(v, out)
        }),
        _ => {}
    }
}

#[test]
fn no_wildcard_action_or_resource_on_dynamodb_or_sqs() {
    let t = template();
    let mut statements = 0;
    for (name, function) in of_type(&t, "AWS::Serverless::Function") {
        for (_, policy) in policies(name, function) {
            let policy_statements = policy["Statement"].as_array().unwrap_or_else(|| {
                panic!("{name}: inline statements only, no managed policy templates")
            });
            for statement in policy_statements {
                statements += 1;
                let actions: Vec<&str> = statement["Action"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap())
                    .collect();
                for action in &actions {
                    assert!(!action.contains('*'), "{name}: wildcard action {action}");
                }
                if actions
                    .iter()
                    .any(|a| a.starts_with("dynamodb:") || a.starts_with("sqs:"))
                {
                    let resources = statement["Resource"]
                        .as_array()
                        .unwrap_or_else(|| panic!("{name}: resources listed"));
                    for resource in resources {
                        assert_ne!(resource, "*", "{name}: wildcard resource");
                    }
                }
            }
        }
    }
    assert!(statements >= 6);
}

#[test]
fn tables_have_ttl_and_point_in_time_recovery() {
    let t = template();
    let tables = of_type(&t, "AWS::DynamoDB::Table");
    assert_eq!(tables.len(), 2);
    for (name, table) in &tables {
        assert_eq!(
            table["Properties"]["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"],
            true,
            "{name}"
        );
    }
    // Idempotency records and webhook dedup records share the idempotency table and its TTL.
    let idempotency = &resources(&t)["IdempotencyTable"]["Properties"];
    assert_eq!(idempotency["TimeToLiveSpecification"]["Enabled"], true);
    assert_eq!(
        idempotency["TimeToLiveSpecification"]["AttributeName"],
        payonce::adapters::dynamodb::IDEMPOTENCY_TTL_ATTRIBUTE
    );
    let gsi = &resources(&t)["PaymentsTable"]["Properties"]["GlobalSecondaryIndexes"][0];
    assert_eq!(
        gsi["IndexName"],
        payonce::adapters::dynamodb::INFLIGHT_INDEX
    );
}

#[test]
fn the_queue_redrives_to_a_dlq_and_outlasts_the_processor() {
    let t = template();
    let queue = &resources(&t)["WebhookQueue"]["Properties"];
    assert!(queue["RedrivePolicy"]["maxReceiveCount"].as_u64().unwrap() >= 5);
    assert_eq!(
        queue["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0],
        "WebhookDeadLetterQueue"
    );
    assert_eq!(queue["MaximumMessageSize"], 1_048_576);
    let processor_timeout = resources(&t)["WebhookProcessorFunction"]["Properties"]["Timeout"]
        .as_u64()
        .unwrap();
    assert!(queue["VisibilityTimeout"].as_u64().unwrap() >= 6 * processor_timeout);
    let event =
        &resources(&t)["WebhookProcessorFunction"]["Properties"]["Events"]["Queue"]["Properties"];
    assert_eq!(event["FunctionResponseTypes"][0], "ReportBatchItemFailures");
}

#[test]
fn every_order_and_payment_route_requires_the_jwt_authorizer() {
    let t = template();
    let api = &resources(&t)["HttpApi"]["Properties"]["Auth"];
    assert_eq!(api["DefaultAuthorizer"], "JwtAuthorizer");
    assert!(
        api["Authorizers"]["JwtAuthorizer"]["JwtConfiguration"]["issuer"].is_object(),
        "issuer is a parameter"
    );
    let mut routes = Vec::new();
    for (name, function) in of_type(&t, "AWS::Serverless::Function") {
        for (_, event) in function["Properties"]["Events"].as_object().unwrap() {
            if event["Type"] != "HttpApi" {
                continue;
            }
            let path = event["Properties"]["Path"].as_str().unwrap().to_owned();
            let authorizer = event["Properties"]["Auth"]["Authorizer"].as_str();
            if path.starts_with("/orders") || path.starts_with("/payments") {
                assert!(
                    authorizer.is_none() || authorizer == Some("JwtAuthorizer"),
                    "{name} {path} must use the JWT authorizer"
                );
            } else if path == "/openapi.json" || path.starts_with("/problems/") {
                // The API's documentation, public and read-only, from the orders function.
                assert_eq!(name, "OrdersFunction", "{path}");
                assert_eq!(authorizer, Some("NONE"), "{path} is public documentation");
            } else {
                assert!(
                    path.starts_with("/webhooks/"),
                    "{name}: unexpected route {path}"
                );
                assert_eq!(
                    authorizer,
                    Some("NONE"),
                    "webhooks authenticate by signature"
                );
            }
            routes.push(path);
        }
    }
    for expected in [
        "/orders",
        "/orders/{order_id}",
        "/payments",
        "/payments/{payment_id}",
        "/payments/{payment_id}/refunds",
        "/webhooks/{provider}",
    ] {
        assert!(routes.iter().any(|r| r == expected), "{expected} is routed");
    }
}

#[test]
fn no_secret_is_written_in_the_template() {
    let t = template();
    let mut all = Vec::new();
    strings(&t, &mut all);
    for text in &all {
        for marker in [
            "sk_live",
            "sk_test",
            "rk_live",
            "whsec_",
            "-----BEGIN",
            "AKIA",
        ] {
            assert!(!text.contains(marker), "secret-looking literal: {text}");
        }
    }
    for (name, function) in of_type(&t, "AWS::Serverless::Function") {
        if let Some(vars) = function["Properties"]["Environment"]["Variables"].as_object() {
            for (var, value) in vars {
                if var.contains("SECRET") || var.contains("KEY") {
                    assert!(
                        value.is_object(),
                        "{name}.{var} must reference a parameter, not hold a value"
                    );
                }
            }
        }
    }
    assert!(t["Parameters"]["PspSecretArn"]["AllowedPattern"]
        .as_str()
        .unwrap()
        .contains("secretsmanager"));
}

#[test]
fn every_function_is_a_rust_bootstrap_with_a_sample_event() {
    let t = template();
    let globals = &t["Globals"]["Function"];
    assert_eq!(globals["Runtime"], "provided.al2023");
    assert_eq!(globals["Handler"], "bootstrap");
    assert_eq!(globals["CodeUri"], "..");
    assert_eq!(globals["Architectures"][0]["Ref"], "Architecture");
    assert_eq!(t["Parameters"]["Architecture"]["Default"], "arm64");
    let events = Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/events");
    let samples = [
        ("orders", "orders-create.json"),
        ("charge", "payments-create.json"),
        ("refund", "refunds-create.json"),
        ("webhook-receiver", "webhook-stripe.json"),
        ("webhook-processor", "webhook-processor-sqs.json"),
        ("reconcile", "reconcile-schedule.json"),
        ("cleanup", "cleanup-schedule.json"),
    ];
    let functions = of_type(&t, "AWS::Serverless::Function");
    assert_eq!(functions.len(), samples.len());
    for (name, function) in functions {
        assert_eq!(
            function["Metadata"]["BuildMethod"], "rust-cargolambda",
            "{name}"
        );
        let binary = function["Metadata"]["BuildProperties"]["Binary"]
            .as_str()
            .unwrap();
        let (_, sample) = samples
            .iter()
            .find(|(b, _)| *b == binary)
            .unwrap_or_else(|| panic!("{name}: no sample for {binary}"));
        assert!(events.join(sample).exists(), "{sample}");
    }
    for function in ["ChargeFunction", "RefundFunction"] {
        let timeout = resources(&t)[function]["Properties"]["Timeout"]
            .as_u64()
            .unwrap();
        assert!(timeout <= 25, "{function}: API Gateway gives up at 30 s");
    }
}

#[test]
fn a_late_duplicate_charge_alarms_from_every_path_that_settles_payments() {
    // GIVEN the template
    let t = template();
    // THEN each function that settles payments (charge, webhook processor, reconcile) has a log
    // group with a retention and a metric filter for the `late-duplicate-charge` alarm field
    let filters = of_type(&t, "AWS::Logs::MetricFilter");
    let mut watched = Vec::new();
    for (name, filter) in &filters {
        let props = &filter["Properties"];
        if props["FilterPattern"]
            .as_str()
            .is_some_and(|p| p.contains("\"late-duplicate-charge\""))
        {
            assert_eq!(
                props["MetricTransformations"][0]["MetricName"], "LateDuplicateCharges",
                "{name}"
            );
            let group = props["LogGroupName"]["Ref"].as_str().expect("a log group");
            let group_props = &resources(&t)[group]["Properties"];
            assert!(group_props["RetentionInDays"].as_u64().is_some(), "{group}");
            let function = group_props["LogGroupName"]["Fn::Sub"]
                .as_str()
                .expect("the function's log group name");
            watched.push(function.to_owned());
        }
    }
    watched.sort();
    assert_eq!(
        watched,
        [
            "/aws/lambda/${ChargeFunction}",
            "/aws/lambda/${ReconcileFunction}",
            "/aws/lambda/${WebhookProcessorFunction}",
        ]
    );
    // AND an alarm fires on the first one
    let alarms = of_type(&t, "AWS::CloudWatch::Alarm");
    let alarm = alarms
        .iter()
        .find(|(_, a)| a["Properties"]["MetricName"] == "LateDuplicateCharges")
        .expect("an alarm on LateDuplicateCharges");
    assert_eq!(alarm.1["Properties"]["Threshold"], 0);
    assert_eq!(
        alarm.1["Properties"]["ComparisonOperator"],
        "GreaterThanThreshold"
    );
}

/// Each HttpApi route as (method, path) → (function, its `Auth`).
fn routes(t: &Value) -> BTreeMap<(String, String), (String, Value)> {
    let mut routes = BTreeMap::new();
    for (name, function) in of_type(t, "AWS::Serverless::Function") {
        let Some(events) = function["Properties"]["Events"].as_object() else {
            continue;
        };
        for event in events.values().filter(|e| e["Type"] == "HttpApi") {
            let props = &event["Properties"];
            routes.insert(
                (
                    props["Method"].as_str().unwrap().to_uppercase(),
                    props["Path"].as_str().unwrap().to_owned(),
                ),
                (name.clone(), props["Auth"].clone()),
            );
        }
    }
    routes
}

/// A function's allowed actions per resource (a logical id for `Fn::GetAtt: [X, Arn]` and
/// `Ref: X`, else the resource as JSON), whatever the parameters.
fn allowed(t: &Value, function: &str) -> BTreeMap<String, BTreeSet<String>> {
    allowed_under(t, function, None)
}

/// [`allowed`], from the policies granted only under `condition` (`None`: unconditionally).
fn allowed_under(
    t: &Value,
    function: &str,
    condition: Option<&str>,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for statement in policies(function, &resources(t)[function])
        .into_iter()
        .filter(|(granted_under, _)| *granted_under == condition)
        .flat_map(|(_, p)| p["Statement"].as_array().unwrap())
    {
        assert_eq!(statement["Effect"], "Allow", "{function}");
        for resource in statement["Resource"].as_array().unwrap() {
            let name = match (resource["Fn::GetAtt"][0].as_str(), resource["Ref"].as_str()) {
                (Some(id), _) | (None, Some(id)) => id.to_owned(),
                _ => resource.to_string(),
            };
            let actions = out.entry(name).or_default();
            for action in statement["Action"].as_array().unwrap() {
                actions.insert(action.as_str().unwrap().to_owned());
            }
        }
    }
    out
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|i| (*i).to_owned()).collect()
}

#[test]
fn the_template_routes_exactly_the_route_tables_api_routes_behind_their_access() {
    use payonce::http::{Access, Operation, Server, ROUTES};
    // GIVEN the template's routes and the route table the functions and the sandbox use
    let t = template();
    let routed = routes(&t);
    let api: BTreeMap<(String, String), _> = ROUTES
        .iter()
        .filter(|r| r.server == Server::Api)
        .map(|r| ((r.method.to_owned(), r.path.to_owned()), r))
        .collect();
    // THEN API Gateway routes exactly the table's API routes (the sandbox's own are not deployed)
    assert_eq!(
        routed.keys().collect::<Vec<_>>(),
        api.keys().collect::<Vec<_>>(),
        "template routes and payonce::http::ROUTES"
    );
    for (key, route) in &api {
        let (function, auth) = &routed[key];
        // AND each reaches the function that answers its operation
        let binary = match route.operation {
            Operation::CreateOrder
            | Operation::GetOrder
            | Operation::ReviseOrder
            | Operation::GetOpenApi
            | Operation::GetProblem => "orders",
            Operation::CreatePayment | Operation::GetPayment => "charge",
            Operation::CreateRefund | Operation::CapturePayment | Operation::CancelPayment => {
                "refund"
            }
            Operation::ReceiveWebhook => "webhook-receiver",
            other => panic!("{other:?} is the sandbox's"),
        };
        assert_eq!(
            resources(&t)[function.as_str()]["Metadata"]["BuildProperties"]["Binary"],
            binary,
            "{key:?}"
        );
        // AND behind the access the table gives it
        let default_jwt = auth["Authorizer"].is_null() || auth["Authorizer"] == "JwtAuthorizer";
        match route.access {
            Access::Bearer => assert!(
                default_jwt && auth["AuthorizationScopes"].is_null(),
                "{key:?}: {auth}"
            ),
            Access::BearerWithScope(scope) => assert!(
                default_jwt && auth["AuthorizationScopes"] == serde_json::json!([scope]),
                "{key:?}: {auth}"
            ),
            Access::Signed | Access::Public => {
                assert_eq!(auth["Authorizer"], "NONE", "{key:?}")
            }
        }
    }
}

#[test]
fn each_staff_scope_guards_its_own_route_of_the_refund_function() {
    // GIVEN the template's routes
    let t = template();
    let routes = routes(&t);
    // THEN refunds and captures go to the refund function, behind the JWT authorizer with
    // their own scope each (API Gateway answers 403 to a token without it); cancels too, with
    // the owner's token alone (the function asks for the capture scope where it must)
    let guarded = [
        (
            "/payments/{payment_id}/refunds",
            Some(payonce::service::REFUND_OAUTH_SCOPE),
        ),
        (
            "/payments/{payment_id}/capture",
            Some(payonce::service::CAPTURE_OAUTH_SCOPE),
        ),
        ("/payments/{payment_id}/cancel", None),
    ];
    for (path, scope) in guarded {
        let (function, auth) = routes
            .get(&("POST".to_owned(), path.to_owned()))
            .unwrap_or_else(|| panic!("the route {path}"));
        assert_eq!(function, "RefundFunction", "{path}");
        assert_eq!(
            resources(&t)[function.as_str()]["Metadata"]["BuildProperties"]["Binary"],
            "refund"
        );
        assert!(
            auth["Authorizer"].is_null() || auth["Authorizer"] == "JwtAuthorizer",
            "{path}: {auth}"
        );
        match scope {
            Some(scope) => assert_eq!(
                auth["AuthorizationScopes"],
                serde_json::json!([scope]),
                "{path}: exactly its scope"
            ),
            None => assert!(auth["AuthorizationScopes"].is_null(), "{path}: {auth}"),
        }
    }
    // AND no other route asks for a scope (customers pay and read their payments without one),
    // and no other route reaches the refund function
    for ((method, path), (function, auth)) in &routes {
        if guarded.iter().any(|(guarded, _)| guarded == path) {
            continue;
        }
        assert!(
            auth["AuthorizationScopes"].is_null(),
            "{method} {path}: {auth}"
        );
        assert_ne!(function, "RefundFunction", "{method} {path}");
    }
}

#[test]
fn the_refund_function_may_do_only_what_a_refund_does() {
    // GIVEN the template
    let t = template();
    // THEN the refund function reads the key's record with the payment (BatchGetItem), claims,
    // completes or frees it (Put, Update, Delete), moves the payment's refund amounts and the
    // refund (Put, Update, ConditionCheck, GetItem), and reads the PSP secret: nothing else
    // (no Scan, no Query, no DeleteItem on payments, no queue)
    let refund = allowed(&t, "RefundFunction");
    assert_eq!(
        refund,
        BTreeMap::from([
            (
                "IdempotencyTable".to_owned(),
                set(&[
                    "dynamodb:BatchGetItem",
                    "dynamodb:PutItem",
                    "dynamodb:UpdateItem",
                    "dynamodb:DeleteItem"
                ])
            ),
            (
                "PaymentsTable".to_owned(),
                set(&[
                    "dynamodb:BatchGetItem",
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "dynamodb:UpdateItem",
                    "dynamodb:ConditionCheckItem"
                ])
            ),
            (
                "PspSecretArn".to_owned(),
                set(&["secretsmanager:GetSecretValue"])
            ),
        ])
    );
    let env = &resources(&t)["RefundFunction"]["Properties"]["Environment"]["Variables"];
    assert_eq!(env["PSP_SECRET_ARN"]["Ref"], "PspSecretArn");
    assert_eq!(env["PSP"]["Ref"], "Psp");
    // AND the paths that now read or write refunds may: GET /payments/{id} and the webhook
    // processor read a payment's refunds in one BatchGetItem; the processor and reconcile
    // update refunds (and their records) and defer their checks; reconcile calls the PSP
    for (function, needs) in [
        (
            "ChargeFunction",
            &[
                "dynamodb:BatchGetItem",
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
            ][..],
        ),
        (
            "WebhookProcessorFunction",
            &[
                "dynamodb:BatchGetItem",
                "dynamodb:GetItem",
                "dynamodb:UpdateItem",
                "dynamodb:ConditionCheckItem",
            ][..],
        ),
        (
            "ReconcileFunction",
            &[
                "dynamodb:BatchGetItem",
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:ConditionCheckItem",
            ][..],
        ),
    ] {
        let granted = &allowed(&t, function)["PaymentsTable"];
        for action in needs {
            assert!(granted.contains(*action), "{function} lacks {action}");
        }
        assert!(
            !granted.contains("dynamodb:DeleteItem") && !granted.contains("dynamodb:Scan"),
            "{function}: {granted:?}"
        );
    }
    assert!(
        allowed(&t, "ReconcileFunction")["PspSecretArn"].contains("secretsmanager:GetSecretValue")
    );
}

/// The metric filters for `alarm` value `field`: (metric name, the function whose log group
/// each one reads), checking each log group keeps its logs for a bounded time.
fn alarm_filters(t: &Value, field: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (name, filter) in of_type(t, "AWS::Logs::MetricFilter") {
        let props = &filter["Properties"];
        let pattern = props["FilterPattern"].as_str().unwrap_or("");
        // The functions log flat JSON: a field is at the top level of the line.
        assert!(!pattern.contains("$.fields."), "{name}: {pattern}");
        let alarm = payonce::logging::ALARM_FIELD;
        if !pattern.contains(&format!("$.{alarm} = \"{field}\"")) {
            continue;
        }
        let group = props["LogGroupName"]["Ref"].as_str().expect("a log group");
        let group_props = &resources(t)[group]["Properties"];
        assert!(group_props["RetentionInDays"].as_u64().is_some(), "{group}");
        let function = group_props["LogGroupName"]["Fn::Sub"]
            .as_str()
            .and_then(|n| n.strip_prefix("/aws/lambda/${"))
            .and_then(|n| n.strip_suffix('}'))
            .unwrap_or_else(|| panic!("{name}: a function's log group"));
        found.push((
            props["MetricTransformations"][0]["MetricName"]
                .as_str()
                .unwrap()
                .to_owned(),
            function.to_owned(),
        ));
    }
    found.sort();
    found
}

fn assert_alarmed(t: &Value, metric: &str) {
    let alarms = of_type(t, "AWS::CloudWatch::Alarm");
    let (_, alarm) = alarms
        .iter()
        .find(|(_, a)| a["Properties"]["MetricName"] == metric)
        .unwrap_or_else(|| panic!("an alarm on {metric}"));
    let props = &alarm["Properties"];
    assert_eq!(props["Namespace"], "payonce");
    assert_eq!(props["Threshold"], 0, "{metric}: the first one alarms");
    assert_eq!(props["ComparisonOperator"], "GreaterThanThreshold");
    assert_eq!(props["TreatMissingData"], "notBreaching");
    assert_eq!(props["AlarmActions"]["Fn::If"][0], "HasAlarmTopic");
}

#[test]
fn refunds_that_reconcile_cannot_settle_or_that_fail_late_alarm() {
    // GIVEN the template
    let t = template();
    // THEN reconcile's `refund-stuck` and `refund-unprovable` count as stuck refunds
    for field in ["refund-stuck", "refund-unprovable"] {
        assert_eq!(
            alarm_filters(&t, field),
            [("StuckRefunds".to_owned(), "ReconcileFunction".to_owned())],
            "{field}"
        );
    }
    assert_alarmed(&t, "StuckRefunds");
    // AND a refund failing after it succeeded alarms from every path that settles refunds
    let late = alarm_filters(&t, "refund-failed-late");
    assert_eq!(
        late.iter().map(|(_, f)| f.as_str()).collect::<Vec<_>>(),
        [
            "ReconcileFunction",
            "RefundFunction",
            "WebhookProcessorFunction"
        ]
    );
    assert!(late
        .iter()
        .all(|(metric, _)| metric == "LateRefundFailures"));
    assert_alarmed(&t, "LateRefundFailures");
    assert_alarmed(&t, "LateDuplicateCharges");
    assert_alarmed(&t, "StuckPayments");
}

#[test]
fn webhooks_that_disagree_with_our_books_and_refused_psp_credentials_alarm() {
    // GIVEN the template
    let t = template();
    // THEN the processor's `webhook-mismatch` alarms
    assert_eq!(
        alarm_filters(&t, "webhook-mismatch"),
        [(
            "WebhookMismatches".to_owned(),
            "WebhookProcessorFunction".to_owned()
        )]
    );
    assert_alarmed(&t, "WebhookMismatches");
    // AND every function that calls the PSP alarms on refused credentials
    assert_eq!(
        alarm_filters(&t, "psp-credentials")
            .iter()
            .map(|(m, f)| (m.as_str(), f.as_str()))
            .collect::<Vec<_>>(),
        [
            ("PspCredentialRefusals", "ChargeFunction"),
            ("PspCredentialRefusals", "ReconcileFunction"),
            ("PspCredentialRefusals", "RefundFunction"),
        ]
    );
    assert_alarmed(&t, "PspCredentialRefusals");
    // AND the processor knows the PSP mode it must accept (test unless the stack says live)
    let globals = &t["Globals"]["Function"]["Environment"]["Variables"];
    assert_eq!(
        globals["PSP_LIVEMODE"]["Fn::If"],
        serde_json::json!(["PspIsLive", "true", "false"])
    );
    assert_eq!(t["Parameters"]["PspMode"]["Default"], "test");
}

/// The template's parameters, each at its default, then `overrides`.
fn parameters(t: &Value, overrides: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut values: BTreeMap<String, String> = t["Parameters"]
        .as_object()
        .unwrap()
        .iter()
        .filter_map(|(name, p)| Some((name.clone(), p["Default"].as_str()?.to_owned())))
        .collect();
    for (name, value) in overrides {
        assert!(t["Parameters"][*name].is_object(), "no parameter {name}");
        values.insert((*name).to_owned(), (*value).to_owned());
    }
    values
}

/// Whether the template's condition `name` holds under `params`.
fn condition(t: &Value, name: &str, params: &BTreeMap<String, String>) -> bool {
    let definition = &t["Conditions"][name];
    assert!(definition.is_object(), "no condition {name}");
    holds(t, definition, params)
}

fn holds(t: &Value, expression: &Value, params: &BTreeMap<String, String>) -> bool {
    if let Some([a, b]) = expression["Fn::Equals"].as_array().map(Vec::as_slice) {
        return resolve(t, a, params) == resolve(t, b, params);
    }
    if let Some([inner]) = expression["Fn::Not"].as_array().map(Vec::as_slice) {
        return !holds(t, inner, params);
    }
    if let Some(name) = expression["Condition"].as_str() {
        return condition(t, name, params);
    }
    panic!("a condition this test does not read: {expression}")
}

/// `value` with the parameters' intrinsics evaluated under `params` (`Ref` to a parameter,
/// `Fn::If`, `Fn::FindInMap`); `None` for `AWS::NoValue`. Other references stay as they are.
fn resolve(t: &Value, value: &Value, params: &BTreeMap<String, String>) -> Option<Value> {
    match value {
        Value::Object(map) if map.len() == 1 => {
            if let Some(name) = map.get("Ref").and_then(Value::as_str) {
                if name == "AWS::NoValue" {
                    return None;
                }
                return Some(
                    params
                        .get(name)
                        .map_or_else(|| value.clone(), |v| Value::String(v.clone())),
                );
            }
            if let Some([test, then, otherwise]) = map
                .get("Fn::If")
                .and_then(|v| v.as_array().map(Vec::as_slice))
            {
                let chosen = if condition(t, test.as_str().unwrap(), params) {
                    then
                } else {
                    otherwise
                };
                return resolve(t, chosen, params);
            }
            if let Some([mapping, top, second]) = map
                .get("Fn::FindInMap")
                .and_then(|v| v.as_array().map(Vec::as_slice))
            {
                let key = |v: &Value| resolve(t, v, params).unwrap().as_str().unwrap().to_owned();
                let found = &t["Mappings"][mapping.as_str().unwrap()][key(top)][key(second)];
                assert!(!found.is_null(), "no mapping entry for {value}");
                return Some(found.clone());
            }
            Some(Value::Object(
                map.iter()
                    .filter_map(|(k, v)| Some((k.clone(), resolve(t, v, params)?)))
                    .collect(),
            ))
        }
        Value::Object(map) => Some(Value::Object(
            map.iter()
                .filter_map(|(k, v)| Some((k.clone(), resolve(t, v, params)?)))
                .collect(),
        )),
        Value::Array(items) => Some(Value::Array(
            items.iter().filter_map(|i| resolve(t, i, params)).collect(),
        )),
        other => Some(other.clone()),
    }
}

/// A function's own environment variables, resolved under `params`.
fn env_under(t: &Value, function: &str, params: &BTreeMap<String, String>) -> Value {
    resolve(
        t,
        &resources(t)[function]["Properties"]["Environment"]["Variables"],
        params,
    )
    .unwrap_or(Value::Null)
}

/// The secrets (parameter names) a function may read under `params`.
fn secret_grants(t: &Value, function: &str, params: &BTreeMap<String, String>) -> BTreeSet<String> {
    policies(function, &resources(t)[function])
        .into_iter()
        .filter(|(granted_under, _)| granted_under.is_none_or(|c| condition(t, c, params)))
        .flat_map(|(_, p)| p["Statement"].as_array().unwrap().clone())
        .filter(|statement| {
            statement["Action"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a.as_str().unwrap().starts_with("secretsmanager:"))
        })
        .flat_map(|statement| {
            assert_eq!(
                statement["Action"],
                serde_json::json!(["secretsmanager:GetSecretValue"]),
                "{function}: secrets are only read"
            );
            statement["Resource"].as_array().unwrap().clone()
        })
        .map(|r| {
            r["Ref"]
                .as_str()
                .unwrap_or_else(|| panic!("{function}: a secret by parameter, not {r}"))
                .to_owned()
        })
        .collect()
}

/// Whether a function may read the PSP API secret under `params`.
fn reads_the_psp_secret(t: &Value, function: &str, params: &BTreeMap<String, String>) -> bool {
    secret_grants(t, function, params).contains("PspSecretArn")
}

const PSP_FUNCTIONS: [&str; 3] = ["ChargeFunction", "RefundFunction", "ReconcileFunction"];
const WEBHOOK_FUNCTIONS: [&str; 2] = ["WebhookReceiverFunction", "WebhookProcessorFunction"];

#[test]
fn one_psp_per_deployment_is_chosen_by_the_psp_parameter() {
    // GIVEN the template
    let t = template();
    // THEN `Psp` picks stripe (the default), omise or 2c2p, the names payonce's config reads
    let psp = &t["Parameters"]["Psp"];
    assert_eq!(psp["Default"], "stripe");
    let allowed_values: Vec<&str> = psp["AllowedValues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        allowed_values,
        payonce::config::PspKind::ALL.map(payonce::config::PspKind::name)
    );
    // AND each secret's description gives each PSP's shape: the API credentials in one, the
    // webhook signing secrets in the other (for 2C2P, the merchant key that signs them)
    let description = |parameter: &str| {
        t["Parameters"][parameter]["Description"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let api = description("PspSecretArn");
    for field in ["api_key", "secret_key", "merchant_id", "omise", "2c2p"] {
        assert!(api.contains(field), "{field}: {api}");
    }
    assert!(!api.contains("webhook_secrets"), "{api}");
    let webhook = description("PspWebhookSecretArn");
    for field in [
        "webhook_secrets",
        "merchant_id",
        "secret_key",
        "omise",
        "2c2p",
    ] {
        assert!(webhook.contains(field), "{field}: {webhook}");
    }
    assert!(!webhook.contains("api_key"), "{webhook}");
    // AND the old Stripe-only parameter is gone, everywhere
    assert!(t["Parameters"]["StripeApiBase"].is_null());
    let mut all = Vec::new();
    strings(&t, &mut all);
    for text in &all {
        assert!(
            !text.contains("StripeApiBase") && !text.contains("STRIPE_API_BASE"),
            "{text}"
        );
    }
    // AND the webhook route stays /webhooks/{provider}, the output names the chosen provider's path
    assert!(routes(&t).contains_key(&("POST".to_owned(), "/webhooks/{provider}".to_owned())));
    assert_eq!(
        t["Outputs"]["WebhookUrl"]["Value"]["Fn::Sub"]
            .as_str()
            .unwrap()
            .rsplit_once("/webhooks/")
            .unwrap()
            .1,
        "${Psp}"
    );
}

#[test]
fn each_function_that_calls_the_psp_or_reads_webhooks_knows_which_psp() {
    let t = template();
    for kind in payonce::config::PspKind::ALL {
        for mode in ["test", "live"] {
            // GIVEN a deployment of this PSP in this mode, with the default API base
            let params = parameters(&t, &[("Psp", kind.name()), ("PspMode", mode)]);
            // THEN charge, refund and reconcile get the PSP, its secret and the PSP's own API
            // base, the one payonce's config would pick itself
            for function in PSP_FUNCTIONS {
                let env = env_under(&t, function, &params);
                assert_eq!(env["PSP"], kind.name(), "{function}");
                assert_eq!(env["PSP_SECRET_ARN"]["Ref"], "PspSecretArn", "{function}");
                assert_eq!(
                    env["PSP_API_BASE"],
                    kind.default_api_base(mode == "live"),
                    "{function} {kind:?} {mode}"
                );
                assert!(reads_the_psp_secret(&t, function, &params), "{function}");
            }
            // AND the receiver and the processor get the PSP (to register its scheme only)
            for function in WEBHOOK_FUNCTIONS {
                let env = env_under(&t, function, &params);
                assert_eq!(env["PSP"], kind.name(), "{function}");
                assert!(env.get("PSP_API_BASE").is_none(), "{function} calls no PSP");
                assert!(
                    env.get("PSP_SECRET_ARN").is_none(),
                    "{function} never learns the API secret"
                );
            }
            // AND each function may read exactly the secret it needs: the API secret for the
            // functions that call the PSP, the webhook secret for the receiver always and the
            // processor only for 2C2P (whose notifications it reads only once verified with the
            // merchant key the webhook secret holds), none for orders and cleanup. The public
            // receiver never reads the API secret, whatever the PSP.
            let is_2c2p = kind == payonce::config::PspKind::TwoC2p;
            let expected = [
                ("ChargeFunction", &["PspSecretArn"][..]),
                ("RefundFunction", &["PspSecretArn"][..]),
                ("ReconcileFunction", &["PspSecretArn"][..]),
                ("WebhookReceiverFunction", &["PspWebhookSecretArn"][..]),
                (
                    "WebhookProcessorFunction",
                    if is_2c2p {
                        &["PspWebhookSecretArn"][..]
                    } else {
                        &[][..]
                    },
                ),
                ("OrdersFunction", &[][..]),
                ("CleanupFunction", &[][..]),
            ];
            let functions: BTreeSet<String> = of_type(&t, "AWS::Serverless::Function")
                .into_iter()
                .map(|(name, _)| name.clone())
                .collect();
            assert_eq!(
                functions,
                expected.iter().map(|(f, _)| (*f).to_owned()).collect(),
                "every function's secrets are asserted"
            );
            for (function, secrets) in expected {
                assert_eq!(
                    secret_grants(&t, function, &params),
                    set(secrets),
                    "{function} {kind:?}"
                );
            }
            // AND each function is told the ARN of exactly the secret it may read
            for function in PSP_FUNCTIONS {
                let env = env_under(&t, function, &params);
                assert!(env.get("PSP_WEBHOOK_SECRET_ARN").is_none(), "{function}");
            }
            let receiver = env_under(&t, "WebhookReceiverFunction", &params);
            assert_eq!(
                receiver["PSP_WEBHOOK_SECRET_ARN"]["Ref"],
                "PspWebhookSecretArn"
            );
            let processor = env_under(&t, "WebhookProcessorFunction", &params);
            assert_eq!(
                processor.get("PSP_WEBHOOK_SECRET_ARN").is_some(),
                is_2c2p,
                "{processor}"
            );
            // AND orders know the PSP (its currencies and minimum charges), never a secret
            let orders = env_under(&t, "OrdersFunction", &params);
            assert_eq!(orders["PSP"], kind.name());
            assert!(orders.get("PSP_SECRET_ARN").is_none() && orders.get("PSP_API_BASE").is_none());
            assert!(orders.get("PSP_WEBHOOK_SECRET_ARN").is_none());
            // AND nothing else touches the PSP
            let cleanup = env_under(&t, "CleanupFunction", &params);
            assert!(cleanup.get("PSP").is_none() && cleanup.get("PSP_SECRET_ARN").is_none());
            assert!(cleanup.get("PSP_WEBHOOK_SECRET_ARN").is_none());
        }
    }
    // AND an explicit PspApiBase wins whatever the PSP
    let params = parameters(
        &t,
        &[("Psp", "omise"), ("PspApiBase", "https://psp.example")],
    );
    for function in PSP_FUNCTIONS {
        assert_eq!(
            env_under(&t, function, &params)["PSP_API_BASE"],
            "https://psp.example"
        );
    }
    // AND the processor's conditional grant is exactly the webhook secret, under `PspIs2c2p`
    // alone; unconditionally it reads no secret
    assert_eq!(
        allowed_under(&t, "WebhookProcessorFunction", Some("PspIs2c2p")),
        BTreeMap::from([(
            "PspWebhookSecretArn".to_owned(),
            set(&["secretsmanager:GetSecretValue"])
        )])
    );
    let unconditional = allowed_under(&t, "WebhookProcessorFunction", None);
    assert!(!unconditional.contains_key("PspSecretArn"));
    assert!(!unconditional.contains_key("PspWebhookSecretArn"));
    // AND the receiver's grants are the queue and the webhook secret, nothing else
    assert_eq!(
        allowed(&t, "WebhookReceiverFunction"),
        BTreeMap::from([
            ("WebhookQueue".to_owned(), set(&["sqs:SendMessage"])),
            (
                "PspWebhookSecretArn".to_owned(),
                set(&["secretsmanager:GetSecretValue"])
            ),
        ])
    );
}

#[test]
fn the_api_secret_and_the_webhook_secret_are_two_secrets() {
    // GIVEN the template
    let t = template();
    // THEN both ARNs are Secrets Manager secrets the operator creates (no default)
    for parameter in ["PspSecretArn", "PspWebhookSecretArn"] {
        let p = &t["Parameters"][parameter];
        assert!(p["Default"].is_null(), "{parameter}");
        assert!(
            p["AllowedPattern"]
                .as_str()
                .unwrap()
                .contains("secretsmanager"),
            "{parameter}"
        );
    }
    // AND a rule refuses the same secret for both, so the receiver never reads the API key
    let assertions = t["Rules"]["SeparateWebhookSecret"]["Assertions"]
        .as_array()
        .expect("the SeparateWebhookSecret rule");
    assert_eq!(
        assertions[0]["Assert"],
        serde_json::json!({"Fn::Not": [{"Fn::Equals": [
            {"Ref": "PspSecretArn"},
            {"Ref": "PspWebhookSecretArn"}
        ]}]})
    );
}

#[test]
fn a_stripe_deployment_is_wired_as_before_the_psp_parameter() {
    // GIVEN the template at its defaults (Psp stripe), in each mode
    let t = template();
    for mode in ["test", "live"] {
        let params = parameters(&t, &[("PspMode", mode)]);
        // THEN each function's own environment is what it was, plus `PSP` where the PSP is read,
        // and the Stripe API base under its new name
        let psp_env = serde_json::json!({
            "PSP": "stripe",
            "PSP_SECRET_ARN": {"Ref": "PspSecretArn"},
            "PSP_API_BASE": "https://api.stripe.com",
        });
        for function in PSP_FUNCTIONS {
            // The charge function also checks a return URL against the API's CORS origins.
            let mut expected = psp_env.clone();
            if function == "ChargeFunction" {
                expected["CHECKOUT_ORIGINS"] =
                    serde_json::json!({"Fn::Join": [",", {"Ref": "AllowedOrigins"}]});
            }
            assert_eq!(env_under(&t, function, &params), expected, "{function}");
        }
        assert_eq!(
            env_under(&t, "WebhookReceiverFunction", &params),
            serde_json::json!({
                "PSP": "stripe",
                "PSP_WEBHOOK_SECRET_ARN": {"Ref": "PspWebhookSecretArn"},
                "WEBHOOK_QUEUE_URL": {"Ref": "WebhookQueue"},
            })
        );
        // (plus the queue asking reconcile for a payment now, which a Stripe payment never
        // needs: Stripe captures at once)
        assert_eq!(
            env_under(&t, "WebhookProcessorFunction", &params),
            serde_json::json!({
                "PSP": "stripe",
                "RECONCILE_REQUEST_QUEUE_URL": {"Ref": "ReconcileRequestQueue"},
            })
        );
        // AND each function's grants under these parameters are the ones it had
        let processor = resolve(
            &t,
            &resources(&t)["WebhookProcessorFunction"]["Properties"]["Policies"],
            &params,
        )
        .unwrap();
        assert_eq!(
            processor,
            resources(&t)["WebhookProcessorFunction"]["Properties"]["Policies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["Fn::If"].is_null())
                .cloned()
                .collect::<Value>(),
            "the processor's 2C2P grant is absent"
        );
        assert!(secret_grants(&t, "WebhookProcessorFunction", &params).is_empty());
        assert_eq!(
            allowed_under(&t, "WebhookProcessorFunction", None),
            allowed(&t, "WebhookProcessorFunction")
        );
    }
    // AND the globals are those of before (the PSP is set per function), with the 2C2P refunds
    // switch every function reads alike (unused by a Stripe deployment: `disabled` by default)
    let globals = t["Globals"]["Function"]["Environment"]["Variables"]
        .as_object()
        .unwrap();
    assert_eq!(
        globals.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "IDEMPOTENCY_TABLE",
            "PAYMENTS_TABLE",
            "PSP_LIVEMODE",
            "RUST_LOG",
            "TWOC2P_REFUNDS",
            "TWOC2P_SETTLEMENT"
        ]
    );
    assert_eq!(
        t["Parameters"]["TwoC2pRefunds"]["Default"],
        serde_json::json!("disabled")
    );
    assert_eq!(
        t["Parameters"]["TwoC2pSettlement"]["Default"],
        serde_json::json!("automatic")
    );
}

/// Every `alarm = "..."` name the code logs, found by reading its sources.
fn alarm_names_in_the_code() -> BTreeSet<String> {
    fn walk(dir: &std::path::Path, found: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).expect("a source directory") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("a source file");
                for part in text.split("alarm = \"").skip(1) {
                    if let Some(name) = part.split('"').next() {
                        found.insert(name.to_owned());
                    }
                }
            }
        }
    }
    let mut found = BTreeSet::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for dir in ["shared/src", "functions"] {
        walk(&root.join(dir), &mut found);
    }
    found
}

#[test]
fn every_alarm_the_code_logs_has_a_metric_filter_and_an_alarm() {
    // GIVEN the template and every alarm name the code logs
    let t = template();
    let names = alarm_names_in_the_code();
    assert!(
        names.contains("late-duplicate-charge") && names.len() >= 8,
        "{names:?}"
    );
    // THEN each is counted by a metric filter on a function's log group, and alarmed
    for name in &names {
        let filters = alarm_filters(&t, name);
        assert!(!filters.is_empty(), "no metric filter for alarm {name}");
        for (metric, _) in &filters {
            assert_alarmed(&t, metric);
        }
    }
}

/// Whether a CloudFormation `AllowedPattern` could let a `*` through: an unescaped `.` outside a
/// character class, a negated class, a class or an escape that includes `*`. Conservative: it
/// reads the pattern, it does not run it.
fn pattern_can_match_a_star(pattern: &str) -> bool {
    let mut chars = pattern.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some('*' | 'S' | 'W' | 'D' | 'p' | 'P') = chars.next() {
                    return true;
                }
            }
            '[' if !in_class => {
                in_class = true;
                if chars.peek() == Some(&'^') {
                    return true;
                }
            }
            ']' if in_class => in_class = false,
            '*' if in_class => return true,
            '.' if !in_class => return true,
            _ => {}
        }
    }
    false
}

#[test]
fn a_checkout_on_another_origin_passes_the_preflight_and_reads_the_retry_headers() {
    // GIVEN the template's HTTP API
    let t = template();
    let cors = &resources(&t)["HttpApi"]["Properties"]["CorsConfiguration"];
    // THEN its origins are the `AllowedOrigins` parameter, a list each element of which must be a
    // whole origin that no wildcard can pass
    assert_eq!(
        cors["AllowOrigins"],
        serde_json::json!({"Ref": "AllowedOrigins"})
    );
    let origins = &t["Parameters"]["AllowedOrigins"];
    assert_eq!(origins["Type"], "CommaDelimitedList");
    assert!(
        origins["Default"].is_null(),
        "each deployment names its checkout origins"
    );
    let pattern = origins["AllowedPattern"].as_str().expect("AllowedPattern");
    assert!(
        pattern.starts_with('^') && pattern.ends_with('$'),
        "{pattern}"
    );
    assert!(!pattern_can_match_a_star(pattern), "{pattern}");
    assert!(pattern_can_match_a_star("^https://.+$") && pattern_can_match_a_star("^[^,]+$"));
    // AND credentials stay off: tokens travel in `Authorization`, never in cookies
    assert_eq!(cors["AllowCredentials"], false);
    // AND the preflight allows the headers and methods a checkout sends
    let listed = |key: &str| -> BTreeSet<String> {
        cors[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key} is a list"))
            .iter()
            .map(|v| v.as_str().unwrap().to_ascii_lowercase())
            .collect()
    };
    for header in ["authorization", "content-type", "idempotency-key"] {
        assert!(listed("AllowHeaders").contains(header), "{header}");
    }
    assert_eq!(listed("AllowMethods"), set(&["get", "patch", "post"]));
    for method in routes(&t).keys().map(|(m, _)| m.to_ascii_lowercase()) {
        assert!(listed("AllowMethods").contains(&method), "{method}");
    }
    // AND the browser may read the headers a retrying checkout acts on
    for header in ["retry-after", "idempotent-replayed", "x-request-id"] {
        assert!(listed("ExposeHeaders").contains(header), "{header}");
    }
    assert!(cors["MaxAge"].as_u64().is_some_and(|s| s > 0));
}

/// Every function's log group (`/aws/lambda/${Function}`) by function.
fn function_log_groups(t: &Value) -> BTreeMap<String, (String, Value)> {
    of_type(t, "AWS::Logs::LogGroup")
        .into_iter()
        .filter_map(|(id, group)| {
            let function = group["Properties"]["LogGroupName"]["Fn::Sub"]
                .as_str()?
                .strip_prefix("/aws/lambda/${")?
                .strip_suffix('}')?;
            Some((
                function.to_owned(),
                (id.clone(), group["Properties"]["RetentionInDays"].clone()),
            ))
        })
        .collect()
}

#[test]
fn every_function_and_the_api_keep_their_logs_for_a_bounded_time() {
    // GIVEN the template
    let t = template();
    // THEN every function has its log group, with a retention
    let groups = function_log_groups(&t);
    for (name, _) in of_type(&t, "AWS::Serverless::Function") {
        let (group, retention) = groups
            .get(name)
            .unwrap_or_else(|| panic!("{name}: no log group"));
        assert!(retention.as_u64().is_some_and(|d| d > 0), "{group}");
    }
    // AND no log group of the stack keeps its logs for ever
    for (id, group) in of_type(&t, "AWS::Logs::LogGroup") {
        assert!(
            group["Properties"]["RetentionInDays"].as_u64().is_some(),
            "{id}"
        );
    }
}

#[test]
fn the_api_writes_a_json_access_log_line_per_request() {
    // GIVEN the template's HTTP API
    let t = template();
    let settings = &resources(&t)["HttpApi"]["Properties"]["AccessLogSettings"];
    // THEN access logs go to a log group of the stack, with a retention
    let group = settings["DestinationArn"]["Fn::GetAtt"][0]
        .as_str()
        .expect("the access log group's Arn");
    assert_eq!(settings["DestinationArn"]["Fn::GetAtt"][1], "Arn");
    assert_eq!(resources(&t)[group]["Type"], "AWS::Logs::LogGroup");
    assert!(resources(&t)[group]["Properties"]["RetentionInDays"]
        .as_u64()
        .is_some());
    // AND each line is one JSON object naming the request, the caller, the route, the outcome,
    // the time taken and what the integration said when it failed
    let format: Value =
        serde_json::from_str(settings["Format"].as_str().expect("a format")).expect("JSON");
    for (field, variable) in [
        ("requestId", "$context.requestId"),
        ("ip", "$context.identity.sourceIp"),
        ("routeKey", "$context.routeKey"),
        ("status", "$context.status"),
        ("responseLatency", "$context.responseLatency"),
        ("integrationError", "$context.integrationErrorMessage"),
    ] {
        assert_eq!(format[field], variable, "{field}");
    }
}

/// The alarms on metrics of `namespace`.
fn aws_alarms<'a>(t: &'a Value, namespace: &str) -> Vec<(&'a String, &'a Value)> {
    of_type(t, "AWS::CloudWatch::Alarm")
        .into_iter()
        .filter(|(_, a)| a["Properties"]["Namespace"] == namespace)
        .collect()
}

/// The one alarm on `metric` in `namespace` whose only dimension is `dimension`.
fn alarm_on<'a>(t: &'a Value, namespace: &str, metric: &str, dimension: &Value) -> &'a String {
    let found: Vec<_> = aws_alarms(t, namespace)
        .into_iter()
        .filter(|(_, a)| {
            a["Properties"]["MetricName"] == metric
                && a["Properties"]["Dimensions"].as_array().map(Vec::len) == Some(1)
                && a["Properties"]["Dimensions"][0] == *dimension
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one alarm on {namespace} {metric} {dimension}"
    );
    found[0].0
}

#[test]
fn functions_the_api_the_queue_and_the_payments_alarm_on_one_dashboard() {
    // GIVEN the template
    let t = template();
    // THEN every function alarms on its errors and its throttles
    for (name, _) in of_type(&t, "AWS::Serverless::Function") {
        let dimension = serde_json::json!({"Name": "FunctionName", "Value": {"Ref": name}});
        for metric in ["Errors", "Throttles"] {
            let id = alarm_on(&t, "AWS/Lambda", metric, &dimension);
            assert_eq!(
                resources(&t)[id.as_str()]["Properties"]["Threshold"],
                0,
                "{id}"
            );
        }
    }
    // AND the API alarms on its 5xx answers and its p99 latency
    let api = serde_json::json!({"Name": "ApiId", "Value": {"Ref": "HttpApi"}});
    alarm_on(&t, "AWS/ApiGateway", "5xx", &api);
    let latency = alarm_on(&t, "AWS/ApiGateway", "Latency", &api);
    assert_eq!(
        resources(&t)[latency.as_str()]["Properties"]["ExtendedStatistic"],
        "p99"
    );
    // AND the webhook queue on its oldest message, its DLQ on any message
    let queue = |id: &str| serde_json::json!({"Name": "QueueName", "Value": {"Fn::GetAtt": [id, "QueueName"]}});
    alarm_on(
        &t,
        "AWS/SQS",
        "ApproximateAgeOfOldestMessage",
        &queue("WebhookQueue"),
    );
    alarm_on(
        &t,
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
        &queue("WebhookDeadLetterQueue"),
    );
    // AND stuck payments, late duplicates, refused credentials and refused webhook signatures
    // alarm on the first one; the receiver's signature refusals are counted from its log
    for metric in [
        "StuckPayments",
        "LateDuplicateCharges",
        "PspCredentialRefusals",
        "WebhookSignatureFailures",
    ] {
        assert_alarmed(&t, metric);
    }
    assert_eq!(
        alarm_filters(&t, "webhook-signature"),
        [(
            "WebhookSignatureFailures".to_owned(),
            "WebhookReceiverFunction".to_owned()
        )]
    );
    // AND every alarm notifies the topic when there is one
    let alarms = of_type(&t, "AWS::CloudWatch::Alarm");
    for (id, alarm) in &alarms {
        assert_eq!(
            alarm["Properties"]["AlarmActions"]["Fn::If"],
            serde_json::json!(["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]),
            "{id}"
        );
    }
    // AND one dashboard shows every alarm
    let dashboards = of_type(&t, "AWS::CloudWatch::Dashboard");
    assert_eq!(dashboards.len(), 1);
    let body = dashboards[0].1["Properties"]["DashboardBody"]["Fn::Sub"]
        .as_str()
        .expect("a dashboard body");
    let body: Value = serde_json::from_str(body).expect("the dashboard body is JSON");
    let shown: BTreeSet<&str> = body["widgets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["type"] == "alarm")
        .flat_map(|w| w["properties"]["alarms"].as_array().unwrap())
        .map(|a| a.as_str().unwrap())
        .collect();
    for (id, _) in &alarms {
        assert!(
            shown.contains(format!("${{{id}.Arn}}").as_str()),
            "{id} on the dashboard"
        );
    }
}

#[test]
fn every_function_deploys_through_its_live_alias_and_rolls_back_on_the_alarms() {
    // GIVEN the template
    let t = template();
    let globals = &t["Globals"]["Function"];
    // THEN every function publishes a version behind the `live` alias, which SAM points the API
    // routes, the queue's event source and the schedules at, and moves it through CodeDeploy
    assert_eq!(globals["AutoPublishAlias"], "live");
    let preference = &globals["DeploymentPreference"];
    assert_eq!(
        preference["Type"],
        serde_json::json!({"Ref": "DeploymentType"})
    );
    let deployment_type = &t["Parameters"]["DeploymentType"];
    assert_eq!(deployment_type["Default"], "AllAtOnce");
    assert!(deployment_type["AllowedValues"]
        .as_array()
        .unwrap()
        .contains(&Value::from("Canary10Percent5Minutes")));
    // AND a deployment rolls back on API 5xx answers and on the payment alarms
    let global_alarms: BTreeSet<String> = preference["Alarms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["Ref"].as_str().expect("an alarm of the stack").to_owned())
        .collect();
    let alarm_of_metric = |metric: &str| -> String {
        of_type(&t, "AWS::CloudWatch::Alarm")
            .into_iter()
            .find(|(_, a)| a["Properties"]["MetricName"] == metric)
            .unwrap_or_else(|| panic!("an alarm on {metric}"))
            .0
            .clone()
    };
    for metric in [
        "5xx",
        "StuckPayments",
        "LateDuplicateCharges",
        "PspCredentialRefusals",
        "PspAnswersUntrusted",
        "WebhookMismatches",
        "WebhookSignatureFailures",
    ] {
        assert!(global_alarms.contains(&alarm_of_metric(metric)), "{metric}");
    }
    // AND on the function's own errors; no function opts out
    for (name, function) in of_type(&t, "AWS::Serverless::Function") {
        let props = &function["Properties"];
        assert!(props["AutoPublishAlias"].is_null(), "{name}");
        assert!(props["DeploymentPreference"]["Type"].is_null(), "{name}");
        assert!(props["DeploymentPreference"]["Enabled"].is_null(), "{name}");
        let own = alarm_on(
            &t,
            "AWS/Lambda",
            "Errors",
            &serde_json::json!({"Name": "FunctionName", "Value": {"Ref": name}}),
        );
        assert!(
            props["DeploymentPreference"]["Alarms"]
                .as_array()
                .unwrap_or_else(|| panic!("{name}: its own rollback alarms"))
                .contains(&serde_json::json!({"Ref": own})),
            "{name} rolls back on {own}"
        );
    }
    // AND production deploys as a canary, staging and the default stack at once
    let samconfig = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/samconfig.toml"),
    )
    .expect("infra/samconfig.toml");
    let overrides = |env: &str| -> String {
        let section = samconfig
            .split(&format!("[{env}.deploy.parameters]"))
            .nth(1)
            .unwrap_or_else(|| panic!("[{env}.deploy.parameters]"));
        let section = section.split("\n[").next().unwrap();
        section
            .lines()
            .find_map(|l| l.strip_prefix("parameter_overrides = "))
            .unwrap_or("")
            .to_owned()
    };
    assert!(overrides("prod").contains("DeploymentType=Canary10Percent5Minutes"));
    assert!(overrides("staging").contains("DeploymentType=AllAtOnce"));
    assert!(!overrides("default").contains("DeploymentType"));
}

#[test]
fn the_local_env_file_sets_every_variable_the_template_gives_a_function() {
    // GIVEN infra/env.json, the environment `sam local invoke --env-vars` and docs/deploy.md's
    // `cargo lambda watch` read, and the template
    let t = template();
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/env.json"))
            .expect("infra/env.json");
    let env: Value = serde_json::from_str(&text).expect("env.json is JSON");
    let local = env["Parameters"]
        .as_object()
        .expect("Parameters for every function");
    // THEN every variable the template sets (globally or per function) has a local value
    let mut declared = BTreeSet::new();
    for vars in std::iter::once(&t["Globals"]["Function"]["Environment"]["Variables"]).chain(
        of_type(&t, "AWS::Serverless::Function")
            .into_iter()
            .map(|(_, f)| &f["Properties"]["Environment"]["Variables"]),
    ) {
        if let Some(vars) = vars.as_object() {
            declared.extend(vars.keys().cloned());
        }
    }
    for var in &declared {
        assert!(local.contains_key(var), "env.json lacks {var}");
    }
    // AND locally nothing reads a real secret: the PSP is the fake one, its key the fake's
    assert_eq!(local["PSP_SECRET_ARN"], "");
    assert_eq!(local["PSP_WEBHOOK_SECRET_ARN"], "");
    assert!(local["PSP_API_BASE"]
        .as_str()
        .unwrap()
        .starts_with("http://127.0.0.1:"));
    assert_eq!(local["STRIPE_API_KEY"], payonce_fake_psp::DEFAULT_API_KEY);
    for endpoint in ["AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS"] {
        assert!(local[endpoint]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:"));
    }
}

/// The README's diagram names every function the template deploys, by its binary, and no other.
#[test]
fn the_readme_diagram_names_every_function_and_no_other() {
    let t = template();
    let deployed: BTreeSet<String> = of_type(&t, "AWS::Serverless::Function")
        .into_iter()
        .map(|(name, f)| {
            f["Metadata"]["BuildProperties"]["Binary"]
                .as_str()
                .unwrap_or_else(|| panic!("{name} names its binary"))
                .to_owned()
        })
        .collect();
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("README.md");
    let diagram = readme
        .split("```mermaid")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("README has a mermaid diagram");
    // Nodes are `id[label]`; a function's label is its binary's name.
    let labels: BTreeSet<String> = diagram
        .split('[')
        .skip(1)
        .filter_map(|rest| rest.split(']').next())
        .map(|label| label.trim_matches(|c| c == '[' || c == '(').to_owned())
        .collect();
    let named: BTreeSet<String> = labels
        .iter()
        .filter(|label| {
            !label.is_empty() && label.chars().all(|c| c.is_ascii_lowercase() || c == '-')
        })
        .cloned()
        .collect();
    assert_eq!(named, deployed, "the diagram's function nodes: {labels:?}");
}
