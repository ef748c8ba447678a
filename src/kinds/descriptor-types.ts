/**
 * Resource types from descriptors instead of generated code: a kind named by
 * the full name of its message, looked up in a set of `.proto` file
 * descriptors (what `buf build -o kinds.binpb` writes, or what a global sends
 * its zones). Runtime-neutral; the CLI reads the files.
 *
 * @module
 */
import { create, fromBinary, type DescFile, type DescMessage } from "@bufbuild/protobuf";
import { createFileRegistry, type FileRegistry } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema, type FileDescriptorProto } from "@bufbuild/protobuf/wkt";
import { KdsError } from "../errors.ts";
import type {
  ResourceScope,
  ResourceType,
  ResourceTypeInit,
  SyncDirection,
} from "./resource-types.ts";

/** A kind declared by the name of its message: what a kinds file lists and a kind catalog carries. */
export interface KindDeclaration {
  /** Short name ("Gateway"). */
  readonly kind: string;
  /** Full name of the spec's message ("acme.v1.GatewaySpec"). */
  readonly message: string;
  /** Which way it flows. */
  readonly direction: SyncDirection;
  /** Cluster- or mesh-scoped. */
  readonly scope: ResourceScope;
}

/** The declaration of a registered type. */
export function declarationOf(type: ResourceType): KindDeclaration {
  return {
    kind: type.kind,
    message: type.schema.typeName,
    direction: type.direction,
    scope: type.scope,
  };
}

/** "acme.v1.GatewaySpec, global-to-zone, cluster-scoped": a kind's definition as error messages show it. */
export function describeDeclaration(d: KindDeclaration): string {
  return `${d.message}, ${d.direction}, ${d.scope}-scoped`;
}

/**
 * A registry of the messages in `files` (every imported file included).
 * Throws `invalid_argument` saying what is missing.
 */
export function descriptorRegistry(files: readonly FileDescriptorProto[]): FileRegistry {
  try {
    return createFileRegistry(create(FileDescriptorSetSchema, { file: [...files] }));
  } catch (error) {
    throw new KdsError(
      "invalid_argument",
      `the descriptors are incomplete or invalid (${error instanceof Error ? error.message : String(error)}); build them with every import, as \`buf build -o kinds.binpb\` does`,
      { cause: error },
    );
  }
}

/** Parses a serialized google.protobuf.FileDescriptorSet; throws `invalid_argument` when it is not one. */
export function parseDescriptorSet(bytes: Uint8Array): FileDescriptorProto[] {
  let files: FileDescriptorProto[];
  try {
    files = fromBinary(FileDescriptorSetSchema, bytes).file;
  } catch (error) {
    throw new KdsError(
      "invalid_argument",
      `not a FileDescriptorSet (${error instanceof Error ? error.message : String(error)}); build one with \`buf build -o kinds.binpb\``,
      {
        cause: error,
      },
    );
  }
  if (files.length === 0)
    throw new KdsError(
      "invalid_argument",
      "the descriptor set holds no .proto file; build one with `buf build -o kinds.binpb`",
    );
  return files;
}

/**
 * The message `name` in `registry`; throws `invalid_argument` naming the
 * messages it does define (outside google.protobuf) when it is not there.
 * `where` names the registry in that message.
 */
export function messageIn(
  registry: FileRegistry,
  name: string,
  where = "the descriptors",
): DescMessage {
  const found = registry.getMessage(name);
  if (found !== undefined) return found;
  const known: string[] = [];
  for (const t of registry)
    if (t.kind === "message" && !t.typeName.startsWith("google.protobuf.")) known.push(t.typeName);
  known.sort();
  const shown =
    known.length > 12 ? [...known.slice(0, 12), `... (${known.length - 12} more)`] : known;
  throw new KdsError(
    "invalid_argument",
    `message ${name} is not in ${where}, which defines ${shown.length === 0 ? "no message" : shown.join(", ")}`,
  );
}

/** Resource types for `declarations`, their messages looked up in `registry`. */
export function typesFromDescriptors(
  registry: FileRegistry,
  declarations: readonly KindDeclaration[],
): ResourceTypeInit[] {
  return declarations.map((d) => ({
    kind: d.kind,
    schema: messageIn(registry, d.message),
    direction: d.direction,
    scope: d.scope,
  }));
}

/**
 * The descriptors of the files defining `schemas` and of every file they
 * import, each after its imports, each once: enough for
 * {@link descriptorRegistry} on the other side.
 */
export function filesDefining(schemas: Iterable<DescMessage>): FileDescriptorProto[] {
  const out: FileDescriptorProto[] = [];
  const seen = new Set<string>();
  const visit = (file: DescFile): void => {
    if (seen.has(file.name)) return;
    seen.add(file.name);
    for (const dependency of file.dependencies) visit(dependency);
    out.push(file.proto);
  };
  for (const schema of schemas) visit(schema.file);
  return out;
}
