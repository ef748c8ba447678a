// A zone control plane running in a web page: it dials the global that
// served the page over the half-duplex transport (connect-web on fetch),
// proving its name with the zone token in the page's fragment (#token=...,
// which the browser never sends to a server), and shows the resources it
// holds as they sync. Built with esbuild by
// examples/browser/build.ts; served by examples/browser/serve.ts.
import { create } from "@bufbuild/protobuf";
import { createConnectTransport } from "@connectrpc/connect-web";
import {
  ZoneControlPlane,
  consoleLogger,
  createTypeRegistry,
  resourceKey,
} from "../../src/index.ts";
import { halfDuplexMuxTransport } from "../../src/transport/index.ts";
import { DataplaneSpecSchema, exampleTypes } from "../example-kinds/index.ts";

const zoneName = new URLSearchParams(location.search).get("zone") ?? "browser";
const token = new URLSearchParams(location.hash.slice(1)).get("token") ?? undefined;
const zone = new ZoneControlPlane({
  name: zoneName,
  token,
  transport: halfDuplexMuxTransport(
    createConnectTransport({ baseUrl: location.origin, useBinaryFormat: true }),
    { target: location.origin },
  ),
  types: createTypeRegistry(exampleTypes), // it writes Dataplanes before its first session
  logger: consoleLogger("warn"),
  backoff: { baseMs: 200, capMs: 2_000 },
});
const stop = new AbortController();
addEventListener("pagehide", () => stop.abort());

const status = document.getElementById("status") as HTMLElement;
const list = document.getElementById("resources") as HTMLElement;

async function render(): Promise<void> {
  const items: string[] = [];
  for (const type of zone.types.list()) {
    for (const r of (await zone.store.list(type.kind)).resources)
      items.push(`${type.kind} ${resourceKey(r.meta.mesh, r.meta.name)}`);
  }
  list.replaceChildren(
    ...items.map((text) => {
      const li = document.createElement("li");
      li.textContent = text;
      return li;
    }),
  );
  const s = zone.status();
  status.textContent = s.online
    ? `zone "${zoneName}" online`
    : `zone "${zoneName}" offline${s.lastEnd === undefined ? "" : `: ${s.lastEnd.message}`}`;
  status.dataset.online = String(s.online);
}

let added = 0;
document.getElementById("add-dataplane")?.addEventListener("click", () => {
  added++;
  void zone.store.put({
    kind: "Dataplane",
    mesh: "default",
    name: `dp-${added}`,
    spec: create(DataplaneSpecSchema, { address: `10.9.0.${added}`, service: "browser" }),
  });
});

void (async () => {
  for await (const _change of zone.store.watch(0, { signal: stop.signal })) await render();
})();
setInterval(() => void render(), 500);
void zone.run(stop.signal);
void render();
