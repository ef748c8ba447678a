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
  // Three types the API refers to that share a name with another export of the root entry
  // point, which keeps the other: the generated messages RejectedResource and ResourceMeta
  // (kds-mux's own types of those names are exported; the messages are reached through
  // their exported Schemas), and the zone status's SyncCounters (the name is the admin
  // API's generated message). Exporting them would change what those names mean.
  intentionallyNotExported: [
    "src/gen/kds/admin/v1/admin_pb.ts:RejectedResource",
    "src/gen/kds/v1/resource_pb.ts:ResourceMeta",
    "src/observe/zone-status.ts:SyncCounters",
  ],
  treatWarningsAsErrors: false,
  validation: { notExported: true, invalidLink: true, notDocumented: false },
};
