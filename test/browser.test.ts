// The browser zone in headless Chromium (Debian's chromium, driven by
// playwright-core; .ci/run installs it): the page dials the global over the
// half-duplex transport, shows the global's resources, and its own
// dataplanes reach the global.
import { existsSync } from "node:fs";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create } from "@bufbuild/protobuf";
import { MeshSpecSchema } from "../src/gen/kds/example/v1/example_pb.ts";
import type { GlobalControlPlane } from "../src/global/global-control-plane.ts";
import type { ServedGlobal } from "../src/adapters/node/serve-global.ts";
import { serveBrowserDemo } from "../examples/browser/serve.ts";
import { eventually } from "./contract/harness.ts";

const executablePath = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";

describe("browser zone", () => {
  let browser: Browser;
  let global: GlobalControlPlane;
  let served: ServedGlobal;
  const stop = new AbortController();

  beforeAll(async () => {
    if (!existsSync(executablePath)) {
      throw new Error(`no Chromium at ${executablePath}: install Debian's chromium (apt-get install chromium; .ci/run does) or set CHROMIUM_PATH`);
    }
    ({ global, served } = await serveBrowserDemo({ zones: ["browser-1"], signal: stop.signal }));
    browser = await chromium.launch({
      executablePath,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
    });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    stop.abort();
    await served?.close();
  });

  it("syncs resources both ways over the half-duplex transport", async () => {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(`${served.url}/?zone=browser-1`);
    await page.waitForSelector('#status[data-online="true"]', { timeout: 20_000 });
    await page.waitForSelector("li:text('Mesh default')", { timeout: 20_000 });
    await page.waitForSelector("li:text('TrafficPolicy default/timeouts')", { timeout: 20_000 });

    await global.store.put({ kind: "Mesh", name: "added-later", spec: create(MeshSpecSchema, {}) });
    await page.waitForSelector("li:text('Mesh added-later')", { timeout: 20_000 });

    await page.click("#add-dataplane");
    await eventually(async () => (await global.store.get("Dataplane", "default", "browser-1.dp-1")) !== undefined, "the browser's dataplane on the global", 20_000);
    expect((await global.zoneStatus("browser-1"))?.online).toBe(true);
    expect(errors).toEqual([]);
    await page.close();
  }, 60_000);
});
