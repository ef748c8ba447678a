// One conformance cell of the runtime matrix, run on Node, Deno or Bun: the
// kit (src/conformance over the node:http2 adapter) checks a global
// (`global URL ZONE`) or plays the global for a zone (`zone KINDS_FILE`): it
// listens on a port the OS picks and prints `listening URL` for the zone to
// dial. Then prints one JSON line: { ok, ms, passed, skipped, failed: [rule: detail] }.
import { conformanceDialer, listenForZone } from "../../src/adapters/node/conformance-link.ts";
import { checkGlobal, checkZone, type CheckResult } from "../../src/conformance/index.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { kindCatalog } from "../../src/sync/kind-catalog.ts";
import { loadKindsFile } from "../../src/cli/kinds-file.ts";

const [mode, a, b] = process.argv.slice(2);
const signal = AbortSignal.timeout(240_000);
const started = performance.now();
let results: CheckResult[];
if (mode === "global") {
  results = await checkGlobal({
    dial: conformanceDialer({ url: a as string }),
    zone: b as string,
    signal,
  });
} else {
  // Port 0: a port picked at random could be taken by another test's process meanwhile.
  const listener = await listenForZone("127.0.0.1", 0, signal);
  console.log(`listening ${listener.url}`);
  try {
    results = await checkZone({
      accept: listener.accept,
      catalog: kindCatalog(createTypeRegistry(loadKindsFile(a as string).types).list()),
      dialWaitMs: 60_000,
      signal,
    });
  } finally {
    await listener.close();
  }
}
const failed = results
  .filter((r) => r.outcome === "fail")
  .map((r) => `${r.rule}: ${r.detail.slice(0, 200)}`);
console.log(
  JSON.stringify({
    ok: failed.length === 0,
    ms: Math.round(performance.now() - started),
    passed: results.filter((r) => r.outcome === "pass").length,
    skipped: results.filter((r) => r.outcome === "skip").length,
    failed,
  }),
);
process.exit(0);
