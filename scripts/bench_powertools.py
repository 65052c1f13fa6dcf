#!/usr/bin/env python3
"""The peer in scripts/bench: AWS Lambda Powertools for Python's idempotency utility with its
DynamoDB persistence layer against the same DynamoDB Local, key from the `Idempotency-Key`
header, payload validation on, no local cache (payonce has none either), wrapping a no-op
handler. Prints p50/p99 of the first call and of the replay, in milliseconds, as JSON.
"""
import json
import os
import sys
import time
import uuid

import boto3
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent,
)


class Context:
    function_name = "bench"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:bench"
    aws_request_id = "bench"

    def get_remaining_time_in_millis(self):
        return 10_000


def percentiles(samples):
    samples = sorted(samples)
    at = lambda q: samples[round((len(samples) - 1) * q)]
    return {"p50_ms": at(0.5), "p99_ms": at(0.99), "n": len(samples)}


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    endpoint = os.environ["PAYONCE_TEST_DYNAMODB_ENDPOINT"]
    client = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
    table = f"powertools-{uuid.uuid4().hex[:8]}"
    client.create_table(TableName=table, BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}])
    layer = DynamoDBPersistenceLayer(table_name=table, boto3_client=client)
    config = IdempotencyConfig(event_key_jmespath='headers."Idempotency-Key"', payload_validation_jmespath="body",
                               use_local_cache=False)

    @idempotent(config=config, persistence_store=layer)
    def handler(event, context):
        return {"ok": True}

    body = json.dumps({"order_id": "o1", "order_version": 1, "payment_method": "pm_card_visa"})
    events = [{"headers": {"Idempotency-Key": f"pt-{i}-{uuid.uuid4().hex}"}, "body": body} for i in range(n)]
    context = Context()
    warm = n // 10
    for event in events[:warm]:
        handler(event, context)
    first, replay = [], []
    for event in events[warm:]:
        started = time.perf_counter()
        handler(event, context)
        first.append((time.perf_counter() - started) * 1000)
    for event in events[warm:]:
        started = time.perf_counter()
        handler(event, context)
        replay.append((time.perf_counter() - started) * 1000)
    import aws_lambda_powertools
    print(json.dumps({"version": aws_lambda_powertools.__version__ if hasattr(aws_lambda_powertools, "__version__") else "?",
                      "first": percentiles(first), "replay": percentiles(replay)}))


if __name__ == "__main__":
    main()
