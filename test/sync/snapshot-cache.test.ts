// A SnapshotCache stream source: its change listeners hear the store's changes until their signal aborts.
import { describe, expect, it } from "vitest";
import { exampleTypes } from "../../examples/example-kinds/index.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";
import { silentLogger } from "../../src/log.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import { SnapshotCache } from "../../src/sync/snapshot-cache.ts";
import { mesh } from "./helpers.ts";

/** Resolves once `heard` holds at least `count` calls. */
async function until(heard: string[], count: number): Promise<void> {
  while (heard.length < count) await new Promise((resolve) => setTimeout(resolve, 5));
}

describe("SnapshotCache source", () => {
  it("tells each change listener of changes until its own signal aborts", async () => {
    const types = createTypeRegistry(exampleTypes);
    const store = new InMemoryStore(types);
    const meshType = types.find("Mesh");
    if (meshType === undefined) throw new Error("no Mesh kind");
    const cache = new SnapshotCache(store, [meshType], { logger: silentLogger });
    const running = new AbortController();
    cache.start(running.signal);
    const source = cache.source();
    const first = new AbortController();
    const second = new AbortController();
    const heardFirst: string[] = [];
    const heardSecond: string[] = [];
    source.onChange((_url, key) => heardFirst.push(key ?? "*"), first.signal);
    source.onChange((_url, key) => heardSecond.push(key ?? "*"), second.signal);
    await store.put(mesh("a"));
    await until(heardSecond, 1);
    await until(heardFirst, 1);
    first.abort();
    await store.put(mesh("b"));
    await until(heardSecond, 2);
    second.abort();
    await store.put(mesh("c"));
    // The last change reached the cache (its set has it) but neither stopped listener.
    while (source.snapshotNow?.(meshType.typeUrl)?.resources.get("c") === undefined)
      await new Promise((resolve) => setTimeout(resolve, 5));
    expect(heardFirst.filter((k) => k !== "*")).toEqual(["a"]);
    expect(heardSecond.filter((k) => k !== "*")).toEqual(["a", "b"]);
    running.abort();
  });
});
