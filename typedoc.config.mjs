// `npm run docs`: the API reference from the TSDoc comments, into site/api/
// (git-ignored). One entry point per subpath of package.json "exports", so
// the reference shows exactly what a user can import: ./dist/X.d.ts is
// documented from ./src/X.ts.
import { readFileSync } from "node:fs";

const pkg = JSON.parse(readFileSync(new URL("./package.json", import.meta.url), "utf8"));

/** "./dist/adapters/node/index.d.ts" -> "./src/adapters/node/index.ts" */
const source = (types) => types.replace(/^\.\/dist\//, "./src/").replace(/\.d\.ts$/, ".ts");

/** @type {Partial<import("typedoc").TypeDocOptions>} */
export default {
  entryPoints: Object.values(pkg.exports).map((entry) => source(entry.types)),
  tsconfig: "./tsconfig.build.json",
  out: "./site/api",
  name: `${pkg.name} ${pkg.version}`,
  readme: "none",
  excludePrivate: true,
  excludeInternal: true,
  disableSources: true, // no source links: a checkout has no remote to point them at
  // protoc-gen-es marks generated declarations with @generated
  blockTags: [...(await import("typedoc")).OptionDefaults.blockTags, "@generated"],
  // The zone status's SyncCounters shares its name with the admin API's generated message,
  // which kds-mux/schema exports; exporting both from one entry point cannot be.
  intentionallyNotExported: ["src/observe/zone-status.ts:SyncCounters"],
  treatWarningsAsErrors: false,
  validation: { notExported: true, invalidLink: true, notDocumented: false },
};
