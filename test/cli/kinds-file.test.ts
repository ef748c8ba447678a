// Kinds files read in process: the checks the CLI tests do not each start a process for.
import { execFileSync } from "node:child_process";
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EXAMPLE_KINDS_FILE, loadKindsFile } from "../../src/cli/kinds-file.ts";
import { KdsError } from "../../src/errors.ts";
import { createTypeRegistry } from "../../src/kinds/builtin-types.ts";

const root = fileURLToPath(new URL("../..", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "kds-mux-kinds-file-"));
const file = (name: string, text: string): string => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};
const gateway =
  "  - kind: Gateway\n    message: acme.v1.GatewaySpec\n    direction: global-to-zone\n    scope: cluster\n";
const workload =
  "  - kind: Workload\n    message: acme.v1.WorkloadSpec\n    direction: global-to-zone\n    scope: mesh\n";

beforeAll(() => {
  cpSync(join(root, "examples/own-kinds/buf.yaml"), join(dir, "buf.yaml"));
  cpSync(join(root, "examples/own-kinds/proto"), join(dir, "proto"), { recursive: true });
  execFileSync(join(root, "node_modules/.bin/buf"), ["build", "-o", "kinds.binpb"], {
    cwd: dir,
    stdio: "pipe",
  });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function problem(path: string): string {
  try {
    loadKindsFile(path);
  } catch (error) {
    expect(KdsError.is(error, "invalid_argument")).toBe(true);
    return (error as Error).message;
  }
  throw new Error(`${path} was accepted`);
}

describe("kinds files", () => {
  it("loads the example kinds the CLI uses by default", () => {
    expect(
      loadKindsFile(EXAMPLE_KINDS_FILE).types.map(
        (t) => `${t.kind} ${t.schema.typeName} ${t.direction} ${t.scope}`,
      ),
    ).toEqual([
      "Mesh kds.example.v1.MeshSpec global-to-zone cluster",
      "TrafficPolicy kds.example.v1.TrafficPolicySpec global-to-zone mesh",
      "Dataplane kds.example.v1.DataplaneSpec zone-to-global mesh",
      "ZoneIngress kds.example.v1.ZoneIngressSpec zone-to-zones cluster",
    ]);
  });

  it("takes a kind's zone selector (zones)", () => {
    const path = file(
      "zones.yaml",
      `descriptorSet: kinds.binpb\nkinds:\n${gateway}    zones: region=eu\n`,
    );
    expect(loadKindsFile(path).types.map((t) => t.zones)).toEqual(["region=eu"]);
  });

  it("takes the kinds a kind depends on (dependsOn), listing them first", () => {
    const path = file(
      "depends.yaml",
      `descriptorSet: kinds.binpb\nkinds:\n${gateway}    dependsOn: [Workload]\n${workload}`,
    );
    const { types } = loadKindsFile(path);
    expect(types.map((t) => `${t.kind} ${(t.dependsOn ?? []).join(",")}`)).toEqual([
      "Gateway Workload",
      "Workload ",
    ]);
    expect(
      createTypeRegistry(types)
        .list()
        .filter((t) => t.direction !== "local")
        .map((t) => t.kind),
    ).toEqual(["Workload", "Gateway"]);
  });

  it("takes JSON as well as YAML", () => {
    const path = file(
      "kinds.json",
      JSON.stringify({
        descriptorSet: "kinds.binpb",
        kinds: [
          {
            kind: "Workload",
            message: "acme.v1.WorkloadSpec",
            direction: "zone-to-global",
            scope: "mesh",
          },
        ],
      }),
    );
    expect(loadKindsFile(path).types.map((t) => t.schema.typeName)).toEqual([
      "acme.v1.WorkloadSpec",
    ]);
  });

  it.each([
    ["invalid YAML", "descriptorSet: [oops\n", "invalid YAML"],
    [
      "an unknown top-level field",
      `descriptorSet: kinds.binpb\nkind: Gateway\nkinds:\n${gateway}`,
      'unknown field "kind" (a kinds file has descriptorSet, kinds)',
    ],
    [
      "an unknown field in a kind",
      `descriptorSet: kinds.binpb\nkinds:\n${gateway}    namespace: x\n`,
      'kinds[0] (Gateway): unknown field "namespace" (a kind has kind, message, direction, scope, and optionally zones, whenStale, dependsOn)',
    ],
    [
      "a whenStale that is neither serve nor withhold",
      `descriptorSet: kinds.binpb\nkinds:\n${gateway}    whenStale: drop\n`,
      'kinds[0] (Gateway): "whenStale" must be one of serve, withhold, got "drop"',
    ],
    [
      "a dependsOn cycle",
      `descriptorSet: kinds.binpb\nkinds:\n${gateway}    dependsOn: [Workload]\n${workload}    dependsOn: [Gateway]\n`,
      "dependsOn forms a cycle: Gateway -> Workload -> Gateway",
    ],
    [
      "a dependsOn naming an unknown kind",
      `descriptorSet: kinds.binpb\nkinds:\n${gateway}    dependsOn: [Mesh]\n`,
      'dependsOn names kinds that are not defined: "Gateway" depends on "Mesh"',
    ],
    [
      "a dependsOn that is not a list",
      `descriptorSet: kinds.binpb\nkinds:\n${gateway}    dependsOn: Workload\n`,
      'kinds[0] (Gateway): "dependsOn" must be a list of kind names',
    ],
    [
      "an invalid zone selector",
      `descriptorSet: kinds.binpb\nkinds:\n${gateway}    zones: "region in (eu"\n`,
      'the zones of kind "Gateway" "region in (eu": leaves a parenthesis open',
    ],
    [
      "a zone selector on a zone-to-global kind",
      "descriptorSet: kinds.binpb\nkinds:\n  - kind: Workload\n    message: acme.v1.WorkloadSpec\n    direction: zone-to-global\n    scope: mesh\n    zones: region=eu\n",
      "only global-to-zone and zone-to-zones kinds can name the zones",
    ],
    ["no kinds", "descriptorSet: kinds.binpb\nkinds: []\n", '"kinds" must list at least one kind'],
    ["no descriptor set", `kinds:\n${gateway}`, '"descriptorSet" must name the descriptor set'],
    [
      "a missing field",
      "descriptorSet: kinds.binpb\nkinds:\n  - kind: Gateway\n    message: acme.v1.GatewaySpec\n    direction: local\n",
      'kinds[0] (Gateway): "scope" is required',
    ],
    [
      "the reserved kind Zone",
      "descriptorSet: kinds.binpb\nkinds:\n  - kind: Zone\n    message: acme.v1.GatewaySpec\n    direction: local\n    scope: cluster\n",
      'kinds[0] (Zone): kind "Zone" is kds-mux\'s own',
    ],
    [
      "a bad kind name",
      "descriptorSet: kinds.binpb\nkinds:\n  - kind: gateway\n    message: acme.v1.GatewaySpec\n    direction: local\n    scope: cluster\n",
      'kind "gateway" must start with an upper-case letter',
    ],
    [
      "a kind named like kds-mux's own GlobalInstance",
      `descriptorSet: kinds.binpb\nkinds:\n${gateway.replace("Gateway\n", "GlobalInstance\n")}`,
      'kind "GlobalInstance" is kds-mux\'s own; choose another name',
    ],
    [
      "kinds differing only in case",
      `descriptorSet: kinds.binpb\nkinds:\n${gateway}${gateway.replace("Gateway\n", "GATEWAY\n").replace("GatewaySpec", "WorkloadSpec")}`,
      'kind "GATEWAY" is listed twice (kinds[0] and kinds[1])',
    ],
  ])("refuses %s, naming the file", (_what, text, expected) => {
    const path = file("bad.yaml", text);
    const message = problem(path);
    expect(message.startsWith(`${path}: `)).toBe(true);
    expect(message).toContain(expected);
  });
});
