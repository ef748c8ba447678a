// The per-resource errors an ACK carries: the client's whole current set of
// rejected resources per type (a later accepted version or a removal takes
// one out; a SotW set starts over), at most 100 named, the rest counted.
import { describe, expect, it } from "vitest";
import {
  MAX_RESOURCE_ERRORS,
  RejectedSet,
  resourceErrorsOf,
} from "../../src/discovery/resource-errors.ts";

const T = "type.googleapis.com/x.v1.X";

describe("per-resource errors in ACKs", () => {
  it("carry the current set: joined on rejection, left on acceptance or removal", () => {
    const set = new RejectedSet();
    expect(set.detail(T)).toBeUndefined();
    set.applied(T, {
      replaced: false,
      received: ["a", "b", "c"],
      removed: [],
      rejected: [
        { key: "b", reason: "too long" },
        { key: "c", reason: "bad" },
      ],
    });
    const detail = set.detail(T);
    expect(detail?.code).toBe(0);
    expect(
      resourceErrorsOf({ details: detail?.details as { typeUrl: string; value: Uint8Array }[] }),
    ).toEqual({
      errors: [
        { key: "b", reason: "too long" },
        { key: "c", reason: "bad" },
      ],
      omitted: 0,
    });
    set.applied(T, { replaced: false, received: ["b"], removed: ["c"], rejected: [] });
    expect(set.detail(T)).toBeUndefined();
    set.applied(T, {
      replaced: false,
      received: ["d"],
      removed: [],
      rejected: [{ key: "d", reason: "x" }],
    });
    set.applied(T, { replaced: true, received: [], removed: [], rejected: [] });
    expect(set.detail(T)).toBeUndefined();
  });

  it("name at most 100 and count the rest", () => {
    const set = new RejectedSet();
    const rejected = Array.from({ length: 130 }, (_, i) => ({ key: `r${i}`, reason: "no" }));
    set.applied(T, { replaced: true, received: [], removed: [], rejected });
    const { errors, omitted } = resourceErrorsOf({
      details: set.detail(T)?.details as { typeUrl: string; value: Uint8Array }[],
    });
    expect(errors).toHaveLength(MAX_RESOURCE_ERRORS);
    expect(omitted).toBe(30);
  });

  it("read as none from a status without them", () => {
    expect(resourceErrorsOf(undefined)).toEqual({ errors: [], omitted: 0 });
    expect(resourceErrorsOf({ details: [] })).toEqual({ errors: [], omitted: 0 });
  });
});
