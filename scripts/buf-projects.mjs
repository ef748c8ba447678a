// The buf projects of this repository: the core protos, the example kinds
// (whose descriptor set the CLI loads by default) and the own-kinds example
// project. `npm run generate` writes their outputs; `npm run check:gen`
// fails when a committed output drifts. buf and protoc-gen-es come from this
// checkout's node_modules (no network).
import { execFileSync } from "node:child_process";
import { delimiter, join } from "node:path";

/** Root of the checkout. */
export const root = new URL("..", import.meta.url).pathname;

/**
 * Each project: its directory, the directories `buf generate` writes (as its
 * buf.gen.yaml says), and the descriptor set `buf build` writes, if any.
 */
export const bufProjects = [
  { dir: ".", generated: ["src/gen"] },
  { dir: "examples/example-kinds", generated: ["gen"], descriptorSet: "kinds.binpb" },
  { dir: "examples/own-kinds", generated: ["src/gen"] },
];

const env = {
  ...process.env,
  PATH: `${join(root, "node_modules", ".bin")}${delimiter}${process.env.PATH ?? ""}`,
};

/** Runs buf with `args` in project directory `dir`; exits the process with buf's message when it fails. */
export function buf(dir, args) {
  try {
    return execFileSync(join(root, "node_modules", ".bin", "buf"), args, {
      cwd: join(root, dir),
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
  } catch (error) {
    console.error(
      `\`buf ${args.join(" ")}\` failed in ${dir}:\n${String(error.stderr ?? "").trim() || error.message}`,
    );
    process.exit(1);
  }
}
