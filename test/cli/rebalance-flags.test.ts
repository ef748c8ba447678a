// The rebalancing flags of `kds-mux global`, parsed in process.
import { InvalidArgumentError } from "commander";
import { describe, expect, it } from "vitest";
import { advertiseUrlOption, isDialable } from "../../src/cli/rebalance-flags.ts";

const parse = (text: string): unknown => {
  const option = advertiseUrlOption();
  return option.parseArg?.(text, undefined);
};

describe("--advertise-url", () => {
  it("takes an http or https URL as written", () => {
    expect(parse("https://global-1.example.com:5685")).toBe("https://global-1.example.com:5685");
    expect(parse("http://10.0.0.7:5685")).toBe("http://10.0.0.7:5685");
  });

  it.each([
    ["not a URL", "global one", "is not a URL; use for example https://"],
    ["another scheme", "grpc://global-1:5685", "must be an http:// or https:// URL"],
  ])("refuses %s, saying what to write", (_what, text, expected) => {
    let thrown: unknown;
    try {
      parse(text);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(InvalidArgumentError);
    expect((thrown as Error).message).toContain(expected);
    expect((thrown as Error).message).toContain("--advertise-url");
  });

  it("tells a wildcard listener's URL, which no zone can dial, from a dialable one", () => {
    expect(isDialable("http://0.0.0.0:5685")).toBe(false);
    expect(isDialable("http://[::]:5685")).toBe(false);
    expect(isDialable("http://127.0.0.1:5685")).toBe(true);
    expect(isDialable("https://global-1.example.com")).toBe(true);
  });
});
