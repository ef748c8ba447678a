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
  // Two generated message types whose names the root entry point gives to kds-mux's own
  // types (sync's ResourceMeta and RejectedResource, and the status's SyncCounters); their
  // Schemas are exported, the message types are reached through them.
  intentionallyNotExported: [
    "src/gen/kds/admin/v1/admin_pb.ts:RejectedResource",
    "src/gen/kds/v1/resource_pb.ts:ResourceMeta",
    "src/sync/status.ts:SyncCounters",
  ],
  treatWarningsAsErrors: false,
  validation: { notExported: true, invalidLink: true, notDocumented: false },
};
