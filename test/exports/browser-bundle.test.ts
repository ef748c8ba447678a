// Every runtime-neutral entry point (all of package.json "exports" but the
// node/deno/bun adapters) and the browser example bundle for a browser with
// no `node:` import, no Node built-in, and no file of the CLI or of a runtime
// adapter. A control bundle of `kds-mux/node` shows the check does see
// node:http2 when it is there.
import { readFileSync } from "node:fs";
import { builtinModules } from "node:module";
import { fileURLToPath } from "node:url";
import { build, type Plugin } from "esbuild";
import { describe, expect, it } from "vitest";

const root = new URL("../../", import.meta.url);
const pkg = JSON.parse(readFileSync(new URL("package.json", root), "utf8")) as {
  exports: Record<string, unknown>;
};
const deno = JSON.parse(readFileSync(new URL("deno.json", root), "utf8")) as {
  exports: Record<string, string>;
};
const RUNTIME_ADAPTERS = ["./node", "./deno", "./bun"];
const builtins = new Set(builtinModules);

interface BrowserBundle {
  /** Node built-ins the bundle imports, as `specifier (from importer)`. */
  readonly nodeImports: string[];
  /** Source files of this project in the bundle, relative to the root. */
  readonly projectFiles: string[];
  readonly bytes: number;
  readonly text: string;
}

/** Bundles `entry` for the browser, recording (instead of failing on) every Node built-in it imports. */
async function bundleForBrowser(entry: string): Promise<BrowserBundle> {
  const nodeImports: string[] = [];
  const recordNodeBuiltins: Plugin = {
    name: "record-node-builtins",
    setup(b) {
      b.onResolve({ filter: /.*/ }, (args) => {
        if (!args.path.startsWith("node:") && !builtins.has(args.path)) return undefined;
        nodeImports.push(`${args.path} (from ${args.importer.replace(fileURLToPath(root), "")})`);
        return { path: args.path, external: true };
      });
    },
  };
  const result = await build({
    entryPoints: [fileURLToPath(new URL(entry, root))],
    bundle: true,
    write: false,
    metafile: true,
    format: "esm",
    platform: "browser",
    target: "es2022",
    logLevel: "silent",
    plugins: [recordNodeBuiltins],
  });
  const text = result.outputFiles.map((f) => f.text).join("\n");
  const projectFiles = Object.keys(result.metafile.inputs).filter(
    (p) => !p.includes("node_modules/"),
  );
  return { nodeImports, projectFiles, bytes: text.length, text };
}

/** Entry points that are for servers only: the PostgreSQL store needs a TCP client (postgres.js uses Node's net and tls). */
const SERVER_ONLY = ["./postgres"];
const neutralEntries = Object.keys(pkg.exports).filter(
  (name) => !RUNTIME_ADAPTERS.includes(name) && !SERVER_ONLY.includes(name),
);

describe("browser bundles", () => {
  it("cover the runtime-neutral entry points of the exports map", () => {
    expect(neutralEntries).toEqual(
      expect.arrayContaining([".", "./mux", "./transport", "./zone", "./fetch"]),
    );
  });

  for (const name of neutralEntries) {
    it(`kds-mux${name.slice(1)} (${deno.exports[name]}) pulls no node: import, CLI or runtime adapter`, async () => {
      const source = deno.exports[name];
      expect(source, `deno.json exports ${name}`).toBeDefined();
      const bundle = await bundleForBrowser(source!);
      expect(bundle.nodeImports).toEqual([]);
      expect(bundle.text).not.toContain("node:http2");
      expect(
        bundle.projectFiles.filter((p) => /^src\/(cli|adapters\/(node|deno|bun))\//.test(p)),
      ).toEqual([]);
      expect(bundle.projectFiles.length).toBeGreaterThan(0);
    });
  }

  it("the browser example (examples/browser/main.ts) pulls no node: import, CLI or runtime adapter", async () => {
    const bundle = await bundleForBrowser("examples/browser/main.ts");
    expect(bundle.nodeImports).toEqual([]);
    expect(bundle.text).not.toContain("node:http2");
    expect(
      bundle.projectFiles.filter((p) => /^src\/(cli|adapters\/(node|deno|bun))\//.test(p)),
    ).toEqual([]);
  });

  it("a layer's entry point leaves out the layers it does not need", async () => {
    const transport = await bundleForBrowser(deno.exports["./transport"]!);
    expect(
      transport.projectFiles.filter((p) => /^src\/(global|sync|discovery|zone)\//.test(p)),
    ).toEqual([]);
    const mux = await bundleForBrowser(deno.exports["./mux"]!);
    expect(
      mux.projectFiles.filter((p) => /^src\/(global|sync|discovery|zone|transport)\//.test(p)),
    ).toEqual([]);
  });

  it("(control) sees node:http2 in the node adapter's bundle", async () => {
    const bundle = await bundleForBrowser(deno.exports["./node"]!);
    expect(bundle.nodeImports.some((i) => i.startsWith("node:http2 "))).toBe(true);
    expect(bundle.text).toContain("node:http2");
  });
});
