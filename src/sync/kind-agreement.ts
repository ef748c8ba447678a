/**
 * How a zone squares its kinds with the global's catalog: kinds it lacks are
 * learned (registered from the catalog's descriptors), kinds both sides have
 * must agree on message, direction and scope, and a kind the zone syncs must
 * be synced by the global too. Anything else is refused with a message that
 * names the kind and both sides' definitions.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import type { KindCatalog } from "../gen/kds/v1/kinds_pb.ts";
import {
  declarationOf,
  describeDeclaration,
  descriptorRegistry,
  messageIn,
  type KindDeclaration,
} from "../kinds/descriptor-types.ts";
import type { Any } from "@bufbuild/protobuf/wkt";
import { KIND_CATALOG_TYPE_URL, catalogOf, declarationsOf } from "./kind-catalog.ts";
import { TYPE_URL_PREFIX, TypeRegistry, type ResourceType } from "../kinds/resource-types.ts";

/** The kinds of one side, checked against and extended from its peer's catalogs. */
export class KindAgreement {
  readonly #types: TypeRegistry;
  readonly #self: string;
  /** Kinds this side learned from a catalog (the others were given to it). */
  readonly #learned = new Set<string>();
  readonly #onRefused: ((error: KdsError) => void) | undefined;
  /** The bytes of the last catalog agreed to, and how many kinds the registry held after: the same catalog again changes nothing. */
  #lastAgreed: { readonly bytes: Uint8Array; readonly kinds: number } | undefined;

  /**
   * @param types - this side's registry; learned kinds are registered into it
   * @param self - how messages name this side, e.g. `zone "zone-east"`
   * @param onRefused - told each refusal {@link agree} throws (the zone's status keeps it as its last error)
   */
  constructor(types: TypeRegistry, self: string, onRefused?: (error: KdsError) => void) {
    this.#types = types;
    this.#self = self;
    this.#onRefused = onRefused;
  }

  /** Kinds learned so far, in the order they were learned. */
  get learned(): readonly string[] {
    return [...this.#learned];
  }

  /**
   * {@link agree} on a catalog as received (the response's resources).
   * The catalog the global sent last time, byte for byte, against a
   * registry that has not changed since, is agreed without reading it
   * again: it registers nothing, so it returns none (a zone reconnecting to
   * the same global decoded it on every session).
   */
  agreeReceived(resources: readonly Any[], peer: string): ResourceType[] {
    const value = resources.length === 1 ? resources[0]?.value : undefined;
    const last = this.#lastAgreed;
    if (
      last !== undefined &&
      value !== undefined &&
      resources[0]?.typeUrl === KIND_CATALOG_TYPE_URL &&
      sameBytes(value, last.bytes) &&
      this.#types.list().length === last.kinds
    )
      return [];
    const learned = this.agree(catalogOf(resources), peer);
    if (value !== undefined)
      this.#lastAgreed = { bytes: value.slice(), kinds: this.#types.list().length };
    return learned;
  }

  /**
   * Checks `catalog`, sent by `peer` (e.g. `global "global"`), against this
   * side's kinds and registers the kinds this side lacks. Returns the types
   * registered now. Throws `kinds_mismatch` (registering nothing) when a kind
   * both sides have differs, when a message is another kind here, or when
   * this side syncs a kind the peer does not; throws `invalid_resource` when
   * the catalog cannot be read.
   */
  agree(catalog: KindCatalog, peer: string): ResourceType[] {
    try {
      return this.#agree(catalog, peer);
    } catch (error) {
      if (error instanceof KdsError) this.#onRefused?.(error);
      throw error;
    }
  }

  #agree(catalog: KindCatalog, peer: string): ResourceType[] {
    const theirs = declarationsOf(catalog);
    const problems: string[] = [];
    const missing: (KindDeclaration & { readonly dependsOn: readonly string[] })[] = [];
    const named = new Set<string>();
    for (const d of theirs) {
      named.add(d.kind.toLowerCase());
      const local = this.#types.find(d.kind);
      if (local !== undefined) {
        const mine = declarationOf(local);
        if (
          mine.kind !== d.kind ||
          mine.message !== d.message ||
          mine.direction !== d.direction ||
          mine.scope !== d.scope
        ) {
          problems.push(
            `kind "${d.kind}": ${peer} defines ${describeDeclaration(d)}; ${this.#origin(local)} ${mine.kind === d.kind ? "" : `kind "${mine.kind}" as `}${describeDeclaration(mine)}${this.#restartHint(local)}`,
          );
        }
        continue;
      }
      const sameMessage = this.#types.byTypeUrl(TYPE_URL_PREFIX + d.message);
      if (sameMessage !== undefined) {
        problems.push(
          `kind "${d.kind}": ${peer} defines ${describeDeclaration(d)}; ${this.#origin(sameMessage)} that message as kind "${sameMessage.kind}" (${describeDeclaration(declarationOf(sameMessage))})${this.#restartHint(sameMessage)}`,
        );
        continue;
      }
      missing.push(d);
    }
    for (const local of this.#types.list()) {
      if (local.direction === "local" || named.has(local.kind.toLowerCase())) continue;
      const mine = describeDeclaration(declarationOf(local));
      problems.push(
        this.#learned.has(local.kind)
          ? `kind "${local.kind}": ${this.#self} learned it (${mine}) in an earlier session, but ${peer} no longer syncs it; restart ${this.#self} to forget it`
          : `kind "${local.kind}": ${this.#self} syncs it (${mine}), but ${peer} does not; add it to ${peer}'s kinds or make it local here`,
      );
    }
    if (problems.length > 0) {
      throw new KdsError(
        "kinds_mismatch",
        `${this.#self} refuses the kinds of ${peer}: ${problems.join("; ")}. Give both sides the same kinds (a zone started without kinds learns the global's).`,
      );
    }
    if (missing.length === 0) return [];
    let learned: ResourceType[];
    try {
      const registry = descriptorRegistry(catalog.files);
      const inits = missing.map((d) => ({
        kind: d.kind,
        schema: messageIn(registry, d.message),
        direction: d.direction,
        scope: d.scope,
        dependsOn: d.dependsOn,
      }));
      // Validates them all before any is registered here, beside the kinds this side has (a learned kind may
      // depend on one of them), and orders them: each after the kinds it depends on.
      const byName = new Map(inits.map((i) => [i.kind, i]));
      const check = new TypeRegistry([
        ...this.#types.list().map((t) => ({
          kind: t.kind,
          schema: t.schema,
          direction: t.direction,
          scope: t.scope,
          dependsOn: t.dependsOn,
        })),
        ...inits,
      ]);
      learned = check
        .list()
        .flatMap((t) => {
          const init = byName.get(t.kind);
          return init === undefined ? [] : [init];
        })
        .map((init) => this.#types.register(init));
    } catch (error) {
      throw new KdsError(
        "invalid_resource",
        `the kinds sent by ${peer} cannot be used: ${error instanceof Error ? error.message : String(error)}`,
        { cause: error },
      );
    }
    for (const t of learned) this.#learned.add(t.kind);
    return learned;
  }

  #origin(type: ResourceType): string {
    return this.#learned.has(type.kind) ? `${this.#self} learned earlier` : `${this.#self} defines`;
  }

  #restartHint(type: ResourceType): string {
    return this.#learned.has(type.kind)
      ? ` (restart ${this.#self} to learn the new definition)`
      : "";
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false;
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false;
  return true;
}
