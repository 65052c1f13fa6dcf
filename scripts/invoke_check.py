#!/usr/bin/env python3
"""Invokes every Lambda binary through `cargo lambda watch` + `cargo lambda invoke` with its
sample event from infra/events/, against DynamoDB Local, moto's SQS and the fake PSP, and checks
each response. Run by scripts/test (which exports the emulator endpoints) after the Rust tests.

Placeholders in the samples (`ord_example`, `pay_example`, the webhook signature) are replaced
with the ids this run created and a fresh signature, since a static signature is stale by design.
"""
import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import boto3

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVENTS = os.path.join(ROOT, "infra", "events")
WEBHOOK_SECRET = "whsec_invoke_check"
FAKE_API_KEY = "sk_test_payonce_fake"
failures = []
passes = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(name, condition, detail):
    print(("ok   " if condition else "FAIL ") + name + ("" if condition else f": {detail}"))
    (passes if condition else failures).append(name)


def wait_port(port, what, proc, seconds=600):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited early with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    sys.exit(f"{what} did not listen on {port}")


def main():
    ddb_endpoint = os.environ["PAYONCE_TEST_DYNAMODB_ENDPOINT"]
    sqs_endpoint = os.environ["PAYONCE_TEST_SQS_ENDPOINT"]
    suffix = uuid.uuid4().hex[:8]
    tables = {"idempotency": f"invoke-idem-{suffix}", "payments": f"invoke-pay-{suffix}"}
    ddb = boto3.client("dynamodb", endpoint_url=ddb_endpoint, region_name="us-east-1")
    ddb.create_table(TableName=tables["idempotency"], BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                     KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}])
    ddb.create_table(TableName=tables["payments"], BillingMode="PAY_PER_REQUEST",
                     AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                           {"AttributeName": "inflight", "AttributeType": "S"},
                                           {"AttributeName": "check_at_ms", "AttributeType": "N"}],
                     KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                     GlobalSecondaryIndexes=[{"IndexName": "inflight",
                                              "KeySchema": [{"AttributeName": "inflight", "KeyType": "HASH"},
                                                            {"AttributeName": "check_at_ms", "KeyType": "RANGE"}],
                                              "Projection": {"ProjectionType": "KEYS_ONLY"}}])
    # The examples' own tables (examples/*/template.yaml): things, shipments, accounts.
    example_tables = {"things": f"invoke-things-{suffix}", "shipments": f"invoke-ship-{suffix}",
                      "accounts": f"invoke-accounts-{suffix}"}
    for table in example_tables.values():
        ddb.create_table(TableName=table, BillingMode="PAY_PER_REQUEST",
                         AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                         KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}])
    sqs = boto3.client("sqs", endpoint_url=sqs_endpoint, region_name="us-east-1")
    queue_url = sqs.create_queue(QueueName=f"invoke-webhooks-{suffix}")["QueueUrl"]

    children = []
    try:
        psp_port = free_port()
        fake = subprocess.Popen([os.path.join(ROOT, "target", "debug", "payonce-fake-psp"), "--addr", f"127.0.0.1:{psp_port}",
                                 "--api-key", FAKE_API_KEY], stdout=subprocess.DEVNULL, start_new_session=True)
        children.append(fake)
        wait_port(psp_port, "the fake PSP", fake, 30)

        # Build the functions first: `cargo lambda watch` compiles on the first invoke, and that
        # time would count against the invocation's deadline. It builds from the workspace root,
        # so the build here selects the same packages (the default members) and so the same
        # features, or the watch would compile everything again.
        subprocess.run(["cargo", "build", "--locked", "--bins"], cwd=ROOT, check=True)
        invoke_port = free_port()
        env = dict(os.environ,
                   IDEMPOTENCY_TABLE=tables["idempotency"], PAYMENTS_TABLE=tables["payments"],
                   THINGS_TABLE=example_tables["things"], SHIPMENTS_TABLE=example_tables["shipments"],
                   ACCOUNTS_TABLE=example_tables["accounts"],
                   AWS_ENDPOINT_URL_DYNAMODB=ddb_endpoint, AWS_ENDPOINT_URL_SQS=sqs_endpoint,
                   STRIPE_API_BASE=f"http://127.0.0.1:{psp_port}", STRIPE_API_KEY=FAKE_API_KEY,
                   STRIPE_WEBHOOK_SECRETS=WEBHOOK_SECRET, WEBHOOK_QUEUE_URL=queue_url,
                   RECONCILE_MIN_AGE_MS="0", RUST_LOG="warn,payonce_charge=debug,payonce_refund=debug")
        log = open(os.path.join(ROOT, ".cache", "logs", "cargo-lambda-watch.log"), "w")
        watch = subprocess.Popen(["cargo", "lambda", "watch", "--invoke-address", "127.0.0.1", "--invoke-port", str(invoke_port),
                                  "--ignore-changes", "--timeout", "60"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        children.append(watch)
        wait_port(invoke_port, "cargo lambda watch", watch, 120)

        def invoke(function, sample, patch=None):
            with open(os.path.join(EVENTS, sample)) as f:  # an absolute path is kept as it is
                text = f.read()
            event = json.loads(text)
            if patch:
                event = patch(event)
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as tmp:
                json.dump(event, tmp)
            out = subprocess.run(["cargo", "lambda", "invoke", function, "--data-file", tmp.name, "--invoke-address", "127.0.0.1",
                                  "--invoke-port", str(invoke_port), "--output-format", "json"],
                                 cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
            os.unlink(tmp.name)
            if out.returncode != 0:
                check(f"{function} {sample} invoked", False, out.stderr[-2000:])
                return {}
            return json.loads(out.stdout)

        def with_ids(order_id=None, payment_id=None):
            def patch(event):
                text = json.dumps(event)
                if order_id:
                    text = text.replace("ord_example", order_id)
                if payment_id:
                    text = text.replace("pay_example", payment_id)
                return json.loads(text)
            return patch

        def body(response):
            return json.loads(response.get("body") or "null")

        r = invoke("orders", "orders-create.json")
        order = body(r) or {}
        check("orders: POST /orders -> 201", r.get("statusCode") == 201 and order.get("version") == 1 and order.get("amount") == 3000, r)
        order_id = order.get("order_id", "missing")
        r = invoke("orders", "orders-create.json")
        check("orders: same Idempotency-Key -> replayed", r.get("statusCode") == 201 and (body(r) or {}).get("order_id") == order_id
              and r.get("headers", {}).get("idempotent-replayed") == "true", r)
        r = invoke("orders", "orders-get.json", with_ids(order_id))
        check("orders: GET /orders/{id} -> 200", r.get("statusCode") == 200 and (body(r) or {}).get("order_id") == order_id, r)
        r = invoke("orders", "orders-patch.json", with_ids(order_id))
        check("orders: PATCH -> version 2", r.get("statusCode") == 200 and (body(r) or {}).get("version") == 2
              and (body(r) or {}).get("amount") == 4500, r)

        r = invoke("charge", "payments-create.json", with_ids(order_id))
        payment = body(r) or {}
        check("charge: POST /payments -> 201 succeeded", r.get("statusCode") == 201 and payment.get("status") == "succeeded"
              and payment.get("amount") == 4500, r)
        payment_id = payment.get("payment_id", "missing")
        r = invoke("charge", "payments-create.json", with_ids(order_id))
        check("charge: replay -> 201 Idempotent-Replayed", r.get("statusCode") == 201
              and r.get("headers", {}).get("idempotent-replayed") == "true", r)
        r = invoke("charge", "payments-get.json", with_ids(payment_id=payment_id))
        check("charge: GET /payments/{id} -> 200", r.get("statusCode") == 200 and (body(r) or {}).get("payment_id") == payment_id, r)

        # Refunds: the sample is a staff token's event (API Gateway put the `payments:refund`
        # scope in requestContext.authorizer.jwt.scopes).
        r = invoke("refund", "refunds-create.json", with_ids(payment_id=payment_id))
        refund = body(r) or {}
        check("refund: POST /payments/{id}/refunds -> 201 succeeded", r.get("statusCode") == 201
              and refund.get("status") == "succeeded" and refund.get("amount") == 1500
              and refund.get("payment_id") == payment_id and (refund.get("provider_refund_id") or "").startswith("re_")
              and "x-request-id" in r.get("headers", {}), r)
        r = invoke("refund", "refunds-create.json", with_ids(payment_id=payment_id))
        check("refund: replay -> 201 Idempotent-Replayed", r.get("statusCode") == 201
              and (body(r) or {}).get("refund_id") == refund.get("refund_id")
              and r.get("headers", {}).get("idempotent-replayed") == "true", r)

        def without_scope(event):
            event = with_ids(payment_id=payment_id)(event)
            event["requestContext"]["authorizer"]["jwt"]["scopes"] = None
            del event["requestContext"]["authorizer"]["jwt"]["claims"]["scope"]
            return event
        r = invoke("refund", "refunds-create.json", without_scope)
        check("refund: a token without payments:refund -> 403 insufficient-scope", r.get("statusCode") == 403
              and (body(r) or {}).get("type") == "/problems/insufficient-scope", r)

        def staff_get(event):
            event = with_ids(payment_id=payment_id)(event)
            event["requestContext"]["authorizer"]["jwt"]["claims"]["sub"] = "staff_example"
            event["requestContext"]["authorizer"]["jwt"]["scopes"] = ["payments:refund"]
            return event
        r = invoke("charge", "payments-get.json", staff_get)
        details = body(r) or {}
        check("charge: GET /payments/{id} with payments:refund -> partially_refunded with its refund", r.get("statusCode") == 200
              and details.get("status") == "partially_refunded" and details.get("amount_refunded") == 1500
              and [x.get("refund_id") for x in details.get("refunds", [])] == [refund.get("refund_id")], r)

        r = invoke("webhook-receiver", "webhook-stripe.json")
        check("webhook-receiver: the static sample's stale signature -> 401", r.get("statusCode") == 401, r)

        def signed(event):
            event = with_ids(payment_id=payment_id)(event)
            now = int(time.time())
            mac = hmac.new(WEBHOOK_SECRET.encode(), f"{now}.{event['body']}".encode(), hashlib.sha256).hexdigest()
            event["headers"]["stripe-signature"] = f"t={now},v1={mac}"
            return event
        r = invoke("webhook-receiver", "webhook-stripe.json", signed)
        queued = int(sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"])
                     ["Attributes"]["ApproximateNumberOfMessages"])
        check("webhook-receiver: signed event -> 200 and queued", r.get("statusCode") == 200 and queued == 1, (r, queued))

        r = invoke("webhook-processor", "webhook-processor-sqs.json", with_ids(payment_id=payment_id))
        check("webhook-processor: known payment -> no batch item failure", r.get("batchItemFailures") == [], r)
        r = invoke("webhook-processor", "webhook-processor-sqs.json")
        check("webhook-processor: unknown payment -> reported for retry",
              [f.get("itemIdentifier") for f in r.get("batchItemFailures", [])] == ["4b2c0d0e-0000-4000-8000-000000000001"], r)

        r = invoke("reconcile", "reconcile-schedule.json")
        check("reconcile: scheduled run -> report", r.get("examined") == 0 and r.get("errors") == 0, r)
        r = invoke("reconcile", "reconcile-request-sqs.json", with_ids(payment_id=payment_id))
        check("reconcile: a request for a settled payment -> already settled",
              r.get("examined") == 1 and r.get("already_settled") == 1 and r.get("errors") == 0, r)
        r = invoke("reconcile", "reconcile-request-sqs.json")
        check("reconcile: a request for an unknown payment -> skipped",
              r.get("examined") == 1 and r.get("skipped") == 1 and r.get("errors") == 0, r)
        r = invoke("cleanup", "cleanup-schedule.json")
        check("cleanup: scheduled run -> report", r.get("finished") is True and r.get("deleted_records") == 0, r)

        # The examples: payonce's layer and event wrapper in functions of their own.
        def items(table):
            return ddb.scan(TableName=table)["Items"]
        create = os.path.join(ROOT, "examples", "http-create-thing", "events", "create.json")
        r = invoke("create-thing", create)
        thing = body(r) or {}
        check("example create-thing: POST /things -> 201", r.get("statusCode") == 201 and thing.get("name") == "lamp"
              and thing.get("id", "").startswith("thing_"), r)
        r = invoke("create-thing", create)
        check("example create-thing: same key -> the same thing, Idempotent-Replayed", r.get("statusCode") == 201
              and (body(r) or {}).get("id") == thing.get("id") and r.get("headers", {}).get("idempotent-replayed") == "true", r)

        def another_name(event):
            event["body"] = json.dumps({"name": "chair"})
            return event
        r = invoke("create-thing", create, another_name)
        check("example create-thing: same key, another body -> 422", r.get("statusCode") == 422
              and (body(r) or {}).get("type") == "/problems/idempotency-key-mismatch", r)
        check("example create-thing: one thing written", len(items(example_tables["things"])) == 1,
              items(example_tables["things"]))

        shipments = os.path.join(ROOT, "examples", "sqs-consumer", "events", "shipments.json")
        r = invoke("ship-orders", shipments)
        check("example ship-orders: a batch with a duplicate -> no failure", r.get("batchItemFailures") == [], r)
        r = invoke("ship-orders", shipments)
        check("example ship-orders: redelivered -> no failure", r.get("batchItemFailures") == [], r)
        check("example ship-orders: one shipment for the order", len(items(example_tables["shipments"])) == 1,
              items(example_tables["shipments"]))

        ledger = os.path.join(ROOT, "examples", "sqs-fifo-ledger", "events", "ledger.json")
        r = invoke("apply-ledger", ledger)
        check("example apply-ledger: a FIFO batch with a duplicate entry -> no failure", r.get("batchItemFailures") == [], r)
        r = invoke("apply-ledger", ledger)
        check("example apply-ledger: redelivered -> no failure", r.get("batchItemFailures") == [], r)
        accounts = items(example_tables["accounts"])
        check("example apply-ledger: each entry once, in order",
              len(accounts) == 1 and [e["S"] for e in accounts[0]["entries"]["L"]] == ["ent_1", "ent_2"]
              and accounts[0]["balance"]["N"] == "300", accounts)
    finally:
        for child in children:
            try:
                os.killpg(child.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for child in children:
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
    print(f"{len(passes)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
