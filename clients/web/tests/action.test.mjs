// The demo checkout with a card that asks for 3-D Secure and with "pay later" (manual capture),
// in headless Chromium against payonce-local: the key survives the redirect to the fake PSP's
// page and back, and the fake PSP's ledger shows exactly one charge.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  assertSucceededCharges,
  openCheckout,
  recordPayments,
  sel,
  storedKeys,
  waitForState,
  withCheckout,
} from "./support/checkout.mjs";

const T = { timeout: 120_000 };
const THREE_DS = "pm_card_threeDSecure2Required";

/** Pays with the 3-D Secure card and waits for the fake PSP's page; returns the stored key. */
async function payIntoTheBanksPage(page, sandbox, orderId) {
  await page.check(sel.method(THREE_DS));
  await Promise.all([page.waitForURL(`${sandbox.pspUrl}/_fake/authenticate/**`), page.click(sel.pay)]);
  assert.match(await page.textContent("body"), /Authenticate the payment of 3000 JPY/);
}

test("3-D Secure: the bank's page, Complete, back to the checkout, paid, one charge; a reload charges nothing", T, (t) =>
  withCheckout(t, async ({ sandbox, browser }) => {
    const page = await browser.firstPage();
    const payments = recordPayments(page);
    const orderId = await openCheckout(page, sandbox);
    await payIntoTheBanksPage(page, sandbox, orderId);
    assert.equal(payments.responses[0].status, 202);
    const key = payments.requests[0].key;

    // WHEN the customer completes the authentication
    await Promise.all([page.waitForURL(`${sandbox.url}/**redirect_status=succeeded*`), page.click("text=Complete")]);

    // THEN the checkout resumes with the same key and shows it paid: one charge in the ledger
    await waitForState(page, "paid", 30_000);
    assert.ok(payments.requests.length >= 2);
    assert.deepEqual([...new Set(payments.keys())], [key], "every request under the one key");
    assert.deepEqual(payments.requests.at(-1).body, payments.requests[0].body, "the same snapshot");
    await assertSucceededCharges(sandbox, 1);
    assert.equal((await sandbox.charges()).length, 1);
    assert.deepEqual(await storedKeys(page, [orderId]), [], "the key is cleared once paid");

    // WHEN the return page is reloaded
    const sent = payments.requests.length;
    await page.reload();
    // THEN nothing is sent again and nothing is charged again
    await waitForState(page, "already-paid");
    assert.equal(payments.requests.length, sent);
    await assertSucceededCharges(sandbox, 1);
  }));

test("3-D Secure failed: back at the checkout the order is free, and another card pays it", T, (t) =>
  withCheckout(t, async ({ sandbox, browser }) => {
    const page = await browser.firstPage();
    const payments = recordPayments(page);
    const orderId = await openCheckout(page, sandbox);
    await payIntoTheBanksPage(page, sandbox, orderId);

    // WHEN the customer fails the authentication
    await Promise.all([page.waitForURL(`${sandbox.url}/**redirect_status=failed*`), page.click("text=Fail")]);

    // THEN the checkout shows the failure (402 authentication-failed) and the order unpaid
    await waitForState(page, "failed", 30_000);
    const last = payments.responses.at(-1);
    assert.equal(last.status, 402);
    assert.equal((await last.json()).type, "/problems/authentication-failed");
    assert.deepEqual(await storedKeys(page, [orderId]), []);
    await page.waitForFunction(() => document.querySelector('[data-testid="payment-state"]')?.textContent === "unpaid");

    // WHEN another card pays, with a new key
    await page.check(sel.method("pm_card_visa"));
    await page.click(sel.pay);
    await waitForState(page, "paid");
    // THEN two charges at the PSP, one succeeded
    assert.equal(new Set(payments.keys()).size, 2);
    assert.equal((await sandbox.charges()).length, 2);
    await assertSucceededCharges(sandbox, 1);
  }));

test("pay later: authorized, held, nothing captured", T, (t) =>
  withCheckout(t, async ({ sandbox, browser }) => {
    const page = await browser.firstPage();
    const payments = recordPayments(page);
    const orderId = await openCheckout(page, sandbox);
    await page.check(sel.method("pm_card_visa"));
    await page.check('[data-testid="capture-later"]');
    await page.click(sel.pay);
    await waitForState(page, "authorized");
    assert.equal(payments.requests[0].body.capture, "manual");
    assert.equal(payments.responses[0].status, 201);
    await page.waitForFunction(() => document.querySelector('[data-testid="payment-state"]')?.textContent === "authorized");
    const charges = await sandbox.charges();
    assert.equal(charges.length, 1);
    assert.equal(charges[0].outcome, "authorized");
    await assertSucceededCharges(sandbox, 0);
    assert.deepEqual(await storedKeys(page, [orderId]), []);
  }));

test("3-D Secure abandoned: back at the checkout later, cancel it, and another card pays once", T, (t) =>
  withCheckout(t, async ({ sandbox, browser }) => {
    const page = await browser.firstPage();
    const payments = recordPayments(page);
    const orderId = await openCheckout(page, sandbox);
    await payIntoTheBanksPage(page, sandbox, orderId);
    const key = payments.requests[0].key;

    // WHEN the customer leaves the bank's page without acting and comes back to the checkout
    await openCheckout(page, sandbox, { order: orderId, states: ["requires-action"] });

    // THEN the same key is asked again, nothing is redirected, and the page offers a way out
    assert.equal(page.url().startsWith(sandbox.url), true, "still on the checkout");
    assert.deepEqual([...new Set(payments.keys())], [key]);
    assert.equal(await page.isVisible('[data-testid="cancel-action"]'), true);
    await page.waitForFunction(() => document.querySelector('[data-testid="payment-state"]')?.textContent === "processing");

    // WHEN they cancel it
    const cancels = [];
    page.on("request", (request) => {
      if (request.method() === "POST" && /\/payments\/[^/]+\/cancel$/.test(new URL(request.url()).pathname)) {
        cancels.push(request.headers()["idempotency-key"]);
      }
    });
    await page.click('[data-testid="cancel-action"]');
    await waitForState(page, "canceled", 30_000);

    // THEN the PSP canceled the intent under the payment's own key, and the order is free
    await page.waitForFunction(() => document.querySelector('[data-testid="payment-state"]')?.textContent === "unpaid");
    assert.equal(cancels.length >= 1, true);
    assert.notEqual(cancels[0], key, "the cancel has a key of its own");
    const [intent] = await sandbox.charges();
    assert.equal(intent.outcome, "canceled");
    assert.equal(intent.cancels.length, 1);
    assert.match(intent.cancels[0].idempotency_key, /^payonce-cancel-pay_/);

    // WHEN another card pays
    await page.check(sel.method("pm_card_visa"));
    await page.click(sel.pay);
    await waitForState(page, "paid");
    // THEN the old key was settled first (nothing charged under it), a new key paid: one charge
    assert.equal(payments.keys().at(-1) !== key, true);
    assert.equal((await sandbox.charges()).length, 2);
    await assertSucceededCharges(sandbox, 1);
    assert.deepEqual(await storedKeys(page, [orderId]), []);
  }));
