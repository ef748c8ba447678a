/**
 * A delta response's bytes from pieces shared across streams: each resource
 * is encoded once (its {@link WireResource.deltaEntry}), and what differs per
 * stream (the nonce, the removals) is encoded around them. When one change
 * goes to every zone, each zone's response costs its few own bytes and a
 * copy, not a reflective encode (see src/mux/frame-bytes.ts).
 *
 * @module
 */
import type { EncodedPieces } from "../mux/frame-bytes.ts";
import { stringFields } from "../mux/frame-bytes.ts";
import type { WireResource } from "./types.ts";

/** `DeltaDiscoveryResponse` field numbers, in the order protobuf writes them. */
const SYSTEM_VERSION_INFO = 1;
const TYPE_URL = 4;
const NONCE = 5;
const REMOVED_RESOURCES = 6;

/** The last version's field, shared by every stream that sends the same version next. */
let lastVersion: { readonly version: string; readonly bytes: Uint8Array } | undefined;

/**
 * The exact encoding of a `DeltaDiscoveryResponse` with these fields (what
 * `toBinary` writes for it), or undefined when a resource has no
 * `deltaEntry` (the response is then encoded whole).
 */
export function deltaResponseEncoding(
  version: string,
  typeUrl: string,
  nonce: string,
  upserts: readonly WireResource[],
  removed: readonly string[],
): EncodedPieces | undefined {
  const pieces: Uint8Array[] = [];
  let byteLength = 0;
  if (version !== "") {
    if (lastVersion?.version !== version)
      lastVersion = { version, bytes: stringFields([[SYSTEM_VERSION_INFO, version]]) };
    pieces.push(lastVersion.bytes);
    byteLength += lastVersion.bytes.byteLength;
  }
  for (const r of upserts) {
    const entry = r.deltaEntry;
    if (entry === undefined) return undefined;
    pieces.push(entry);
    byteLength += entry.byteLength;
  }
  const own: [number, string][] = [];
  if (typeUrl !== "") own.push([TYPE_URL, typeUrl]);
  if (nonce !== "") own.push([NONCE, nonce]);
  for (const key of removed) own.push([REMOVED_RESOURCES, key]);
  if (own.length > 0) {
    const tail = stringFields(own);
    pieces.push(tail);
    byteLength += tail.byteLength;
  }
  return { pieces, byteLength };
}
