// The admin Apply call is all or nothing in the store (issue 24, item 7): one
// store.apply per call, so a fault in the middle of a 50-resource apply leaves
// none of them, and the error says what happened to the batch.
import { createClient, createRouterTransport, type Client } from "@connectrpc/connect";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { registerAdmin, type AdminBackend } from "../../src/admin/admin-service.ts";
import type { KdsError } from "../../src/errors.ts";
import { AdminService } from "../../src/gen/kds/admin/v1/admin_pb.ts";
import { InMemoryStore } from "../../src/store/memory.ts";
import type { ResourceStore } from "../../src/store/contract.ts";
import { FaultyStore } from "../support/faulty-store.ts";
import { fromConnectError } from "../../src/connect-errors.ts";
import {
  faultOnChangeLog,
  postgresServerVariant,
  types,
  type StoreSpace,
} from "../store/fixtures.ts";

const meshes = (prefix: string, count = 50) =>
  Array.from({ length: count }, (_, i) => ({
    type: "Mesh",
    name: `${prefix}-${i}`,
    specJson: `{"description":"${i}"}`,
  }));

function admin(store: ResourceStore): Client<typeof AdminService> {
  const backend: AdminBackend = { role: "global", types, store, zoneStatuses: async () => [] };
  return createClient(
    AdminService,
    createRouterTransport((router) => registerAdmin(router, backend)),
  );
}

/** The KdsError an admin call failed with. */
async function failure(call: Promise<unknown>): Promise<KdsError> {
  try {
    await call;
  } catch (error) {
    return fromConnectError(error, "admin");
  }
  throw new Error("expected the call to fail");
}

describe("admin Apply", () => {
  it("writes a 50-resource call with ONE store apply, all at consecutive revisions", async () => {
    const store = new FaultyStore(new InMemoryStore(types));
    const response = await admin(store).apply({ resources: meshes("ok") });
    expect(response.resources).toHaveLength(50);
    expect(store.calls.get("apply")).toBe(1);
    expect(store.calls.get("put")).toBeUndefined();
    expect(response.resources.map((r) => Number(r.version))).toEqual(
      Array.from({ length: 50 }, (_, i) => i + 1),
    );
  });

  it("writes nothing when one resource is invalid, and says none was applied", async () => {
    const store = new InMemoryStore(types);
    const resources = meshes("bad");
    resources[25] = { type: "Mesh", name: "bad name!", specJson: "{}" };
    const error = await failure(admin(store).apply({ resources }));
    expect(error.code).toBe("invalid_resource");
    expect(error.message).toMatch(
      /none of the 50 resources was applied \(an apply is all or nothing\)/,
    );
    expect((await store.list("Mesh")).resources).toEqual([]);
  });

  it("writes nothing when the store fails the batch, and says it was all or none", async () => {
    const store = new FaultyStore(new InMemoryStore(types)).failNext("apply");
    const error = await failure(admin(store).apply({ resources: meshes("fault") }));
    expect(error.code).toBe("store_unavailable");
    expect(error.message).toMatch(
      /injected apply failure \(Mesh\); either all or none of the 50 resources were applied, never a part .* run `kds-mux get` to see which/,
    );
    expect((await store.inner.list("Mesh")).resources).toEqual([]);
  });

  describe("on PostgreSQL", () => {
    let space: StoreSpace;
    beforeAll(async () => {
      await postgresServerVariant.setup();
      space = await postgresServerVariant.fresh();
    });
    afterAll(async () => {
      await space?.close();
      await postgresServerVariant.teardown();
    });

    it("leaves none of a 50-resource apply when the database fails it half-way, after the resource rows were written, and says none was applied", async () => {
      const { url, schema } = space.postgres as { url: string; schema: string };
      const sql = postgres(url, { max: 1, onnotice: () => undefined });
      try {
        // The change-log insert of the 26th resource fails inside the apply's transaction, after all 50 resource rows went in.
        const removeFault = await faultOnChangeLog(sql, schema, "pg-25");
        const client = admin(space.store);
        const error = await failure(client.apply({ resources: meshes("pg") }));
        expect(error.code).toBe("store_unavailable");
        expect(error.message).toMatch(
          /injected fault at pg-25.*the store rolled the transaction back, so none of the 50 resources was applied/,
        );
        const [counted] = await sql.unsafe(
          `SELECT count(*)::int AS n FROM "${schema}".kds_resources WHERE kind = 'Mesh'`,
        );
        expect(counted?.n).toBe(0);
        expect(await space.store.revision()).toBe(0);
        await removeFault();
        expect((await client.apply({ resources: meshes("pg") })).resources).toHaveLength(50);
        expect((await space.store.list("Mesh")).resources).toHaveLength(50);
      } finally {
        await sql.end({ timeout: 5 });
      }
    });
  });
});
