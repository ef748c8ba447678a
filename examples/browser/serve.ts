// Serves the browser zone: a global control plane on plain HTTP/1.1 (what a
// browser's fetch speaks without TLS) that also serves the page. Open the
// printed address (it carries a zone token in its fragment); `npm run
// example:browser`.
import { create } from "@bufbuild/protobuf";
import { readFileSync } from "node:fs";
import { serveGlobal, type ServedGlobal } from "../../src/adapters/node/index.ts";
import { GlobalControlPlane, consoleLogger, createTypeRegistry } from "../../src/index.ts";
import { MeshSpecSchema, TrafficPolicySpecSchema, exampleTypes } from "../example-kinds/index.ts";
import { buildBrowserZone } from "./build.ts";

/** The page's address for zone `zone`, with a fresh zone token in the fragment (never sent to a server). */
export async function pageUrl(
  global: GlobalControlPlane,
  served: ServedGlobal,
  zone: string,
): Promise<string> {
  const { token } = await global.tokens.issueZoneToken(zone);
  return `${served.url}/?zone=${zone}#token=${token}`;
}

/** Builds the page and starts a global that serves it; zones named in `zones` are registered. */
export async function serveBrowserDemo(
  options: { port?: number; zones?: string[]; signal?: AbortSignal } = {},
): Promise<{ global: GlobalControlPlane; served: ServedGlobal }> {
  const dir = await buildBrowserZone();
  const global = new GlobalControlPlane({
    types: createTypeRegistry(exampleTypes),
    logger: consoleLogger("warn"),
  });
  const stop = new AbortController();
  options.signal?.addEventListener("abort", () => stop.abort(), { once: true });
  global.start(stop.signal);
  for (const zone of options.zones ?? ["browser"]) await global.registerZone(zone);
  await global.store.put({
    kind: "Mesh",
    name: "default",
    spec: create(MeshSpecSchema, { mtls: true }),
  });
  await global.store.put({
    kind: "TrafficPolicy",
    mesh: "default",
    name: "timeouts",
    spec: create(TrafficPolicySpecSchema, { timeoutMs: 1500 }),
  });
  const files: Record<string, [string, string]> = {
    "/": ["index.html", "text/html"],
    "/index.html": ["index.html", "text/html"],
    "/main.js": ["main.js", "text/javascript"],
  };
  const served = await serveGlobal(global.server, {
    port: options.port ?? 0,
    httpVersion: "1.1",
    fallback: (request, response) => {
      const file = files[new URL(request.url ?? "/", "http://x").pathname];
      if (file === undefined) {
        response.writeHead(404);
        response.end("not found");
        return;
      }
      response.writeHead(200, { "content-type": file[1] });
      response.end(readFileSync(`${dir}${file[0]}`));
    },
  });
  return { global, served };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { global, served } = await serveBrowserDemo({ port: 5690 });
  console.log(`open ${await pageUrl(global, served, "browser")} in a browser (Ctrl-C to stop)`);
}
