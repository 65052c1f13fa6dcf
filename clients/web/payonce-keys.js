// payonce-keys.js: the checkout key manager. A dependency-free ES module.
//
// Each payment attempt has one snapshot, {order_id, order_version, payment_method} (plus
// return_url and capture when the checkout sends them), and one Idempotency-Key. The manager keeps the key in sessionStorage, bound to the snapshot, so a
// retry, a double click or a reload re-sends the same request under the same key and the
// server answers with the stored outcome instead of charging again.
//
// What sessionStorage holds, one item per order that has an unresolved attempt:
//   name  "<namespace>:<order_ref>"   order_ref   = first 32 hex digits of SHA-256 over the order id
//   value {"key":"<uuid>","snapshot_id":"<64 hex digits>"}
//                                     snapshot_id = SHA-256 over (order_id, order_version, payment_method
//                                                   [, return_url] [, capture])
// Nothing else: no card data, no amounts, no payment method tokens, no order ids in clear.
// One item per order also means at most one unresolved key per order in a tab.
//
// The "another snapshot while unresolved" rule: pay(snapshot) for an order whose stored key
// belongs to another snapshot FIRST RESOLVES the old attempt. It re-sends the old snapshot
// under the old key (a replay: it returns the stored outcome and never charges twice) until
// the answer is final. Then:
//   - the old attempt paid: pay() returns that "paid" outcome (outcome.snapshot is the old
//     snapshot) and sends nothing for the new snapshot, because the order is paid;
//   - the old attempt ended without paying (declined, failed, refused as stale or in
//     conflict): its key is cleared and the new snapshot gets a new key;
//   - the old attempt is still unknown when the manager stops waiting (or the replay came back
//     422 idempotency-key-mismatch, which means send() ignored its snapshot argument): pay()
//     returns {kind: "unresolved"}, keeps the old key and sends nothing new.
// send(key, snapshot, {signal}) must therefore build the request from its snapshot argument.
// Re-sending the old snapshot needs the snapshot, but storage holds only its hash. The manager
// remembers every snapshot it has seen since the page loaded. After a reload, the page calls
// recover(order_id, candidates) with the snapshots it could have sent (for example every
// version of the order × every payment method); the one whose hash matches is remembered. If
// the old snapshot is unknown, pay() refuses with {kind: "unresolved"} and sends nothing.
//
// A customer action (3-D Secure): a 202 "requires_action" is not final. pay() keeps the key and
// returns {kind: "requires-action", next_action}, after handing next_action to onAction (default:
// location.assign(next_action.url), in the same tab, so sessionStorage survives the redirect).
// The provider sends the customer back to the snapshot's return_url; that page calls
// pay(snapshot, send, {afterAction: true}) with the same snapshot (recover() finds it), which
// asks again under the same key and, while the answer is still "requires_action" (the provider's
// word is on its way), waits instead of redirecting again. A customer who comes back to the
// checkout without acting (back button, a new visit) gets pay(snapshot, send, {redirect: false}):
// the "requires-action" outcome is returned and nothing is handed to onAction, so the page can
// offer to go on to the provider or to cancel the payment (POST /payments/{id}/cancel) and pay
// another way; once canceled, the key's answer is final ("failed") and a new snapshot pays.
// "authorized" (manual capture) is final.

const FINAL_KINDS = new Set([
  "paid", // 2xx, payment status "succeeded"
  "authorized", // 201, payment status "authorized": captured later by the merchant
  "declined", // 402 card-declined or payment-method-rejected
  "failed", // 402 payment-failed (or another 402), or a payment whose status is "failed"
  "already-paid", // 409 order-already-paid: the server did not store this request
  "in-progress", // 409 payment-in-progress: another key holds the order; this one was not stored
  "already-authorized", // 409 order-already-authorized: an authorized payment holds the order
  "stale", // 409 order-version-mismatch: this snapshot can never be charged
  "mismatch", // 422 idempotency-key-mismatch: the key is bound to another request
  "rejected", // any other 4xx but 401/403/408/425/429: refused, nothing stored
]);

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const HEX64_RE = /^[0-9a-f]{64}$/;

/** Thrown by keyFor() when another snapshot of the same order holds an unresolved key. */
export class UnresolvedAttemptError extends Error {
  constructor(orderId, snapshotId) {
    super(`order ${orderId} has an unresolved payment attempt for another snapshot; resolve it first`);
    this.name = "UnresolvedAttemptError";
    this.order_id = orderId;
    this.snapshot_id = snapshotId;
  }
}

// ---------------------------------------------------------------------------------------------
// SHA-256 (FIPS 180-4), synchronous so that the lookup, the new key and the write to storage all
// happen in the same task as the click, before any request can leave. The round constants are
// derived as the standard defines them (fractional parts of square and cube roots of primes).

const PRIMES = [];
for (let n = 2; PRIMES.length < 64; n++) {
  if (PRIMES.every((p) => n % p !== 0)) PRIMES.push(n);
}
const frac32 = (x) => ((x - Math.floor(x)) * 0x100000000) >>> 0;
const H0 = Uint32Array.from(PRIMES.slice(0, 8), (p) => frac32(Math.sqrt(p)));
const K = Uint32Array.from(PRIMES, (p) => frac32(Math.cbrt(p)));
const rotr = (x, n) => (x >>> n) | (x << (32 - n));

/** SHA-256 of the UTF-8 encoding of `text`, as 64 lowercase hex digits. */
export function sha256Hex(text) {
  const bytes = new TextEncoder().encode(String(text));
  const blocks = Math.ceil((bytes.length + 9) / 64);
  const data = new Uint8Array(blocks * 64);
  data.set(bytes);
  data[bytes.length] = 0x80;
  const view = new DataView(data.buffer);
  const bits = bytes.length * 8;
  view.setUint32(data.length - 8, Math.floor(bits / 0x100000000));
  view.setUint32(data.length - 4, bits >>> 0);
  const h = Uint32Array.from(H0);
  const w = new Uint32Array(64);
  for (let offset = 0; offset < data.length; offset += 64) {
    for (let i = 0; i < 16; i++) w[i] = view.getUint32(offset + i * 4);
    for (let i = 16; i < 64; i++) {
      const x = w[i - 15];
      const y = w[i - 2];
      const s0 = rotr(x, 7) ^ rotr(x, 18) ^ (x >>> 3);
      const s1 = rotr(y, 17) ^ rotr(y, 19) ^ (y >>> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    let [a, b, c, d, e, f, g, hh] = h;
    for (let i = 0; i < 64; i++) {
      const t1 = (hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i]) | 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      hh = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
  }
  return Array.from(h, (v) => v.toString(16).padStart(8, "0")).join("");
}

// ---------------------------------------------------------------------------------------------
// Snapshots

/** The snapshot in its canonical form; throws a TypeError on a malformed one. */
export function normaliseSnapshot(snapshot) {
  const { order_id, order_version, payment_method, return_url, capture } = snapshot ?? {};
  if (typeof order_id !== "string" || order_id === "") {
    throw new TypeError("snapshot.order_id must be a non-empty string");
  }
  if (!Number.isSafeInteger(order_version) || order_version < 1) {
    throw new TypeError("snapshot.order_version must be a positive integer");
  }
  if (typeof payment_method !== "string" || payment_method === "") {
    throw new TypeError("snapshot.payment_method must be a non-empty string (a PSP token)");
  }
  const s = { order_id, order_version, payment_method };
  if (return_url !== undefined) {
    if (typeof return_url !== "string" || return_url === "") {
      throw new TypeError("snapshot.return_url must be a non-empty string when given");
    }
    s.return_url = return_url;
  }
  if (capture !== undefined) {
    if (capture !== "automatic" && capture !== "manual") {
      throw new TypeError('snapshot.capture must be "automatic" or "manual" when given');
    }
    s.capture = capture;
  }
  return Object.freeze(s);
}

/** The id of a normalised snapshot: its optional fields count only when given, so a snapshot of
 * the three required fields keeps the id it always had. */
function idOf(s) {
  const parts = ["payonce/snapshot/v1", s.order_id, s.order_version, s.payment_method];
  if (s.return_url !== undefined) parts.push("return_url", s.return_url);
  if (s.capture !== undefined) parts.push("capture", s.capture);
  return sha256Hex(JSON.stringify(parts));
}

/** The opaque id of a snapshot: SHA-256 over its fields. */
export function snapshotId(snapshot) {
  return idOf(normaliseSnapshot(snapshot));
}

function orderRef(orderId) {
  return sha256Hex(JSON.stringify(["payonce/order/v1", String(orderId)])).slice(0, 32);
}

// ---------------------------------------------------------------------------------------------
// Responses

/** Milliseconds a Retry-After value asks for (delta-seconds or an HTTP date), or null. */
export function parseRetryAfter(value, nowMs = Date.now()) {
  if (value == null) return null;
  const text = String(value).trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const date = Date.parse(text);
  return Number.isNaN(date) ? null : Math.max(0, date - nowMs);
}

function problemName(body) {
  const type = body && typeof body.type === "string" ? body.type : "";
  return type.startsWith("/problems/") ? type.slice("/problems/".length) : type;
}

/**
 * What an answer to POST /payments means for the key: either a result ({kind, final}) or a
 * reason to send the same request again ({retry: true, reason, retryAfterMs}).
 */
export function classify(status, body, retryAfterMs) {
  const retry = (reason) => ({ retry: true, reason, retryAfterMs });
  if (status >= 200 && status < 300) {
    const state = body && typeof body.status === "string" ? body.status : "";
    if (status !== 202 && state === "succeeded") return { kind: "paid", final: true };
    if (status !== 202 && state === "authorized") return { kind: "authorized", final: true };
    const action = body?.next_action;
    if (state === "requires_action" && action?.type === "redirect" && typeof action.url === "string") {
      // Not final, and nothing to re-send until the customer has acted.
      return { kind: "requires-action", final: false, next_action: action, retryAfterMs };
    }
    if (status !== 202 && (state === "failed" || state === "canceled" || state === "declined")) {
      return { kind: "failed", final: true };
    }
    // 202 processing (the PSP's outcome is unknown; a webhook or reconcile settles it), or a
    // state this client does not know: ask again with the same key.
    return retry("processing");
  }
  const problem = problemName(body);
  if (status === 402) {
    if (problem === "card-declined" || problem === "payment-method-rejected") {
      return { kind: "declined", final: true, problem };
    }
    return { kind: "failed", final: true, problem };
  }
  if (status === 409) {
    switch (problem) {
      case "order-already-paid":
        return { kind: "already-paid", final: true, problem };
      case "payment-in-progress":
        return { kind: "in-progress", final: true, problem };
      case "order-already-authorized":
        return { kind: "already-authorized", final: true, problem };
      case "order-version-mismatch":
        return { kind: "stale", final: true, problem };
      default:
        // idempotency-key-in-use (the same key is being processed right now) and any conflict
        // this client does not know: never final, wait and ask again.
        return retry(problem || "conflict");
    }
  }
  if (status === 422 && problem === "idempotency-key-mismatch") {
    return { kind: "mismatch", final: true, problem };
  }
  if (status === 401 || status === 403) return { kind: "unauthorized", final: false, problem };
  if (status === 408 || status === 425 || status === 429) return retry(`http-${status}`);
  if (status >= 400 && status < 500) return { kind: "rejected", final: true, problem };
  // 5xx (psp-unavailable, a gateway timeout, an internal error) and anything else: the outcome
  // is unknown, keep the key and ask again.
  return retry(problem || `http-${status}`);
}

// ---------------------------------------------------------------------------------------------
// The manager

const defaultSleep = (ms, signal) =>
  new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });

function backoffFunction(backoff) {
  if (typeof backoff === "function") return backoff;
  const { initialMs = 250, maxMs = 5000, factor = 2, jitter = 0.2 } = backoff ?? {};
  return (attempt) => {
    const base = Math.min(maxMs, initialMs * factor ** attempt);
    return Math.round(base * (1 - jitter * Math.random()));
  };
}

class TimeoutError extends Error {
  constructor(ms) {
    super(`no answer within ${ms} ms`);
    this.name = "TimeoutError";
  }
}

/**
 * Creates a key manager. See payonce-keys.d.ts for the types.
 *
 * @param {object} [options]
 * @param {Storage} [options.storage] where keys live (default: sessionStorage)
 * @param {string} [options.namespace] prefix of the storage items (default "payonce")
 * @param {Function} [options.send] default send(key, snapshot, {signal}) → Promise<Response>
 * @param {number} [options.fetchTimeoutMs] how long one request may take (default 35 000)
 * @param {object|Function} [options.backoff] {initialMs, maxMs, factor, jitter} or attempt → ms
 * @param {number} [options.maxRetryAfterMs] cap on a server's Retry-After (default 60 000)
 * @param {number} [options.maxWaitMs] how long pay() keeps asking before it returns "pending"
 *   and leaves the key for later (default 120 000)
 * @param {Function} [options.onStatus] called with {phase, snapshot, attempt, waitMs, reason, outcome}
 * @param {Function} [options.onAction] called with (next_action, outcome) when the provider waits
 *   for the customer (default: location.assign(next_action.url))
 */
export function createKeyManager(options = {}) {
  const storage = options.storage ?? globalThis.sessionStorage;
  if (!storage) throw new TypeError("createKeyManager needs a Storage (sessionStorage)");
  const namespace = options.namespace ?? "payonce";
  const prefix = `${namespace}:`;
  const defaultSend = options.send;
  const fetchTimeoutMs = options.fetchTimeoutMs ?? 35_000;
  const maxRetryAfterMs = options.maxRetryAfterMs ?? 60_000;
  const maxWaitMs = options.maxWaitMs ?? 120_000;
  const backoff = backoffFunction(options.backoff);
  const onStatus = options.onStatus ?? (() => {});
  const onAction =
    options.onAction ?? ((action) => globalThis.location?.assign?.(action.url));
  const now = options.now ?? (() => Date.now());
  const sleep = options.sleep ?? defaultSleep;
  const randomUUID = options.randomUUID ?? (() => globalThis.crypto.randomUUID());

  /** snapshot_id → snapshot, for every snapshot seen since the page loaded (memory only). */
  const known = new Map();
  /** order_ref → the flight (the one pay() running for that order in this tab). */
  const flights = new Map();

  function describe(snapshot) {
    const s = normaliseSnapshot(snapshot);
    const id = idOf(s);
    known.set(id, s);
    return { s, id, ref: orderRef(s.order_id) };
  }

  function read(ref) {
    let raw;
    try {
      raw = storage.getItem(prefix + ref);
    } catch {
      return null;
    }
    if (raw == null) return null;
    try {
      const entry = JSON.parse(raw);
      if (typeof entry?.key === "string" && typeof entry?.snapshot_id === "string") {
        return { key: entry.key, snapshot_id: entry.snapshot_id };
      }
    } catch {
      // not ours or damaged: treated as absent and overwritten by the next write
    }
    return null;
  }

  function write(ref, key, id) {
    // Only these two fields, ever.
    storage.setItem(prefix + ref, JSON.stringify({ key, snapshot_id: id }));
  }

  function remove(ref, id) {
    const entry = read(ref);
    if (entry && (id === undefined || entry.snapshot_id === id)) {
      storage.removeItem(prefix + ref);
      return true;
    }
    return false;
  }

  function emit(event) {
    try {
      onStatus(event);
    } catch {
      // a status callback must not break a payment
    }
  }

  /** The stored key of this snapshot, or a new one stored before it is returned. */
  function claimKey(ref, id, orderId) {
    const entry = read(ref);
    if (entry && entry.snapshot_id === id) return { key: entry.key, fresh: false };
    if (entry) throw new UnresolvedAttemptError(orderId, entry.snapshot_id);
    const key = randomUUID();
    write(ref, key, id);
    if (read(ref)?.key !== key) throw new Error("sessionStorage did not keep the idempotency key");
    return { key, fresh: true };
  }

  /** One request, bounded by fetchTimeoutMs (the body is read within the same bound). */
  async function exchange(send, key, snapshot, flight) {
    const controller = new AbortController();
    flight.controllers.add(controller);
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => {
        controller.abort();
        reject(new TimeoutError(fetchTimeoutMs));
      }, fetchTimeoutMs);
    });
    const call = (async () => {
      const response = await send(key, snapshot, { signal: controller.signal });
      if (!response || typeof response.status !== "number") {
        throw new TypeError("send() must resolve to a Response");
      }
      const text = typeof response.text === "function" ? await response.text() : "";
      let body = null;
      try {
        body = text ? JSON.parse(text) : null;
      } catch {
        body = null;
      }
      return { response, body };
    })();
    call.catch(() => {});
    try {
      return await Promise.race([call, timeout]);
    } finally {
      clearTimeout(timer);
      flight.controllers.delete(controller);
    }
  }

  /** Sends (snapshot, key) until the answer is final, unknown for too long, or cancelled. */
  async function drive(flight, snapshot, key, send, firstPhase, afterAction = false) {
    const started = now();
    for (let attempt = 0; ; attempt++) {
      if (flight.cancelled) return { kind: "cancelled", final: false, snapshot };
      emit({ phase: attempt === 0 ? firstPhase : firstPhase === "resolving" ? "resolving" : "checking", snapshot, attempt });
      let verdict;
      let exchanged = null;
      try {
        exchanged = await exchange(send, key, snapshot, flight);
        const headers = exchanged.response.headers;
        const retryAfter = parseRetryAfter(headers?.get?.("retry-after"), now());
        verdict = classify(
          exchanged.response.status,
          exchanged.body,
          retryAfter == null ? undefined : Math.min(retryAfter, maxRetryAfterMs),
        );
      } catch (error) {
        verdict = { retry: true, reason: error?.name === "TimeoutError" ? "timeout" : "network", error };
      }
      if (afterAction && verdict.kind === "requires-action") {
        // Back from the provider: its word on the action is on its way. Wait, never redirect again.
        verdict = { retry: true, reason: "action-completing", retryAfterMs: verdict.retryAfterMs };
      }
      if (flight.cancelled) return { kind: "cancelled", final: false, snapshot };
      if (!verdict.retry) {
        return {
          ...verdict,
          snapshot,
          status: exchanged.response.status,
          body: exchanged.body,
          response: exchanged.response,
          replayed: exchanged.response.headers?.get?.("idempotent-replayed") === "true",
          attempts: attempt + 1,
        };
      }
      const waitMs = verdict.retryAfterMs ?? backoff(attempt);
      if (now() - started + waitMs > maxWaitMs) {
        return {
          kind: "pending",
          final: false,
          snapshot,
          reason: verdict.reason,
          status: exchanged?.response.status,
          body: exchanged?.body ?? null,
          response: exchanged?.response,
          attempts: attempt + 1,
        };
      }
      emit({ phase: firstPhase === "resolving" ? "resolving" : "waiting", snapshot, attempt, waitMs, reason: verdict.reason });
      await sleep(waitMs, flight.signal);
    }
  }

  async function run(flight, s, id, ref, send, afterAction, redirect) {
    const entry = read(ref);
    if (entry && entry.snapshot_id !== id) {
      const old = known.get(entry.snapshot_id);
      if (!old) {
        return { kind: "unresolved", final: false, snapshot: s, snapshot_id: entry.snapshot_id };
      }
      const previous = await drive(flight, old, entry.key, send, "resolving");
      // A replay of the old key with the old snapshot cannot be a mismatch; if it is, send()
      // did not build the request from its snapshot argument, and the old attempt is unknown.
      const resolved = previous.final && previous.kind !== "mismatch";
      if (resolved) remove(ref, entry.snapshot_id);
      if (previous.kind === "cancelled") return { ...previous, snapshot: s };
      if (!resolved) {
        return { kind: "unresolved", final: false, snapshot: s, snapshot_id: entry.snapshot_id, previous };
      }
      if (previous.kind === "paid") return previous;
      if (flight.cancelled) return { kind: "cancelled", final: false, snapshot: s };
    }
    const { key, fresh } = claimKey(ref, id, s.order_id);
    const outcome = await drive(flight, s, key, send, fresh ? "processing" : "checking", afterAction && !fresh);
    if (outcome.final) remove(ref, id);
    if (outcome.kind === "requires-action" && redirect) {
      try {
        onAction(outcome.next_action, outcome);
      } catch {
        // the page shows the outcome; the key stays for the return page
      }
    }
    return outcome;
  }

  const manager = {
    /** The opaque id of a snapshot (what storage keeps next to the key). */
    snapshotId(snapshot) {
      return describe(snapshot).id;
    },

    /**
     * The key of this snapshot: the stored one, or a new crypto.randomUUID() stored before it
     * is returned. Throws UnresolvedAttemptError when another snapshot of the same order holds
     * an unresolved key (resolve it first: pay() does).
     */
    keyFor(snapshot) {
      const { s, id, ref } = describe(snapshot);
      return claimKey(ref, id, s.order_id).key;
    },

    /** The stored key of exactly this snapshot, or null; creates nothing. */
    peek(snapshot) {
      const { id, ref } = describe(snapshot);
      const entry = read(ref);
      return entry && entry.snapshot_id === id ? entry.key : null;
    },

    /**
     * The unresolved attempt stored for this order, or null: {snapshot_id, snapshot} where
     * snapshot is known only if this page has seen it (else null; see recover()).
     */
    unresolved(orderId) {
      const entry = read(orderRef(orderId));
      if (!entry) return null;
      return { snapshot_id: entry.snapshot_id, snapshot: known.get(entry.snapshot_id) ?? null };
    },

    /**
     * After a reload: finds, among snapshots the page could have sent, the one whose unresolved
     * key is stored for this order, remembers it and returns it (or null).
     */
    recover(orderId, candidates) {
      const entry = read(orderRef(orderId));
      if (!entry) return null;
      for (const candidate of candidates ?? []) {
        if (candidate?.order_id !== orderId) continue;
        const { s, id } = describe(candidate);
        if (id === entry.snapshot_id) return s;
      }
      return null;
    },

    /**
     * Pays this snapshot: one flight per order in this tab (a second call for the same snapshot
     * while one runs gets the same promise, so a double click sends one request; a call for
     * another snapshot of the order gets {kind: "busy"}). Resolves an older snapshot's attempt
     * first (see the top of this file), takes the key, sends, retries with the same key, and
     * settles the key on a final outcome. Never rejects for a server or network problem.
     */
    pay(snapshot, send = defaultSend, { afterAction = false, redirect = true } = {}) {
      if (typeof send !== "function") throw new TypeError("pay() needs send(key, snapshot, {signal})");
      const { s, id, ref } = describe(snapshot);
      const running = flights.get(ref);
      if (running) {
        return running.id === id
          ? running.promise
          : Promise.resolve({ kind: "busy", final: false, snapshot: s });
      }
      const abort = new AbortController();
      const flight = { id, cancelled: false, signal: abort.signal, controllers: new Set() };
      flight.cancel = () => {
        flight.cancelled = true;
        abort.abort();
        for (const controller of flight.controllers) controller.abort();
      };
      flights.set(ref, flight);
      flight.promise = (async () => {
        let outcome;
        try {
          outcome = await run(flight, s, id, ref, send, afterAction, redirect);
        } catch (error) {
          outcome = { kind: "error", final: false, snapshot: s, error };
        } finally {
          if (flights.get(ref) === flight) flights.delete(ref);
        }
        emit({ phase: "done", snapshot: s, outcome });
        return outcome;
      })();
      return flight.promise;
    },

    /**
     * Clears the snapshot's key if the outcome is final (paid, declined, failed, or refused for
     * good: already-paid, in-progress, stale, mismatch, rejected); keeps it on anything else
     * (timeout, network error, 5xx, 409 idempotency-key-in-use, 202 processing). pay() calls it
     * itself; it is for callers that send with keyFor(). Returns whether a key was cleared.
     */
    settle(snapshot, outcome) {
      const { id, ref } = describe(snapshot);
      const final = outcome?.final ?? FINAL_KINDS.has(outcome?.kind);
      return final === true && FINAL_KINDS.has(outcome?.kind) ? remove(ref, id) : false;
    },

    /** Whether a pay() is running for this order (or for any order, without an argument). */
    inFlight(orderId) {
      return orderId === undefined ? flights.size > 0 : flights.has(orderRef(orderId));
    },

    /**
     * Drops an order's unresolved key WITHOUT resolving it. Only for when the server has shown
     * the attempt can no longer charge (the order moved past its version and is not
     * processing) and its snapshot cannot be rebuilt. Refused (false) while pay() runs.
     */
    abandon(orderId) {
      const ref = orderRef(orderId);
      if (flights.has(ref)) return false;
      return remove(ref);
    },

    /** Logout: stops every running pay() and removes every key of this namespace. */
    clearAll() {
      for (const flight of flights.values()) flight.cancel();
      flights.clear();
      known.clear();
      const names = [];
      for (let i = 0; i < storage.length; i++) {
        const name = storage.key(i);
        if (name !== null && name.startsWith(prefix)) names.push(name);
      }
      for (const name of names) storage.removeItem(name);
      return names.length;
    },
  };
  return manager;
}

/** Whether a stored value has the only shape this module writes: {key: uuid, snapshot_id: hex}. */
export function isStoredEntry(value) {
  if (!value || typeof value !== "object") return false;
  const fields = Object.keys(value).sort().join(",");
  return fields === "key,snapshot_id" && UUID_RE.test(value.key) && HEX64_RE.test(value.snapshot_id);
}
