import { describe, expect, it } from "vitest";
import { isAborted } from "../../src/util/abort.ts";

describe("isAborted", () => {
  it("is false without a signal and for a signal that has not aborted", () => {
    expect(isAborted(undefined)).toBe(false);
    expect(isAborted(new AbortController().signal)).toBe(false);
  });

  it("turns true when the signal aborts, as signal.aborted does", () => {
    const controller = new AbortController();
    const seen: boolean[] = [];
    controller.signal.addEventListener("abort", () => seen.push(isAborted(controller.signal)));
    controller.abort(new Error("stop"));
    expect(isAborted(controller.signal)).toBe(true);
    expect(seen).toEqual([true]);
  });

  it("reads signals made by AbortSignal.abort, AbortSignal.any and AbortSignal.timeout", () => {
    expect(isAborted(AbortSignal.abort())).toBe(true);
    const parent = new AbortController();
    const any = AbortSignal.any([parent.signal]);
    expect(isAborted(any)).toBe(false);
    parent.abort();
    expect(isAborted(any)).toBe(true);
    expect(isAborted(AbortSignal.timeout(60_000))).toBe(false);
  });

  it("throws for an object that is not an AbortSignal, as the getter does", () => {
    expect(() => isAborted({ aborted: true } as unknown as AbortSignal)).toThrow(TypeError);
  });
});
