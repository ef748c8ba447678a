// The CLI's read-only admin calls are made again when the server ended them unanswered (a stream reset
// or a lost connection, no kds error code): an admin listener at its cap evicts connections that have
// not sent their credentials yet, a client's own among them under a flood. Writes never are.
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { READ_RETRY_DELAYS_MS, call, read } from "../../src/cli/admin-client.ts";

const SERVER = "http://127.0.0.1:1";

/** A call failing with each of `errors` in turn, then answering "ok"; counts its attempts. */
function flaky(errors: unknown[]): { work: () => Promise<string>; attempts: () => number } {
  let n = 0;
  return {
    work: async () => {
      const error = errors[n++];
      if (error !== undefined) throw error;
      return "ok";
    },
    attempts: () => n,
  };
}

describe("admin reads", () => {
  it("are made again after a reset or a lost connection, at most twice", async () => {
    const twice = flaky([
      new ConnectError("reset", Code.Canceled),
      new ConnectError("gone", Code.Unavailable),
    ]);
    expect(await read(SERVER, twice.work)).toBe("ok");
    expect(twice.attempts()).toBe(3);
    const always = flaky(Array.from({ length: 5 }, () => new ConnectError("reset", Code.Canceled)));
    await expect(read(SERVER, always.work)).rejects.toMatchObject({ code: "aborted" });
    expect(always.attempts()).toBe(READ_RETRY_DELAYS_MS.length + 1);
  });

  it("are not made again for an answer, nor a refusal the server named", async () => {
    const denied = flaky([new ConnectError("no", Code.PermissionDenied)]);
    await expect(read(SERVER, denied.work)).rejects.toThrow(/no/);
    expect(denied.attempts()).toBe(1);
    const named = new ConnectError("overloaded", Code.Unavailable);
    named.metadata.set("kds-error-code", "overloaded");
    const refused = flaky([named]);
    await expect(read(SERVER, refused.work)).rejects.toMatchObject({ code: "overloaded" });
    expect(refused.attempts()).toBe(1);
  });

  it("while writes are never made again", async () => {
    const write = flaky([new ConnectError("reset", Code.Canceled)]);
    await expect(call(SERVER, write.work)).rejects.toMatchObject({ code: "aborted" });
    expect(write.attempts()).toBe(1);
  });
});
