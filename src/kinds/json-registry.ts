/**
 * The type registry the Connect protocol's JSON codec needs to write and
 * read mux frames: every frame's `Any`s name their message by type URL, and
 * JSON spells an `Any` out field by field, so both sides must know each
 * message an `Any` may hold.
 *
 * @module
 */
import {
  createRegistry,
  type DescEnum,
  type DescExtension,
  type DescMessage,
  type DescService,
  type Registry,
} from "@bufbuild/protobuf";
import { file_kds_mux_v1_half_duplex } from "../gen/kds/mux/v1/half_duplex_pb.ts";
import { file_kds_mux_v1_mux } from "../gen/kds/mux/v1/mux_pb.ts";
import { file_kds_v1_discovery } from "../gen/kds/v1/discovery_pb.ts";
import { file_kds_v1_kinds } from "../gen/kds/v1/kinds_pb.ts";
import { file_kds_v1_resource } from "../gen/kds/v1/resource_pb.ts";
import type { TypeRegistry } from "./resource-types.ts";

type Desc = DescMessage | DescEnum | DescExtension | DescService;

/** The frames, the discovery messages, `kds.v1.KdsResource` and `kds.v1.KindCatalog` (with everything they import). */
const fixed: Registry = createRegistry(
  file_kds_mux_v1_mux,
  file_kds_mux_v1_half_duplex,
  file_kds_v1_discovery,
  file_kds_v1_resource,
  file_kds_v1_kinds,
);

/**
 * A registry for the JSON codec of the mux (`jsonOptions.registry` of a
 * Connect transport or router): the frame and discovery messages, the
 * `kds.v1.KdsResource` envelope and the `kds.v1.KindCatalog` every resource
 * `Any` holds, and the spec message of every kind in `types`, looked up when
 * asked, so kinds registered later (learned from the global) are found too.
 * A spec that itself holds an `Any` needs that `Any`'s message among the
 * kinds' files to be written as JSON.
 */
export function muxJsonRegistry(types?: TypeRegistry): Registry {
  // Kinds are only ever added: rebuild the kinds' part when their number changed.
  let cached: { count: number; registry: Registry } | undefined;
  const kindsFiles = (): Registry => {
    const list = types?.list() ?? [];
    if (cached?.count !== list.length)
      cached = {
        count: list.length,
        registry: createRegistry(...new Set(list.map((t) => t.schema.file))),
      };
    return cached.registry;
  };
  const find = <T extends Desc>(lookup: (r: Registry) => T | undefined): T | undefined =>
    lookup(fixed) ?? (types === undefined ? undefined : lookup(kindsFiles()));
  return {
    kind: "registry",
    get: (typeName) => find((r) => r.get(typeName)),
    getMessage: (typeName) => find((r) => r.getMessage(typeName)),
    getEnum: (typeName) => find((r) => r.getEnum(typeName)),
    getExtension: (typeName) => find((r) => r.getExtension(typeName)),
    getExtensionFor: (extendee, no) => find((r) => r.getExtensionFor(extendee, no)),
    getService: (typeName) => find((r) => r.getService(typeName)),
    *[Symbol.iterator]() {
      yield* fixed;
      if (types !== undefined) yield* kindsFiles();
    },
  };
}
