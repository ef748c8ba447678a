// What the hostile peers send: sessions planned from the recorded corpus by
// a seeded generator. Frame mutations (bit flips, truncation, huge and
// overlong varints, unknown fields, random bytes, crossovers, semantic edits
// of control frames), envelope lies (length prefixes, flags, oversize), and
// sequences (frames before hello, a second hello, window overrun, duplicates,
// wrong lanes, frames after a goaway).
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { type CallSchema, GoAwayReason, FrameSchema } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import type { FrameValueInit } from "../../src/mux/frames.ts";
import type { SeedFrame } from "./corpus.ts";
import type { Protocol } from "./peer.ts";

/** A small seeded PRNG (mulberry32): the same seed plans the same sessions. */
export class Random {
  #state: number;
  constructor(seed: number) {
    this.#state = seed >>> 0;
  }
  /** A float in [0, 1). */
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)] as T;
  }
  bytes(n: number): Uint8Array {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) out[i] = this.int(256);
    return out;
  }
  /** Picks a key of `weights` with probability proportional to its weight. */
  weighted<K extends string>(weights: Record<K, number>): K {
    const entries = Object.entries(weights) as [K, number][];
    let r = this.next() * entries.reduce((s, [, w]) => s + w, 0);
    for (const [k, w] of entries) {
      r -= w;
      if (r < 0) return k;
    }
    return (entries[entries.length - 1] as [K, number])[0];
  }
}

/** Protobuf varint of `value` (up to 64 bits). */
function varint(value: bigint): number[] {
  const out: number[] = [];
  let v = BigInt.asUintN(64, value);
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v !== 0n) b |= 0x80;
    out.push(b);
  } while (v !== 0n);
  return out;
}

function concat(parts: readonly (Uint8Array | number[])[]): Uint8Array {
  const total = parts.reduce((s, p) => s + p.length, 0);
  const out = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** The byte-level and field-level mutations of one frame, by name (for the report). */
export const frameMutations = {
  bitflip: (r: Random, b: Uint8Array): Uint8Array => {
    const out = b.slice();
    if (out.length === 0) return r.bytes(1);
    for (let i = 0, n = 1 + r.int(8); i < n; i++) {
      const at = r.int(out.length);
      out[at] = (out[at] as number) ^ (1 << r.int(8));
    }
    return out;
  },
  interestingBytes: (r: Random, b: Uint8Array): Uint8Array => {
    const out = b.slice();
    if (out.length === 0) return new Uint8Array([0xff]);
    for (let i = 0, n = 1 + r.int(4); i < n; i++)
      out[r.int(out.length)] = r.pick([0x00, 0x01, 0x7f, 0x80, 0xff, 0x0a, 0x12, 0x08]);
    return out;
  },
  truncate: (r: Random, b: Uint8Array): Uint8Array => b.slice(0, r.int(Math.max(1, b.length))),
  appendRandom: (r: Random, b: Uint8Array): Uint8Array => concat([b, r.bytes(1 + r.int(64))]),
  unknownField: (r: Random, b: Uint8Array): Uint8Array => {
    // A well-formed field this version does not know, before or after the known ones.
    const field = r.pick([17, 99, 1000, 536_870_911, 2 + r.int(30)]);
    const wire = r.pick([0, 1, 2, 5]);
    const tag = varint(BigInt(field) * 8n + BigInt(wire));
    const len = r.int(40);
    const value =
      wire === 0
        ? varint(BigInt(r.int(2 ** 31)) * BigInt(r.int(2 ** 31)))
        : wire === 1
          ? Array.from(r.bytes(8))
          : wire === 5
            ? Array.from(r.bytes(4))
            : [...varint(BigInt(len)), ...Array.from(r.bytes(len))];
    return r.next() < 0.5 ? concat([b, tag, value]) : concat([tag, value, b]);
  },
  hugeVarint: (r: Random, b: Uint8Array): Uint8Array => {
    // A known field with the largest varint, an overlong (11-byte) varint, or a length that overruns the frame.
    const field = r.pick([1, 2, 3, 4, 10, 11, 12, 13, 14, 15, 16]);
    const choice = r.int(3);
    if (choice === 0) return concat([b, varint(BigInt(field << 3)), varint(2n ** 64n - 1n)]);
    if (choice === 1)
      return concat([
        b,
        varint(BigInt(field << 3)),
        [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
      ]);
    return concat([
      b,
      varint(BigInt((field << 3) | 2)),
      varint(BigInt(r.pick([0xffffffff, 2 ** 31, 2 ** 53 - 1, 1 << 30]))),
      r.bytes(r.int(16)),
    ]);
  },
  deleteRange: (r: Random, b: Uint8Array): Uint8Array => {
    if (b.length < 2) return b.slice();
    const from = r.int(b.length);
    const to = Math.min(b.length, from + 1 + r.int(16));
    return concat([b.subarray(0, from), b.subarray(to)]);
  },
  duplicateRange: (r: Random, b: Uint8Array): Uint8Array => {
    if (b.length < 2) return concat([b, b]);
    const from = r.int(b.length);
    const to = Math.min(b.length, from + 1 + r.int(32));
    return concat([b.subarray(0, to), b.subarray(from)]);
  },
  randomBytes: (r: Random): Uint8Array => r.bytes(r.int(512)),
  empty: (): Uint8Array => new Uint8Array(0),
} as const;

/** Semantic mutations: decode a control frame, set a field to an extreme, encode it again. */
export function semanticMutation(r: Random, zone: string): Uint8Array {
  const u32 = (): number =>
    r.pick([0, 1, 64, 65_535, 65_536, 65_537, 2 ** 31 - 1, 2 ** 32 - 1, r.int(2 ** 32)]);
  const u64 = (): bigint => r.pick([0n, 1n, 2n ** 63n, 2n ** 64n - 1n, BigInt(r.int(2 ** 32))]);
  const choice = r.int(9);
  let value: FrameValueInit | { case: undefined };
  switch (choice) {
    case 0:
      value = { case: "windowUpdate", value: { requests: u32(), responses: u32() } };
      break;
    case 1:
      value = { case: "ping", value: { id: u64() } };
      break;
    case 2:
      value = { case: "pong", value: { id: u64() } };
      break;
    case 3:
      value = {
        case: "goaway",
        value: {
          reason: r.pick([0, 1, 2, 3, 4, 5, 6, 7, 99, -1]) as GoAwayReason,
          message: "x".repeat(r.int(2000)),
        },
      };
      break;
    case 4:
      value = {
        case: "hello",
        value: {
          protocolVersion: r.pick([0, 1, 2, 2 ** 32 - 1]),
          peerId: r.pick([zone, "", "someone-else", "x".repeat(5000)]),
          requestWindow: u32(),
          responseWindow: u32(),
          maxMessageBytes: u32(),
          heartbeatIntervalMs: u32(),
          heartbeatTimeoutMs: u32(),
          batching: r.next() < 0.5,
          calls: r.next() < 0.5,
        },
      };
      break;
    case 5:
      value = {
        case: "call",
        value: {
          id: u64(),
          kind: r.pick([
            {
              case: "open",
              value: {
                path: r.pick([
                  "/kds.admin.v1.AdminService/Get",
                  "/nope/Nope",
                  "",
                  "/kds.admin.v1.AdminService/Apply",
                ]),
                headers: { "content-type": "application/proto" },
                body: r.bytes(r.int(64)),
                window: u32(),
              },
            },
            { case: "head", value: { status: u32(), headers: {} } },
            { case: "data", value: r.bytes(r.int(256)) },
            { case: "end", value: { trailers: {}, error: "boom", code: "internal" } },
            { case: "cancel", value: {} },
            { case: "credit", value: u32() },
          ] as const) as NonNullable<MessageInitShape<typeof CallSchema>["kind"]>,
        },
      };
      break;
    case 6:
      // A batch holding control frames, or a batch inside a batch: forbidden.
      value = {
        case: "batch",
        value: {
          frames: [
            create(FrameSchema, {
              value:
                r.next() < 0.5
                  ? { case: "ping", value: { id: 1n } }
                  : { case: "batch", value: { frames: [] } },
            }),
          ],
        },
      };
      break;
    case 7:
      value = { case: "batch", value: { frames: [] } };
      break;
    default:
      value = { case: undefined };
  }
  return toBinary(FrameSchema, create(FrameSchema, { value }));
}

/** The hello a hostile peer opens with: the recorded one, renamed to the zone it was admitted as. */
export function helloFor(corpus: readonly SeedFrame[], zone: string): Uint8Array {
  const seed = corpus.find((f) => f.from === "zone" && f.kind === "hello");
  if (seed === undefined) throw new Error("the corpus holds no zone hello");
  const hello = fromBinary(FrameSchema, seed.bytes);
  if (hello.value.case !== "hello") throw new Error("unreachable: the seed is a hello");
  hello.value.value.peerId = zone;
  return toBinary(FrameSchema, hello);
}

/** One envelope: flags, then the message length (big-endian), then the message. */
export function envelope(
  message: Uint8Array,
  flags = 0,
  claimedLength = message.length,
): Uint8Array {
  const out = new Uint8Array(5 + message.length);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, claimedLength >>> 0);
  out.set(message, 5);
  return out;
}

/** The end-of-stream envelope a Connect client sends last (empty JSON), or nothing for gRPC. */
function trailer(protocol: Protocol): Uint8Array[] {
  return protocol === "connect" ? [envelope(new TextEncoder().encode("{}"), 0x02)] : [];
}

/** A frame of no known kind (an empty message): the last frame of most sessions, so the global must end any session still open with a protocol error. */
export const SENTINEL = new Uint8Array(0);

/** Who a hostile session claims to be. */
export interface Identity {
  readonly zone: string;
  readonly token: string;
}

/** A planned hostile session. */
export interface SessionPlan {
  /** Which family of attack, for the report. */
  readonly family: string;
  readonly protocol: Protocol;
  readonly headers: Record<string, string>;
  readonly chunks: Uint8Array[];
  /** Envelopes written (valid or not). */
  readonly frames: number;
  /** Of those, how many were mutated or out of place. */
  readonly mutated: number;
  /** The zone the session claimed (for attributing what it created). */
  readonly zone: string;
  /**
   * How the peer ends its side: "sentinel" sends a frame of no known kind last (the
   * global must end any session still open with a protocol error), "eof" just
   * half-closes, "broken" leaves a broken envelope last.
   */
  readonly ending: "sentinel" | "eof" | "broken";
  /** One of the frames decodes as a goaway: the peer itself ended the session there. */
  readonly peerGoaway: boolean;
}

/** Whether any of `messages` decodes as a goaway frame. */
function sendsGoaway(messages: readonly Uint8Array[]): boolean {
  return messages.some((m) => {
    try {
      return fromBinary(FrameSchema, m).value.case === "goaway";
    } catch {
      return false; // not a frame at all: the global ends the stream there, as the report shows
    }
  });
}

/** Plans hostile sessions from a corpus. */
export class Planner {
  readonly #r: Random;
  readonly #corpus: readonly SeedFrame[];
  readonly #zoneFrames: readonly SeedFrame[];
  readonly #identities: readonly Identity[];
  /** Mutations applied, by name. */
  readonly mutations: Record<string, number> = {};

  constructor(seed: number, corpus: readonly SeedFrame[], identities: readonly Identity[]) {
    this.#r = new Random(seed);
    this.#corpus = corpus;
    this.#zoneFrames = corpus.filter(
      (f) => f.from === "zone" && f.kind !== "hello" && f.kind !== "goaway",
    );
    this.#identities = identities;
  }

  #count(name: string): void {
    this.mutations[name] = (this.mutations[name] ?? 0) + 1;
  }

  /** A mutated frame (message bytes): a byte-level mutation of any recorded frame, or a semantic one. */
  #mutatedFrame(zone: string): Uint8Array {
    const r = this.#r;
    if (r.next() < 0.15) {
      this.#count("semantic");
      return semanticMutation(r, zone);
    }
    if (r.next() < 0.08) {
      this.#count("crossover");
      const a = r.pick(this.#corpus).bytes;
      const b = r.pick(this.#corpus).bytes;
      return concat([a.subarray(0, r.int(a.length + 1)), b.subarray(r.int(b.length + 1))]);
    }
    const names = Object.keys(frameMutations) as (keyof typeof frameMutations)[];
    const name = r.pick(names);
    this.#count(name);
    let bytes = frameMutations[name](r, r.pick(this.#corpus).bytes);
    // Sometimes stack a second mutation.
    if (r.next() < 0.2) {
      const second = r.pick(names);
      this.#count(second);
      bytes = frameMutations[second](r, bytes);
    }
    return bytes;
  }

  /** A mutated frame that still decodes as a mux frame (a few tries, then an unknown field added to a real frame). */
  #decodableFrame(zone: string): Uint8Array {
    for (let i = 0; i < 5; i++) {
      const bytes = this.#mutatedFrame(zone);
      try {
        fromBinary(FrameSchema, bytes);
        return bytes;
      } catch {
        // Does not decode: try another mutation.
      }
    }
    this.#count("unknownField");
    return frameMutations.unknownField(this.#r, this.#r.pick(this.#zoneFrames).bytes);
  }

  /** Plans the next session. */
  next(): SessionPlan {
    const r = this.#r;
    const identity = r.pick(this.#identities);
    const protocol = r.weighted<Protocol>({ grpc: 6, connect: 3, "grpc-web": 1 });
    const headers: Record<string, string> = {
      "client-id": identity.zone,
      authorization: `Bearer ${identity.token}`,
    };
    const family = r.weighted({
      mutate: 62,
      sequence: 20,
      envelope: 12,
      admission: 4,
      oversize: 0.15,
    });
    const hello = helloFor(this.#corpus, identity.zone);
    const messages: Uint8Array[] = [];
    let mutated = 0;
    const chunks: Uint8Array[] = [];
    const plain = (m: Uint8Array): void => void messages.push(m);
    const bad = (m: Uint8Array): void => {
      messages.push(m);
      mutated++;
    };
    const recorded = (): Uint8Array => r.pick(this.#zoneFrames).bytes;
    switch (family) {
      case "mutate": {
        // Half the sessions send only mutations that still decode, so they reach the mux itself rather than
        // the protobuf decoder (whose first failure ends the stream).
        const decodable = r.next() < 0.5;
        this.#count(decodable ? "session:decodable" : "session:any");
        plain(hello);
        for (let i = 0, n = 1 + r.int(60); i < n; i++) {
          if (r.next() < 0.25) plain(recorded());
          else
            bad(
              decodable ? this.#decodableFrame(identity.zone) : this.#mutatedFrame(identity.zone),
            );
        }
        break;
      }
      case "sequence": {
        const kind = r.weighted({
          beforeHello: 3,
          secondHello: 2,
          windowOverrun: 2,
          responseOverrun: 2,
          duplicates: 3,
          pingFlood: 2,
          afterGoaway: 2,
          wrongPeer: 1,
          wrongLane: 2,
          creditOverflow: 1,
          helloOnly: 1,
        });
        this.#count(`sequence:${kind}`);
        const requests = this.#zoneFrames.filter(
          (f) => f.kind === "request" || f.kind === "deltaRequest",
        );
        const responses = this.#zoneFrames.filter(
          (f) => f.kind === "response" || f.kind === "deltaResponse",
        );
        const pick = (from: readonly SeedFrame[]): Uint8Array =>
          from.length > 0 ? r.pick(from).bytes : recorded();
        switch (kind) {
          case "beforeHello":
            for (let i = 0, n = 1 + r.int(5); i < n; i++) bad(recorded());
            if (r.next() < 0.5) plain(hello);
            break;
          case "secondHello":
            plain(hello);
            for (let i = 0, n = r.int(5); i < n; i++) plain(recorded());
            bad(r.next() < 0.5 ? hello : semanticMutation(r, identity.zone));
            break;
          case "windowOverrun":
            plain(hello);
            for (let i = 0; i < 64 + 1 + r.int(40); i++) (i < 64 ? plain : bad)(pick(requests));
            break;
          case "responseOverrun":
            plain(hello);
            for (let i = 0; i < 64 + 1 + r.int(40); i++) (i < 64 ? plain : bad)(pick(responses));
            break;
          case "duplicates": {
            plain(hello);
            const frame = recorded();
            for (let i = 0, n = 2 + r.int(100); i < n; i++) bad(frame);
            break;
          }
          case "pingFlood": {
            plain(hello);
            const ping = toBinary(
              FrameSchema,
              create(FrameSchema, { value: { case: "ping", value: { id: 1n } } }),
            );
            for (let i = 0, n = 50 + r.int(400); i < n; i++) bad(ping);
            break;
          }
          case "afterGoaway":
            plain(hello);
            plain(
              toBinary(
                FrameSchema,
                create(FrameSchema, {
                  value: {
                    case: "goaway",
                    value: { reason: GoAwayReason.SHUTDOWN, message: "bye" },
                  },
                }),
              ),
            );
            for (let i = 0, n = 1 + r.int(20); i < n; i++)
              bad(r.next() < 0.5 ? recorded() : this.#mutatedFrame(identity.zone));
            break;
          case "wrongPeer": {
            const other = fromBinary(FrameSchema, hello);
            if (other.value.case === "hello")
              other.value.value.peerId = r.pick([
                "global",
                "zone-x",
                "",
                identity.zone.toUpperCase(),
              ]);
            bad(toBinary(FrameSchema, other));
            for (let i = 0, n = r.int(5); i < n; i++) plain(recorded());
            break;
          }
          case "wrongLane": {
            // Frames the global sends, sent back to it: its hello, its responses, its call opens.
            plain(hello);
            const fromGlobal = this.#corpus.filter((f) => f.from === "global");
            for (let i = 0, n = 1 + r.int(20); i < n; i++) bad(r.pick(fromGlobal).bytes);
            break;
          }
          case "creditOverflow":
            plain(hello);
            for (let i = 0, n = 2 + r.int(10); i < n; i++) {
              bad(
                toBinary(
                  FrameSchema,
                  create(FrameSchema, {
                    value: {
                      case: "windowUpdate",
                      value: { requests: 2 ** 32 - 1, responses: 2 ** 32 - 1 },
                    },
                  }),
                ),
              );
            }
            break;
          case "helloOnly":
            plain(hello);
            break;
        }
        break;
      }
      case "envelope": {
        // Lies in the gRPC/Connect envelope around otherwise real frames.
        plain(hello);
        for (let i = 0, n = r.int(10); i < n; i++) plain(recorded());
        const kind = r.weighted({
          lengthLonger: 3,
          lengthShorter: 3,
          lengthHuge: 2,
          flags: 3,
          cutHeader: 2,
          split: 2,
        });
        this.#count(`envelope:${kind}`);
        const m = r.next() < 0.7 ? recorded() : this.#mutatedFrame(identity.zone);
        for (const msg of messages) chunks.push(envelope(msg));
        const count = messages.length;
        messages.length = 0;
        mutated++;
        switch (kind) {
          case "lengthLonger":
            chunks.push(envelope(m, 0, m.length + 1 + r.int(1000)));
            break;
          case "lengthShorter":
            chunks.push(envelope(m, 0, Math.max(0, m.length - 1 - r.int(m.length + 1))));
            break;
          case "lengthHuge":
            chunks.push(
              envelope(
                m,
                0,
                r.pick([0xffffffff, 0x80000000, 4 * 1024 * 1024 + 1, 64 * 1024 * 1024]),
              ),
            );
            break;
          case "flags": {
            // Bits other than "compressed" are not errors: gRPC ignores them, Connect and gRPC-web skip an envelope
            // flagged end-of-stream or trailer. So a sentinel follows, which an open session must answer with a goaway.
            chunks.push(
              envelope(m, r.pick([0x01, 0x02, 0x03, 0x80, 0x81, 0xff, 0x04])),
              envelope(SENTINEL),
              ...trailer(protocol),
            );
            return {
              family: `${family}:${kind}`,
              protocol,
              headers,
              chunks,
              frames: count + 2,
              mutated: 1,
              zone: identity.zone,
              ending: "sentinel",
              peerGoaway: sendsGoaway([m]),
            };
          }
          case "cutHeader":
            chunks.push(envelope(m).subarray(0, 1 + r.int(4)));
            break;
          case "split": {
            // Legal: one envelope split across writes at a random point; then a mutated frame.
            const whole = envelope(m);
            const at = r.int(whole.length);
            const last = this.#mutatedFrame(identity.zone);
            chunks.push(
              whole.subarray(0, at),
              whole.subarray(at),
              envelope(last),
              envelope(SENTINEL),
              ...trailer(protocol),
            );
            return {
              family: `${family}:${kind}`,
              protocol,
              headers,
              chunks,
              frames: count + 3,
              mutated: 1,
              zone: identity.zone,
              ending: "sentinel",
              peerGoaway: sendsGoaway([m, last]),
            };
          }
        }
        // A broken envelope ends the stream for the server. Except one: connect-es 2.2.0 reads a stream that ends
        // right after a whole envelope header (no payload byte) as a clean end, so the global sees a half-close.
        const headerOnly = kind === "lengthLonger" && m.length === 0;
        return {
          family: `${family}:${kind}`,
          protocol,
          headers,
          chunks,
          frames: count + 1,
          mutated,
          zone: identity.zone,
          ending: headerOnly ? "eof" : "broken",
          peerGoaway: false,
        };
      }
      case "admission": {
        const kind = r.weighted({
          noToken: 2,
          badToken: 2,
          otherZonesToken: 2,
          unregistered: 2,
          invalidClientId: 1,
          noClientId: 1,
        });
        this.#count(`admission:${kind}`);
        if (kind === "noToken") delete headers.authorization;
        if (kind === "badToken")
          headers.authorization = `Bearer ${identity.token.slice(0, -4)}AAAA`;
        if (kind === "otherZonesToken")
          headers.authorization = `Bearer ${r.pick(this.#identities.filter((i) => i.zone !== identity.zone)).token}`;
        if (kind === "unregistered") headers["client-id"] = "nobody-registered";
        if (kind === "invalidClientId")
          headers["client-id"] = r.pick(["UPPER", "a b", "x".repeat(64), "../etc"]);
        if (kind === "noClientId") delete headers["client-id"];
        bad(hello);
        for (let i = 0, n = r.int(5); i < n; i++) bad(this.#mutatedFrame(identity.zone));
        break;
      }
      case "oversize": {
        this.#count("oversize");
        plain(hello);
        // A real frame over the global's 4 MiB limit (a response carrying one huge resource).
        const big = toBinary(
          FrameSchema,
          create(FrameSchema, {
            value: {
              case: "deltaResponse",
              value: {
                typeUrl: "type.googleapis.com/kds.example.v1.DataplaneSpec",
                nonce: "z",
                resources: [
                  {
                    name: "big",
                    version: "1",
                    resource: { typeUrl: "x", value: new Uint8Array(4 * 1024 * 1024 + 64) },
                  },
                ],
              },
            },
          }),
        );
        bad(big);
        break;
      }
    }
    const peerGoaway = sendsGoaway(messages);
    const ending = r.next() < 0.85 ? "sentinel" : "eof";
    if (ending === "sentinel") messages.push(SENTINEL);
    for (const m of messages) chunks.push(envelope(m));
    chunks.push(...trailer(protocol));
    return {
      family,
      protocol,
      headers,
      chunks,
      frames: messages.length,
      mutated,
      zone: identity.zone,
      ending,
      peerGoaway,
    };
  }
}
