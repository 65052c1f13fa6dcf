// The demo checkout page in headless Chromium against payonce-local: each test gets
// its own sandbox and browser and checks the fake PSP's succeeded charges, not only the page.
import { test } from "node:test";
import assert from "node:assert/strict";
import { stat } from "node:fs/promises";
import {
  assertSucceededCharges,
  nextPaymentResponse,
  openCheckout,
  recordPayments,
  screenshot,
  sel,
  storedKeys,
  trackStates,
  waitForState,
  withCheckout,
} from "./support/checkout.mjs";

const T = { timeout: 90_000 };

test("double click on pay: one request in flight, one charge", T, (t) =>
  withCheckout(t, async ({ sandbox, browser }) => {
    const page = await browser.firstPage();
    const payments = recordPayments(page);
    const states = await trackStates(page);
    const orderId = await openCheckout(page, sandbox);
    assert.deepEqual(await storedKeys(page, [orderId]), []);

    await page.dblclick(sel.pay);
    await waitForState(page, "paid");

    assert.equal(payments.requests.length, 1, "one POST /payments");
    assert.equal(payments.responses[0].status, 201);
    assert.deepEqual(payments.requests[0].body, {
      order_id: orderId,
      order_version: 1,
      payment_method: "pm_card_visa",
      return_url: `${sandbox.url}/?user=demo-user&order=${orderId}&from=psp`,
    });
    assert.deepEqual((await states()).slice(-2), ["processing", "paid"]);
    await assertSucceededCharges(sandbox, 1);
    assert.deepEqual(await storedKeys(page, [orderId]), [], "the key is cleared once paid");
    assert.equal(await page.textContent(sel.paymentState), "paid");
    assert.equal(await page.isDisabled(sel.pay), true);

    const file = await screenshot(page, "paid.png");
    assert.ok((await stat(file)).size > 1000);
  }));

test("three pay() calls at once in the browser share one request", T, (t) =>
  withCheckout(t, async ({ sandbox, browser }) => {
    const page = await browser.firstPage();
    const payments = recordPayments(page);
    const orderId = await openCheckout(page, sandbox);
    const kinds = await page.evaluate(async (orderId) => {
      const { createKeyManager } = await import("/payonce-keys.js");
      const { token } = await (await fetch("/_sandbox/token?user=demo-user")).json();
      const keys = createKeyManager();
      const send = (key, snapshot, { signal }) =>
        fetch("/payments", {
          method: "POST",
          signal,
          headers: { authorization: `Bearer ${token}`, "idempotency-key": key, "content-type": "application/json" },
          body: JSON.stringify(snapshot),
        });
      const snapshot = { order_id: orderId, order_version: 1, payment_method: "pm_card_mastercard" };
      const calls = [keys.pay(snapshot, send), keys.pay(snapshot, send), keys.pay(snapshot, send)];
      return (await Promise.all(calls)).map((outcome) => outcome.kind);
    }, orderId);
    assert.deepEqual(kinds, ["paid", "paid", "paid"]);
    assert.equal(payments.requests.length, 1);
    await assertSucceededCharges(sandbox, 1);
    assert.deepEqual(await storedKeys(page, [orderId]), []);
  }));

test("the response is lost after the server charged: same key again, paid, one charge", T, (t) =>
  withCheckout(t, async ({ sandbox, browser }) => {
    const page = await browser.firstPage();
    const payments = recordPayments(page);
    const states = await trackStates(page);
    const orderId = await openCheckout(page, sandbox);

    let first = true;
    let storedWhenSent = null;
    let charged = null;
    await page.route("**/payments", async (route) => {
      if (!first) return route.continue();
      first = false;
      // The request is out: the key must already be in sessionStorage.
      storedWhenSent = await storedKeys(page, [orderId]);
      const response = await route.fetch(); // the server charges...
      charged = response.status();
      await route.abort("connectionreset"); // ...and the page never hears of it
    });

    await page.click(sel.pay);
    await waitForState(page, "paid");

    const [sent, retried] = payments.requests;
    assert.equal(payments.requests.length, 2);
    assert.equal(charged, 201, "the first attempt was charged at the server");
    assert.equal(retried.key, sent.key, "the retry carries the same Idempotency-Key");
    assert.deepEqual(retried.body, sent.body);
    assert.deepEqual(storedWhenSent.map((e) => e.key), [sent.key], "stored before the request left");
    assert.equal(payments.responses.length, 1);
    assert.equal(payments.responses[0].status, 201);
    assert.equal(payments.responses[0].replayed, true, "answered from the stored outcome");
    assert.ok((await states()).includes("checking"), "shows 'checking payment status…' while retrying");
    await assertSucceededCharges(sandbox, 1);
    assert.deepEqual(await storedKeys(page, [orderId]), []);
  }));

test("reload mid-payment: the key stored before the reload is reused after it", T, (t) =>
  withCheckout(t, async ({ sandbox, browser }) => {
    const page = await browser.firstPage();
    const payments = recordPayments(page);
    const orderId = await openCheckout(page, sandbox);

    let routed = 0;
    let markCharged;
    const charged = new Promise((resolve) => (markCharged = resolve));
    let release;
    const released = new Promise((resolve) => (release = resolve));
    await page.route("**/payments", async (route) => {
      if (routed++ > 0) return route.continue();
      await route.fetch(); // the server charges; the page is reloaded before it hears back
      markCharged();
      await released;
      await route.abort("connectionreset").catch(() => {});
    });

    await page.click(sel.pay);
    await charged;
    assert.equal(await page.getAttribute(sel.status, "data-state"), "processing");
    const before = await storedKeys(page, [orderId]);
    assert.deepEqual(before.map((e) => e.key), [payments.requests[0].key]);

    await page.reload();
    release();
    await waitForState(page, "paid");

    assert.equal(payments.requests.length, 2);
    assert.equal(payments.requests[1].key, payments.requests[0].key, "same Idempotency-Key after the reload");
    assert.deepEqual(payments.requests[1].body, payments.requests[0].body);
    assert.equal(payments.responses.at(-1).status, 201);
    assert.equal(payments.responses.at(-1).replayed, true);
    await assertSucceededCharges(sandbox, 1);
    assert.deepEqual(await storedKeys(page, [orderId]), []);
  }));

test("reload while the outcome is unknown (202, PSP response lost): same key, paid, one charge", T, (t) =>
  withCheckout(t, async ({ sandbox, browser }) => {
    const page = await browser.firstPage();
    const payments = recordPayments(page);
    const orderId = await openCheckout(page, sandbox);

    // The PSP's success webhook is held until the page has its 202: without the hold it may be
    // applied before the charge has decided, and the answer is then (rightly) 201.
    await sandbox.holdWebhooks();
    await page.check(sel.method("pm_fake_lost_response"));
    const answered = nextPaymentResponse(page);
    await page.click(sel.pay);
    assert.equal((await answered).status(), 202);
    await waitForState(page, "checking");
    const before = await storedKeys(page, [orderId]);
    assert.deepEqual(before.map((e) => e.key), [payments.requests[0].key]);

    await page.reload();
    await sandbox.releaseWebhooks();
    await waitForState(page, "paid");

    assert.ok(payments.requests.length >= 2);
    assert.deepEqual(new Set(payments.keys()), new Set([payments.requests[0].key]), "one key throughout");
    assert.equal(await page.isChecked(sel.method("pm_fake_lost_response")), true);
    await assertSucceededCharges(sandbox, 1);
    assert.deepEqual(await storedKeys(page, [orderId]), []);
  }));

test("decline clears the key; another card gets a new key and pays once", T, (t) =>
  withCheckout(t, async ({ sandbox, browser }) => {
    const page = await browser.firstPage();
    const payments = recordPayments(page);
    const orderId = await openCheckout(page, sandbox);

    await page.check(sel.method("pm_card_visa_chargeDeclined"));
    await page.click(sel.pay);
    await waitForState(page, "declined");
    assert.match(await page.textContent(sel.status), /declined/);
    assert.deepEqual(await storedKeys(page, [orderId]), [], "a decline is final: key cleared");
    await assertSucceededCharges(sandbox, 0);

    await page.check(sel.method("pm_card_visa"));
    await page.click(sel.pay);
    await waitForState(page, "paid");

    const [declined, paid] = payments.requests;
    assert.equal(payments.requests.length, 2);
    assert.notEqual(paid.key, declined.key, "a new key for the new snapshot");
    assert.equal(paid.body.payment_method, "pm_card_visa");
    await assertSucceededCharges(sandbox, 1);
    assert.equal((await sandbox.charges()).length, 2, "one declined and one succeeded PaymentIntent");
    assert.deepEqual(await storedKeys(page, [orderId]), []);
  }));

test("changing the order after a decline: a new version, a new key, the old key gone", T, (t) =>
  withCheckout(t, async ({ sandbox, browser }) => {
    const page = await browser.firstPage();
    const payments = recordPayments(page);
    const orderId = await openCheckout(page, sandbox);

    await page.check(sel.method("pm_card_visa_chargeDeclined"));
    await page.click(sel.pay);
    await waitForState(page, "declined");
    const oldKey = payments.requests[0].key;
    assert.deepEqual(await storedKeys(page, [orderId]), []);

    await page.click(sel.addItem);
    await page.waitForFunction(() => document.querySelector('[data-testid="version"]').textContent === "2");
    await waitForState(page, "ready");
    assert.equal(await page.getAttribute(sel.amount, "data-amount"), "4500");

    let storedWhenSent = null;
    await page.route("**/payments", async (route) => {
      storedWhenSent ??= await storedKeys(page, [orderId]);
      await route.continue();
    });
    await page.check(sel.method("pm_card_visa"));
    await page.click(sel.pay);
    await waitForState(page, "paid");

    const paid = payments.requests[1];
    assert.equal(payments.requests.length, 2);
    assert.deepEqual(paid.body, {
      order_id: orderId,
      order_version: 2,
      payment_method: "pm_card_visa",
      return_url: `${sandbox.url}/?user=demo-user&order=${orderId}&from=psp`,
    });
    assert.notEqual(paid.key, oldKey);
    assert.deepEqual(storedWhenSent.map((e) => e.key), [paid.key], "only the new key is stored");
    const [charge] = await assertSucceededCharges(sandbox, 1);
    assert.equal(charge.amount, 4500, "the new version's amount");
    assert.deepEqual(await storedKeys(page, [orderId]), []);
  }));

test("two tabs pay one order: one charge; the second tab shows it already paid", T, (t) =>
  withCheckout(t, async ({ sandbox, browser, context }) => {
    const first = await browser.firstPage();
    const firstPayments = recordPayments(first);
    const orderId = await openCheckout(first, sandbox);
    const second = await context.newPage();
    const secondPayments = recordPayments(second);
    await openCheckout(second, sandbox, { order: orderId });

    // The first tab's attempt stays in `processing` (its PSP response is lost, and the webhook
    // that settles it is held), and the second tab pays meanwhile.
    await sandbox.holdWebhooks();
    await first.check(sel.method("pm_fake_lost_response"));
    const firstAnswer = nextPaymentResponse(first);
    await first.click(sel.pay);
    assert.equal((await firstAnswer).status(), 202);
    const secondAnswer = nextPaymentResponse(second);
    await second.click(sel.pay);
    const refused = await secondAnswer;
    assert.equal(refused.status(), 409);
    assert.equal((await refused.json()).type, "/problems/payment-in-progress");
    await sandbox.releaseWebhooks();

    await waitForState(first, "paid");
    await waitForState(second, "already-paid");
    assert.equal(await second.textContent(sel.paymentState), "paid");
    assert.notEqual(secondPayments.requests[0].key, firstPayments.requests[0].key, "sessionStorage is per tab");
    await assertSucceededCharges(sandbox, 1);
    assert.deepEqual(await storedKeys(first, [orderId]), []);
    assert.deepEqual(await storedKeys(second, [orderId]), []);
  }));

test("two tabs click pay at the same moment: one charge, one tab paid, the other already paid", T, (t) =>
  withCheckout(t, async ({ sandbox, browser, context }) => {
    const first = await browser.firstPage();
    const orderId = await openCheckout(first, sandbox);
    const second = await context.newPage();
    await openCheckout(second, sandbox, { order: orderId });
    await second.check(sel.method("pm_card_mastercard"));

    await Promise.all([first.click(sel.pay), second.click(sel.pay)]);
    const outcomes = await Promise.all([first, second].map((page) => waitForState(page, ["paid", "already-paid"])));
    assert.deepEqual(outcomes.sort(), ["already-paid", "paid"]);
    await assertSucceededCharges(sandbox, 1);
    assert.deepEqual(await storedKeys(first, [orderId]), []);
    assert.deepEqual(await storedKeys(second, [orderId]), []);
  }));

test("logout clears every stored key and stops the payment in flight", T, (t) =>
  withCheckout(t, async ({ sandbox, browser }) => {
    const page = await browser.firstPage();
    const payments = recordPayments(page);
    const orderId = await openCheckout(page, sandbox);

    // An unresolved key of another order in this tab, stored the way the module stores it.
    await page.evaluate(async () => {
      const { createKeyManager } = await import("/payonce-keys.js");
      createKeyManager().keyFor({ order_id: "ord_elsewhere", order_version: 3, payment_method: "pm_card_visa" });
    });
    // This order's payment is held before it reaches the server.
    let release;
    const held = new Promise((resolve) => (release = resolve));
    await page.route("**/payments", async (route) => {
      await held;
      await route.abort("connectionreset").catch(() => {});
    });
    const failed = page.waitForEvent("requestfailed");
    await page.click(sel.pay);
    await page.waitForFunction(() => sessionStorage.length === 2);
    const keys = await storedKeys(page, [orderId, "ord_elsewhere"]);
    assert.equal(keys.length, 2);
    assert.ok(keys.some((entry) => entry.key === payments.requests[0].key));

    await page.click(sel.logout);
    await waitForState(page, "signed-out");
    assert.deepEqual(await storedKeys(page), [], "nothing left after logout");
    await failed; // logout aborted the request in flight
    release();
    // A stopped payment neither retries nor stores its key again (one backoff period and more).
    await page.waitForTimeout(600);
    assert.equal(payments.requests.length, 1);
    assert.deepEqual(await storedKeys(page), []);
    assert.equal(await page.isVisible('[data-testid="signed-out"]'), true);
    await assertSucceededCharges(sandbox, 0);
  }));
