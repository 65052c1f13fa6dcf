// Unit tests of payonce-keys.js in Node: a memory Storage and a scripted send() stand in for
// sessionStorage and the API, and sleep() is recorded instead of waited.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  classify,
  createKeyManager,
  isStoredEntry,
  parseRetryAfter,
  sha256Hex,
  snapshotId,
  UnresolvedAttemptError,
} from "../payonce-keys.js";

class MemoryStorage {
  #items = new Map();
  failWrites = false;
  get length() {
    return this.#items.size;
  }
  key(i) {
    return [...this.#items.keys()][i] ?? null;
  }
  getItem(name) {
    return this.#items.has(name) ? this.#items.get(name) : null;
  }
  setItem(name, value) {
    if (this.failWrites) throw new Error("QuotaExceededError");
    this.#items.set(name, String(value));
  }
  removeItem(name) {
    this.#items.delete(name);
  }
  dump() {
    return Object.fromEntries(this.#items);
  }
}

const json = (status, body, headers = {}) =>
  new Response(body === undefined ? null : JSON.stringify(body), {
    status,
    headers: { "content-type": status >= 400 ? "application/problem+json" : "application/json", ...headers },
  });
const paid = (extra = {}) => json(201, { payment_id: "pay_1", status: "succeeded", amount: 3000, currency: "jpy" }, extra);
const problem = (status, type, headers = {}, extra = {}) =>
  json(status, { type: `/problems/${type}`, title: type, status, ...extra }, headers);

/** A scripted server: each call takes the next answer (a Response, an Error to throw, or a function). */
function server(...answers) {
  const calls = [];
  const send = async (key, snapshot, init) => {
    calls.push({ key, snapshot: { ...snapshot }, signal: init?.signal });
    const next = answers.length > 1 ? answers.shift() : answers[0];
    const value = typeof next === "function" ? await next(key, snapshot, init) : next;
    if (value instanceof Error) throw value;
    return value instanceof Response ? value.clone() : value;
  };
  return { send, calls };
}

function setup(overrides = {}) {
  const storage = overrides.storage ?? new MemoryStorage();
  const sleeps = [];
  const events = [];
  let uuid = 0;
  const manager = createKeyManager({
    storage,
    backoff: { initialMs: 100, maxMs: 800, factor: 2, jitter: 0 },
    sleep: async (ms) => {
      sleeps.push(ms);
    },
    randomUUID: () => `00000000-0000-4000-8000-${String(++uuid).padStart(12, "0")}`,
    onStatus: (event) => events.push(event.phase),
    ...overrides,
  });
  return { manager, storage, sleeps, events };
}

const snap = (version = 1, pm = "pm_card_visa", order = "ord_1") => ({
  order_id: order,
  order_version: version,
  payment_method: pm,
});

function assertOnlyKeys(storage) {
  for (const [name, value] of Object.entries(storage.dump())) {
    if (!name.startsWith("payonce:")) continue;
    assert.match(name, /^payonce:[0-9a-f]{32}$/);
    assert.ok(isStoredEntry(JSON.parse(value)), `unexpected stored value ${value}`);
    assert.doesNotMatch(value, /ord_|pm_|3000/);
  }
}

test("sha256Hex matches node:crypto, including multi-block and non-ASCII input", () => {
  for (const text of ["", "abc", "a".repeat(55), "a".repeat(56), "a".repeat(64), "é✓🎉".repeat(40)]) {
    assert.equal(sha256Hex(text), createHash("sha256").update(text, "utf8").digest("hex"));
  }
});

test("snapshot ids differ by every field and are stable", () => {
  const ids = new Set([snapshotId(snap(1)), snapshotId(snap(2)), snapshotId(snap(1, "pm_card_mastercard")), snapshotId(snap(1, "pm_card_visa", "ord_2"))]);
  assert.equal(ids.size, 4);
  assert.equal(snapshotId(snap(1)), snapshotId({ payment_method: "pm_card_visa", order_version: 1, order_id: "ord_1" }));
  assert.throws(() => snapshotId({ order_id: "o", order_version: "1", payment_method: "pm" }), TypeError);
});

test("a new snapshot gets a UUID stored before the request leaves; paid clears it", async () => {
  const { manager, storage, events } = setup({ randomUUID: () => crypto.randomUUID() });
  let storedWhenSent = null;
  const { send, calls } = server(() => {
    storedWhenSent = manager.peek(snap());
    assertOnlyKeys(storage);
    return paid();
  });
  const outcome = await manager.pay(snap(), send);
  assert.equal(outcome.kind, "paid");
  assert.equal(outcome.final, true);
  assert.equal(calls.length, 1);
  assert.match(calls[0].key, /^[0-9a-f-]{36}$/);
  assert.equal(storedWhenSent, calls[0].key);
  assert.deepEqual(calls[0].snapshot, snap());
  assert.equal(manager.peek(snap()), null);
  assert.deepEqual(storage.dump(), {});
  assert.deepEqual(events, ["processing", "done"]);
});

test("double pay() of one snapshot sends one request and shares the outcome", async () => {
  const { manager } = setup();
  let release;
  const { send, calls } = server(() => new Promise((resolve) => (release = () => resolve(paid()))));
  const first = manager.pay(snap(), send);
  const second = manager.pay(snap(), send);
  assert.equal(first, second);
  assert.equal(manager.inFlight("ord_1"), true);
  const other = await manager.pay(snap(1, "pm_card_mastercard"), send);
  assert.equal(other.kind, "busy");
  await new Promise((r) => setTimeout(r, 0));
  release();
  assert.equal((await first).kind, "paid");
  assert.equal(calls.length, 1);
  assert.equal(manager.inFlight("ord_1"), false);
});

test("network errors, 5xx, timeouts, 409 in-use and 202 retry with the same key", async () => {
  const { manager, sleeps, events } = setup({ fetchTimeoutMs: 20 });
  const { send, calls } = server(
    new TypeError("Failed to fetch"),
    problem(503, "psp-unavailable", { "retry-after": "1" }),
    json(500, { message: "Internal Server Error" }),
    () => new Promise(() => {}), // never answers: the 20 ms timeout fires
    problem(409, "idempotency-key-in-use", { "retry-after": "2" }),
    json(202, { payment_id: "pay_1", status: "processing" }, { "retry-after": "3" }),
    paid({ "idempotent-replayed": "true" }),
  );
  const outcome = await manager.pay(snap(), send);
  assert.equal(outcome.kind, "paid");
  assert.equal(outcome.replayed, true);
  assert.equal(calls.length, 7);
  assert.equal(new Set(calls.map((c) => c.key)).size, 1);
  assert.equal(calls[3].signal.aborted, true, "the timed-out request was aborted");
  // backoff 100·2^n where the server gave no Retry-After; Retry-After otherwise
  assert.deepEqual(sleeps, [100, 1000, 400, 800, 2000, 3000]);
  assert.equal(events[0], "processing");
  assert.ok(events.includes("checking"));
  assert.equal(manager.peek(snap()), null);
});

test("decline clears the key; the next payment method gets a new key", async () => {
  const { manager, storage } = setup();
  const { send, calls } = server(
    problem(402, "card-declined", {}, { decline_code: "generic_decline" }),
    paid(),
  );
  const declined = await manager.pay(snap(1, "pm_card_visa_chargeDeclined"), send);
  assert.equal(declined.kind, "declined");
  assert.equal(declined.body.decline_code, "generic_decline");
  assert.deepEqual(storage.dump(), {});
  const ok = await manager.pay(snap(1, "pm_card_visa"), send);
  assert.equal(ok.kind, "paid");
  assert.notEqual(calls[0].key, calls[1].key);
});

test("refusals that store nothing (already paid, in progress, stale, mismatch) are final", async () => {
  for (const [status, type, kind] of [
    [409, "order-already-paid", "already-paid"],
    [409, "payment-in-progress", "in-progress"],
    [409, "order-version-mismatch", "stale"],
    [422, "idempotency-key-mismatch", "mismatch"],
    [402, "payment-failed", "failed"],
    [402, "payment-method-rejected", "declined"],
  ]) {
    const { manager, storage } = setup();
    const { send } = server(problem(status, type));
    const outcome = await manager.pay(snap(), send);
    assert.equal(outcome.kind, kind, type);
    assert.equal(outcome.final, true);
    assert.deepEqual(storage.dump(), {}, type);
  }
});

test("still unknown after maxWaitMs: pending, key kept, the next pay() reuses it", async () => {
  let clock = 0;
  const { manager } = setup({
    maxWaitMs: 5000,
    now: () => clock,
    sleep: async (ms) => {
      clock += ms;
    },
  });
  const { send, calls } = server(problem(503, "psp-unavailable", { "retry-after": "2" }));
  const outcome = await manager.pay(snap(), send);
  assert.equal(outcome.kind, "pending");
  assert.equal(outcome.final, false);
  assert.equal(calls.length, 3); // t=0, 2 s, 4 s; the next wait would pass 5 s
  const key = manager.peek(snap());
  assert.equal(key, calls[0].key);
  const { send: send2, calls: calls2 } = server(paid());
  assert.equal((await manager.pay(snap(), send2)).kind, "paid");
  assert.equal(calls2[0].key, key);
});

test("401 is not final: the key is kept for a retry with a fresh token", async () => {
  const { manager } = setup();
  const { send, calls } = server(json(401, { message: "Unauthorized" }));
  const outcome = await manager.pay(snap(), send);
  assert.equal(outcome.kind, "unauthorized");
  assert.equal(manager.peek(snap()), calls[0].key);
});

test("another snapshot while unresolved: the old attempt is resolved first (declined → new key)", async () => {
  const { manager, storage } = setup({ maxWaitMs: 0 });
  const first = server(new TypeError("Failed to fetch"));
  assert.equal((await manager.pay(snap(1), first.send)).kind, "pending");
  const oldKey = first.calls[0].key;
  assert.throws(() => manager.keyFor(snap(2)), UnresolvedAttemptError);

  const { send, calls } = server(problem(409, "order-version-mismatch"), paid());
  const outcome = await manager.pay(snap(2), send);
  assert.equal(outcome.kind, "paid");
  assert.deepEqual(calls[0], { key: oldKey, snapshot: snap(1), signal: calls[0].signal });
  assert.notEqual(calls[1].key, oldKey);
  assert.deepEqual(calls[1].snapshot, snap(2));
  assert.deepEqual(storage.dump(), {});
});

test("another snapshot while unresolved: an old attempt that paid ends it, nothing new is sent", async () => {
  const { manager, storage } = setup({ maxWaitMs: 0 });
  await manager.pay(snap(1), server(json(202, { status: "processing" })).send);
  const { send, calls } = server(paid({ "idempotent-replayed": "true" }));
  const outcome = await manager.pay(snap(1, "pm_card_mastercard"), send);
  assert.equal(outcome.kind, "paid");
  assert.deepEqual(outcome.snapshot, snap(1));
  assert.equal(calls.length, 1);
  assert.deepEqual(storage.dump(), {});
});

test("another snapshot while unresolved: still unknown → refused, the old key stays", async () => {
  const { manager, storage } = setup({ maxWaitMs: 0 });
  await manager.pay(snap(1), server(json(202, { status: "processing" })).send);
  const before = storage.dump();
  const { send, calls } = server(problem(409, "idempotency-key-in-use", { "retry-after": "1" }));
  const outcome = await manager.pay(snap(2), send);
  assert.equal(outcome.kind, "unresolved");
  assert.equal(calls.length, 1);
  assert.deepEqual(calls[0].snapshot, snap(1));
  assert.deepEqual(storage.dump(), before);
});

test("resolving with a send() that ignores its snapshot (422 on the old key) keeps the old key", async () => {
  const { manager, storage } = setup({ maxWaitMs: 0 });
  await manager.pay(snap(1), server(new TypeError("Failed to fetch")).send);
  const before = storage.dump();
  const { send, calls } = server(problem(422, "idempotency-key-mismatch"), paid());
  const outcome = await manager.pay(snap(2), send);
  assert.equal(outcome.kind, "unresolved");
  assert.equal(outcome.previous.kind, "mismatch");
  assert.equal(calls.length, 1);
  assert.deepEqual(storage.dump(), before);
});

test("after a reload the old snapshot is unknown until recover() finds it among candidates", async () => {
  const storage = new MemoryStorage();
  const tab = setup({ storage, maxWaitMs: 0 });
  await tab.manager.pay(snap(1), server(new TypeError("Failed to fetch")).send);
  const key = tab.manager.peek(snap(1));

  const reloaded = setup({ storage });
  assert.equal(reloaded.manager.unresolved("ord_1").snapshot, null);
  const refused = server(paid());
  assert.equal((await reloaded.manager.pay(snap(2), refused.send)).kind, "unresolved");
  assert.equal(refused.calls.length, 0, "nothing is sent while the old attempt is unknown");

  const candidates = [2, 1].flatMap((v) => ["pm_card_mastercard", "pm_card_visa"].map((pm) => snap(v, pm)));
  assert.deepEqual(reloaded.manager.recover("ord_1", candidates), snap(1));
  const { send, calls } = server(paid({ "idempotent-replayed": "true" }));
  const outcome = await reloaded.manager.pay(snap(1), send);
  assert.equal(outcome.kind, "paid");
  assert.equal(calls[0].key, key, "the same key after the reload");
});

test("keyFor and settle: same snapshot same key; only final outcomes clear", () => {
  const { manager, storage } = setup();
  const key = manager.keyFor(snap());
  assert.equal(manager.keyFor(snap()), key);
  for (const kind of ["pending", "unauthorized", "cancelled", "busy", "error"]) {
    assert.equal(manager.settle(snap(), { kind }), false, kind);
    assert.equal(manager.peek(snap()), key, kind);
  }
  assert.equal(manager.settle(snap(2), { kind: "paid", final: true }), false, "another snapshot's key is not touched");
  assert.equal(manager.settle(snap(), { kind: "declined" }), true);
  assert.deepEqual(storage.dump(), {});
  assert.notEqual(manager.keyFor(snap()), key);
});

test("clearAll (logout) removes every key of the namespace and cancels a running pay()", async () => {
  const { manager, storage } = setup();
  storage.setItem("other-app", "kept");
  manager.keyFor(snap(1, "pm_card_visa", "ord_a"));
  manager.keyFor(snap(1, "pm_card_visa", "ord_b"));
  const { send, calls } = server((_key, _snapshot, { signal }) =>
    new Promise((_, reject) => signal.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError")))),
  );
  const running = manager.pay(snap(1, "pm_card_visa", "ord_c"), send);
  await new Promise((r) => setTimeout(r, 0));
  assertOnlyKeys(storage);
  assert.equal(Object.keys(storage.dump()).length, 4);
  assert.equal(manager.clearAll(), 3);
  const outcome = await running;
  assert.equal(outcome.kind, "cancelled");
  assert.equal(calls.length, 1);
  assert.deepEqual(storage.dump(), { "other-app": "kept" });
});

test("when sessionStorage refuses the key, nothing is sent", async () => {
  const storage = new MemoryStorage();
  storage.failWrites = true;
  const { manager } = setup({ storage });
  const { send, calls } = server(paid());
  const outcome = await manager.pay(snap(), send);
  assert.equal(outcome.kind, "error");
  assert.equal(calls.length, 0);
});

test("classify and parseRetryAfter", () => {
  assert.deepEqual(classify(201, { status: "succeeded" }), { kind: "paid", final: true });
  assert.equal(classify(202, { status: "processing" }, 2000).retryAfterMs, 2000);
  assert.equal(classify(409, { type: "/problems/idempotency-key-in-use" }).retry, true);
  assert.equal(classify(409, { type: "/problems/something-new" }).retry, true);
  assert.equal(classify(503, { type: "/problems/psp-unavailable" }).retry, true);
  assert.equal(classify(504, null).retry, true);
  assert.equal(classify(429, null).retry, true);
  assert.equal(classify(400, { type: "/problems/idempotency-key-invalid" }).kind, "rejected");
  assert.equal(parseRetryAfter("3"), 3000);
  assert.equal(parseRetryAfter(null), null);
  assert.equal(parseRetryAfter(new Date(10_000).toUTCString(), 4_000), 6_000);
  assert.equal(parseRetryAfter("soon"), null);
});

// ---------------------------------------------------------------------------------------------
// Customer action (3-D Secure) and manual capture

const actionSnap = () => ({ ...snap(), return_url: "https://shop.example/checkout/return", capture: "manual" });
const waiting = () =>
  json(202, {
    payment_id: "pay_1",
    status: "requires_action",
    next_action: { type: "redirect", url: "https://psp.example/authenticate/pi_1", expires_at: 1 },
  }, { "retry-after": "2" });
const authorized = () => json(201, { payment_id: "pay_1", status: "authorized", amount_capturable: 3000 });

test("the optional fields change a snapshot's id only when given", () => {
  const plain = snapshotId(snap());
  assert.equal(
    plain,
    sha256Hex(JSON.stringify(["payonce/snapshot/v1", "ord_1", 1, "pm_card_visa"])),
    "a three-field snapshot keeps the id it always had",
  );
  assert.notEqual(snapshotId({ ...snap(), return_url: "https://shop.example/r" }), plain);
  assert.notEqual(snapshotId({ ...snap(), capture: "manual" }), plain);
  assert.throws(() => snapshotId({ ...snap(), capture: "later" }), TypeError);
  assert.throws(() => snapshotId({ ...snap(), return_url: "" }), TypeError);
});

test("classify: requires_action is handed over, authorized and order-already-authorized are final", () => {
  const action = { type: "redirect", url: "https://psp.example/a", expires_at: 1 };
  assert.deepEqual(classify(202, { status: "requires_action", next_action: action }, 2000), {
    kind: "requires-action",
    final: false,
    next_action: action,
    retryAfterMs: 2000,
  });
  // A requires_action without a redirect this client can follow is asked again, as processing.
  assert.equal(classify(202, { status: "requires_action" }).retry, true);
  assert.deepEqual(classify(201, { status: "authorized" }), { kind: "authorized", final: true });
  assert.equal(classify(409, { type: "/problems/order-already-authorized" }).kind, "already-authorized");
  assert.equal(classify(409, { type: "/problems/order-already-authorized" }).final, true);
  assert.equal(classify(402, { type: "/problems/authentication-failed" }).kind, "failed");
});

test("requires_action keeps the key, hands the redirect over once, and the return page resumes with it", async () => {
  const actions = [];
  const { manager, storage, sleeps } = setup({ onAction: (action) => actions.push(action.url) });
  const first = server(waiting());
  // WHEN the provider asks for 3-D Secure
  const outcome = await manager.pay(actionSnap(), first.send);
  // THEN one request, the redirect handed over, the key kept for the return page
  assert.equal(outcome.kind, "requires-action");
  assert.equal(outcome.final, false);
  assert.deepEqual(actions, ["https://psp.example/authenticate/pi_1"]);
  assert.equal(first.calls.length, 1);
  const key = first.calls[0].key;
  assert.equal(manager.peek(actionSnap()), key);
  assertOnlyKeys(storage);

  // WHEN the return page resumes while the provider's word is still on its way
  const back = server(waiting(), waiting(), paid());
  const resumed = await manager.pay(actionSnap(), back.send, { afterAction: true });
  // THEN it waits (never redirects again) and asks under the same key until paid
  assert.equal(resumed.kind, "paid");
  assert.deepEqual(back.calls.map((c) => c.key), [key, key, key]);
  assert.deepEqual(back.calls[0].snapshot, actionSnap());
  assert.deepEqual(actions.length, 1, "no second redirect");
  assert.deepEqual(sleeps, [2000, 2000]);
  assert.equal(manager.peek(actionSnap()), null, "the key is cleared once paid");
});

test("back without acting: redirect false hands nothing over; once canceled, the key settles and a new card pays", async () => {
  const actions = [];
  const { manager } = setup({ onAction: (action) => actions.push(action.url) });
  const first = server(waiting());
  await manager.pay(actionSnap(), first.send);
  const key = first.calls[0].key;
  assert.equal(actions.length, 1);

  // WHEN the customer comes back to the checkout without acting
  const again = server(waiting());
  const shown = await manager.pay(actionSnap(), again.send, { redirect: false });
  // THEN the same key is asked once, the outcome returned, nothing handed over again
  assert.equal(shown.kind, "requires-action");
  assert.deepEqual(again.calls.map((c) => c.key), [key]);
  assert.equal(actions.length, 1, "no second redirect");
  assert.equal(manager.peek(actionSnap()), key, "the key stays until the attempt is settled");

  // WHEN the page canceled the payment and another card pays: the old key is asked first,
  // answers the cancel (402: nothing charged), and the new snapshot gets a new key
  const other = { ...actionSnap(), payment_method: "pm_card_mastercard" };
  const canceled = problem(402, "payment-failed");
  const next = server(canceled, paid());
  const outcome = await manager.pay(other, next.send);
  assert.equal(outcome.kind, "paid");
  assert.equal(next.calls[0].key, key);
  assert.notEqual(next.calls[1].key, key);
  assert.equal(manager.peek(actionSnap()), null);
  assert.equal(manager.peek(other), null);
});

test("an authorization is final: the key is cleared", async () => {
  const { manager } = setup();
  const { send, calls } = server(authorized());
  const outcome = await manager.pay(actionSnap(), send);
  assert.equal(outcome.kind, "authorized");
  assert.equal(outcome.final, true);
  assert.equal(calls.length, 1);
  assert.equal(manager.peek(actionSnap()), null);
});
