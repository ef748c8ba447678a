/**
 * Version and feature negotiation in the hello: each side announces the
 * range of mux protocol versions it speaks, the named features it accepts
 * and its software version; the session runs the highest version both
 * ranges hold, with the features both sides announced (docs/protocol.md,
 * "Versions and features"). Pure functions (but for sharing equal agreed values):
 * the session calls them.
 *
 * @module
 */
import { KDS_MUX_VERSION } from "../version.ts";

/** The highest mux protocol version this implementation speaks (version 3 negotiates ranges and features in the hello). */
export const PROTOCOL_VERSION = 3;

/** The lowest mux protocol version this implementation speaks: a version 2 peer (no range in its hello) is served. */
export const MIN_PROTOCOL_VERSION = 2;

/** The features this implementation knows; a session uses those both sides announced. */
export const FEATURES = ["batching", "calls", "trace-context"] as const;

/**
 * A named feature: `batching` (the side accepts `batch` frames), `calls`
 * (it accepts reverse-call frames), `trace-context` (it reads the W3C
 * trace context of data frames; offered by default only while a tracing
 * SDK is registered).
 */
export type Feature = (typeof FEATURES)[number];

/** The features version 2 names in booleans of the hello; the rest exist only at version 3. */
const VERSION_2_FEATURES = ["batching", "calls"] as const;

/** What this implementation says of itself in its hello by default. */
export const SOFTWARE_VERSION = `kds-mux/${KDS_MUX_VERSION}`;

/** Most names a hello's `features` may hold. */
export const MAX_FEATURES = 32;
/** Longest feature name, in characters. */
export const MAX_FEATURE_NAME = 64;
/** Longest `software_version`, in characters. */
export const MAX_SOFTWARE_VERSION = 128;

/** A range of mux protocol versions, both ends included. */
export interface VersionRange {
  /** Lowest version spoken. */
  readonly min: number;
  /** Highest version spoken. */
  readonly max: number;
}

/** What one side offers in its hello. */
export interface HelloOffer {
  /** The versions it speaks. */
  readonly versions: VersionRange;
  /** The features it accepts. */
  readonly features: readonly Feature[];
  /** Its software and version ("kds-mux/0.1.0"). */
  readonly softwareVersion: string;
}

/** The negotiation fields of a hello, as the wire carries them. */
export interface HelloNegotiationFields {
  /** The lowest version the sender speaks (a version 2 peer compares it exactly). */
  readonly protocolVersion: number;
  /** The highest version the sender speaks; 0 means `protocolVersion`. */
  readonly maxProtocolVersion: number;
  /** Named features (version 3). */
  readonly features: readonly string[];
  /** The sender's software version (version 3). */
  readonly softwareVersion: string;
  /** Version 2's flag for the `batching` feature. */
  readonly batching: boolean;
  /** Version 2's flag for the `calls` feature. */
  readonly calls: boolean;
}

/** What a session agreed on with its peer. */
export interface Agreement {
  /** The mux protocol version the session runs. */
  readonly protocolVersion: number;
  /** The features both sides announced, in the order of {@link FEATURES}. */
  readonly features: readonly Feature[];
  /** The versions the peer speaks. */
  readonly peerVersions: VersionRange;
  /** The peer's software version; empty when it did not say (a version 2 peer). */
  readonly peerSoftwareVersion: string;
}

/**
 * The negotiation fields of the hello `offer` makes. The range goes as
 * `protocol_version` (the lowest) and `max_protocol_version`; the version 3
 * fields go only when the range reaches 3, so a side limited to version 2
 * sends exactly a version 2 hello. The booleans go always, for version 2
 * peers.
 */
export function helloFields(
  offer: HelloOffer,
): Omit<HelloNegotiationFields, "features"> & { features: string[] } {
  const v3 = offer.versions.max >= 3;
  return {
    protocolVersion: offer.versions.min,
    maxProtocolVersion: offer.versions.max > offer.versions.min ? offer.versions.max : 0,
    features: v3 ? [...offer.features] : [],
    softwareVersion: v3 ? offer.softwareVersion : "",
    batching: offer.features.includes("batching"),
    calls: offer.features.includes("calls"),
  };
}

/** The peer's range as its hello states it (a hello without `max_protocol_version` speaks only `protocol_version`). */
export function peerRange(
  hello: Pick<HelloNegotiationFields, "protocolVersion" | "maxProtocolVersion">,
): VersionRange {
  return {
    min: hello.protocolVersion,
    max: hello.maxProtocolVersion === 0 ? hello.protocolVersion : hello.maxProtocolVersion,
  };
}

/** "2" or "2 to 3". */
export function describeRange(range: VersionRange): string {
  return range.min === range.max ? `${range.min}` : `${range.min} to ${range.max}`;
}

/**
 * Negotiates with the peer's hello. Returns the agreement, or the reason the
 * hello is refused: a range that is malformed, that shares no version with
 * this side's (naming both ranges and which side to upgrade), or negotiation
 * fields out of bounds.
 *
 * @param local - what this side offered
 * @param hello - the peer's hello
 * @param roles - this side's role and a name for the peer ("zone \"edge-1\"") for the refusal
 */
export function negotiate(
  local: HelloOffer,
  hello: HelloNegotiationFields,
  roles: { readonly local: "zone" | "global"; readonly peer: string },
): { readonly agreement: Agreement } | { readonly refusal: string } {
  const peer = peerRange(hello);
  if (hello.maxProtocolVersion !== 0 && hello.maxProtocolVersion < hello.protocolVersion) {
    return {
      refusal: `the peer's hello says max_protocol_version ${hello.maxProtocolVersion}, below its protocol_version ${hello.protocolVersion} (the lowest version it speaks)`,
    };
  }
  if (hello.softwareVersion.length > MAX_SOFTWARE_VERSION) {
    return {
      refusal: `the peer's software_version is ${hello.softwareVersion.length} characters long; at most ${MAX_SOFTWARE_VERSION} are allowed`,
    };
  }
  if (
    hello.features.length > MAX_FEATURES ||
    hello.features.some((f) => f.length > MAX_FEATURE_NAME)
  ) {
    return {
      refusal: `the peer's hello lists ${hello.features.length} features; at most ${MAX_FEATURES} names of at most ${MAX_FEATURE_NAME} characters are allowed`,
    };
  }
  const version = Math.min(local.versions.max, peer.max);
  if (version < Math.max(local.versions.min, peer.min))
    return { refusal: rangeRefusal(local, roles, peer, hello.softwareVersion) };
  // Version 2 names its two features in booleans; version 3 lists them.
  const announced: readonly string[] =
    version >= 3 ? hello.features : VERSION_2_FEATURES.filter((f) => hello[f]);
  const features = FEATURES.filter((f) => local.features.includes(f) && announced.includes(f));
  return {
    agreement: {
      protocolVersion: version,
      features: sharedFeatures.get(features.join(","), features),
      peerVersions: sharedRanges.get(`${peer.min}-${peer.max}`, peer),
      peerSoftwareVersion: sharedSoftware.get(hello.softwareVersion, hello.softwareVersion),
    },
  };
}

/**
 * One frozen copy of each equal value, by key: every peer of a fleet sends
 * the same hello, and a global keeps what it agreed with each for the
 * session's life. Keeps at most 64 distinct values (what peers send is
 * theirs to choose, the memory is this side's); past that, `value` itself,
 * frozen.
 */
class SharedValues<T> {
  readonly #values = new Map<string, T>();

  get(key: string, value: T): T {
    const known = this.#values.get(key);
    if (known !== undefined) return known;
    Object.freeze(value);
    if (this.#values.size < 64) this.#values.set(key, value);
    return value;
  }
}

const sharedFeatures = new SharedValues<readonly Feature[]>();
const sharedRanges = new SharedValues<VersionRange>();
const sharedSoftware = new SharedValues<string>();

/** The refusal of a peer whose range shares no version with this side's: both ranges, and which side to upgrade. */
function rangeRefusal(
  local: HelloOffer,
  roles: { readonly local: "zone" | "global"; readonly peer: string },
  peer: VersionRange,
  peerSoftware: string,
): string {
  const peerSays = peerSoftware === "" ? "" : ` (${peerSoftware})`;
  const both =
    `the ${roles.local} speaks mux protocol versions ${describeRange(local.versions)} (${local.softwareVersion}), ` +
    `the ${roles.peer}${peerSays} speaks ${describeRange(peer)}`;
  const upgrade =
    peer.max < local.versions.min
      ? `upgrade the ${roles.peer} to a release that speaks version ${local.versions.min} or later`
      : `upgrade the ${roles.local} to a release that speaks version ${peer.min} or later, or run the ${roles.peer} on a release that speaks version ${local.versions.max}`;
  return `${both}: no version in common; ${upgrade} (see docs/protocol.md, "Versions and features")`;
}

/**
 * What a session agreed on, for log lines: "protocol 3 (batching, calls),
 * kds-mux/0.1.0", or "protocol 2 (calls), software version not given".
 */
export function describeAgreement(peer: {
  readonly protocolVersion: number;
  readonly features: readonly string[];
  readonly softwareVersion: string;
}): string {
  const features = peer.features.length === 0 ? "no features" : peer.features.join(", ");
  return `protocol ${peer.protocolVersion} (${features}), ${peer.softwareVersion === "" ? "software version not given" : peer.softwareVersion}`;
}
