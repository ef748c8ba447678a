/**
 * A one-off state-of-the-world fetch on a client view: request one type,
 * take the first response, ACK it when `accept` takes it or NACK it with the
 * reason when `accept` throws. For a resource read once at the start of a
 * session, before a {@link DiscoveryClient} takes the view over.
 *
 * @module
 */
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import type { Any } from "@bufbuild/protobuf/wkt";
import { KdsError } from "../errors.ts";
import { DiscoveryRequestSchema, type NodeSchema } from "../gen/kds/v1/discovery_pb.ts";
import type { ClientStreamView } from "../mux/views.ts";

/** google.rpc.Code INVALID_ARGUMENT, the code of a NACK's error_detail. */
const INVALID_ARGUMENT = 3;

/** What {@link fetchOnce} does. */
export interface FetchOnceInit<T> {
  /** The view to request on; nothing else may use it until the fetch ends. */
  readonly view: ClientStreamView;
  /** The type to fetch. */
  readonly typeUrl: string;
  /** Who is asking. */
  readonly node?: MessageInitShape<typeof NodeSchema>;
  /** Takes the response's resources; throwing rejects them (NACK). */
  readonly accept: (resources: readonly Any[]) => T;
  /** Cancels the fetch (a deadline belongs here). */
  readonly signal: AbortSignal;
}

/**
 * Sends one SotW request for `typeUrl` and waits for its response. Resolves
 * with what `accept` returned after the ACK left; rejects with what `accept`
 * threw after the NACK left, or with `protocol_error` when a response of
 * another type arrives first.
 */
export async function fetchOnce<T>(init: FetchOnceInit<T>): Promise<T> {
  const { view, typeUrl, signal } = init;
  await view.send(create(DiscoveryRequestSchema, { typeUrl, node: init.node }), signal);
  const response = await view.recv(signal);
  if (response.$typeName !== "kds.v1.DiscoveryResponse" || response.typeUrl !== typeUrl) {
    throw new KdsError(
      "protocol_error",
      `expected a state-of-the-world response of ${typeUrl}, got a ${response.$typeName} of ${response.typeUrl}`,
    );
  }
  let accepted: T;
  try {
    accepted = init.accept(response.resources);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    await view.send(
      create(DiscoveryRequestSchema, {
        typeUrl,
        responseNonce: response.nonce,
        errorDetail: { code: INVALID_ARGUMENT, message },
      }),
      signal,
    );
    throw error;
  }
  await view.send(
    create(DiscoveryRequestSchema, {
      typeUrl,
      versionInfo: response.versionInfo,
      responseNonce: response.nonce,
    }),
    signal,
  );
  return accepted;
}
