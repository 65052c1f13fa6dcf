// A checkout served from one origin paying through payonce on another, as in production (the
// page on the shop's domain, the API on API Gateway's): two sandboxes on two ports, the API one
// allowing the page's origin, as the template's AllowedOrigins does.
import { test } from "node:test";
import assert from "node:assert/strict";
import { startSandbox } from "./support/sandbox.mjs";
import { launchBrowser } from "./support/browser.mjs";
import { assertSucceededCharges, recordPayments, sel, waitForState } from "./support/checkout.mjs";

const T = { timeout: 90_000 };

test("a checkout on another origin pays once and reads payonce's headers", T, async (t) => {
  const shop = await startSandbox();
  const api = await startSandbox({ args: ["--allowed-origin", shop.url] });
  const stranger = await startSandbox();
  let browser;
  try {
    browser = await launchBrowser();
    const page = await browser.firstPage();
    const payments = recordPayments(page);
    await page.goto(`${shop.url}/?api=${encodeURIComponent(api.url)}`);
    await waitForState(page, ["ready"]);

    await page.click(sel.pay);
    await waitForState(page, "paid");

    assert.equal(payments.requests.length, 1, "one POST /payments");
    assert.equal(payments.responses[0].status, 201);
    await assertSucceededCharges(api, 1);
    await assertSucceededCharges(shop, 0);

    // The page's own code can read what payonce answers across origins: x-request-id,
    // Idempotent-Replayed on a replay (the key manager relies on them).
    const seen = await page.evaluate(async (base) => {
      const { token } = await (await fetch(`${base}/_sandbox/token?user=cors-user`)).json();
      const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
      const order = await (await fetch(`${base}/orders`, {
        method: "POST",
        headers,
        body: JSON.stringify({ currency: "jpy", items: [{ sku: "A1", quantity: 1, unit_amount: 1000 }] }),
      })).json();
      const pay = () => fetch(`${base}/payments`, {
        method: "POST",
        headers: { ...headers, "idempotency-key": "cors-key-1" },
        body: JSON.stringify({ order_id: order.order_id, order_version: 1, payment_method: "pm_card_visa" }),
      });
      const first = await pay();
      const again = await pay();
      return {
        statuses: [first.status, again.status],
        requestId: first.headers.get("x-request-id"),
        replayed: again.headers.get("idempotent-replayed"),
      };
    }, api.url);
    assert.deepEqual(seen.statuses, [201, 201]);
    assert.match(seen.requestId ?? "", /^[0-9a-f-]{36}$/);
    assert.equal(seen.replayed, "true");
    await assertSucceededCharges(api, 2);

    // An API that does not list the shop's origin cannot be called from its page at all.
    const refused = await page.evaluate(async (base) => {
      try {
        await fetch(`${base}/orders`, { method: "POST", headers: { authorization: "Bearer x", "content-type": "application/json" }, body: "{}" });
        return "answered";
      } catch (error) {
        return error.name;
      }
    }, stranger.url);
    assert.equal(refused, "TypeError");
    assert.deepEqual(await stranger.charges(), []);
  } catch (error) {
    t.diagnostic(`payonce-local (API), last lines:\n${api.log.slice(-40).join("\n")}`);
    throw error;
  } finally {
    await browser?.close();
    await Promise.all([shop.stop(), api.stop(), stranger.stop()]);
  }
});

test("the demo page is served with a policy that allows only its own code", T, async () => {
  const sandbox = await startSandbox();
  try {
    const response = await fetch(`${sandbox.url}/`);
    const csp = response.headers.get("content-security-policy") ?? "";
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self' 'sha256-[A-Za-z0-9+/]+={0,2}'/);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
    // A request naming another host (DNS rebinding) is not answered.
    const port = new URL(sandbox.url).port;
    const rebound = await new Promise((resolve, reject) => {
      import("node:http").then(({ request }) => {
        const req = request({ host: "127.0.0.1", port, path: "/_sandbox/token", headers: { host: `evil.example:${port}` } }, (res) => {
          res.resume();
          resolve(res.statusCode);
        });
        req.on("error", reject);
        req.end();
      });
    });
    assert.equal(rebound, 403);
  } finally {
    await sandbox.stop();
  }
});
