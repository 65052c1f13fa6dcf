// Starts target/debug/payonce-local (or $PAYONCE_LOCAL_BIN) on free loopback ports for one
// test, waits for its banner, and reads the fake PSP's charges.
import { spawn } from "node:child_process";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const webDir = path.resolve(fileURLToPath(new URL("../..", import.meta.url)));
export const repoRoot = path.resolve(webDir, "../..");

const START_TIMEOUT_MS = 30_000;
const LOG_LINES = 300;

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function lines(stream, onLine) {
  let rest = "";
  stream.setEncoding("utf8");
  stream.on("data", (chunk) => {
    rest += chunk;
    let newline;
    while ((newline = rest.indexOf("\n")) >= 0) {
      onLine(rest.slice(0, newline).replace(/\x1b\[[0-9;]*m/g, ""));
      rest = rest.slice(newline + 1);
    }
  });
}

async function startOnce(bin, args) {
  const port = await freePort();
  let pspPort = await freePort();
  while (pspPort === port) pspPort = await freePort();
  const child = spawn(bin, ["--port", String(port), "--psp-port", String(pspPort), ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, NO_COLOR: "1" },
  });
  const log = [];
  const keep = (line) => {
    log.push(line);
    if (log.length > LOG_LINES) log.shift();
  };
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const ready = new Promise((resolve, reject) => {
    let url = null;
    let pspUrl = null;
    const timer = setTimeout(() => reject(new Error(`payonce-local printed no banner within ${START_TIMEOUT_MS} ms`)), START_TIMEOUT_MS);
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`payonce-local exited (code ${code}, signal ${signal}) before it was ready:\n${log.join("\n")}`));
    });
    lines(child.stdout, (line) => {
      keep(line);
      url ??= line.match(/^\s+API\s+(http\S+)/)?.[1] ?? null;
      pspUrl ??= line.match(/^\s+fake PSP\s+(http\S+)/)?.[1] ?? null;
      if (line.startsWith("Press Ctrl-C")) {
        clearTimeout(timer);
        if (url && pspUrl) resolve({ url, pspUrl });
        else reject(new Error(`banner without the API or fake PSP URL:\n${log.join("\n")}`));
      }
    });
    lines(child.stderr, keep);
  });
  ready.catch(() => {});
  return { child, log, exited, ready };
}

/**
 * A running sandbox: {url, pspUrl, log, charges(), succeededCharges(), stop()}; `args` are
 * passed on to payonce-local (e.g. `["--allowed-origin", url]`).
 */
export async function startSandbox({ args = [] } = {}) {
  const bin = process.env.PAYONCE_LOCAL_BIN || path.join(repoRoot, "target/debug/payonce-local");
  let lastError;
  // A free port can be taken between the probe and the bind: try again with new ports.
  for (let attempt = 0; attempt < 3; attempt++) {
    const started = await startOnce(bin, args);
    try {
      const { url, pspUrl } = await started.ready;
      return sandbox(started, url, pspUrl);
    } catch (error) {
      lastError = error;
      started.child.kill("SIGKILL");
      await started.exited;
      if (error.code === "ENOENT") break;
    }
  }
  throw lastError;
}

async function control(pspUrl, path) {
  const response = await fetch(`${pspUrl}${path}`, { method: "POST" });
  if (!response.ok) throw new Error(`POST ${path}: HTTP ${response.status}`);
}

function sandbox({ child, log, exited }, url, pspUrl) {
  return {
    url,
    pspUrl,
    log,
    /** Every PaymentIntent the fake PSP holds. */
    async charges() {
      const response = await fetch(`${pspUrl}/_fake/charges`);
      if (!response.ok) throw new Error(`GET /_fake/charges: HTTP ${response.status}`);
      return response.json();
    },
    /**
     * Holds the fake PSP's webhooks until `releaseWebhooks()`: what payonce answers is then
     * its answer without any webhook, not the winner of a race with one.
     */
    async holdWebhooks() {
      await control(pspUrl, "/_fake/webhooks/hold");
    },
    /** Lets the held webhooks go, in order. */
    async releaseWebhooks() {
      await control(pspUrl, "/_fake/webhooks/release");
    },
    /** How many charges succeeded at the PSP: the number the customer pays. */
    async succeededCharges() {
      return (await this.charges()).filter((charge) => charge.status === "succeeded");
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
        await exited;
        clearTimeout(timer);
      }
    },
  };
}
