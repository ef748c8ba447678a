/**
 * Global mode: the kit plays a zone against a global under test. It dials
 * the global once per check (sequentially: each session of the zone
 * replaces the last), writes what a conforming zone would and what a broken
 * one might, and checks every answer against docs/protocol.md.
 *
 * @module
 */
import { KdsError } from "../errors.ts";
import type { Frame } from "../gen/kds/mux/v1/mux_pb.ts";
import { KindDirection } from "../gen/kds/v1/kinds_pb.ts";
import { catalogOf } from "../sync/kind-catalog.ts";
import { TYPE_URL_PREFIX } from "../kinds/resource-types.ts";
import type { Lane } from "../mux/frames.ts";
import { ANSWER_MS, Conversation, laneOf } from "./conversation.ts";
import {
  CATALOG_TYPE,
  UNKNOWN_TYPE,
  catalogRequest,
  deltaRequest,
  hello,
  paddedRequest,
  paddedResponse,
  ping,
  sotwRequest,
  windowUpdate,
} from "./frames.ts";
import { checkHello, describeEnd, expectProtocolError, type Expectation } from "./expectations.ts";
import type { DialLink } from "./link.ts";
import { Report, type CheckResult } from "./report.ts";
import type { RuleName } from "./rules.ts";

/** Options of {@link checkGlobal}. */
export interface GlobalCheckOptions {
  /** Opens a mux call to the global under test. */
  readonly dial: DialLink;
  /** A zone registered on the global, the kit dials as. */
  readonly zone: string;
  /** That zone's token, when the global requires one. */
  readonly token?: string;
  /** Progress lines (which check runs). */
  readonly progress?: (line: string) => void;
  readonly signal: AbortSignal;
}

/** The elements a frame may hold at most (docs/protocol.md, Flow control). */
const MAX_ELEMENTS = 2 ** 19;

/** Runs every check of global mode; resolves with the results (it does not throw for a failing global). */
export async function checkGlobal(options: GlobalCheckOptions): Promise<CheckResult[]> {
  const run = new GlobalRun(options);
  await run.all();
  return run.report.results();
}

class GlobalRun {
  readonly report = new Report();
  readonly #o: GlobalCheckOptions;
  /** Global-to-zone resources the first session received, per type: name -> version. */
  readonly #held = new Map<string, Map<string, string>>();
  /** Refusals whose status came in response headers that left the stream open (status.in-trailers). */
  readonly #openHeaderStatuses: string[] = [];
  #refusals = 0;

  constructor(options: GlobalCheckOptions) {
    this.#o = options;
  }

  async all(): Promise<void> {
    const steps: [string, RuleName, () => Promise<void>][] = [
      ["admission", "admission.missing-client-id", () => this.admission()],
      ["handshake and discovery", "hello.first-frame", () => this.main()],
      ["resume", "resume.initial-versions", () => this.resume()],
      ["overrun by one frame", "overrun.frame", () => this.overrun("frame")],
      ["overrun by one byte", "overrun.byte", () => this.overrun("byte")],
      ["unknown type", "unknown-type", () => this.unknownType()],
      ["frame above max_message_bytes", "size.max-message-bytes", () => this.oversized()],
      ["frame of 2^19 + 1 elements", "size.elements", () => this.elements()],
      ["bad hellos", "refuse.version", () => this.badHellos()],
      ["catalog NACK", "nack.catalog-ends-session", () => this.catalogNack()],
      ["nonces and window updates", "nonce.first-request", () => this.noncesAndWindows()],
    ];
    for (const [name, rule, step] of steps) {
      this.#o.signal.throwIfAborted();
      this.#o.progress?.(`conformance: ${name}`);
      try {
        await step();
      } catch (error) {
        if (this.#o.signal.aborted) throw error;
        if (KdsError.is(error, "transport")) throw error; // the global is unreachable: no check can run, say so once
        // Reported, not lost: a step that cannot go on (the global cut the connection, say) fails its rule with the reason.
        this.report.add(
          rule,
          "fail",
          `the ${name} check could not run: ${error instanceof Error ? error.message : String(error)}`,
        );
      }
    }
  }

  #headers(zone: string | undefined, withToken: boolean): Record<string, string> {
    const h: Record<string, string> = {};
    if (zone !== undefined) h["client-id"] = zone;
    if (withToken && this.#o.token !== undefined) h.authorization = `Bearer ${this.#o.token}`;
    return h;
  }

  async #open(zone: string | undefined = this.#o.zone, withToken = true): Promise<Conversation> {
    return new Conversation(
      await this.#o.dial(this.#headers(zone, withToken), this.#o.signal),
      this.#o.signal,
    );
  }

  /** Opens a session and exchanges hellos; undefined (and `rule` failed) when the global sent no hello. */
  async #session(
    rule: RuleName,
    init: Parameters<typeof hello>[1] = {},
  ): Promise<Conversation | undefined> {
    const c = await this.#open();
    c.write(hello(this.#o.zone, init));
    await c.waitFor((f) => f.value.case === "hello", ANSWER_MS);
    if (c.peerHello === undefined) {
      const end = await c.end(ANSWER_MS);
      this.report.add(
        rule,
        "fail",
        `the global sent no hello within ${ANSWER_MS} ms${end === undefined ? "" : `; the call ended: ${describeEnd(end)}`}`,
      );
      c.link.cancel();
      return undefined;
    }
    return c;
  }

  async #refusal(
    rule: RuleName,
    headers: Record<string, string>,
    status: number,
    code: string,
  ): Promise<{ admitted: boolean }> {
    const c = new Conversation(await this.#o.dial(headers, this.#o.signal), this.#o.signal);
    c.write(hello(headers["client-id"] ?? "none"));
    const first = await c.waitFor((f) => f.value.case === "hello", ANSWER_MS);
    if (first !== undefined) {
      c.link.cancel();
      return { admitted: true };
    }
    const end = await c.end(ANSWER_MS);
    c.link.cancel();
    this.report.expect(
      rule,
      end?.grpcStatus === status && end.kdsErrorCode === code,
      end === undefined ? "the call did not end" : describeEnd(end),
    );
    if (end?.grpcStatus !== undefined) this.#refusals++;
    if (end?.statusIn === "headers-open") this.#openHeaderStatuses.push(rule);
    return { admitted: false };
  }

  async admission(): Promise<void> {
    const auth = this.#headers(undefined, true);
    await this.#refusal("admission.missing-client-id", auth, 3, "missing_client_id");
    await this.#refusal(
      "admission.invalid-client-id",
      { ...auth, "client-id": "Not_A_Zone" },
      3,
      "invalid_argument",
    );
    const tokenless = await this.#refusal(
      "admission.unauthenticated",
      this.#headers(this.#o.zone, false),
      16,
      "unauthenticated",
    );
    if (tokenless.admitted)
      this.report.add(
        "admission.unauthenticated",
        "skip",
        "the global admitted the zone without a token (it runs without zone authentication)",
      );
    const other = `${this.#o.zone.slice(0, 40)}-conformance-x`;
    if (this.#o.token !== undefined && !tokenless.admitted) {
      await this.#refusal(
        "admission.permission-denied",
        this.#headers(other, true),
        7,
        "permission_denied",
      );
    } else {
      this.report.add(
        "admission.permission-denied",
        "skip",
        this.#o.token === undefined
          ? "no zone token given"
          : "the global does not authenticate zones",
      );
    }
    this.#reportStatusPlacement();
    if (tokenless.admitted) {
      const r = await this.#refusal(
        "admission.not-registered",
        this.#headers(other, false),
        9,
        "zone_not_registered",
      );
      if (r.admitted)
        this.report.add(
          "admission.not-registered",
          "fail",
          `the global admitted the unregistered zone "${other}"`,
        );
    } else {
      this.report.add(
        "admission.not-registered",
        "skip",
        "the global authenticates zones, and the kit has no token of an unregistered zone",
      );
    }
  }

  async main(): Promise<void> {
    const c = await this.#open();
    // Listen before saying hello: the global's hello comes at once, and nothing else but control frames may precede ours.
    await c.drain(500);
    const beforeOurs = c.received.length;
    c.write(hello(this.#o.zone));
    if (c.peerHello === undefined) await c.waitFor((f) => f.value.case === "hello", ANSWER_MS);
    const end = c.peerHello === undefined ? await c.end(100) : undefined;
    checkHello(this.report, c, { role: "global", expectedPeerId: undefined, end });
    if (c.peerHello === undefined) return void c.link.cancel();
    const early = c.received.slice(0, beforeOurs).filter((f) => laneOf(f) !== undefined);
    this.report.expect(
      "hello.no-data-before-peer-hello",
      early.length === 0,
      early.length === 0
        ? `only control frames (${
            c.received
              .slice(0, beforeOurs)
              .map((f) => f.value.case)
              .join(", ") || "none"
          }) before the kit's hello`
        : `sent ${early.map((f) => f.value.case).join(", ")} before the kit's hello`,
    );
    await this.#ping(c);
    const catalog = await this.#catalog(c, "");
    if (catalog === undefined) return void c.link.cancel();
    c.write(catalogRequest(this.#o.zone, catalog.nonce, catalog.version));
    const nonces = new Map<string, string[]>([[CATALOG_TYPE, [catalog.nonce]]]);
    const types = catalog.globalToZone;
    for (const typeUrl of types) c.write(deltaRequest({ typeUrl, resourceNamesSubscribe: ["*"] }));
    await this.#collect(c, 1_500, nonces, (typeUrl, name, version) => {
      const m = this.#held.get(typeUrl) ?? new Map<string, string>();
      m.set(name, version);
      this.#held.set(typeUrl, m);
    });
    // A fresh subscription to the catalog: the whole set again, under a new nonce.
    c.write(catalogRequest(this.#o.zone));
    const again = await c.waitFor(
      (f) => f.value.case === "response" && f.value.value.typeUrl === CATALOG_TYPE,
      ANSWER_MS,
    );
    if (again?.value.case === "response") {
      nonces.get(CATALOG_TYPE)?.push(again.value.value.nonce);
      c.write(catalogRequest(this.#o.zone, again.value.value.nonce, again.value.value.versionInfo));
    }
    const reused = [...nonces].flatMap(([t, list]) =>
      new Set(list).size === list.length ? [] : [`${t}: ${list.join(", ")}`],
    );
    const total = [...nonces.values()].reduce((n, l) => n + l.length, 0);
    if (total < 2) this.report.add("nonce.unique", "skip", "fewer than two responses arrived");
    else
      this.report.expect(
        "nonce.unique",
        reused.length === 0,
        reused.length === 0
          ? `${total} responses, all nonces distinct`
          : `reused nonces: ${reused.join("; ")}`,
      );
    await this.#returnsCredit(c);
    c.shutdown("conformance kit: done");
    const over = await c.end(ANSWER_MS);
    this.report.expect(
      "goaway.graceful",
      over?.grpcStatus === 0 && over.kdsErrorCode === undefined,
      over === undefined
        ? `the call did not end within ${ANSWER_MS} ms of the kit's goaway`
        : describeEnd(over),
    );
  }

  async #ping(c: Conversation): Promise<void> {
    const id = BigInt(Math.floor(Math.random() * 2 ** 48));
    const start = Date.now();
    c.write(ping(id));
    const pong = await c.waitFor(
      (f) => f.value.case === "pong" && f.value.value.id === id,
      ANSWER_MS,
    );
    this.report.expect(
      "ping.pong",
      pong !== undefined,
      pong !== undefined
        ? `pong ${id} after ${Date.now() - start} ms`
        : `no pong with id ${id} within ${ANSWER_MS} ms`,
    );
  }

  /** Requests the catalog; checks and returns the response, or undefined (failed) when none came. */
  async #catalog(
    c: Conversation,
    nonce: string,
  ): Promise<{ nonce: string; version: string; globalToZone: string[] } | undefined> {
    c.write(catalogRequest(this.#o.zone, nonce));
    const frame = await c.waitFor(
      (f) => f.value.case === "response" && f.value.value.typeUrl === CATALOG_TYPE,
      ANSWER_MS,
    );
    if (frame?.value.case !== "response") {
      this.report.add("catalog.response", "fail", `no catalog response within ${ANSWER_MS} ms`);
      return undefined;
    }
    const r = frame.value.value;
    let globalToZone: string[] = [];
    let problem = "";
    try {
      const catalog = catalogOf(r.resources);
      globalToZone = catalog.kinds
        .filter((k) => k.direction === KindDirection.GLOBAL_TO_ZONE)
        .map((k) => TYPE_URL_PREFIX + k.message);
      // Each kind after the kinds it depends on, all of them in the catalog (docs/protocol.md, "Order between kinds").
      const listed = new Set<string>();
      for (const k of catalog.kinds) {
        const late = k.dependsOn.find((d) => !listed.has(d));
        if (late !== undefined)
          problem ||= `kind "${k.kind}" depends on "${late}", which the catalog does not list before it`;
        listed.add(k.kind);
      }
    } catch (error) {
      problem = error instanceof Error ? error.message : String(error);
    }
    if (r.nonce === "") problem ||= "the response has no nonce";
    if (r.versionInfo === "") problem ||= "the response has no version_info";
    this.report.expect(
      "catalog.response",
      problem === "",
      problem ||
        `version ${r.versionInfo}, nonce ${r.nonce}, ${globalToZone.length} global-to-zone kinds`,
    );
    return { nonce: r.nonce, version: r.versionInfo, globalToZone };
  }

  /** Reads delta responses until `quietMs` pass without one, ACKing each; records nonces and resources. */
  async #collect(
    c: Conversation,
    quietMs: number,
    nonces: Map<string, string[]>,
    onResource: (typeUrl: string, name: string, version: string) => void,
  ): Promise<void> {
    const deadline = Date.now() + 15_000;
    while (Date.now() < deadline) {
      const frame = await c.waitFor((f) => f.value.case === "deltaResponse", quietMs);
      if (frame?.value.case !== "deltaResponse") return;
      const r = frame.value.value;
      nonces.set(r.typeUrl, [...(nonces.get(r.typeUrl) ?? []), r.nonce]);
      for (const res of r.resources) onResource(r.typeUrl, res.name, res.version);
      c.write(deltaRequest({ typeUrl: r.typeUrl, responseNonce: r.nonce }));
    }
  }

  /** Spends the whole frame credit on stale ACKs (which a server ignores) and expects credit back. */
  async #returnsCredit(c: Conversation): Promise<void> {
    await c.drain(200);
    const n = Math.min(c.credit("requests").frames, 4096);
    const frame = sotwRequest({ typeUrl: CATALOG_TYPE, responseNonce: "stale-credit" });
    if (n <= 0 || n * 64 > c.credit("requests").bytes) {
      this.report.add("flow.returns-credit", "skip", `the kit holds ${n} frames of credit`);
      return;
    }
    c.write(...Array.from({ length: n }, () => frame));
    const got = await c.waitFor(() => c.credit("requests").frames > 0, ANSWER_MS);
    this.report.expect(
      "flow.returns-credit",
      got !== undefined,
      got !== undefined
        ? `after ${n} requests (the whole window), window updates returned ${c.granted.requests.frames - c.sent.requests.frames} frames`
        : `no window update within ${ANSWER_MS} ms after the kit used all ${n} frames of request credit`,
    );
  }

  async resume(): Promise<void> {
    const held = [...this.#held].filter(([, m]) => m.size > 0);
    if (held.length === 0) {
      this.report.add(
        "resume.initial-versions",
        "skip",
        "the global sent this zone no global-to-zone resources; apply one (kds-mux apply) to run this check",
      );
      return;
    }
    const c = await this.#session("resume.initial-versions");
    if (c === undefined) return;
    const catalog = await this.#catalog(c, "");
    if (catalog === undefined) return void c.link.cancel();
    c.write(catalogRequest(this.#o.zone, catalog.nonce, catalog.version));
    for (const [typeUrl, m] of held)
      c.write(
        deltaRequest({
          typeUrl,
          resourceNamesSubscribe: ["*"],
          initialResourceVersions: Object.fromEntries(m),
        }),
      );
    const resent: string[] = [];
    await this.#collect(c, 1_500, new Map(), (typeUrl, name, version) => {
      if (this.#held.get(typeUrl)?.get(name) === version) resent.push(`${name}@${version}`);
    });
    const count = held.reduce((n, [, m]) => n + m.size, 0);
    this.report.expect(
      "resume.initial-versions",
      resent.length === 0,
      resent.length === 0
        ? `${count} resources held at their versions: none resent`
        : `resent unchanged: ${resent.slice(0, 5).join(", ")}${resent.length > 5 ? ", ..." : ""}`,
    );
    c.shutdown("conformance kit: done");
    await c.end(ANSWER_MS);
  }

  /**
   * Sends one frame (or one byte) past the global's credit on the response
   * lane. The kit grants the global a request window of one frame, settles
   * the catalog, waits for the global to subscribe to a zone-to-global kind
   * (which spends that frame), lets the credit settle (every window update
   * read), then writes credit + 1 delta responses of that kind in one
   * write. The global's ACK of the first one waits for request credit the
   * kit never returns, so a discovery client that ACKs a response before it
   * takes the next (as kds-mux's does) leaves the rest unconsumed, and the
   * last one arrives past what the global granted. Should credit come back
   * before the last frame arrives anyway (a consumer that keeps pace), the
   * frame was not past the credit by then, and the check is skipped rather
   * than failed.
   */
  async overrun(unit: "frame" | "byte"): Promise<void> {
    const rule: RuleName = unit === "frame" ? "overrun.frame" : "overrun.byte";
    for (let attempt = 1; attempt <= 2; attempt++) {
      const c = await this.#session(rule, { requestWindow: 1 });
      if (c === undefined) return;
      const catalog = await this.#catalog(c, "");
      if (catalog === undefined) return void c.link.cancel();
      c.write(catalogRequest(this.#o.zone, catalog.nonce, catalog.version));
      const sub = await c.waitFor(
        (f) => f.value.case === "deltaRequest" && f.value.value.responseNonce === "",
        ANSWER_MS,
      );
      if (sub?.value.case !== "deltaRequest") {
        this.report.add(
          rule,
          "skip",
          `the global subscribed to no zone-to-global kind within ${ANSWER_MS} ms of the catalog ACK; give it one to run this check`,
        );
        return void c.link.cancel();
      }
      const typeUrl = sub.value.value.typeUrl;
      await c.drain(400);
      const credit = c.credit("responses");
      const max = Math.min((c.peerHello?.maxMessageBytes ?? 1024) - 64, 1 << 20);
      let frames: Frame[];
      if (unit === "frame") {
        if (credit.frames * 300 >= credit.bytes) {
          this.report.add(
            rule,
            "skip",
            `the global's byte credit (${credit.bytes}) does not hold ${credit.frames} frames of 300 bytes`,
          );
          return void c.link.cancel();
        }
        frames = Array.from({ length: Math.max(1, credit.frames + 1) }, (_, i) =>
          paddedResponse(typeUrl, 300, `f${attempt}-${i}`),
        );
      } else {
        if (credit.bytes < 1024) {
          this.report.add(
            rule,
            "skip",
            `the global granted ${credit.bytes} bytes of response credit (see hello.byte-windows)`,
          );
          return void c.link.cancel();
        }
        const count = Math.ceil((credit.bytes + 1) / max);
        if (count > credit.frames || max < 300) {
          this.report.add(
            rule,
            "skip",
            `${credit.bytes + 1} bytes take ${count} frames of at most ${max}; the global's frame credit is ${credit.frames}`,
          );
          return void c.link.cancel();
        }
        const sizes = Array.from({ length: count }, () => Math.floor((credit.bytes + 1) / count));
        // The first frame takes the remainder the even split left over.
        const remainder = credit.bytes + 1 - sizes.reduce((a, b) => a + b, 0);
        frames = sizes.map((size, i) =>
          paddedResponse(typeUrl, i === 0 ? size + remainder : size, `b${attempt}-${i}`),
        );
      }
      c.write(...frames);
      const lane: Lane = "responses";
      const goaway = await c.awaitGoaway(2 * ANSWER_MS);
      const end = goaway !== undefined ? await c.end(ANSWER_MS) : undefined;
      const excess = unit === "frame" ? -c.credit(lane).frames : -c.credit(lane).bytes;
      c.link.cancel();
      const what =
        unit === "frame"
          ? `${credit.frames + 1} responses against ${credit.frames} frames of credit`
          : `${credit.bytes + 1} bytes of responses against ${credit.bytes} bytes of credit`;
      if (goaway !== undefined) {
        const ok =
          goaway.reason === "PROTOCOL_ERROR" &&
          /window/i.test(goaway.message) &&
          end?.grpcStatus === 3 &&
          end.kdsErrorCode === "protocol_error";
        this.report.expect(
          rule,
          ok,
          `${what}: goaway ${goaway.reason} "${goaway.message}"; ${end === undefined ? "the call did not end" : describeEnd(end)}`,
        );
        return;
      }
      if (excess > 0) {
        this.report.add(
          rule,
          "fail",
          `${what}: the global neither ended the session nor granted the ${excess} ${unit === "frame" ? "frames" : "bytes"} (no goaway within ${2 * ANSWER_MS} ms)`,
        );
        return;
      }
      if (attempt === 2)
        this.report.add(
          rule,
          "skip",
          `${what}: the global returned credit before the overrun arrived, twice; the kit could not send past its credit`,
        );
    }
  }

  /** status.in-trailers, from the refusals seen so far. */
  #reportStatusPlacement(): void {
    if (this.#refusals === 0) {
      this.report.add("status.in-trailers", "skip", "no refusal carried a status");
      return;
    }
    this.report.expect(
      "status.in-trailers",
      this.#openHeaderStatuses.length === 0,
      this.#openHeaderStatuses.length === 0
        ? `${this.#refusals} refusals, each status in trailers (Trailers-Only)`
        : `the status came in response headers that left the stream open (gRPC clients read no status there) for: ${this.#openHeaderStatuses.join(", ")}`,
    );
  }

  /**
   * A first catalog request carrying a nonce the global never issued is
   * answered; after its ACK, an answer naming an unknown nonce is stale
   * (nothing comes back, the session goes on); a window update of zero
   * changes nothing; one past the credit cap is a protocol error.
   */
  async noncesAndWindows(): Promise<void> {
    const c = await this.#session("nonce.first-request");
    if (c === undefined) return;
    const isCatalog = (f: Frame): boolean =>
      f.value.case === "response" && f.value.value.typeUrl === CATALOG_TYPE;
    c.write(catalogRequest(this.#o.zone, "conformance-never-issued"));
    const first = await c.waitFor(isCatalog, ANSWER_MS);
    this.report.expect(
      "nonce.first-request",
      first !== undefined,
      first !== undefined
        ? "the catalog came for a first request carrying a nonce the global never issued"
        : `no catalog within ${ANSWER_MS} ms of a first request carrying the nonce "conformance-never-issued"`,
    );
    if (first?.value.case !== "response") return void c.link.cancel();
    const { nonce, versionInfo } = first.value.value;
    c.write(catalogRequest(this.#o.zone, nonce, versionInfo));
    await c.drain(300);
    c.write(catalogRequest(this.#o.zone, "conformance-stale", versionInfo));
    const answered = await c.waitFor(isCatalog, 1_000);
    const alive = await this.#pongs(c);
    this.report.expect(
      "nonce.stale",
      answered === undefined && alive,
      answered !== undefined
        ? "the global answered a request whose response_nonce it never issued (after the type's first request)"
        : alive
          ? "nothing came back for an answer naming an unknown nonce, and the session went on"
          : "the session ended after an answer naming an unknown nonce",
    );
    c.write(windowUpdate(0, 0, 0, 0));
    const zeroOk = await this.#pongs(c);
    this.report.expect(
      "window.zero",
      zeroOk,
      zeroOk
        ? "a window update of zero changed nothing; a ping after it was answered"
        : "no pong after a window update of zero",
    );
    // 2^32 - 1 frames on top of the window the kit already holds: past 2^31.
    c.write(windowUpdate(0, 2 ** 32 - 1, 0, 0));
    await expectProtocolError(this.report, "refuse.window-cap", c, {
      grpcStatus: 3,
      kdsErrorCode: "protocol_error",
      what: "a window update of 2^32 - 1 response frames",
    });
  }

  /** Whether a ping is answered within the answer time (the session is alive). */
  async #pongs(c: Conversation): Promise<boolean> {
    const id = BigInt(Math.floor(Math.random() * 2 ** 48));
    c.write(ping(id));
    const pong = await c.waitFor(
      (f) => f.value.case === "pong" && f.value.value.id === id,
      ANSWER_MS,
    );
    return pong !== undefined;
  }

  async unknownType(): Promise<void> {
    const c = await this.#session("unknown-type");
    if (c === undefined) return;
    c.write(deltaRequest({ typeUrl: UNKNOWN_TYPE, resourceNamesSubscribe: ["*"] }));
    await expectProtocolError(this.report, "unknown-type", c, {
      grpcStatus: 3,
      kdsErrorCode: "unknown_type",
      what: `a delta request for ${UNKNOWN_TYPE}`,
    });
  }

  async oversized(): Promise<void> {
    const c = await this.#session("size.max-message-bytes");
    if (c === undefined) return;
    const max = c.peerHello?.maxMessageBytes ?? 0;
    if (max + 1 > c.credit("requests").bytes) {
      c.link.cancel();
      this.report.add(
        "size.max-message-bytes",
        "skip",
        `the global's max_message_bytes (${max}) is not below its byte window`,
      );
      return;
    }
    c.write(paddedRequest(max + 1, "big"));
    await expectProtocolError(this.report, "size.max-message-bytes", c, {
      grpcStatus: 3,
      kdsErrorCode: "protocol_error",
      what: `a frame of ${max + 1} bytes (max_message_bytes ${max})`,
    });
  }

  async elements(): Promise<void> {
    const c = await this.#session("size.elements");
    if (c === undefined) return;
    const frame = sotwRequest({
      typeUrl: CATALOG_TYPE,
      responseNonce: "stale-elements",
      resourceNames: Array.from({ length: MAX_ELEMENTS + 1 }, () => ""),
    });
    c.write(frame);
    await expectProtocolError(this.report, "size.elements", c, {
      grpcStatus: 3,
      kdsErrorCode: "protocol_error",
      what: `a request of ${MAX_ELEMENTS + 1} empty resource names`,
    });
  }

  async badHellos(): Promise<void> {
    const cases: [RuleName, Frame[], Expectation["extra"]?][] = [
      [
        "refuse.version",
        [hello(this.#o.zone, { protocolVersion: 1 })],
        (g) =>
          /\b1\b/.test(g) && /\b2\b/.test(g)
            ? undefined
            : "the goaway does not name both versions (1 and 2)",
      ],
      [
        "refuse.byte-windows",
        [hello(this.#o.zone, { requestWindowBytes: 0, responseWindowBytes: 0 })],
      ],
      ["refuse.peer-id", [hello(`${this.#o.zone.slice(0, 40)}-not-me`)]],
      ["refuse.first-frame", [catalogRequest(this.#o.zone), hello(this.#o.zone)]],
    ];
    for (const [rule, frames, extra] of cases) {
      const c = await this.#open();
      c.write(...frames);
      await expectProtocolError(this.report, rule, c, {
        grpcStatus: 3,
        kdsErrorCode: "protocol_error",
        what: `${frames.map((f) => f.value.case).join(" then ")}`,
        extra,
      });
    }
    const c = await this.#session("refuse.second-hello");
    if (c === undefined) return;
    c.write(hello(this.#o.zone));
    await expectProtocolError(this.report, "refuse.second-hello", c, {
      grpcStatus: 3,
      kdsErrorCode: "protocol_error",
      what: "a second hello",
    });
  }

  async catalogNack(): Promise<void> {
    const c = await this.#session("nack.catalog-ends-session");
    if (c === undefined) return;
    const catalog = await this.#catalog(c, "");
    if (catalog === undefined) return void c.link.cancel();
    const reason = "conformance kit: this zone's kinds disagree on purpose";
    c.write(
      sotwRequest({
        typeUrl: CATALOG_TYPE,
        responseNonce: catalog.nonce,
        errorDetail: { code: 3, message: reason },
      }),
    );
    const goaway = await c.awaitGoaway(ANSWER_MS + 5_000);
    c.link.cancel();
    this.report.expect(
      "nack.catalog-ends-session",
      goaway?.message.includes(reason) === true,
      goaway === undefined
        ? `no goaway within ${ANSWER_MS + 5_000} ms of the NACK`
        : `goaway ${goaway.reason} "${goaway.message}"`,
    );
  }
}
