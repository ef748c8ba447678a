// A zone written for the conformance tests: just enough of the protocol to
// pass every zone-mode check, and faults that each break one rule. It dials
// the kit's listener again after every session, as a zone does.
import { create } from "@bufbuild/protobuf";
import { AnySchema } from "@bufbuild/protobuf/wkt";
import { conformanceDialer } from "../../src/adapters/node/conformance-link.ts";
import { Conversation } from "../../src/conformance/conversation.ts";
import { catalogRequest, goaway, hello, pong, sotwRequest } from "../../src/conformance/frames.ts";
import { GoAwayReason, FrameSchema } from "../../src/gen/kds/mux/v1/mux_pb.ts";
import { DeltaDiscoveryResponseSchema } from "../../src/gen/kds/v1/discovery_pb.ts";
import { catalogOf } from "../../src/sync/kind-catalog.ts";

/** Each fault breaks the rule named in its comment. */
export interface ZoneFaults {
  noPong?: boolean; // ping.pong
  noByteWindows?: boolean; // hello.byte-windows
  oldVersion?: boolean; // hello.version
  wrongPeerId?: boolean; // hello.peer-id
  dataBeforeHello?: boolean; // hello.no-data-before-peer-hello
  ignoreWindows?: boolean; // flow.within-window (frames)
  v1Credit?: boolean; // flow.within-window (bytes counted the v1 way: empty strings cost nothing)
  nackWithoutDetail?: boolean; // nack.error-detail
  ignoreUnknownType?: boolean; // unknown-type
  reuseNonce?: boolean; // nonce.unique
  resendOnResume?: boolean; // resume.initial-versions
  acceptOverrun?: boolean; // overrun.frame
  ackWrongVersion?: boolean; // ack.echo
}

/** Runs the zone until `signal` aborts: dial, one session, dial again. */
export async function scriptedZone(
  url: string,
  name: string,
  faults: ZoneFaults,
  signal: AbortSignal,
): Promise<void> {
  const dial = conformanceDialer({ url });
  for (let i = 0; i < 50 && !signal.aborted; i++) {
    try {
      const c = new Conversation(await dial({ "client-id": name }, signal), signal);
      await session(c, name, faults);
      c.link.cancel();
    } catch (error) {
      if (signal.aborted) return;
      throw error;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function session(c: Conversation, name: string, f: ZoneFaults): Promise<void> {
  if (f.dataBeforeHello) c.write(catalogRequest(name));
  c.write(
    hello(f.wrongPeerId ? `${name}-other` : name, {
      protocolVersion: f.oldVersion ? 1 : 2,
      ...(f.noByteWindows ? { requestWindowBytes: 0, responseWindowBytes: 0 } : {}),
    }),
  );
  if ((await c.waitFor((m) => m.value.case === "hello", 10_000)) === undefined) return;
  if (!f.dataBeforeHello) c.write(catalogRequest(name));
  if (f.ignoreWindows)
    c.write(
      ...Array.from({ length: 12 }, (_, i) =>
        sotwRequest({
          typeUrl: "type.googleapis.com/kds.v1.KindCatalog",
          responseNonce: `stale-${i}`,
        }),
      ),
    );
  if (f.v1Credit) {
    // 3 frames of 8,000 empty names: about 16 KB each on the wire, but 8 bytes each as version 1 counted them.
    c.write(
      ...Array.from({ length: 3 }, (_, i) =>
        sotwRequest({
          typeUrl: "type.googleapis.com/kds.v1.KindCatalog",
          responseNonce: `stale-${i}`,
          resourceNames: Array.from({ length: 8000 }, () => ""),
        }),
      ),
    );
  }
  let responses = 0;
  const ownWindow = 64;
  for (let i = 0; i < 1000; i++) {
    const frame = await c.next(20_000);
    if (frame === undefined) return;
    const v = frame.value;
    if (v.case === "ping" && !f.noPong) c.write(pong(v.value.id));
    if (v.case === "goaway") return;
    if (v.case === "response" || v.case === "deltaResponse") {
      responses++;
      if (responses > ownWindow && !f.acceptOverrun) {
        c.write(
          goaway(
            GoAwayReason.PROTOCOL_ERROR,
            `the peer overran the responses window: frame ${responses} with ${ownWindow} granted`,
          ),
        );
        c.link.close();
        return;
      }
    }
    if (v.case === "response") {
      const r = v.value;
      let problem: string | undefined;
      try {
        catalogOf(r.resources);
      } catch (error) {
        problem = (error as Error).message;
      }
      if (problem === undefined || f.nackWithoutDetail) {
        c.write(
          sotwRequest({
            typeUrl: r.typeUrl,
            responseNonce: r.nonce,
            versionInfo: f.ackWrongVersion ? "other" : r.versionInfo,
          }),
        );
      } else {
        c.write(
          sotwRequest({
            typeUrl: r.typeUrl,
            responseNonce: r.nonce,
            errorDetail: { code: 3, message: problem },
          }),
        );
      }
    }
    if (v.case === "deltaRequest") {
      const r = v.value;
      if (r.typeUrl.includes("NoSuchKind")) {
        if (f.ignoreUnknownType) continue;
        c.write(
          goaway(
            GoAwayReason.PROTOCOL_ERROR,
            `the global requested ${r.typeUrl}, which this zone does not serve`,
          ),
        );
        c.link.close();
        return;
      }
      if (r.responseNonce !== "" || r.resourceNamesSubscribe.length === 0) continue;
      // A zone-to-global kind: two resources, in two responses.
      const held = r.initialResourceVersions;
      for (const [n, res] of ["a", "b"].entries()) {
        if (held[`default/${res}`] === "1" && !f.resendOnResume) continue;
        const resource = {
          name: `default/${res}`,
          version: "1",
          resource: create(AnySchema, { typeUrl: "type.googleapis.com/kds.v1.KdsResource" }),
        };
        c.write(
          create(FrameSchema, {
            value: {
              case: "deltaResponse",
              value: create(DeltaDiscoveryResponseSchema, {
                typeUrl: r.typeUrl,
                nonce: f.reuseNonce ? "z1" : `z${n + 1}`,
                resources: [resource],
              }),
            },
          }),
        );
      }
    }
  }
}
