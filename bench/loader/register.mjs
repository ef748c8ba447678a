// Registers the bench's TypeScript loader (hooks.mjs): `node --import
// ./bench/loader/register.mjs bench/run.ts`. See hooks.mjs for why the
// benchmarks do not run under tsx.
import { register } from "node:module";

register("./hooks.mjs", import.meta.url);
