/**
 * The kind catalog on a session, both sides: the global serves its catalog
 * (one fixed resource) next to its kinds and ends the session of a zone that
 * refuses it; a zone fetches it before anything else and squares it with its
 * own kinds ({@link KindAgreement}), learning the ones it lacks.
 *
 * @module
 */
import { fetchOnce } from "../discovery/fetch-once.ts";
import { staticSource } from "../discovery/static-source.ts";
import type { SnapshotSource } from "../discovery/types.ts";
import { KdsError } from "../errors.ts";
import type { Logger } from "../log.ts";
import type { Session } from "../mux/views.ts";
import { anySignal, sleep } from "../util/abort.ts";
import { declarationOf, describeDeclaration } from "../kinds/descriptor-types.ts";
import type { KindAgreement } from "./kind-agreement.ts";
import { KIND_CATALOG_TYPE_URL, catalogResource, kindCatalog } from "./kind-catalog.ts";
import type { ResourceType, TypeRegistry } from "../kinds/resource-types.ts";

/** How long a zone waits for the global's kinds at the start of a session. */
const KINDS_TIMEOUT_MS = 30_000;

/** How long a zone that refused the global's kinds waits for the global to end the session. */
const REFUSAL_GRACE_MS = 5_000;

/** The global's catalog of `types`, as a source its discovery server serves next to the kinds. */
export function catalogSource(types: TypeRegistry): SnapshotSource {
  return staticSource(KIND_CATALOG_TYPE_URL, [catalogResource(kindCatalog(types.list()))]);
}

/*
 * Two refusals end the session, since nothing can sync past them (the goaway
 * tells the peer why). The session's observer calls them
 * (stream-observer.ts): functions, not an observer wrapping another, since
 * every idle zone's session would hold the wrapper.
 */

/** The zone of `session` NACKed the catalog with `error`: log it and end the session with the zone's reason. */
export function endOnCatalogRefusal(
  session: Session,
  zone: string,
  logger: Logger,
  error: string,
): void {
  logger.error(`zone "${zone}" refused the kinds of this global; ending its session: ${error}`, {
    zone,
  });
  void session.close({ message: error });
}

/**
 * The peer requested `typeUrl`, which this side does not serve (none of
 * `served`): log it and end the session as a protocol error whose cause is
 * an `unknown_type` error naming the type and the served ones. xDS has no
 * in-band answer for that (an empty response would mean "no resources"),
 * and a peer running kds-mux learns the kinds before it requests any, so
 * only a broken or foreign peer gets here.
 */
export function endOnUnknownType(
  session: Session,
  zone: string,
  logger: Logger,
  served: readonly string[],
  typeUrl: string,
): void {
  const self = `${session.role} "${session.localId}"`;
  const peer = session.role === "global" ? `zone "${zone}"` : `global "${session.peerId}"`;
  const error = new KdsError(
    "unknown_type",
    `${peer} requested type "${typeUrl}", which ${self} does not serve; it serves ${served.length === 0 ? "no types" : served.join(", ")}. Request only the kinds of the catalog (${KIND_CATALOG_TYPE_URL}), with the direction that flows from ${self}`,
  );
  logger.warn(`ending the session: ${error.message}`, { zone, typeUrl });
  void session.close({ code: "protocol_error", message: error.message, cause: error });
}

/**
 * Fetches the global's kind catalog on `session` (before anything else is
 * requested) and squares it with this zone's kinds through `agreement`.
 * Resolves with the kinds learned now, or undefined when the session ended
 * meanwhile, which is also how a refused catalog ends: the NACK names the
 * problem and the global ends the session (this zone ends it if the global
 * has not after a grace period). Rejects when the global sends no catalog.
 */
export async function learnKinds(
  session: Session,
  agreement: KindAgreement,
  init: {
    zone: string;
    node: { id: string; cluster: string; userAgentName: string };
    logger: Logger;
  },
): Promise<ResourceType[] | undefined> {
  const peer = `global "${session.peerId}"`;
  const deadline = new AbortController();
  const timer = setTimeout(() => deadline.abort(), KINDS_TIMEOUT_MS);
  let learned: ResourceType[];
  try {
    learned = await fetchOnce({
      view: session.client,
      typeUrl: KIND_CATALOG_TYPE_URL,
      node: init.node,
      signal: anySignal([session.signal, deadline.signal]),
      accept: (resources) => agreement.agreeReceived(resources, peer),
    });
  } catch (error) {
    if (session.signal.aborted || KdsError.is(error, "session_closed")) return undefined;
    if (deadline.signal.aborted) {
      throw new KdsError(
        "protocol_error",
        `${peer} did not send its kinds within ${KINDS_TIMEOUT_MS / 1000} s; is it an older kds-mux? Run the same version on both sides`,
        { cause: error },
      );
    }
    if (!KdsError.is(error, "kinds_mismatch") && !KdsError.is(error, "invalid_resource"))
      throw error;
    init.logger.error(error.message, { zone: init.zone });
    await sleep(REFUSAL_GRACE_MS, session.signal).catch(() => undefined); // ends early when the session does
    if (session.end !== undefined) return undefined;
    throw error;
  } finally {
    clearTimeout(timer);
  }
  if (learned.length > 0) {
    const list = learned
      .map((t) => `${t.kind} (${describeDeclaration(declarationOf(t))})`)
      .join(", ");
    init.logger.info(
      `zone "${init.zone}" learned ${learned.length === 1 ? "a kind" : `${learned.length} kinds`} from ${peer}: ${list}`,
      { zone: init.zone },
    );
  }
  return learned;
}
