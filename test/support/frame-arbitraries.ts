// fast-check arbitraries of mux frames: every kind of data frame the mux
// carries, with arbitrary strings (lone surrogates included), bytes, unknown
// nesting and optional fields, for the properties that compare a frame's
// measured or written bytes with protobuf-es's toBinary.
import { create } from "@bufbuild/protobuf";
import fc from "fast-check";
import { CallSchema, FrameSchema, type Frame } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import {
  DeltaDiscoveryRequestSchema,
  DeltaDiscoveryResponseSchema,
  DiscoveryRequestSchema,
  DiscoveryResponseSchema,
} from "../../src/gen/kds/v1/discovery_pb.ts";

export const text = fc.oneof(
  fc.string(),
  fc.string({ unit: "binary" }),
  fc.string({ unit: "grapheme" }),
  fc.constant(""),
);
export const bytes = fc.uint8Array({ maxLength: 300 });

export const anyMessage = fc.record({ typeUrl: text, value: bytes });
const node = fc.record({
  id: text,
  cluster: text,
  userAgentName: text,
  clientFeatures: fc.array(text, { maxLength: 3 }),
  metadata: fc.option(
    fc.dictionary(fc.string(), fc.oneof(fc.string(), fc.double({ noNaN: true }), fc.boolean())),
    { nil: undefined },
  ),
});
const status = fc.record({
  code: fc.integer(),
  message: text,
  details: fc.array(anyMessage, { maxLength: 2 }),
});

/** The fields of delta responses holding up to `max` of `resource`. */
function deltaResponseOf<R>(resource: fc.Arbitrary<R>, max: number) {
  return fc.record({
    typeUrl: text,
    systemVersionInfo: text,
    nonce: text,
    removedResources: fc.array(text, { maxLength: 5 }),
    resources: fc.array(resource, { maxLength: max }),
  });
}

export const frameValue = fc.oneof(
  fc
    .record({
      typeUrl: text,
      versionInfo: text,
      responseNonce: text,
      resourceNames: fc.array(text, { maxLength: 5 }),
      node: fc.option(node, { nil: undefined }),
      errorDetail: fc.option(status, { nil: undefined }),
    })
    .map((v) => ({ case: "request" as const, value: create(DiscoveryRequestSchema, v) })),
  fc
    .record({
      typeUrl: text,
      versionInfo: text,
      nonce: text,
      resources: fc.array(anyMessage, { maxLength: 5 }),
    })
    .map((v) => ({ case: "response" as const, value: create(DiscoveryResponseSchema, v) })),
  fc
    .record({
      typeUrl: text,
      responseNonce: text,
      resourceNamesSubscribe: fc.array(text, { maxLength: 5 }),
      resourceNamesUnsubscribe: fc.array(text, { maxLength: 5 }),
      initialResourceVersions: fc.dictionary(fc.string(), text, { maxKeys: 5 }),
      errorDetail: fc.option(status, { nil: undefined }),
    })
    .map((v) => ({ case: "deltaRequest" as const, value: create(DeltaDiscoveryRequestSchema, v) })),
  deltaResponseOf(
    fc.record({
      name: text,
      version: text,
      aliases: fc.array(text, { maxLength: 2 }),
      resource: fc.option(anyMessage, { nil: undefined }),
      ttl: fc.option(
        fc.record({
          seconds: fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }),
          nanos: fc.integer(),
        }),
        { nil: undefined },
      ),
    }),
    5,
  ).map((v) => ({
    case: "deltaResponse" as const,
    value: create(DeltaDiscoveryResponseSchema, v),
  })),
  fc
    .record({
      id: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
      path: text,
      headers: fc.dictionary(fc.string(), text, { maxKeys: 3 }),
      body: bytes,
      window: fc.nat(),
    })
    .map(({ id, ...open }) => ({
      case: "call" as const,
      value: create(CallSchema, { id, kind: { case: "open", value: open } }),
    })),
  fc
    .record({ id: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), credit: fc.nat() })
    .map(({ id, credit }) => ({
      case: "call" as const,
      value: create(CallSchema, { id, kind: { case: "credit", value: credit } }),
    })),
);

/** Any data frame (not a batch). */
export const frame = frameValue.map((value) => create(FrameSchema, { value }) as Frame);

/** Delta responses as a server sends them: resources with an Any, no aliases nor TTL (the written path). */
export const sentResponse = deltaResponseOf(
  fc.record({
    name: text,
    version: text,
    resource: fc.option(anyMessage, { nil: undefined }),
  }),
  8,
).map(
  (v) =>
    create(FrameSchema, {
      value: { case: "deltaResponse", value: create(DeltaDiscoveryResponseSchema, v) },
    }) as Frame,
);

/** Delta ACKs as a client sends them: a type URL and a nonce (either may be empty), now and then per-resource errors. */
export const sentAck = fc
  .record({
    typeUrl: fc.oneof(text, fc.constant("type.googleapis.com/kds.v1.KdsResource")),
    responseNonce: fc.oneof(text, fc.nat().map(String)),
    errorDetail: fc.option(fc.record({ code: fc.constant(0), message: text }), {
      nil: undefined,
      freq: 4,
    }),
  })
  .map(
    (v) =>
      create(FrameSchema, {
        value: { case: "deltaRequest", value: create(DeltaDiscoveryRequestSchema, v) },
      }) as Frame,
  );

/**
 * Delta subscriptions as a discovery client sends them: a node of strings (now and then none), a type URL, the names
 * subscribed to, the versions held (keys among them that a plain object holds specially), now and then a nonce.
 */
export const sentSubscription = fc
  .record({
    node: fc.option(
      fc.oneof(
        fc.constant({}),
        fc.record({
          id: text,
          cluster: text,
          userAgentName: text,
          userAgentVersion: text,
          clientFeatures: fc.array(text, { maxLength: 2 }),
        }),
      ),
      { nil: undefined, freq: 4 },
    ),
    typeUrl: fc.oneof(text, fc.constant("type.googleapis.com/kds.v1.KdsResource")),
    resourceNamesSubscribe: fc.array(fc.oneof(fc.constant("*"), text), { maxLength: 3 }),
    initialResourceVersions: fc.dictionary(
      fc.oneof(text, fc.constantFrom("__proto__", "constructor", "toString", "default/a")),
      text,
      { maxKeys: 12 },
    ),
    responseNonce: fc.option(text, { nil: undefined }),
  })
  .map(
    (v) =>
      create(FrameSchema, {
        value: { case: "deltaRequest", value: create(DeltaDiscoveryRequestSchema, v) },
      }) as Frame,
  );
