// The buffer ceilings of `kds-mux global`: --max-session-buffer-bytes and
// --max-buffer-bytes become session byte windows and a memory budget, and bad
// values are refused with a message that says what to pass.
import { describe, expect, it } from "vitest";
import { bufferLimits } from "../../src/cli/serve-commands.ts";
import { run } from "./process.ts";

describe("buffer flags", () => {
  it("split the session's bytes between its lanes and size the process's budget", () => {
    const d = bufferLimits({});
    expect(d.session).toEqual({});
    expect(d.budget.limitBytes).toBe(256 * 1024 * 1024);
    const custom = bufferLimits({ maxSessionBufferBytes: "32MiB", maxBufferBytes: "1GiB" });
    expect(custom.session).toEqual({
      requestWindowBytes: 16 * 1024 * 1024,
      responseWindowBytes: 16 * 1024 * 1024,
    });
    expect(custom.budget.limitBytes).toBe(1024 ** 3);
    expect(bufferLimits({ maxBufferBytes: String(20 * 1024 * 1024) }).budget.limitBytes).toBe(
      20 * 1024 * 1024,
    );
  });

  it("refuse sizes that are not sizes, that cannot hold the largest frame, or a budget below one session", () => {
    expect(() => bufferLimits({ maxSessionBufferBytes: "lots" })).toThrow(
      /--max-session-buffer-bytes "lots" is not a byte size; use for example 16MiB/,
    );
    expect(() => bufferLimits({ maxSessionBufferBytes: "0" })).toThrow(/not a byte size/);
    expect(() => bufferLimits({ maxSessionBufferBytes: "4MiB" })).toThrow(
      /too small: .* at least 8388608 \(8MiB\)/,
    );
    expect(() => bufferLimits({ maxBufferBytes: "8MiB" })).toThrow(
      /--max-buffer-bytes 8MiB is smaller than one session's buffers \(16777216 bytes/,
    );
    expect(() =>
      bufferLimits({ maxSessionBufferBytes: "8MiB", maxBufferBytes: "8MiB" }),
    ).not.toThrow();
  });

  it("make kds-mux global exit 2 with the reason before it starts anything", async () => {
    const r = await run([
      "global",
      "--listen",
      "127.0.0.1:0",
      "--admin-listen",
      "127.0.0.1:0",
      "--store",
      "memory",
      "--insecure-no-zone-auth",
      "--max-buffer-bytes",
      "1MiB",
    ]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--max-buffer-bytes 1MiB is smaller than one session's buffers/);
  }, 120_000);
});
