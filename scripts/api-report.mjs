// The public API report: one api-extractor report per entry point of
// package.json's exports, checked in under api/. `npm run check:api` (a step
// of npm test) fails when the declarations of an entry point no longer match
// its report, so a change to the public surface shows in review;
// `npm run api:update` rewrites the reports after a deliberate change.
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Extractor, ExtractorConfig } from "@microsoft/api-extractor";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const update = process.argv.includes("--update");
// Outside node_modules: api-extractor takes whatever lies under a node_modules folder for another package.
const work = mkdtempSync(join(tmpdir(), "kds-mux-api-"));
const declarations = join(work, "dts");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));

mkdirSync(join(work, "temp"), { recursive: true });
// Declarations only, from the same sources and settings as the build.
execFileSync(
  process.execPath,
  [
    join(root, "node_modules", "typescript", "bin", "tsc"),
    "-p",
    join(root, "tsconfig.build.json"),
    "--emitDeclarationOnly",
    "--sourceMap",
    "false",
    "--outDir",
    declarations,
  ],
  { stdio: "inherit" },
);

// tsc keeps the sources' relative ".ts" specifiers in declarations (TypeScript resolves them to
// the .d.ts beside); api-extractor would take them for external modules and report bare
// re-exports, so they are pointed at the emitted ".js" names first.
for (const entry of readdirSync(declarations, { recursive: true, withFileTypes: true })) {
  if (!entry.isFile() || !entry.name.endsWith(".d.ts")) continue;
  const file = join(entry.parentPath, entry.name);
  const text = readFileSync(file, "utf8");
  const fixed = text.replace(/(["'])(\.\.?\/[^"']*)\.ts\1/g, "$1$2.js$1");
  if (fixed !== text) writeFileSync(file, fixed);
}

const changed = [];
for (const [entry, target] of Object.entries(pkg.exports)) {
  const name = entry === "." ? "kds-mux" : `kds-mux-${entry.slice(2)}`;
  const config = ExtractorConfig.prepare({
    configObject: {
      projectFolder: root,
      mainEntryPointFilePath: join(declarations, target.types.replace(/^\.\/dist\//, "")),
      compiler: { tsconfigFilePath: join(root, "tsconfig.build.json") },
      apiReport: {
        enabled: true,
        reportFileName: `${name}.api.md`,
        reportFolder: join(root, "api"),
        reportTempFolder: join(work, "temp"),
      },
      docModel: { enabled: false },
      dtsRollup: { enabled: false },
      tsdocMetadata: { enabled: false },
      messages: {
        // Types an entry point names but another entry point exports (a layer's options types) are reachable; say nothing of them.
        extractorMessageReporting: {
          "ae-forgotten-export": { logLevel: "none" },
          "ae-missing-release-tag": { logLevel: "none" },
          "ae-internal-missing-underscore": { logLevel: "none" },
        },
        tsdocMessageReporting: { default: { logLevel: "none" } },
        compilerMessageReporting: { default: { logLevel: "warning" } },
      },
    },
    configObjectFullPath: join(root, "api", "api-extractor.json"),
    packageJsonFullPath: join(root, "package.json"),
  });
  const result = Extractor.invoke(config, { localBuild: update, showVerboseMessages: false });
  if (result.apiReportChanged) changed.push(`api/${name}.api.md`);
  if (!result.succeeded && !result.apiReportChanged)
    throw new Error(`api-extractor failed on ${entry} (${result.errorCount} errors)`);
}
rmSync(work, { recursive: true, force: true });
if (changed.length > 0 && !update) {
  console.error(
    `The public API changed: ${changed.join(", ")} no longer match. If the change is deliberate, run \`npm run api:update\` and commit the reports with it.`,
  );
  process.exit(1);
}
console.log(
  update
    ? `api reports written (${Object.keys(pkg.exports).length} entry points${changed.length > 0 ? `, ${changed.length} changed` : ""})`
    : `api reports match (${Object.keys(pkg.exports).length} entry points)`,
);
