#!/usr/bin/env node
// The kds-mux executable. In a checkout (tsconfig.json beside package.json,
// tsx installed) it runs the TypeScript sources; in the published package, the
// compiled dist/. The package ships src/ too (for source maps) but no
// tsconfig.json, so a project that installs kds-mux and has tsx of its own
// still runs dist/ (scripts/check-package.mjs checks it).
import { existsSync } from "node:fs";

const checkout = new URL("../tsconfig.json", import.meta.url);
const source = new URL("../src/cli/run.ts", import.meta.url);
const compiled = new URL("../dist/cli/run.js", import.meta.url);

let useSource = existsSync(checkout) && existsSync(source);
if (useSource) {
  try {
    const { register } = await import("tsx/esm/api");
    register();
  } catch {
    useSource = false;
  }
}
if (useSource) await import(source.href);
else if (existsSync(compiled)) await import(compiled.href);
else {
  process.stderr.write(
    "kds-mux: neither dist/ (run `npm run build`) nor tsx (run `npm install`) is available\n",
  );
  process.exit(1);
}
