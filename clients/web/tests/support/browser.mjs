// Debian's Chromium driven by playwright-core, one fresh profile per test.
import { chromium } from "playwright-core";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";

export const CHROMIUM = process.env.PAYONCE_CHROMIUM || "/usr/bin/chromium";
const ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/**
 * One browser with one context (a fresh --user-data-dir in a temp dir; playwright passes it
 * to Chromium for a persistent context). Pages of the context are tabs: each has its own
 * sessionStorage.
 */
export async function launchBrowser() {
  const userDataDir = await mkdtemp(path.join(tmpdir(), "payonce-chromium-"));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    viewport: { width: 900, height: 760 },
    timeout: 60_000,
  });
  context.setDefaultTimeout(20_000);
  return {
    context,
    /** The context's first tab (a persistent context opens with one). */
    async firstPage() {
      return context.pages()[0] ?? context.newPage();
    },
    async close() {
      await context.close().catch(() => {});
      await rm(userDataDir, { recursive: true, force: true });
    },
  };
}
