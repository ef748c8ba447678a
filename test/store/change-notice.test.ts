// The PostgreSQL store's NOTIFY payload (src/store/postgres/change-notice.ts):
// the revision and the kinds a write changed, and which watches it wakes.
import { describe, expect, it } from "vitest";
import { noticePayload, noticedKinds, wakes } from "../../src/store/postgres/change-notice.ts";

describe("change notice", () => {
  it("writes the revision, then the kinds sorted and comma-separated, and reads them back", () => {
    const payload = noticePayload(812, new Set(["Zone", "Mesh", "ZoneInsight"]));
    expect(payload).toBe("812 Mesh,Zone,ZoneInsight");
    expect([...(noticedKinds(payload) ?? [])]).toEqual(["Mesh", "Zone", "ZoneInsight"]);
  });

  it("names no kinds when there are none, or when they would not fit PostgreSQL's payload limit", () => {
    expect(noticePayload(7, new Set())).toBe("7");
    const many = new Set(Array.from({ length: 200 }, (_, i) => `K${String(i).padStart(60, "0")}`));
    const payload = noticePayload(7, many);
    expect(payload).toBe("7");
    // Kinds of 7,000 characters together (109 of the longest name, 63, and one of 24) are named, and the
    // payload stays under PostgreSQL's 8,000 bytes at the largest revision; one character more names none.
    const longest = Array.from({ length: 109 }, (_, i) => `K${String(i).padStart(62, "0")}`);
    const atLimit = new Set([...longest, "Z".repeat(24)]);
    const named = noticePayload(Number.MAX_SAFE_INTEGER, atLimit);
    expect(noticedKinds(named)).toEqual(atLimit);
    expect(new TextEncoder().encode(named).byteLength).toBeLessThan(8000);
    expect(noticePayload(7, new Set([...longest, "Z".repeat(25)]))).toBe("7");
  });

  it("reads a payload of the revision alone (an older release's) as naming no kinds", () => {
    expect(noticedKinds("42")).toBeUndefined();
    expect(noticedKinds("42 ")).toBeUndefined();
  });

  it("wakes a watch when a named kind is one it follows, or when no kinds are named", () => {
    const watched = new Set(["Mesh", "TrafficPolicy"]);
    expect(wakes(watched, new Set(["TrafficPolicy"]))).toBe(true);
    expect(wakes(watched, new Set(["Zone", "Mesh"]))).toBe(true);
    expect(wakes(watched, new Set(["Zone", "ZoneInsight"]))).toBe(false);
    expect(wakes(watched, undefined)).toBe(true);
  });
});
