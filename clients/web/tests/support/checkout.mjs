// Helpers for the checkout page tests: a sandbox and a browser per test, the page's status
// line, the POST /payments traffic, and the full contents of the tab's sessionStorage.
import assert from "node:assert/strict";
import { mkdir } from "node:fs/promises";
import path from "node:path";
import { startSandbox, webDir } from "./sandbox.mjs";
import { launchBrowser } from "./browser.mjs";

export const artifactsDir = path.join(webDir, "test-artifacts");
export const sel = {
  pay: '[data-testid="pay"]',
  addItem: '[data-testid="add-item"]',
  logout: '[data-testid="logout"]',
  status: '[data-testid="status"]',
  version: '[data-testid="version"]',
  amount: '[data-testid="amount"]',
  orderId: '[data-testid="order-id"]',
  paymentState: '[data-testid="payment-state"]',
  method: (pm) => `[data-testid="pm-${pm}"]`,
};
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** Runs `fn` with a fresh sandbox and a fresh browser; shows the sandbox log when it fails. */
export async function withCheckout(t, fn) {
  const sandbox = await startSandbox();
  let browser;
  try {
    browser = await launchBrowser();
    await fn({ sandbox, browser, context: browser.context });
  } catch (error) {
    t.diagnostic(`payonce-local, last lines:\n${sandbox.log.slice(-40).join("\n")}`);
    throw error;
  } finally {
    await browser?.close();
    await sandbox.stop();
  }
}

/** Records the state sequence of the status line (from DOMContentLoaded on, every load). */
export async function trackStates(page) {
  await page.addInitScript(() => {
    window.__states = [];
    document.addEventListener("DOMContentLoaded", () => {
      const line = document.getElementById("status");
      const note = () => {
        if (window.__states.at(-1) !== line.dataset.state) window.__states.push(line.dataset.state);
      };
      note();
      new MutationObserver(note).observe(line, { attributes: true, attributeFilter: ["data-state"] });
    });
  });
  return () => page.evaluate(() => window.__states);
}

/** Opens the checkout (a new order, or `order`) and waits until it is ready; returns the order id. */
export async function openCheckout(page, sandbox, { user = "demo-user", order, states = ["ready"] } = {}) {
  const query = new URLSearchParams({ user });
  if (order) query.set("order", order);
  await page.goto(`${sandbox.url}/?${query}`);
  await waitForState(page, states);
  return (await page.textContent(sel.orderId)).trim();
}

/** Waits until the status line shows one of `states`; returns the state reached. */
export async function waitForState(page, states, timeout = 20_000) {
  const wanted = [].concat(states);
  try {
    await page.waitForFunction(
      (list) => list.includes(document.querySelector('[data-testid="status"]')?.dataset.state),
      wanted,
      { timeout },
    );
  } catch (error) {
    const line = await page.$eval(sel.status, (el) => `${el.dataset.state}: ${el.textContent}`).catch(() => "?");
    throw new Error(`status never reached ${wanted.join("|")}; it shows "${line}" (${error.message.split("\n")[0]})`);
  }
  return page.getAttribute(sel.status, "data-state");
}

const isPayment = (request) => request.method() === "POST" && new URL(request.url()).pathname === "/payments";

/** Every POST /payments the page sends (its Idempotency-Key and body) and every answer it gets. */
export function recordPayments(page) {
  const requests = [];
  const responses = [];
  page.on("request", (request) => {
    if (isPayment(request)) {
      requests.push({ key: request.headers()["idempotency-key"], body: request.postDataJSON() });
    }
  });
  page.on("response", (response) => {
    if (isPayment(response.request())) {
      responses.push({
        status: response.status(),
        key: response.request().headers()["idempotency-key"],
        replayed: response.headers()["idempotent-replayed"] === "true",
        json: () => response.json(),
      });
    }
  });
  return { requests, responses, keys: () => requests.map((r) => r.key) };
}

export const nextPaymentResponse = (page) => page.waitForResponse((response) => isPayment(response.request()));

/**
 * The full contents of the tab's sessionStorage, checked: only items "payonce:<32 hex>" whose
 * value is exactly {key: UUID v4, snapshot_id: 64 hex}, and none of `forbidden` anywhere.
 * Returns the values.
 */
export async function storedKeys(page, forbidden = []) {
  const items = await page.evaluate(() => {
    const all = [];
    for (let i = 0; i < sessionStorage.length; i++) {
      const name = sessionStorage.key(i);
      all.push([name, sessionStorage.getItem(name)]);
    }
    return all;
  });
  return items.map(([name, raw]) => {
    assert.match(name, /^payonce:[0-9a-f]{32}$/, `unexpected sessionStorage item ${name}=${raw}`);
    const value = JSON.parse(raw);
    assert.deepEqual(Object.keys(value).sort(), ["key", "snapshot_id"], `unexpected stored value ${raw}`);
    assert.match(value.key, UUID_RE);
    assert.match(value.snapshot_id, /^[0-9a-f]{64}$/);
    for (const word of ["pm_", "card", "amount", "jpy", ...forbidden]) {
      assert.ok(!name.includes(word) && !raw.includes(word), `sessionStorage holds "${word}": ${name}=${raw}`);
    }
    return value;
  });
}

export async function assertSucceededCharges(sandbox, count) {
  const succeeded = await sandbox.succeededCharges();
  assert.equal(succeeded.length, count, `succeeded PSP charges: ${JSON.stringify(succeeded)}`);
  return succeeded;
}

export async function screenshot(page, name) {
  await mkdir(artifactsDir, { recursive: true });
  const file = path.join(artifactsDir, name);
  await page.screenshot({ path: file, fullPage: true });
  return file;
}
