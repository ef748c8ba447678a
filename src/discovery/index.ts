/**
 * The xDS discovery state machines (SotW and delta): the client and server a sync runs on, their options, observers and sinks.
 *
 * @module
 */
export {
  DiscoveryServer,
  type DiscoveryServerInit,
} from "./server.ts";
export {
  DiscoveryClient,
  type DiscoveryClientInit,
} from "./client.ts";
export {
  SetDigest,
  digestOf,
} from "./digest.ts";
export {
  fetchOnce,
  type FetchOnceInit,
} from "./fetch-once.ts";
export {
  mergeSources,
  staticSource,
} from "./static-source.ts";
export {
  defaultDiscoveryOptions,
  type ClientObserver,
  type DiscoveryOptions,
  type ReceivedResource,
  type ResourceRejection,
  type ResourceSet,
  type ResourceSink,
  type SinkResult,
  type ServerObserver,
  type Snapshot,
  type SnapshotSource,
  type WireResource,
} from "./types.ts";
