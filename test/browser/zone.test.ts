// The browser zone in headless Chromium (driven by playwright-core; a system
// Chromium, CHROMIUM_PATH, or the one shipped in the npm package
// @sparticuz/chromium: see test/support/chromium.ts): the page dials the
// global over the half-duplex transport, shows the global's resources, and
// its own dataplanes reach the global.
import type { Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { MeshSpecSchema } from "../../examples/example-kinds/index.ts";
import type { GlobalControlPlane } from "../../src/global/global-control-plane.ts";
import type { ServedGlobal } from "../../src/adapters/node/serve-global.ts";
import { pageUrl, serveBrowserDemo } from "../../examples/browser/serve.ts";
import { eventually } from "../contract/harness.ts";
import { launchChromium } from "../support/chromium.ts";

describe("browser zone", () => {
  let browser: Browser;
  let global: GlobalControlPlane;
  let served: ServedGlobal;
  const stop = new AbortController();

  beforeAll(async () => {
    ({ global, served } = await serveBrowserDemo({ zones: ["browser-1"], signal: stop.signal }));
    browser = await launchChromium();
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    stop.abort();
    await served?.close();
  });

  it("syncs resources both ways over the half-duplex transport", async () => {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(await pageUrl(global, served, "browser-1"));
    await page.waitForSelector('#status[data-online="true"]', { timeout: 20_000 });
    await page.waitForSelector("li:text('Mesh default')", { timeout: 20_000 });
    await page.waitForSelector("li:text('TrafficPolicy default/timeouts')", { timeout: 20_000 });

    await global.store.put({ kind: "Mesh", name: "added-later", spec: create(MeshSpecSchema, {}) });
    await page.waitForSelector("li:text('Mesh added-later')", { timeout: 20_000 });

    await page.click("#add-dataplane");
    await eventually(
      async () => (await global.store.get("Dataplane", "default", "browser-1.dp-1")) !== undefined,
      "the browser's dataplane on the global",
      20_000,
    );
    expect((await global.zoneStatus("browser-1"))?.online).toBe(true);
    expect(errors).toEqual([]);
    await page.close();
  }, 60_000);
});
