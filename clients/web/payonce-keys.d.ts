// Types for payonce-keys.js, the checkout key manager.

/** What one payment attempt sends; a new version or payment method is a new snapshot. */
export interface Snapshot {
  order_id: string;
  order_version: number;
  /** A PSP token such as "pm_card_visa", never card data. */
  payment_method: string;
  /** Where the provider sends the customer back after 3-D Secure (on the checkout's origin). */
  return_url?: string;
  /** "manual": authorize now, capture later. */
  capture?: "automatic" | "manual";
}

/** What the customer must do for a "requires-action" outcome. */
export interface NextAction {
  type: "redirect";
  /** The provider's page: open it in the same tab. */
  url: string;
  /** Until when it is open (epoch seconds). */
  expires_at: number;
}

/** Sends POST /payments for `snapshot` under `key`; must build the body from `snapshot`. */
export type Send = (key: string, snapshot: Readonly<Snapshot>, init: { signal: AbortSignal }) => Promise<Response>;

export type FinalKind =
  | "paid" // 2xx with status "succeeded"
  | "authorized" // 201 with status "authorized" (manual capture)
  | "already-authorized" // 409 order-already-authorized (an authorized payment holds the order)
  | "declined" // 402 card-declined / payment-method-rejected
  | "failed" // 402 payment-failed (or another 402)
  | "already-paid" // 409 order-already-paid (this request was not stored)
  | "in-progress" // 409 payment-in-progress (another key holds the order; this one was not stored)
  | "stale" // 409 order-version-mismatch
  | "mismatch" // 422 idempotency-key-mismatch
  | "rejected"; // another 4xx: refused, nothing stored

export type OpenKind =
  | "requires-action" // 202 requires_action: next_action was handed to onAction; key kept
  | "pending" // still unknown after maxWaitMs (202, 5xx, timeouts, 409 in-use): key kept
  | "unresolved" // another snapshot of the order has an unresolved key that could not be resolved
  | "busy" // pay() is running for another snapshot of this order in this tab
  | "unauthorized" // 401/403: get a new token and pay again (key kept)
  | "cancelled" // clearAll() ran meanwhile
  | "error"; // a local failure (e.g. sessionStorage refused the key): nothing was sent

export interface Outcome {
  kind: FinalKind | OpenKind;
  /** true: the key of `snapshot` has been cleared and will never be sent again. */
  final: boolean;
  /** The snapshot whose key produced this outcome (an older one when pay() resolved it and it had paid). */
  snapshot: Readonly<Snapshot>;
  /** The problem type without "/problems/", for problem answers. */
  problem?: string;
  status?: number;
  /** The parsed JSON body of the last answer (a payment or a problem), if any. */
  body?: any;
  /** The last Response (its body already read into `body`). */
  response?: Response;
  /** The answer carried Idempotent-Replayed: true. */
  replayed?: boolean;
  attempts?: number;
  /** Why the last try was not final ("processing", "timeout", "network", "idempotency-key-in-use", ...). */
  reason?: string;
  /** For "unresolved": the stored attempt's snapshot id, and its last outcome if it was tried. */
  snapshot_id?: string;
  previous?: Outcome;
  /** For "requires-action": where the customer goes. */
  next_action?: NextAction;
  error?: unknown;
}

export interface StatusEvent {
  /**
   * processing: first request of a new key; checking: re-sending a stored key; waiting: backing
   * off before the next try; resolving: re-sending an older snapshot's key; done: outcome known.
   */
  phase: "processing" | "checking" | "waiting" | "resolving" | "done";
  snapshot: Readonly<Snapshot>;
  attempt?: number;
  waitMs?: number;
  reason?: string;
  outcome?: Outcome;
}

export interface Backoff {
  /** First delay (default 250 ms); then × factor per try, up to maxMs (default 5000). */
  initialMs?: number;
  maxMs?: number;
  factor?: number;
  /** Fraction of the delay taken off at random (default 0.2). */
  jitter?: number;
}

export interface KeyManagerOptions {
  /** Default: sessionStorage (per tab, survives a reload). */
  storage?: Storage;
  /** Prefix of the storage items (default "payonce"). */
  namespace?: string;
  /** Default send for pay(). */
  send?: Send;
  /** Bound on one request including its body (default 35 000 ms). */
  fetchTimeoutMs?: number;
  backoff?: Backoff | ((attempt: number) => number);
  /** Cap on a Retry-After the server asks for (default 60 000 ms). */
  maxRetryAfterMs?: number;
  /** How long pay() keeps asking before it returns "pending" (default 120 000 ms). */
  maxWaitMs?: number;
  onStatus?: (event: StatusEvent) => void;
  /** Called when the provider waits for the customer; default: location.assign(action.url). */
  onAction?: (action: NextAction, outcome: Outcome) => void;
  /** For tests. */
  now?: () => number;
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>;
  randomUUID?: () => string;
}

export interface KeyManager {
  snapshotId(snapshot: Snapshot): string;
  /** Stored key of this snapshot, or a new one stored first. Throws UnresolvedAttemptError. */
  keyFor(snapshot: Snapshot): string;
  /** Stored key of exactly this snapshot, or null; creates nothing. */
  peek(snapshot: Snapshot): string | null;
  unresolved(orderId: string): { snapshot_id: string; snapshot: Readonly<Snapshot> | null } | null;
  recover(orderId: string, candidates: Iterable<Snapshot>): Readonly<Snapshot> | null;
  /**
   * `afterAction`: on the page the provider sent the customer back to: a "requires_action"
   * answer is waited on (asked again) instead of handed over again. `redirect: false`: a
   * "requires_action" outcome is returned without calling onAction (the customer came back
   * without acting; the page offers to go on or to cancel).
   */
  pay(
    snapshot: Snapshot,
    send?: Send,
    options?: { afterAction?: boolean; redirect?: boolean },
  ): Promise<Outcome>;
  settle(snapshot: Snapshot, outcome: Pick<Outcome, "kind"> & Partial<Outcome>): boolean;
  inFlight(orderId?: string): boolean;
  abandon(orderId: string): boolean;
  /** Logout: cancels running pay() calls and removes every stored key; returns how many. */
  clearAll(): number;
}

export function createKeyManager(options?: KeyManagerOptions): KeyManager;

export class UnresolvedAttemptError extends Error {
  readonly order_id: string;
  readonly snapshot_id: string;
}

export function sha256Hex(text: string): string;
export function snapshotId(snapshot: Snapshot): string;
export function normaliseSnapshot(snapshot: Snapshot): Readonly<Snapshot>;
export function parseRetryAfter(value: string | null | undefined, nowMs?: number): number | null;
export function classify(
  status: number,
  body: any,
  retryAfterMs?: number,
): { kind: FinalKind | "unauthorized"; final: boolean; problem?: string } | { retry: true; reason: string; retryAfterMs?: number };
export function isStoredEntry(value: unknown): boolean;
