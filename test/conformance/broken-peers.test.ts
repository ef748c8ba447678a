// The conformance kit against peers built here: a zone and a global that
// pass every check they can, and the same with one fault each. Each fault
// must be reported under the name of the rule it breaks.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { conformanceDialer, listenForZone } from "../../src/adapters/node/conformance-link.ts";
import {
  checkGlobal,
  checkZone,
  type CheckResult,
  type RuleName,
} from "../../src/conformance/index.ts";
import { KindCatalogSchema, KindDirection } from "../../src/gen/kds/v1/kinds_pb.ts";
import { scriptedGlobal, type GlobalFaults } from "./scripted-global.ts";
import { scriptedZone, type ZoneFaults } from "./scripted-zone.ts";

/** The catalog the kit serves the scripted zone: one zone-to-global kind, so it has resources to send. */
const CATALOG = create(KindCatalogSchema, {
  kinds: [
    {
      kind: "Probe",
      message: "kds.conformance.v1.ProbeSpec",
      direction: KindDirection.ZONE_TO_GLOBAL,
      scope: 2,
    },
  ],
});

/** A zone run takes about 5 s (10 s for the overrun the kit retries); one still going after this is stuck in a wait with no deadline. */
const ZONE_RUN_MS = 120_000;

/**
 * The kit's checks against one scripted zone, with the teardown. Fails
 * naming the step still pending (the kit's last progress line, or which
 * part of the teardown) when the run outlasts {@link ZONE_RUN_MS}, instead
 * of hanging until the test's timeout.
 */
async function againstZone(faults: ZoneFaults): Promise<CheckResult[]> {
  const stop = new AbortController();
  let step = "listening";
  const run = async (): Promise<CheckResult[]> => {
    const listener = await listenForZone("127.0.0.1", 0, stop.signal);
    const zone = scriptedZone(listener.url, "broken-zone", faults, stop.signal);
    try {
      return await checkZone({
        accept: listener.accept,
        catalog: CATALOG,
        dialWaitMs: 15_000,
        signal: stop.signal,
        progress: (line) => (step = line),
      });
    } finally {
      step = "teardown: closing the listener";
      stop.abort();
      await listener.close();
      step = "teardown: waiting for the scripted zone to stop";
      await zone;
    }
  };
  let timer: ReturnType<typeof setTimeout> | undefined;
  const stuck = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(
        new Error(
          `zone run ${JSON.stringify(faults)} still going after ${ZONE_RUN_MS} ms, at: ${step}`,
        ),
      );
      stop.abort();
    }, ZONE_RUN_MS);
  });
  try {
    return await Promise.race([run(), stuck]);
  } finally {
    clearTimeout(timer);
  }
}

async function againstGlobal(faults: GlobalFaults): Promise<CheckResult[]> {
  const stop = new AbortController();
  const listener = await scriptedGlobal("zone-1", faults, stop.signal);
  try {
    return await checkGlobal({
      dial: conformanceDialer({ url: listener.url }),
      zone: "zone-1",
      signal: stop.signal,
    });
  } finally {
    stop.abort();
    await listener.close();
  }
}

function outcome(results: CheckResult[], rule: RuleName): string {
  const r = results.find((x) => x.rule === rule);
  return r === undefined ? "missing" : `${r.outcome}: ${r.detail}`;
}

/** Runs `work` over `items`, `width` at a time (the machine has two cores). */
async function inBatches<T, R>(
  items: readonly T[],
  width: number,
  work: (item: T) => Promise<R>,
): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += width)
    out.push(...(await Promise.all(items.slice(i, i + width).map(work))));
  return out;
}

const zoneFaults: [keyof ZoneFaults, RuleName][] = [
  ["noPong", "ping.pong"],
  ["noByteWindows", "hello.byte-windows"],
  ["oldVersion", "hello.version"],
  ["wrongPeerId", "hello.peer-id"],
  ["dataBeforeHello", "hello.no-data-before-peer-hello"],
  ["ignoreWindows", "flow.within-window"],
  ["v1Credit", "flow.within-window"],
  ["nackWithoutDetail", "nack.error-detail"],
  ["ignoreUnknownType", "unknown-type"],
  ["reuseNonce", "nonce.unique"],
  ["resendOnResume", "resume.initial-versions"],
  ["acceptOverrun", "overrun.frame"],
  ["ackWrongVersion", "ack.echo"],
];

const globalFaults: [keyof GlobalFaults, RuleName[]][] = [
  ["dataBeforeHello", ["hello.no-data-before-peer-hello", "hello.first-frame"]],
  ["noPong", ["ping.pong"]],
  ["noCredit", ["flow.returns-credit"]],
  ["acceptOverrun", ["overrun.frame", "overrun.byte"]],
  ["reuseNonce", ["nonce.unique"]],
  ["noByteWindows", ["hello.byte-windows"]],
  ["acceptOldVersion", ["refuse.version"]],
  ["unknownTypeWithoutTrailer", ["goaway.protocol-error-status"]],
  ["ignoreFirstNonce", ["nonce.first-request"]],
  ["answerStale", ["nonce.stale"]],
  ["acceptWindowCap", ["refuse.window-cap"]],
  ["dependsOnUnlisted", ["catalog.response"]],
];

describe("conformance kit, zone mode, against zones built here", { timeout: 180_000 }, () => {
  it("passes a zone that keeps the rules, and reports each of 13 faults by the rule it breaks", async () => {
    // The runs are independent (a listener and a zone each) and mostly wait, so they all go at once: about 15 s, the longest run (the overrun the kit retries).
    const [baseline, ...runs] = await Promise.all([
      againstZone({}),
      ...zoneFaults.map(async ([fault, rule]) => ({
        fault,
        rule,
        results: await againstZone({ [fault]: true }),
      })),
    ]);
    const failed = baseline.filter((r) => r.outcome === "fail");
    expect(failed, JSON.stringify(failed, null, 2)).toEqual([]);
    for (const rule of [
      "ping.pong",
      "flow.within-window",
      "nack.error-detail",
      "unknown-type",
      "nonce.unique",
      "resume.initial-versions",
      "overrun.frame",
      "ack.echo",
      "hello.byte-windows",
    ] as const) {
      expect(outcome(baseline, rule)).toMatch(/^pass/);
    }
    for (const { fault, rule, results } of runs) {
      expect(outcome(results, rule), `fault ${fault}`).toMatch(/^fail/);
    }
    console.log(
      runs
        .map(
          ({ fault, rule, results }) =>
            `  zone fault ${fault}: ${rule} ${outcome(results, rule).slice(0, 160)}`,
        )
        .join("\n"),
    );
  });
});

describe("conformance kit, global mode, against globals built here", { timeout: 300_000 }, () => {
  it("passes a global that keeps the rules, and reports each of 12 faults by the rule it breaks", async () => {
    const baseline = await againstGlobal({});
    const failed = baseline.filter((r) => r.outcome === "fail");
    expect(failed, JSON.stringify(failed, null, 2)).toEqual([]);
    for (const rule of [
      "ping.pong",
      "flow.returns-credit",
      "overrun.frame",
      "overrun.byte",
      "nonce.unique",
      "refuse.version",
      "goaway.protocol-error-status",
      "unknown-type",
      "size.elements",
      "nonce.first-request",
      "nonce.stale",
      "window.zero",
      "refuse.window-cap",
    ] as const) {
      expect(outcome(baseline, rule)).toMatch(/^pass/);
    }
    const runs = await inBatches(globalFaults, 2, async ([fault, rules]) => ({
      fault,
      rules,
      results: await againstGlobal({ [fault]: true }),
    }));
    for (const { fault, rules, results } of runs) {
      for (const rule of rules) expect(outcome(results, rule), `fault ${fault}`).toMatch(/^fail/);
    }
    console.log(
      runs
        .map(({ fault, rules, results }) =>
          rules
            .map(
              (rule) => `  global fault ${fault}: ${rule} ${outcome(results, rule).slice(0, 160)}`,
            )
            .join("\n"),
        )
        .join("\n"),
    );
  });
});
