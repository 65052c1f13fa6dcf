#!/usr/bin/env python3
"""Renders scripts/bench's JSON results as docs/benchmarks.md's measured section (and prints it)."""
import datetime
import io
import json
import os
import platform
import statistics
import sys
import zipfile

out, readme = sys.argv[1], sys.argv[2]
load = lambda name: json.load(open(os.path.join(out, name)))
requests = load("requests.json")
rounds = sorted(int(name[len("latency-"):-len(".json")]) for name in os.listdir(out)
                if name.startswith("latency-") and name.endswith(".json"))
ours = [load(f"latency-{i}.json") for i in rounds]
theirs = [load(f"powertools-{i}.json") for i in rounds]
functions = ["orders", "charge", "refund", "webhook-receiver", "webhook-processor", "reconcile", "cleanup"]
cold = {fn: load(f"coldstart-{fn}.json") for fn in functions}
ARM64_DIR = sys.argv[3] if len(sys.argv) > 3 else "target/lambda-arm64"

def zipped(binary):
    """The size in MB of `binary` zipped as a Lambda package (deflate)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.write(binary, "bootstrap")
    return len(buf.getvalue()) / 1e6

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
lines = []
w = lines.append
w(f"Measured {datetime.date.today()} on {os.cpu_count()} cores ({cpu}), {platform.system()} {platform.machine()}, "
  f"DynamoDB Local 3.3.0 on loopback; release builds. Regenerate with `scripts/bench`.")
w("")
w("**DynamoDB requests and consumed capacity per operation** (capacity as DynamoDB Local reports it; "
  "transactions count double, and AWS also bills a refused conditional write, which DynamoDB Local reports as 0):")
w("")
w("| operation | requests | target | capacity units | requests by API |")
w("|---|---|---|---|---|")
targets = {"generic_first": "2", "generic_replay": "1", "charge_first": "≤ 3", "charge_first_limited": "≤ 3", "charge_replay": "1",
           "generic_inflight_duplicate": "1", "webhook_apply": "1 txn + 1 read", "webhook_confirm": "", "reconcile_per_attempt": "",
           "refund_first": "≤ 3", "refund_replay": "1", "capture_first": "≤ 3", "capture_replay": "1",
           "cancel_first": "≤ 3", "requires_action_replay": "1"}
names = {"generic_first": "generic idempotency run (first)", "generic_replay": "generic run, replay",
         "generic_inflight_duplicate": "generic run, duplicate in flight", "charge_first": "first charge (POST /payments)",
         "charge_first_limited": "first charge, attempt limits on (as deployed)",
         "charge_replay": "charge replay", "webhook_apply": "webhook that settles a payment",
         "webhook_confirm": "webhook confirming a recorded payment", "reconcile_per_attempt": "reconcile, per stuck attempt",
         "refund_first": "first refund (POST /payments/{id}/refunds)", "refund_replay": "refund replay",
         "capture_first": "capture of an authorization (POST /payments/{id}/capture)", "capture_replay": "capture replay",
         "cancel_first": "cancel of an authorization (POST /payments/{id}/cancel)",
         "requires_action_replay": "replay of a payment waiting for 3-D Secure"}
for key, label in names.items():
    r = requests[key]
    apis = ", ".join(f"{k} {v['requests']:g}" for k, v in r.get("by_operation", {}).items())
    w(f"| {label} | {r['requests']:g} | {targets[key]} | {r['capacity_units']:g} | {apis} |")

def pooled(runs, path):
    values = []
    for run in runs:
        node = run
        for part in path:
            node = node[part]
        values.append(node)
    return statistics.median(values)

w("")
w(f"**Latency of the idempotency wrapper around a no-op handler** ({len(rounds)} alternating rounds of "
  f"{ours[0]['dynamodb_local']['first']['n']} timed calls per side; each figure is the median over the rounds of "
  "that round's p50 or p99, in ms; a ratio is the median over the rounds of that round's ratio of p50s, with its "
  "range across rounds) — payonce's `Idempotency::run`, the raw-SDK floor, and Powertools for Python "
  f"{theirs[0].get('version', '')} (`@idempotent`, DynamoDB persistence layer, key from the `Idempotency-Key` header, "
  "payload validation on, no local cache), same DynamoDB Local, same run:")
w("")
w("| call | payonce p50 | payonce p99 | raw-SDK floor p50 | floor p99 | Powertools p50 | Powertools p99 | payonce / floor (target ≤ 1.1) | payonce / Powertools |")
w("|---|---|---|---|---|---|---|---|---|")
def ratio(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"
for call in ("first", "replay"):
    op50 = pooled(ours, ["dynamodb_local", call, "p50_ms"]); op99 = pooled(ours, ["dynamodb_local", call, "p99_ms"])
    fp50 = pooled(ours, ["floor", call, "p50_ms"]); fp99 = pooled(ours, ["floor", call, "p99_ms"])
    tp50 = pooled(theirs, [call, "p50_ms"]); tp99 = pooled(theirs, [call, "p99_ms"])
    to_floor = [o["dynamodb_local"][call]["p50_ms"] / o["floor"][call]["p50_ms"] for o in ours]
    to_peer = [o["dynamodb_local"][call]["p50_ms"] / t[call]["p50_ms"] for o, t in zip(ours, theirs)]
    w(f"| {call} | {op50:.2f} | {op99:.2f} | {fp50:.2f} | {fp99:.2f} | {tp50:.2f} | {tp99:.2f} | {ratio(to_floor)} | {ratio(to_peer)} |")
w("")
w("All three make the same round trips (first call: the conditional put and the completing update; replay: "
  "the conditional put alone, which returns the stored record). The floor is those requests sent with the SDK "
  "directly, the same items and conditions, no layer around them (`time_floor` in `bench/src/ops.rs`), measured "
  "in the same process and round as payonce, which of the two goes first alternating by round.")
e_first = pooled(ours, ["embedded", "first", "p50_ms"]) * 1000
e_replay = pooled(ours, ["embedded", "replay", "p50_ms"]) * 1000
w("")
w(f"The wrapper's own overhead, against the embedded store: p50 {e_first:.1f} µs first call, {e_replay:.1f} µs replay.")
w("")
w("**Cold start, memory and size per function binary** (process start to its first poll of a local "
  "Lambda Runtime API stub, credentials from env, median of 20; peak RSS at that point; release `bootstrap` zipped):")
w("")
w("| function | cold start median (ms) | target | peak RSS (MB) | target | zip x86_64 (MB) | zip arm64, as deployed (MB) | target |")
w("|---|---|---|---|---|---|---|---|")
for fn in functions:
    c = cold[fn]
    arm64 = os.path.join(ARM64_DIR, fn, "bootstrap")
    w(f"| {fn} | {c['median_ms']:.1f} | ≤ 20 | {c['peak_rss_kb'] / 1024:.1f} | ≤ 25 | {zipped(c['binary']):.2f} | {zipped(arm64):.2f} | ≤ 3 |")

# Cost: a successful payment = first charge + the webhook confirming it (on-demand, us-east-1:
# $0.625 per million write request units, $0.125 per million read request units).
READS = {"GetItem", "BatchGetItem", "Query", "Scan"}
def units_of(key):
    wru = rru = 0.0
    for api, v in requests[key]["by_operation"].items():
        if api in READS:
            rru += v["capacity_units"]
        else:
            wru += v["capacity_units"] or v["requests"]  # a refused conditional write still costs 1
    return wru, rru
def payment_units(first):
    wru = rru = 0.0
    for key in (first, "webhook_confirm"):
        a, b = units_of(key)
        wru += a; rru += b
    return wru, rru
wru, rru = payment_units("charge_first")
lwru, lrru = payment_units("charge_first_limited")
w("")
# The first charge's read of the key's payment, which does not exist yet: AWS bills it (an
# eventually consistent read of a small item, half a unit), DynamoDB Local reports nothing for it.
MISSING_READ = 0.5
def dollars(w_units, r_units):
    return w_units * 0.625 + r_units * 0.125
w(f"**Cost per 1 million successful payments** (first charge + the webhook confirming it) in DynamoDB on-demand: "
  f"{wru:g} WRU + {rru:g} RRU per payment = {wru:g} M WRU × $0.625 + {rru:g} M RRU × $0.125 = "
  f"**${dollars(wru, rru):.4g}** as DynamoDB Local counts it (us-east-1 prices; storage and TTL deletes, which are free, "
  "excluded). Both reads are eventually consistent (half a unit per item). DynamoDB Local reports no unit for the first "
  "charge's read of the key's payment (which carries its idempotency record), which does not exist yet; "
  f"**AWS bills a read of a missing item like any other**, so on AWS a payment is {wru:g} WRU + {rru + MISSING_READ:g} RRU "
  f"= **${dollars(wru, rru + MISSING_READ):.4g}** per million.")
w("")
w(f"With the attempt limits on, as the charge function is deployed (target ≤ 10 WRU): {lwru:g} WRU + {lrru:g} RRU "
  f"per payment = **${dollars(lwru, lrru):.4g}** per million (on AWS, with the missing item's read, "
  f"{lwru:g} WRU + {lrru + MISSING_READ:g} RRU = ${dollars(lwru, lrru + MISSING_READ):.4g}). The user's counter is one more small "
  "item in the begin transaction (2 WRU); the order's lives on the order item that transaction updates anyway (no unit).")

# Where the units of a successful payment go: by table or index, and which items are written how.
def merged(field):
    total = {}
    for key in ("charge_first", "webhook_confirm"):
        for name, value in requests[key].get(field, {}).items():
            total[name] = total.get(name, 0) + value
    return total
w("")
w("Where those units go, by table or index (capacity units as DynamoDB Local reports them with "
  "`ReturnConsumedCapacity = INDEXES`), and the item writes behind them (every item here is under 1 KB, so a "
  "write costs 1 WRU, or 2 inside a transaction, and each write that adds or removes an in-flight index entry "
  "costs the same again on the index):")
w("")
w("| table or index | capacity units per payment |")
w("|---|---|")
for name, value in sorted(merged("by_table").items()):
    w(f"| {name} | {value:g} |")
w("")
w("| item written | writes per payment |")
w("|---|---|")
for name, value in sorted(merged("writes_by_item").items()):
    w(f"| {name} | {value:g} |")

section = "\n".join(lines)
print(section)
text = open(readme).read()
start, end = "<!-- bench:start -->", "<!-- bench:end -->"
if start in text and end in text:
    text = text[: text.index(start) + len(start)] + "\n" + section + "\n" + text[text.index(end):]
    open(readme, "w").write(text)
