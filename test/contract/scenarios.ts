// The session contract: scenarios every runtime must pass. vitest runs them on
// Node (test/contract.test.ts); test/runtime/contract.ts runs the same list
// under Deno and Bun.
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { KdsError } from "../../src/errors.ts";
import { create } from "@bufbuild/protobuf";
import { GoAwayReason, FrameSchema, MultiplexService } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import type { MuxRequest, MuxResponse } from "../../src/mux/frames.ts";
import { MuxSession } from "../../src/mux/session.ts";
import type { Session } from "../../src/mux/views.ts";
import { silentLogger } from "../../src/log.ts";
import { ZoneClient } from "../../src/zone/zone-client.ts";
import { LABELS } from "../../src/kinds/resource-types.ts";
import { dataplane, mesh, startCluster } from "../sync/helpers.ts";
import {
  RawPeer,
  check,
  equal,
  eventually,
  rejects,
  request,
  response,
  sessionPair,
  settle,
  startGlobal,
  transportKinds,
  type TransportKind,
} from "./harness.ts";

export interface Scenario {
  readonly name: string;
  run(): Promise<void>;
}

function typeOf(m: MuxRequest | MuxResponse): string {
  return m.typeUrl;
}

/** A connected zone and the global's view of the same session. */
async function connect(
  kind: TransportKind,
  options: Parameters<typeof startGlobal>[1] = {},
  zoneSession: ConstructorParameters<typeof ZoneClient>[0]["session"] = {},
) {
  const t = await startGlobal(kind, options);
  const zone = new ZoneClient({
    name: "zone-1",
    transport: t.transport(),
    logger: silentLogger,
    session: zoneSession,
  });
  const zs = await zone.dial();
  await eventually(
    () => t.global.session("zone-1") !== undefined,
    "the global lists the zone's session",
  );
  const gs = t.global.session("zone-1") as Session;
  return {
    t,
    zone: zs,
    global: gs,
    close: async () => {
      await zs.close();
      await t.close();
    },
  };
}

/** Both directions of discovery traffic over one session. */
async function roundTrip(zone: Session, global: Session, rounds: number): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    // zone -> global resources: the global is the client, the zone serves.
    await global.client.send(request("type.zone", `g${i}`));
    const gotReq = await zone.server.recv();
    equal(gotReq.typeUrl, "type.zone", "request type at the zone's server view");
    await zone.server.send(response("type.zone", `z${i}`, 128));
    const gotResp = await global.client.recv();
    equal(
      (gotResp as { nonce: string }).nonce,
      `z${i}`,
      "response nonce at the global's client view",
    );
    // global -> zone resources: the zone is the client, the global serves.
    await zone.client.send(request("type.global", `z${i}`));
    equal(
      (await global.server.recv()).typeUrl,
      "type.global",
      "request type at the global's server view",
    );
    await global.server.send(response("type.global", `g${i}`, 128));
    equal(
      ((await zone.client.recv()) as { nonce: string }).nonce,
      `g${i}`,
      "response nonce at the zone's client view",
    );
  }
}

export const scenarios: Scenario[] = [
  {
    // Port of the original "should block while proper Send called".
    name: "a recv on one view blocks until a message for that view arrives",
    async run() {
      const { zone, global } = sessionPair();
      let requestArrived = false;
      const pending = global.server.recv().then((r) => {
        requestArrived = true;
        return r;
      });
      await zone.server.send(response("type.a", "r1"));
      const resp = await global.client.recv();
      equal((resp as { nonce: string }).nonce, "r1", "the response reached the client view");
      // No waiting for silence: the one reader has read every frame sent so
      // far (the response above), and none of them was a request.
      equal(global.stats().received.requests, 0, "requests read by the global");
      equal(global.stats().buffered.requests, 0, "requests waiting in the global's server view");
      await settle(0); // one turn, so a wrongly resolved recv would have run its callback
      check(!requestArrived, "the server view's recv must still block: no request was sent");
      await zone.client.send(request("type.a", "q1"));
      const req = await pending;
      equal(req.responseNonce, "q1", "the request reached the server view");
      await zone.close();
    },
  },
  {
    name: "demux: interleaved requests and responses reach their own views in order",
    async run() {
      const { zone, global } = sessionPair({}, { requestWindow: 256, responseWindow: 256 });
      const n = 200;
      for (let i = 0; i < n; i++) {
        void zone.client.send(request(`type.req`, String(i)));
        void zone.server.send(response(`type.resp`, String(i)));
      }
      for (let i = 0; i < n; i++) {
        const r = await global.server.recv();
        equal(
          `${typeOf(r)}#${r.responseNonce}`,
          `type.req#${i}`,
          "request order at the server view",
        );
      }
      for (let i = 0; i < n; i++) {
        const r = (await global.client.recv()) as { typeUrl: string; nonce: string };
        equal(`${r.typeUrl}#${r.nonce}`, `type.resp#${i}`, "response order at the client view");
      }
      await zone.close();
    },
  },
  ...transportKinds.map<Scenario>((kind) => ({
    name: `sync traffic both ways over ${kind}`,
    async run() {
      const c = await connect(kind);
      try {
        await roundTrip(c.zone, c.global, 20);
        equal(c.global.peerId, "zone-1", "the global knows the zone by its client-id");
        equal(c.zone.peerId, "global", "the zone knows the global's name from its hello");
      } finally {
        await c.close();
      }
    },
  })),
  ...(["memory", "grpc", "half-duplex"] as const).map<Scenario>((kind) => ({
    name: `concurrent sends from both views are serialized intact over ${kind}`,
    async run() {
      const c = await connect(kind, { session: { requestWindow: 8, responseWindow: 8 } });
      try {
        const tasks = 4;
        const per = 60;
        const senders: Promise<void>[] = [];
        for (let t = 0; t < tasks; t++) {
          senders.push(
            (async () => {
              for (let i = 0; i < per; i++) await c.zone.client.send(request(`t${t}`, String(i)));
            })(),
          );
          senders.push(
            (async () => {
              for (let i = 0; i < per; i++)
                await c.zone.server.send(response(`t${t}`, String(i), 512));
            })(),
          );
        }
        const seenReq = new Map<string, number>();
        const seenResp = new Map<string, number>();
        for (let k = 0; k < tasks * per; k++) {
          const r = await c.global.server.recv();
          const prev = seenReq.get(r.typeUrl) ?? -1;
          equal(
            Number(r.responseNonce),
            prev + 1,
            `per-sender order of requests from ${r.typeUrl}`,
          );
          seenReq.set(r.typeUrl, prev + 1);
          const s = (await c.global.client.recv()) as {
            typeUrl: string;
            nonce: string;
            resources: { value: Uint8Array }[];
          };
          const prevS = seenResp.get(s.typeUrl) ?? -1;
          equal(Number(s.nonce), prevS + 1, `per-sender order of responses from ${s.typeUrl}`);
          equal(s.resources[0]?.value.length, 512, "payload intact");
          seenResp.set(s.typeUrl, prevS + 1);
        }
        await Promise.all(senders);
      } finally {
        await c.close();
      }
    },
  })),
  ...(["grpc", "memory", "half-duplex"] as const).flatMap<Scenario>((kind) =>
    (["zone", "global"] as const).map((stalledSide) => ({
      name: `a stalled ${stalledSide} client view does not stall the other lane (${kind}, 64 KiB random payloads)`,
      async run() {
        const window = 8;
        const c = await connect(
          kind,
          { session: { requestWindow: window, responseWindow: window } },
          { requestWindow: window, responseWindow: window },
        );
        try {
          const stalled = stalledSide === "zone" ? c.zone : c.global; // its client view never reads
          const feeder = stalledSide === "zone" ? c.global : c.zone; // serves responses into the stall
          // Responses pile up towards the stalled client view. Those past its window wait until the session
          // closes at the end of the scenario and then reject; what is checked is the buffer, not them.
          const blocked: Promise<void>[] = [];
          for (let i = 0; i < window * 3; i++)
            blocked.push(
              feeder.server
                .send(response("type.stalled", String(i), 65_536))
                .catch(() => undefined),
            );
          await eventually(
            () => stalled.stats().buffered.responses === window,
            "the stalled view's buffer fills to its window",
          );
          // The other lane, both ways, keeps flowing: requests to the stalled side's server view...
          for (let i = 0; i < 50; i++) {
            await feeder.client.send(request("type.flowing", String(i)));
            equal(
              (await stalled.server.recv()).responseNonce,
              String(i),
              "request through the free lane",
            );
            // ...and responses from the stalled side to the feeder's (healthy) client view.
            await stalled.server.send(response("type.flowing", String(i), 65_536));
            equal(
              ((await feeder.client.recv()) as { nonce: string }).nonce,
              String(i),
              "response through the free lane",
            );
          }
          equal(
            stalled.stats().buffered.responses,
            window,
            "the stalled buffer never grows past its window",
          );
          equal(
            feeder.stats().sent.responses,
            window,
            "the feeder sent only what the window allowed",
          );
          // Once the consumer resumes, everything queued arrives in order.
          for (let i = 0; i < window * 3; i++)
            equal(
              ((await stalled.client.recv()) as { nonce: string }).nonce,
              String(i),
              "stalled lane drains in order",
            );
          await Promise.all(blocked);
        } finally {
          await c.close();
        }
      },
    })),
  ),
  {
    name: "a peer that sends beyond its window ends the session with a protocol error",
    async run() {
      const session = new MuxSession({
        role: "global",
        localId: "global",
        peerId: "zone-1",
        options: { requestWindow: 4 },
      });
      const peer = new RawPeer(session);
      peer.hello("zone-1");
      for (let i = 0; i < 5; i++)
        peer.write({ case: "request", value: request("type.x", String(i)) });
      const end = await session.closed;
      equal(end.code, "protocol_error", "end code");
      check(
        end.message.includes("(window 4 frames)"),
        `the reason names the window: ${end.message}`,
      );
      const goaway = await peer.readUntil("goaway");
      check(goaway?.value.case === "goaway", "the peer is told with a goaway");
      equal(goaway.value.value.reason, GoAwayReason.PROTOCOL_ERROR, "goaway reason");
      peer.end();
    },
  },
  {
    name: "queued data frames leave batched to a peer that accepts batches, and one by one otherwise",
    async run() {
      const { zone, global } = sessionPair({}, { requestWindow: 256 });
      await zone.ready;
      const sends = Array.from({ length: 100 }, (_, i) =>
        zone.client.send(request("type.b", String(i))),
      );
      await Promise.all(sends);
      for (let i = 0; i < 100; i++)
        equal((await global.server.recv()).responseNonce, String(i), "order across batches");
      check(zone.stats().sent.requests === 100, "every request left");
      check((zone as MuxSession).batchesSent > 0, "several queued requests left as batches");
      await zone.close();

      const lone = new MuxSession({ role: "zone", localId: "zone-1" });
      const peer = new RawPeer(lone);
      peer.hello("global", 64); // its hello does not set batching
      await lone.ready;
      await Promise.all(
        Array.from({ length: 20 }, (_, i) => lone.client.send(request("type.b", String(i)))),
      );
      let requests = 0;
      while (requests < 20) {
        const frame = await peer.read();
        check(
          frame !== undefined && frame.value.case !== "batch",
          "no batch to a peer that did not ask for them",
        );
        if (frame?.value.case === "request") requests++;
      }
      peer.end();
      await lone.close();
    },
  },
  {
    name: "a batch counts each frame against the window, and holds only data",
    async run() {
      const session = new MuxSession({
        role: "global",
        localId: "global",
        peerId: "zone-1",
        options: { requestWindow: 4 },
      });
      const peer = new RawPeer(session);
      peer.hello("zone-1");
      peer.write({
        case: "batch",
        value: {
          $typeName: "kds.mux.v1.Batch",
          frames: Array.from({ length: 5 }, (_, i) =>
            create(FrameSchema, { value: { case: "request", value: request("t", String(i)) } }),
          ),
        },
      });
      const end = await session.closed;
      equal(end.code, "protocol_error", "a batch of 5 against a window of 4");
      peer.end();

      const other = new MuxSession({ role: "global", localId: "global", peerId: "zone-1" });
      const peer2 = new RawPeer(other);
      peer2.hello("zone-1");
      peer2.write({
        case: "batch",
        value: {
          $typeName: "kds.mux.v1.Batch",
          frames: [create(FrameSchema, { value: { case: "ping", value: { id: 1n } } })],
        },
      });
      const end2 = await other.closed;
      check(
        end2.code === "protocol_error" &&
          end2.message.includes("only requests, responses and calls"),
        end2.message,
      );
      peer2.end();
    },
  },
  {
    name: "a frame before the hello is a protocol error",
    async run() {
      const session = new MuxSession({ role: "zone", localId: "zone-1" });
      const peer = new RawPeer(session);
      peer.write({ case: "request", value: request("type.x") });
      const end = await session.closed;
      equal(end.code, "protocol_error", "end code");
      check(end.message.includes("first frame must be a hello"), end.message);
      peer.end();
    },
  },
  {
    name: "a hello naming another zone than the client-id is refused",
    async run() {
      const session = new MuxSession({ role: "global", localId: "global", peerId: "zone-1" });
      const peer = new RawPeer(session);
      peer.hello("zone-2");
      const end = await session.closed;
      equal(end.code, "protocol_error", "end code");
      check(end.message.includes('admitted as "zone-1"'), end.message);
      peer.end();
    },
  },
  {
    name: "heartbeats keep a quiet session alive; a silent peer times out",
    async run() {
      const opts = { heartbeatIntervalMs: 20, heartbeatTimeoutMs: 1_500 };
      const { zone, global } = sessionPair(opts, opts);
      await zone.ready;
      await settle(2_000);
      equal(zone.end, undefined, "a quiet but live session stays up past its heartbeat timeout");
      check(zone.stats().heartbeatRttMs !== undefined, "pongs measured a round trip");
      check(zone.stats().received.control > 10, "pings and pongs flowed");
      await zone.close();
      await global.closed;

      const lonely = new MuxSession({
        role: "zone",
        localId: "zone-1",
        options: { heartbeatIntervalMs: 20, heartbeatTimeoutMs: 200 },
      });
      const silent = new RawPeer(lonely);
      silent.hello("global");
      const end = await lonely.closed;
      equal(end.code, "heartbeat_timeout", "end code");
      const goaway = await silent.readUntil("goaway");
      check(
        goaway?.value.case === "goaway" &&
          goaway.value.value.reason === GoAwayReason.HEARTBEAT_TIMEOUT,
        "the peer is told why",
      );
      silent.end();
    },
  },
  {
    name: "a clean EOF of one direction ends the whole session",
    async run() {
      const session = new MuxSession({ role: "global", localId: "global", peerId: "zone-1" });
      const peer = new RawPeer(session);
      peer.hello("zone-1");
      await session.ready;
      const recv = session.server.recv();
      peer.end();
      const end = await session.closed;
      equal(end.code, "peer_eof", "end code");
      equal(end.graceful, false, "an EOF without goaway is not graceful");
      const error = await rejects(recv, "a pending recv");
      check(
        KdsError.is(error, "session_closed"),
        `pending recv fails with session_closed: ${String(error)}`,
      );
      const sendError = await rejects(session.client.send(request("x")), "a send after the end");
      check(KdsError.is(sendError, "session_closed"), "sends fail with session_closed");
      // Its hello was never read here: the stream still opens with it (each side sends its hello at once), then ends.
      equal((await peer.read())?.value.case, "hello", "this side's stream opens with its hello");
      check((await peer.read()) === undefined, "this side's stream ends too");
    },
  },
  {
    name: "a zone half-closing its stream over gRPC ends the global's session",
    async run() {
      const t = await startGlobal("grpc");
      try {
        const client = createClient(
          MultiplexService,
          createGrpcTransport({ baseUrl: t.url as string }),
        );
        const hello = {
          value: {
            case: "hello" as const,
            value: {
              protocolVersion: 2,
              peerId: "zone-1",
              requestWindow: 4,
              responseWindow: 4,
              requestWindowBytes: 1 << 20,
              responseWindowBytes: 1 << 20,
              maxMessageBytes: 1 << 20,
              heartbeatIntervalMs: 60_000,
              heartbeatTimeoutMs: 120_000,
            },
          },
        };
        const kinds: string[] = [];
        const authorization = `Bearer ${(await t.tokens.issueZoneToken("zone-1")).token}`;
        for await (const frame of client.streamMessage(
          (async function* () {
            yield hello;
          })(),
          { headers: { "client-id": "zone-1", authorization } },
        )) {
          kinds.push(frame.value.case ?? "?");
        }
        equal(kinds[0], "hello", "the global greets first");
        check(
          kinds.every((k) => k === "hello" || k === "ping"),
          `seeing EOF, the global ends its direction without a goaway: ${kinds.join(", ")}`,
        );
        equal(t.global.session("zone-1"), undefined, "the global dropped the session");
      } finally {
        await t.close();
      }
    },
  },
  {
    name: "a stream without client-id is refused with InvalidArgument",
    async run() {
      const t = await startGlobal("grpc");
      try {
        const client = createClient(
          MultiplexService,
          createGrpcTransport({ baseUrl: t.url as string }),
        );
        const error = await rejects(
          (async () => {
            const none = (async function* () {
              // No frame: the stream is refused for its headers.
            })();
            for await (const _ of client.streamMessage(none)) {
              /* none */
            }
          })(),
          "stream without client-id",
        );
        check(error instanceof ConnectError, "a ConnectError");
        equal(error.code, Code.InvalidArgument, "code");
        check(error.rawMessage.includes('no "client-id" header'), error.rawMessage);
      } finally {
        await t.close();
      }
    },
  },
  ...(["grpc", "memory", "half-duplex"] as const).map<Scenario>((kind) => ({
    name: `an unregistered zone is refused with FailedPrecondition and registration instructions (${kind})`,
    async run() {
      const t = await startGlobal(kind, { zones: [], adminUrl: "http://127.0.0.1:5681" });
      try {
        const zone = new ZoneClient({
          name: "zone-9",
          transport: t.transport(),
          logger: silentLogger,
        });
        const error = await rejects(zone.dial(), "dial of an unregistered zone");
        check(KdsError.is(error, "zone_not_registered"), `typed error: ${String(error)}`);
        check(
          error.message.includes(
            "kds-mux generate zone --name zone-9 | kds-mux apply -f - --server http://127.0.0.1:5681",
          ),
          error.message,
        );
        check(error.message.includes("type: Zone\n  name: zone-9"), error.message);
        if (kind !== "memory") {
          const cause = error.cause;
          check(
            cause instanceof ConnectError && cause.code === Code.FailedPrecondition,
            "FailedPrecondition on the wire",
          );
        }
        t.registry.register("zone-9", { enabled: false });
        const disabled = await rejects(zone.dial(), "dial of a disabled zone");
        check(
          KdsError.is(disabled, "zone_disabled") && disabled.message.includes("disabled"),
          String(disabled),
        );
      } finally {
        await t.close();
      }
    },
  })),
  ...(["memory", "grpc", "half-duplex"] as const).map<Scenario>((kind) => ({
    name: `a second session of the same zone replaces the older one (${kind})`,
    async run() {
      const ended: string[] = [];
      const t = await startGlobal(kind, { onSessionEnded: (_s, end) => ended.push(end.code) });
      try {
        const first = await new ZoneClient({
          name: "zone-1",
          transport: t.transport(),
          logger: silentLogger,
        }).dial();
        await eventually(() => t.global.session("zone-1") !== undefined, "first session listed");
        const firstOnGlobal = t.global.session("zone-1");
        const second = await new ZoneClient({
          name: "zone-1",
          transport: t.transport(),
          logger: silentLogger,
        }).dial();
        const end = await first.closed;
        equal(end.code, "replaced", "the older session's end code");
        equal(end.initiator, "peer", "the global ended it");
        equal(end.graceful, true, "a replacement is deliberate");
        check(end.message.includes("newer session"), end.message);
        await eventually(
          () =>
            t.global.session("zone-1") !== firstOnGlobal &&
            t.global.session("zone-1") !== undefined,
          "the newer session is current",
        );
        await eventually(
          () => ended.includes("replaced"),
          "onSessionEnded reported the replacement",
        );
        equal(t.global.sessions().length, 1, "one session per zone");
        await roundTrip(second, t.global.session("zone-1") as Session, 2);
        await second.close();
      } finally {
        await t.close();
      }
    },
  })),
  {
    name: "a deliberate close reaches the peer as a graceful goaway",
    async run() {
      const c = await connect("grpc");
      try {
        const end = await c.zone.close({ message: "zone restarting" });
        equal(end.code, "shutdown", "local end code");
        const peerEnd = await c.global.closed;
        equal(peerEnd.code, "shutdown", "peer end code");
        equal(peerEnd.initiator, "peer", "initiator seen by the global");
        equal(peerEnd.graceful, true, "graceful");
        equal(peerEnd.message, "zone restarting", "the message travels");
      } finally {
        await c.close();
      }
    },
  },
  {
    name: "a cut transport ends the session as a failure, not a goaway",
    async run() {
      const t = await startGlobal("grpc");
      try {
        const zone = new ZoneClient({
          name: "zone-1",
          transport: t.transport(),
          logger: silentLogger,
        });
        const zs = (await zone.dial()) as MuxSession;
        await eventually(() => t.global.session("zone-1") !== undefined, "session listed");
        const gs = t.global.session("zone-1") as Session;
        // Cut the HTTP/2 stream under the session without a goaway.
        zs.fail("transport", "test cut the stream");
        const end = await gs.closed;
        check(
          end.code === "transport" || end.code === "peer_eof",
          `global sees a failure: ${end.code}`,
        );
        equal(end.graceful, false, "not graceful");
      } finally {
        await t.close();
      }
    },
  },
  {
    name: "a message larger than the peer accepts fails alone; the session goes on",
    async run() {
      const c = await connect("memory", { session: { maxMessageBytes: 4096 } });
      try {
        const error = await rejects(
          c.zone.server.send(response("type.big", "1", 10_000)),
          "oversize send",
        );
        check(KdsError.is(error, "message_too_large"), String(error));
        check(error.message.includes("4096"), error.message);
        await roundTrip(c.zone, c.global, 1);
      } finally {
        await c.close();
      }
    },
  },
  {
    name: "a send that waits past the send timeout ends the session",
    async run() {
      const c = await connect("memory", { session: { responseWindow: 2 } }, { sendTimeoutMs: 200 });
      try {
        // The global's client view never reads: the zone's third response can never leave.
        const sends = [0, 1, 2].map((i) =>
          c.zone.server.send(response("type.t", String(i))).catch((e: unknown) => e),
        );
        const end = await c.zone.closed;
        equal(end.code, "send_timeout", "end code");
        const third = await sends[2];
        check(KdsError.is(third, "session_closed"), `the stuck send fails: ${String(third)}`);
        const peerEnd = await c.global.closed;
        equal(peerEnd.code, "send_timeout", "the global is told why");
      } finally {
        await c.close();
      }
    },
  },
  ...(["memory", "grpc", "half-duplex"] as const).map<Scenario>((kind) => ({
    name: `resources sync both ways, attributed to the zone (${kind})`,
    async run() {
      const cluster = await startCluster(kind);
      try {
        await cluster.global.registerZone("zone-1");
        await cluster.global.store.put(mesh("default", "from the global"));
        const zone = cluster.startZone("zone-1");
        await zone.store.put(
          dataplane("default", "web-1", "10.0.0.1", { [LABELS.zone]: "forged" }),
        );
        const deadline = Date.now() + 10_000;
        for (;;) {
          const mirrored = await zone.store.get("Mesh", "", "default");
          const attributed = await cluster.global.store.get("Dataplane", "default", "zone-1.web-1");
          if (mirrored !== undefined && attributed !== undefined) {
            equal(
              mirrored.meta.labels[LABELS.origin],
              "global",
              "the zone's copy is marked as coming from the global",
            );
            equal(
              attributed.meta.labels[LABELS.zone],
              "zone-1",
              "the global attributes by the session, not by the zone's labels",
            );
            break;
          }
          check(Date.now() < deadline, "resources did not sync within 10 s");
          await settle(10);
        }
      } finally {
        await cluster.close();
      }
    },
  })),
];
