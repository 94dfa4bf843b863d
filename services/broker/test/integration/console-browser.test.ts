import { existsSync, mkdirSync } from "node:fs";
import type { Client } from "@modelcontextprotocol/client";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLegacyHttpBackend, type HttpBackend } from "../fixtures/http-backends.js";
import { createTestServer } from "../fixtures/test-server.js";
import { connectClient, eventually, startBroker, type RunningBroker } from "../helpers/harness.js";

/**
 * The operator console in a real browser: Debian's chromium driven by playwright-core (`.ci/run`
 * installs chromium; `CHROMIUM_PATH` names another). Without a chromium these tests are skipped,
 * except where `CHROMIUM_PATH` or `CI` is set: there a missing browser fails them.
 * `CONSOLE_SCREENSHOTS=<dir>` also saves the README's screenshots there.
 */
const CHROMIUM = process.env.CHROMIUM_PATH ?? ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"].find((path) => existsSync(path));
const REQUIRED = process.env.CHROMIUM_PATH !== undefined || process.env.CI !== undefined;
const SCREENSHOTS = process.env.CONSOLE_SCREENSHOTS;
const ADMIN_KEY = "browser-admin-key-0123456789";
const URI = "push+test://static/a";

if (CHROMIUM === undefined && !REQUIRED) console.warn("console-browser: no chromium found (set CHROMIUM_PATH, or apt-get install chromium); skipped");

describe.skipIf(CHROMIUM === undefined && !REQUIRED)("operator console in a browser", () => {
  let backend: HttpBackend;
  let other: HttpBackend;
  let broker: RunningBroker;
  let browser: Browser;
  let page: Page;
  const clients: Client[] = [];

  beforeAll(async () => {
    if (CHROMIUM === undefined || !existsSync(CHROMIUM)) throw new Error(`no chromium at ${CHROMIUM ?? "/usr/bin/chromium"}: apt-get install chromium, or set CHROMIUM_PATH`);
    backend = await startLegacyHttpBackend(createTestServer({ name: "push" }));
    other = await startLegacyHttpBackend(createTestServer({ name: "polled", subscribe: false }));
    broker = await startBroker(
      {
        backends: [
          { id: "push", url: backend.url, era: "legacy" },
          { id: "poll", url: other.url, era: "legacy", pollIntervalMs: 60_000 },
        ],
        console: { enabled: true, adminKeys: [ADMIN_KEY] },
        subscriptions: { releaseGraceMs: 50 },
      },
      {},
      { readyBackends: ["push", "poll"] },
    );
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
    // The admin key as the Basic password a browser asks for.
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, httpCredentials: { username: "admin", password: ADMIN_KEY } });
    page = await context.newPage();
    if (SCREENSHOTS !== undefined) mkdirSync(SCREENSHOTS, { recursive: true });
  }, 60_000);

  afterAll(async () => {
    await Promise.all(clients.map((client) => client.close().catch(() => undefined)));
    await browser?.close();
    await broker?.close();
    await Promise.all([backend?.close(), other?.close()]);
  });

  const subscribers = (uri: string) => page.locator(`tr[data-uri="${uri}"] [data-subscribers]`);
  const shot = async (name: string): Promise<void> => {
    if (SCREENSHOTS !== undefined) await page.screenshot({ path: `${SCREENSHOTS}/console-${name}.png` });
  };
  const textOf = async (locator: ReturnType<Page["locator"]>): Promise<string | null> => ((await locator.count()) === 0 ? null : locator.first().textContent());

  it("shows a subscription with its count, the update in the live feed, and the count back at 0", async () => {
    await page.goto(new URL("/console", broker.url).href);
    await page.getByRole("heading", { name: "mcp-broker console" }).waitFor();
    expect(await page.getByRole("tab", { selected: true }).textContent()).toBe("Resources");
    await eventually(async () => (await textOf(subscribers(URI))) === "0", "the resource listed with 0 subscribers");

    const client = await connectClient(broker.url, "legacy");
    clients.push(client);
    await client.subscribeResource({ uri: URI });
    await eventually(async () => (await textOf(subscribers(URI))) === "1", "the console to show 1 subscriber", 15_000);
    expect(await page.locator(`tr[data-uri="${URI}"]`).textContent()).toContain("subscribed");

    await client.callTool({ name: "push__emit_update", arguments: { uri: "test://static/a" } });
    await client.callTool({ name: "push__add_tool", arguments: { name: "from_the_browser_test" } });
    // The feed with the keyboard: the tabs take arrow keys.
    await page.getByRole("tab", { name: "Resources" }).focus();
    for (let i = 0; i < 4; i++) await page.keyboard.press("ArrowRight");
    expect(await page.getByRole("tab", { selected: true }).textContent()).toMatch(/^Live feed/);
    const feed = page.getByRole("region", { name: "Live feed" });
    await eventually(async () => ((await feed.textContent()) ?? "").includes(`updated${URI}`.replace("updated", "updated ")), "the update in the live feed", 15_000);
    await eventually(async () => ((await feed.textContent()) ?? "").includes("push__from_the_browser_test"), "the list change with its diff in the live feed", 15_000);
    await shot("feed");

    for (const view of ["Sessions", "Backends", "Catalog"]) {
      await page.getByRole("tab", { name: view }).click();
      await page.getByRole("region", { name: view }).locator("tbody tr").first().waitFor();
      await shot(view.toLowerCase());
    }
    expect(await page.getByRole("region", { name: "Sessions" }).count()).toBe(0);
    await page.getByRole("tab", { name: "Resources" }).click();
    await eventually(async () => (await textOf(subscribers(URI))) === "1", "the resources view again");
    await shot("resources");
    // Search with the keyboard: "/" goes to the view's search field.
    await page.keyboard.press("/");
    await page.keyboard.type(URI);
    expect(await page.locator("tbody tr").count()).toBe(1);
    await page.keyboard.press("Control+a");
    await page.keyboard.press("Backspace");

    await client.unsubscribeResource({ uri: URI });
    await eventually(async () => (await textOf(subscribers(URI))) === "0", "the console to show 0 subscribers", 15_000);
  }, 90_000);

  it("is readable on a phone: no page-wide horizontal scroll, the tabs wrap", async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(new URL("/console/?on=phone#resources", broker.url).href);
    await eventually(async () => (await textOf(subscribers(URI))) !== null, "the resources on a phone");
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    await shot("phone");
  }, 30_000);
});
