// Two kinds defined from descriptors built in the test (no generated code),
// in two versions: v2 adds a field to GatewaySpec, as a global upgraded
// before its zones would.
import { create, createFileRegistry } from "@bufbuild/protobuf";
import {
  FieldDescriptorProto_Label,
  FieldDescriptorProto_Type,
  FileDescriptorProtoSchema,
  type FileDescriptorProto,
} from "@bufbuild/protobuf/wkt";
import type { ResourceTypeInit } from "../../src/kinds/resource-types.ts";

const { STRING: TYPE_STRING, UINT32: TYPE_UINT32 } = FieldDescriptorProto_Type;
const { OPTIONAL: LABEL_OPTIONAL, REPEATED: LABEL_REPEATED } = FieldDescriptorProto_Label;

const field = (
  name: string,
  number: number,
  type: FieldDescriptorProto_Type,
  label = LABEL_OPTIONAL,
  jsonName = name,
) => ({ name, number, type, label, jsonName });

/** acme/v1/kinds.proto: GatewaySpec {hosts, port} (+ replicas in v2) and WorkloadSpec {address, service}. */
export function acmeFile(version: 1 | 2): FileDescriptorProto {
  const gateway = [field("hosts", 1, TYPE_STRING, LABEL_REPEATED), field("port", 2, TYPE_UINT32)];
  if (version === 2) gateway.push(field("replicas", 3, TYPE_UINT32));
  return create(FileDescriptorProtoSchema, {
    name: "acme/v1/kinds.proto",
    package: "acme.v1",
    syntax: "proto3",
    messageType: [
      { name: "GatewaySpec", field: gateway },
      {
        name: "WorkloadSpec",
        field: [field("address", 1, TYPE_STRING), field("service", 2, TYPE_STRING)],
      },
    ],
  });
}

/** The acme registry of `version`. */
export function acmeRegistry(version: 1 | 2) {
  return createFileRegistry(acmeFile(version), () => undefined);
}

/** Gateway flows global -> zone (cluster-scoped), Workload zone -> global (mesh-scoped); `change` alters one kind. */
export function acmeKinds(
  version: 1 | 2,
  change: Partial<
    Record<"Gateway" | "Workload", Partial<Omit<ResourceTypeInit, "schema"> & { message: string }>>
  > = {},
): ResourceTypeInit[] {
  const registry = acmeRegistry(version);
  const kind = (
    name: "Gateway" | "Workload",
    message: string,
    direction: ResourceTypeInit["direction"],
    scope: ResourceTypeInit["scope"],
  ): ResourceTypeInit => {
    const c = change[name] ?? {};
    const schema = registry.getMessage(c.message ?? message);
    if (schema === undefined) throw new Error(`no ${c.message ?? message}`);
    return {
      kind: c.kind ?? name,
      schema,
      direction: c.direction ?? direction,
      scope: c.scope ?? scope,
    };
  };
  return [
    kind("Gateway", "acme.v1.GatewaySpec", "global-to-zone", "cluster"),
    kind("Workload", "acme.v1.WorkloadSpec", "zone-to-global", "mesh"),
  ];
}
