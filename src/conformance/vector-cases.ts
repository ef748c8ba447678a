/**
 * The published test vectors (docs/protocol/vectors/*.json), built from the
 * code's own encoders and limits, each judged by {@link judgeFrame}. Run
 * `npx tsx scripts/protocol-vectors.ts` to write them; a test checks the
 * files against this list and against the judge.
 *
 * @module
 */
import { create, toBinary, type JsonObject, type MessageInitShape } from "@bufbuild/protobuf";
import { anyPack } from "@bufbuild/protobuf/wkt";
import { FrameSchema, GoAwayReason } from "../gen/kds/mux/v1/mux_pb.ts";
import { KdsResourceSchema } from "../gen/kds/v1/resource_pb.ts";
import { MAX_FRAME_ELEMENTS } from "../mux/frame-limits.ts";
import { MIN_HELLO_BYTES } from "../mux/hello-limits.ts";
import {
  MAX_FEATURE_NAME,
  MAX_FEATURES,
  MAX_SOFTWARE_VERSION,
  MIN_PROTOCOL_VERSION,
  PROTOCOL_VERSION,
} from "../mux/negotiation.ts";
import { MAX_WINDOW, MAX_WINDOW_BYTES } from "../mux/options.ts";
import { judgeFrame, type Judgement, type VectorContext } from "./vector-judge.ts";

/** One vector as the JSON file holds it. */
export interface ProtocolVector extends Judgement {
  /** Its file name without `.json`. */
  readonly name: string;
  /** What it holds and why the receiver decides as it does. */
  readonly description: string;
  /** The frame's bytes, hex (lower case). */
  readonly frame: string;
  readonly context?: VectorContext;
}

type FrameInit = MessageInitShape<typeof FrameSchema>;

const encode = (init: FrameInit): Uint8Array => toBinary(FrameSchema, create(FrameSchema, init));

/** Hex of `bytes`. */
export function toHex(bytes: Uint8Array): string {
  let out = "";
  for (const b of bytes) out += b.toString(16).padStart(2, "0");
  return out;
}

/** The bytes of hex `text`. */
export function fromHex(text: string): Uint8Array {
  const out = new Uint8Array(text.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = Number.parseInt(text.slice(2 * i, 2 * i + 2), 16);
  return out;
}

// Hand-written protobuf, for encodings an encoder does not write.
const varint = (n: number): number[] => {
  const out: number[] = [];
  let v = n;
  while (v >= 0x80) {
    out.push((v % 0x80) | 0x80);
    v = Math.floor(v / 0x80);
  }
  out.push(v);
  return out;
};
const tag = (no: number, wireType: number): number[] => varint(no * 8 + wireType);
const field = (no: number, body: number[]): number[] => [
  ...tag(no, 2),
  ...varint(body.length),
  ...body,
];
const bytesOf = (...parts: number[][]): Uint8Array => new Uint8Array(parts.flat());
const utf8 = (text: string): number[] => [...new TextEncoder().encode(text)];

const TYPE_URL = "type.googleapis.com/kds.example.v1.Mesh";

const hello = (init: Record<string, unknown> = {}): FrameInit => ({
  value: {
    case: "hello",
    value: {
      protocolVersion: MIN_PROTOCOL_VERSION,
      maxProtocolVersion: PROTOCOL_VERSION,
      peerId: "zone-1",
      requestWindow: 64,
      responseWindow: 64,
      requestWindowBytes: 8 * 1024 * 1024,
      responseWindowBytes: 8 * 1024 * 1024,
      maxMessageBytes: 4 * 1024 * 1024,
      heartbeatIntervalMs: 15_000,
      heartbeatTimeoutMs: 60_000,
      batching: true,
      calls: true,
      features: ["batching", "calls"],
      softwareVersion: "kds-mux/0.1.0",
      ...init,
    },
  },
});

const resource = (name: string, version: string) => ({
  name,
  version,
  resource: anyPack(
    KdsResourceSchema,
    create(KdsResourceSchema, { meta: { mesh: "default", name, labels: { team: "a" } } }),
  ),
});

const deltaResponse = (init: Record<string, unknown> = {}): FrameInit => ({
  value: {
    case: "deltaResponse",
    value: {
      typeUrl: TYPE_URL,
      systemVersionInfo: "7",
      resources: [resource("web", "7")],
      removedResources: ["old"],
      nonce: "3",
      ...init,
    },
  },
});

/** A SotW response whose credit size is exactly `credit` (its nonce padded). */
function responseOfCredit(credit: number): Uint8Array {
  for (let pad = 0; pad < credit; pad++) {
    const bytes = encode({
      value: {
        case: "response",
        value: { typeUrl: TYPE_URL, versionInfo: "1", nonce: "n".repeat(pad) },
      },
    });
    if (judgeFrame(bytes).creditSize === credit) return bytes;
  }
  throw new Error(`no response of credit size ${credit}`);
}

/** A frame of exactly `length` bytes: a ping carrying an unknown padding field. */
function frameOfLength(length: number): Uint8Array {
  for (let pad = 0; pad < length; pad++) {
    const bytes = bytesOf(field(11, [...tag(1, 0), 1]), field(100, new Array(pad).fill(0x61)));
    if (bytes.length === length) return bytes;
  }
  throw new Error(`no frame of ${length} bytes`);
}

/** A delta request holding `n` empty subscription names: n + 1 elements (the request message itself counts). */
const namesRequest = (n: number): Uint8Array =>
  encode({
    value: {
      case: "deltaRequest",
      value: { resourceNamesSubscribe: new Array<string>(n).fill("") },
    },
  });

/** A delta response of `n` empty resources: cheap on the wire, dear decoded. */
const emptyResources = (n: number): Uint8Array =>
  encode({
    value: {
      case: "deltaResponse",
      value: { resources: Array.from({ length: n }, () => ({})) },
    },
  });

/** The largest `n` whose `build(n)` the judge accepts (`build` grows monotonically toward a refusal). */
function lastAccepted(build: (n: number) => Uint8Array, from: number, to: number): number {
  let lo = from;
  let hi = to;
  if (judgeFrame(build(lo)).verdict !== "accept" || judgeFrame(build(hi)).verdict === "accept")
    throw new Error(`no bound between ${from} and ${to}`);
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (judgeFrame(build(mid)).verdict === "accept") lo = mid;
    else hi = mid;
  }
  return lo;
}

/** A request whose node metadata nests `depth` Structs. */
function nestedStruct(depth: number): Uint8Array {
  let value: JsonObject = {};
  for (let i = 0; i < depth; i++) value = { a: value };
  return encode({
    value: {
      case: "request",
      value: { typeUrl: TYPE_URL, node: { id: "zone-1", metadata: value } },
    },
  });
}

interface Case {
  readonly name: string;
  readonly description: string;
  readonly frame: Uint8Array;
  readonly context?: VectorContext;
}

/** Every case, in a stable order. */
function cases(): Case[] {
  const out: Case[] = [];
  const add = (
    name: string,
    description: string,
    frame: Uint8Array | FrameInit,
    context?: VectorContext,
  ): void => {
    out.push({
      name,
      description,
      frame: frame instanceof Uint8Array ? frame : encode(frame),
      ...(context === undefined ? {} : { context }),
    });
  };

  // Every frame kind, as kds-mux encodes it.
  add("kind.request", "a SotW request: type URL, version, nonce and the node", {
    value: {
      case: "request",
      value: {
        typeUrl: TYPE_URL,
        versionInfo: "2",
        responseNonce: "5",
        node: { id: "zone-1", cluster: "zone", userAgentName: "kds-mux" },
      },
    },
  });
  add("kind.request-nack", "a SotW NACK: error_detail with code 3 and the reason", {
    value: {
      case: "request",
      value: {
        typeUrl: TYPE_URL,
        versionInfo: "1",
        responseNonce: "6",
        errorDetail: { code: 3, message: "spec does not decode" },
      },
    },
  });
  add("kind.response", "a SotW response of one resource", {
    value: {
      case: "response",
      value: {
        typeUrl: TYPE_URL,
        versionInfo: "9",
        resources: [resource("web", "9").resource],
        nonce: "1",
      },
    },
  });
  add(
    "kind.delta-request-subscribe",
    "a delta subscription to every resource, resuming with two held versions (a map of two entries)",
    {
      value: {
        case: "deltaRequest",
        value: {
          typeUrl: TYPE_URL,
          resourceNamesSubscribe: ["*"],
          initialResourceVersions: { web: "7", db: "3" },
        },
      },
    },
  );
  add("kind.delta-request-ack", "a plain delta ACK: the type URL and the nonce only", {
    value: { case: "deltaRequest", value: { typeUrl: TYPE_URL, responseNonce: "3" } },
  });
  add("kind.delta-response", "a delta response: one resource and one removal", deltaResponse());
  add(
    "kind.delta-response-empty",
    "a delta response naming nothing (a sync point)",
    deltaResponse({ resources: [], removedResources: [] }),
  );
  add("kind.hello-v3", "kds-mux's hello: versions 2 to 3, both features, default windows", hello());
  add(
    "kind.hello-v2",
    "a version 2 hello: no range, no feature names, the two booleans",
    hello({ maxProtocolVersion: 0, features: [], softwareVersion: "" }),
  );
  add("kind.ping", "a ping", { value: { case: "ping", value: { id: 42n } } });
  add("kind.pong", "a pong", { value: { case: "pong", value: { id: 42n } } });
  add("kind.window-update", "a window update returning frames and bytes on both lanes", {
    value: {
      case: "windowUpdate",
      value: { requests: 16, responses: 2, requestBytes: 4096, responseBytes: 2_097_152 },
    },
  });
  add("kind.window-update-zero", "a window update that grants nothing: legal, changes nothing", {
    value: { case: "windowUpdate", value: {} },
  });
  add("kind.goaway-shutdown", "a goaway SHUTDOWN", {
    value: { case: "goaway", value: { reason: GoAwayReason.SHUTDOWN, message: "stopping" } },
  });
  add("kind.goaway-reconnect", "a goaway RECONNECT naming the instance to dial", {
    value: {
      case: "goaway",
      value: {
        reason: GoAwayReason.RECONNECT,
        message: "rebalancing",
        reconnectTo: "https://global-2.example.com:5685",
      },
    },
  });
  add(
    "kind.batch",
    "a batch of two delta responses: credit is the sum of the members', the batch costs nothing",
    {
      value: {
        case: "batch",
        value: { frames: [deltaResponse(), deltaResponse({ nonce: "4" })] },
      },
    },
  );
  add("kind.batch-empty", "a batch of no frames: legal, costs nothing", {
    value: { case: "batch", value: {} },
  });
  add("kind.batch-mixed-lanes", "a batch of a request and a call frame", {
    value: {
      case: "batch",
      value: {
        frames: [
          { value: { case: "deltaRequest", value: { typeUrl: TYPE_URL, responseNonce: "1" } } },
          { value: { case: "call", value: { id: 1n, kind: { case: "credit", value: 4 } } } },
        ],
      },
    },
  });
  add(
    "kind.call-open",
    "a call's open (request lane): path, three headers (a map of three entries), body, window",
    {
      value: {
        case: "call",
        value: {
          id: 7n,
          kind: {
            case: "open",
            value: {
              path: "/kds.admin.v1.AdminService/InspectZones",
              headers: {
                "content-type": "application/proto",
                "connect-protocol-version": "1",
                "kds-caller": "global",
              },
              body: new Uint8Array([1, 2, 3]),
              window: 8,
            },
          },
        },
      },
    },
  );
  add("kind.call-head", "a call's head (response lane)", {
    value: {
      case: "call",
      value: {
        id: 7n,
        kind: {
          case: "head",
          value: { status: 200, headers: { "content-type": "application/proto" } },
        },
      },
    },
  });
  add("kind.call-data", "a call's data chunk (response lane)", {
    value: {
      case: "call",
      value: { id: 7n, kind: { case: "data", value: new Uint8Array(16).fill(7) } },
    },
  });
  add("kind.call-end", "a call's end with trailers (response lane)", {
    value: {
      case: "call",
      value: { id: 7n, kind: { case: "end", value: { trailers: { "x-done": "1" } } } },
    },
  });
  add("kind.call-end-error", "a call's end refusing it (permission_denied)", {
    value: {
      case: "call",
      value: {
        id: 8n,
        kind: { case: "end", value: { error: "a zone calls nothing", code: "permission_denied" } },
      },
    },
  });
  add("kind.call-cancel", "a call's cancel (request lane)", {
    value: { case: "call", value: { id: 7n, kind: { case: "cancel", value: {} } } },
  });
  add("kind.call-credit", "a call's credit (request lane)", {
    value: { case: "call", value: { id: 7n, kind: { case: "credit", value: 8 } } },
  });

  // Map and Any contents.
  add(
    "map.entry-empty",
    "a map entry with neither key nor value (the empty key maps to the empty value): one element",
    bytesOf(field(3, [...field(2, utf8(TYPE_URL)), ...field(5, [])])),
  );
  add(
    "map.entry-duplicate-key",
    "two entries of one key: the last wins, so the re-encoded frame, and its credit, hold one",
    bytesOf(
      field(3, [
        ...field(2, utf8(TYPE_URL)),
        ...field(5, [...field(1, utf8("web")), ...field(2, utf8("1"))]),
        ...field(5, [...field(1, utf8("web")), ...field(2, utf8("2"))]),
      ]),
    ),
  );
  add(
    "map.entry-value-first",
    "a map entry whose value comes before its key: legal protobuf, one element",
    bytesOf(field(3, [...field(5, [...field(2, utf8("1")), ...field(1, utf8("web"))])])),
  );
  add(
    "any.resource",
    "a resource whose Any holds a kds.v1.KdsResource: the Any, its type URL and its value count, not what the value holds",
    deltaResponse(),
  );
  add(
    "any.value-not-protobuf",
    "a resource whose Any value is not protobuf at all: the mux does not read inside an Any (the discovery layer NACKs it)",
    deltaResponse({
      resources: [
        {
          name: "web",
          version: "1",
          resource: {
            typeUrl: "type.googleapis.com/kds.v1.KdsResource",
            value: new Uint8Array([0xff, 0xff, 0xff]),
          },
        },
      ],
    }),
  );
  add(
    "any.error-detail",
    "a NACK whose error_detail carries an Any in details (per-resource errors)",
    {
      value: {
        case: "deltaRequest",
        value: {
          typeUrl: TYPE_URL,
          responseNonce: "2",
          errorDetail: {
            code: 0,
            message: "",
            details: [
              anyPack(KdsResourceSchema, create(KdsResourceSchema, { meta: { name: "web" } })),
            ],
          },
        },
      },
    },
  );

  // Encodings a protobuf encoder does not write: credit is the length of the decoded frame encoded again.
  add(
    "noncanonical.varint-padded",
    "a ping whose id 1 is a two-byte varint (0x81 0x00): the credit of a ping is 0, its re-encoded length 4 is under the wire length",
    bytesOf(field(11, [...tag(1, 0), 0x81, 0x00])),
  );
  add(
    "noncanonical.length-padded",
    "a delta ACK whose length prefix is a two-byte varint: credit is the re-encoded length, one byte under the wire length",
    (() => {
      const body = [...field(2, utf8(TYPE_URL)), ...field(6, utf8("3"))];
      const len = varint(body.length);
      return bytesOf([...tag(3, 2), (len[0] as number) | 0x80, 0x00, ...body]);
    })(),
  );
  add(
    "noncanonical.oneof-twice",
    "two members of the frame's oneof: the last wins (a pong), and the credit counts only it",
    bytesOf(field(1, field(4, utf8(TYPE_URL))), field(12, [...tag(1, 0), 5])),
  );
  add(
    "noncanonical.field-repeated",
    "a delta response whose nonce comes twice: the last wins, so the credit is below the wire length",
    bytesOf(
      field(4, [...field(4, utf8(TYPE_URL)), ...field(5, utf8("1")), ...field(5, utf8("2"))]),
    ),
  );
  add(
    "noncanonical.fields-out-of-order",
    "a delta ACK with the nonce before the type URL: credit equals the wire length (same fields, another order)",
    bytesOf(field(3, [...field(6, utf8("3")), ...field(2, utf8(TYPE_URL))])),
  );
  add(
    "noncanonical.default-written",
    "a delta response that writes its empty system_version_info explicitly (an encoder leaves it out): credit is below the wire length",
    bytesOf(field(4, [...field(1, []), ...field(4, utf8(TYPE_URL)), ...field(5, utf8("1"))])),
  );
  add(
    "noncanonical.bool-two",
    "a hello whose batching bool is the varint 2: read as true, re-encoded as 1 (a control frame: no credit)",
    (() => {
      const canonical = encode(hello());
      return bytesOf([...canonical], field(10, [...tag(8, 0), 2]));
    })(),
  );
  add(
    "noncanonical.unknown-field",
    "a ping with an unknown field 99 in the frame: kept, counted as one element, and part of the credit when on a data frame",
    bytesOf(field(11, [...tag(1, 0), 1]), [...tag(99, 0), 1]),
  );
  add(
    "noncanonical.unknown-field-data",
    "a delta ACK with an unknown field 99 inside the request: one more element, and the credit includes it",
    bytesOf(field(3, [...field(2, utf8(TYPE_URL)), ...field(6, utf8("3")), ...tag(99, 0), 1])),
  );
  add(
    "noncanonical.unknown-group",
    "a ping followed by an unknown group (wire types 3 and 4): one element",
    bytesOf(field(11, [...tag(1, 0), 1]), [...tag(98, 3), ...tag(1, 0), 1, ...tag(98, 4)]),
  );

  // Not a frame.
  add(
    "malformed.truncated",
    "a ping whose length runs past the end of the bytes",
    bytesOf([...tag(11, 2), 5, ...tag(1, 0), 1]),
  );
  add(
    "malformed.wire-type",
    "field 11 (ping, a message) written as a varint",
    bytesOf([...tag(11, 0), 1]),
  );
  add(
    "malformed.wire-type-7",
    "a field of wire type 7, which does not exist",
    bytesOf([...tag(11, 7), 1]),
  );
  add(
    "malformed.varint-too-long",
    "a varint of 11 bytes",
    bytesOf([...tag(99, 0), ...new Array(10).fill(0x80), 1]),
  );
  add(
    "malformed.group-unclosed",
    "an unknown group that never ends",
    bytesOf([...tag(98, 3), ...tag(1, 0), 1]),
  );
  add(
    "kind.empty",
    "zero bytes: a frame with no member of its oneof, which a receiver refuses",
    new Uint8Array(),
  );
  add(
    "kind.unknown-only",
    "a frame holding only an unknown field (a member this version does not know)",
    bytesOf([...tag(99, 0), 1]),
  );

  // Bounds of a frame: max_message_bytes (the receiver's hello), elements, decoded size, depth.
  add(
    "limit.max-message-bytes-at",
    "a frame of exactly the receiver's max_message_bytes (1024)",
    frameOfLength(MIN_HELLO_BYTES),
    { maxMessageBytes: MIN_HELLO_BYTES },
  );
  add(
    "limit.max-message-bytes-past",
    "a frame one byte over the receiver's max_message_bytes (1024)",
    frameOfLength(MIN_HELLO_BYTES + 1),
    { maxMessageBytes: MIN_HELLO_BYTES },
  );
  add(
    "limit.elements-at",
    `a delta request of ${MAX_FRAME_ELEMENTS - 1} empty names: with the request itself, exactly ${MAX_FRAME_ELEMENTS} elements`,
    namesRequest(MAX_FRAME_ELEMENTS - 1),
  );
  add(
    "limit.elements-past",
    `one more name: ${MAX_FRAME_ELEMENTS + 1} elements`,
    namesRequest(MAX_FRAME_ELEMENTS),
  );
  const dense = lastAccepted(emptyResources, 1, 100_000);
  add(
    "limit.expansion-at",
    `a delta response of ${dense} empty resources: the most whose decoded estimate stays within 16 times the length plus 16 KiB`,
    emptyResources(dense),
  );
  add(
    "limit.expansion-past",
    `${dense + 1} empty resources: over the decoded estimate`,
    emptyResources(dense + 1),
  );
  const deep = lastAccepted(nestedStruct, 1, 64);
  add(
    "limit.depth-at",
    `a request whose node metadata nests ${deep} Structs: the deepest a receiver reads`,
    nestedStruct(deep),
  );
  add(
    "limit.depth-past",
    `${deep + 1} nested Structs: deeper than a receiver reads`,
    nestedStruct(deep + 1),
  );

  // A hello's bounds.
  add(
    "hello.window-max",
    `frame windows of ${MAX_WINDOW}`,
    hello({ requestWindow: MAX_WINDOW, responseWindow: MAX_WINDOW }),
  );
  add(
    "hello.window-past",
    `a request window of ${MAX_WINDOW + 1}`,
    hello({ requestWindow: MAX_WINDOW + 1 }),
  );
  add("hello.window-zero", "a response window of 0", hello({ responseWindow: 0 }));
  add(
    "hello.byte-window-min",
    `byte windows of ${MIN_HELLO_BYTES}`,
    hello({ requestWindowBytes: MIN_HELLO_BYTES, responseWindowBytes: MIN_HELLO_BYTES }),
  );
  add(
    "hello.byte-window-under",
    `a request byte window of ${MIN_HELLO_BYTES - 1}`,
    hello({ requestWindowBytes: MIN_HELLO_BYTES - 1 }),
  );
  add(
    "hello.byte-window-max",
    `byte windows of ${MAX_WINDOW_BYTES} (2^30)`,
    hello({ requestWindowBytes: MAX_WINDOW_BYTES, responseWindowBytes: MAX_WINDOW_BYTES }),
  );
  add(
    "hello.byte-window-past",
    `a response byte window of ${MAX_WINDOW_BYTES + 1}`,
    hello({ responseWindowBytes: MAX_WINDOW_BYTES + 1 }),
  );
  add(
    "hello.byte-window-missing",
    "a hello without byte windows (version 1's)",
    hello({ requestWindowBytes: 0, responseWindowBytes: 0 }),
  );
  add(
    "hello.max-message-min",
    `max_message_bytes of ${MIN_HELLO_BYTES}`,
    hello({ maxMessageBytes: MIN_HELLO_BYTES }),
  );
  add(
    "hello.max-message-under",
    `max_message_bytes of ${MIN_HELLO_BYTES - 1}`,
    hello({ maxMessageBytes: MIN_HELLO_BYTES - 1 }),
  );
  add(
    "hello.version-1",
    "a hello of version 1 only: no version in common",
    hello({ protocolVersion: 1, maxProtocolVersion: 0 }),
  );
  add(
    "hello.version-future",
    "a hello of versions 3 to 9: version 3 in common",
    hello({ protocolVersion: 3, maxProtocolVersion: 9 }),
  );
  add(
    "hello.version-inverted",
    "max_protocol_version below protocol_version",
    hello({ protocolVersion: 3, maxProtocolVersion: 2 }),
  );
  add(
    "hello.features-max",
    `${MAX_FEATURES} feature names of ${MAX_FEATURE_NAME} characters (unknown ones ignored)`,
    hello({
      features: Array.from({ length: MAX_FEATURES }, (_, i) =>
        String(i).padStart(MAX_FEATURE_NAME, "f"),
      ),
    }),
  );
  add(
    "hello.features-past",
    `${MAX_FEATURES + 1} feature names`,
    hello({ features: Array.from({ length: MAX_FEATURES + 1 }, (_, i) => `f${i}`) }),
  );
  add(
    "hello.feature-name-past",
    `a feature name of ${MAX_FEATURE_NAME + 1} characters`,
    hello({ features: ["f".repeat(MAX_FEATURE_NAME + 1)] }),
  );
  add(
    "hello.software-version-max",
    `a software_version of ${MAX_SOFTWARE_VERSION} characters`,
    hello({ softwareVersion: "v".repeat(MAX_SOFTWARE_VERSION) }),
  );
  add(
    "hello.software-version-past",
    `a software_version of ${MAX_SOFTWARE_VERSION + 1} characters`,
    hello({ softwareVersion: "v".repeat(MAX_SOFTWARE_VERSION + 1) }),
  );

  // Credit: the window the receiver granted (its hello's), what already arrived, and the frame.
  const window = { frames: 4, bytes: 4096 };
  add(
    "credit.byte-at",
    "a response of credit 4096 into a fresh byte window of 4096",
    responseOfCredit(4096),
    { window },
  );
  add(
    "credit.byte-past",
    "a response of credit 4097 into a fresh byte window of 4096",
    responseOfCredit(4097),
    { window },
  );
  add(
    "credit.byte-rest-at",
    "a response of credit 1096 after 3000 bytes arrived (4096 granted)",
    responseOfCredit(1096),
    { window, used: { frames: 1, bytes: 3000 } },
  );
  add(
    "credit.byte-rest-past",
    "a response of credit 1097 after 3000 bytes arrived (4096 granted)",
    responseOfCredit(1097),
    { window, used: { frames: 1, bytes: 3000 } },
  );
  add("credit.frame-at", "the fourth frame of a window of four", deltaResponse(), {
    window: { frames: 4, bytes: 1 << 20 },
    used: { frames: 3, bytes: 300 },
  });
  add("credit.frame-past", "a fifth frame into a window of four", deltaResponse(), {
    window: { frames: 4, bytes: 1 << 20 },
    used: { frames: 4, bytes: 400 },
  });
  add(
    "credit.batch-past",
    "a batch of two responses into a window of one frame: each member counts as if sent alone",
    {
      value: { case: "batch", value: { frames: [deltaResponse(), deltaResponse({ nonce: "4" })] } },
    },
    { window: { frames: 1, bytes: 1 << 20 } },
  );
  add(
    "credit.call-past",
    "a call's data chunk larger than the response lane's byte credit: call frames count like any data frame",
    {
      value: {
        case: "call",
        value: { id: 1n, kind: { case: "data", value: new Uint8Array(1100).fill(1) } },
      },
    },
    { window: { frames: 4, bytes: 1024 } },
  );
  add(
    "credit.control-free",
    "a ping into a window with no credit left: control frames take none",
    { value: { case: "ping", value: { id: 1n } } },
    { window: { frames: 1, bytes: 1024 }, used: { frames: 1, bytes: 1024 } },
  );
  add(
    "window.frames-cap-at",
    "a window update bringing a lane's unused frame credit to exactly 2^31",
    { value: { case: "windowUpdate", value: { responses: 1 } } },
    { outstanding: { frames: 2 ** 31 - 1, bytes: 0 } },
  );
  add(
    "window.frames-cap-past",
    "a window update bringing a lane's unused frame credit to 2^31 + 1",
    { value: { case: "windowUpdate", value: { responses: 2 } } },
    { outstanding: { frames: 2 ** 31 - 1, bytes: 0 } },
  );
  add(
    "window.bytes-cap-at",
    "a window update bringing a lane's unused byte credit to exactly 2^40",
    { value: { case: "windowUpdate", value: { requestBytes: 1 } } },
    { outstanding: { frames: 0, bytes: 2 ** 40 - 1 } },
  );
  add(
    "window.bytes-cap-past",
    "a window update bringing a lane's unused byte credit to 2^40 + 1",
    { value: { case: "windowUpdate", value: { requestBytes: 2 } } },
    { outstanding: { frames: 0, bytes: 2 ** 40 - 1 } },
  );

  // What a batch may hold.
  add(
    "batch.ping-member",
    "a batch holding a ping: only requests, responses and calls may be batched",
    {
      value: { case: "batch", value: { frames: [{ value: { case: "ping", value: { id: 1n } } }] } },
    },
  );
  add("batch.nested", "a batch inside a batch", {
    value: {
      case: "batch",
      value: { frames: [{ value: { case: "batch", value: { frames: [deltaResponse()] } } }] },
    },
  });
  add(
    "string.invalid-utf8",
    "a delta ACK whose nonce is not valid UTF-8 (0xff)",
    bytesOf(field(3, [...field(2, utf8(TYPE_URL)), ...field(6, [0xff])])),
  );
  return out;
}

/** Every vector, judged by the code. */
export function protocolVectors(): ProtocolVector[] {
  return cases().map((c) => {
    const judged = judgeFrame(c.frame, c.context);
    return {
      name: c.name,
      description: c.description,
      frame: toHex(c.frame),
      ...(c.context === undefined ? {} : { context: c.context }),
      ...judged,
    };
  });
}

/** A vector as its file holds it (stable key order, two-space indent, a final newline). */
export function vectorFile(v: ProtocolVector): string {
  const ordered = {
    name: v.name,
    description: v.description,
    frame: v.frame,
    wireBytes: v.wireBytes,
    creditSize: v.creditSize ?? null,
    elements: v.elements ?? null,
    ...(v.context === undefined ? {} : { context: v.context }),
    verdict: v.verdict,
    ...(v.reason === undefined ? {} : { reason: v.reason }),
  };
  return `${JSON.stringify(ordered, null, 2)}\n`;
}
