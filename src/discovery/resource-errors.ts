/**
 * Per-resource errors, a kds-mux extension to xDS: a client that applied a
 * response except for some resources ACKs it with an `error_detail` whose
 * code is 0 (OK) and whose details hold one `kds.v1.ResourceErrors`: every
 * resource of the type it currently rejects, with the reason. The client
 * keeps that set per type (a later accepted version, or a removal, takes a
 * resource out of it); each ACK carries the whole set, and an ACK without
 * it means the set is empty. Any other code is a NACK, as in xDS.
 *
 * @module
 */
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { anyPack, anyUnpack } from "@bufbuild/protobuf/wkt";
import { ResourceErrorsSchema, type StatusSchema } from "../gen/kds/v1/discovery_pb.ts";
import type { ResourceRejection } from "./types.ts";

/** Most resources one ACK names; the rest are counted as omitted. */
export const MAX_RESOURCE_ERRORS = 100;

/** The resources of one type a client currently rejects, by key. */
export class RejectedSet {
  /** Per type, the rejected keys and why; a type with none has no entry, and the map is made at the first (nearly every client has none). */
  #byType: Map<string, Map<string, string>> | undefined;

  /**
   * Records the outcome of an applied response: `replaced` (a
   * state-of-the-world set) starts over; otherwise `received` and `removed`
   * keys leave the set unless `rejected` names them again.
   */
  applied(
    typeUrl: string,
    outcome: {
      replaced: boolean;
      received: readonly string[];
      removed: readonly string[];
      rejected: readonly ResourceRejection[];
    },
  ): void {
    let set = outcome.replaced ? undefined : this.#byType?.get(typeUrl);
    // Nearly always empty: then no key is looked up (a sync's 100k lookups hashed 100k keys nothing else reads).
    if (set !== undefined) {
      for (const key of outcome.received) set.delete(key);
      for (const key of outcome.removed) set.delete(key);
    }
    if (outcome.rejected.length > 0) {
      set ??= new Map();
      for (const r of outcome.rejected) set.set(r.key, r.reason);
    }
    if (set !== undefined && set.size > 0) {
      this.#byType ??= new Map();
      this.#byType.set(typeUrl, set);
    } else this.#byType?.delete(typeUrl);
  }

  /** Whether any resource of `typeUrl` is rejected now (when not, {@link RejectedSet.applied} with nothing rejected changes nothing). */
  holds(typeUrl: string): boolean {
    return this.#byType?.has(typeUrl) === true;
  }

  /** The `error_detail` of an ACK for `typeUrl`: undefined when nothing is rejected. */
  detail(typeUrl: string): MessageInitShape<typeof StatusSchema> | undefined {
    const set = this.#byType?.get(typeUrl);
    if (set === undefined || set.size === 0) return undefined;
    const errors = [...set]
      .slice(0, MAX_RESOURCE_ERRORS)
      .map(([name, reason]) => ({ name, reason }));
    const details = create(ResourceErrorsSchema, { errors, omitted: set.size - errors.length });
    return {
      code: 0,
      message: `${set.size} resources of the response were rejected (kds.v1.ResourceErrors in details)`,
      details: [anyPack(ResourceErrorsSchema, details)],
    };
  }
}

/**
 * The per-resource errors an ACK's `error_detail` carries: the rejected
 * resources and how many more were left unnamed. An error_detail without a
 * kds.v1.ResourceErrors reads as none.
 */
export function resourceErrorsOf(
  detail:
    | { readonly details: readonly { readonly typeUrl: string; readonly value: Uint8Array }[] }
    | undefined,
): { readonly errors: readonly ResourceRejection[]; readonly omitted: number } {
  if (detail === undefined || detail.details.length === 0) return NO_ERRORS; // a plain ACK, nearly every one
  for (const any of detail.details) {
    const unpacked = anyUnpack(
      { $typeName: "google.protobuf.Any", typeUrl: any.typeUrl, value: any.value },
      ResourceErrorsSchema,
    );
    if (unpacked !== undefined)
      return {
        errors: unpacked.errors.map((e) => ({ key: e.name, reason: e.reason })),
        omitted: unpacked.omitted,
      };
  }
  return NO_ERRORS;
}

/** What an ACK without per-resource errors carries: shared, since nothing may change it. */
const NO_ERRORS: { readonly errors: readonly ResourceRejection[]; readonly omitted: number } =
  Object.freeze({ errors: Object.freeze([]), omitted: 0 });
