// The summary keys of the scale scenario (bench/scale.ts), apart from it so a
// test can read them without running it.
import type { SummaryKey } from "./summary.ts";

/** The scenario's summary keys, in the order a run writes them (the smoke test checks both). */
export const SCALE_KEYS: readonly SummaryKey[] = [
  {
    key: "scale.instances",
    unit: "count",
    rule: "positive",
    measures: "global instances (processes)",
    target: "-",
  },
  {
    key: "scale.zones",
    unit: "count",
    rule: "positive",
    measures: "zones (a connection and mux stream each)",
    target: "-",
  },
  {
    key: "scale.connectSeconds",
    unit: "s",
    rule: "positive",
    measures: "from the zones starting to dial until every zone mirrors the Mesh",
    target: "<= 120",
  },
  {
    key: "scale.rssTotalMiB",
    unit: "MiB",
    rule: "positive",
    measures: "RSS of all instances together, idle, every zone connected (after GC)",
    target: "<= 6144",
  },
  {
    key: "scale.heapPerZoneKiB",
    unit: "KiB",
    rule: "finite",
    measures: "heap growth of all instances together per zone (after GC)",
    target: "-",
  },
  {
    key: "scale.p50Ms",
    unit: "ms",
    rule: "spread",
    measures:
      "one change through instance 0 until a zone has it, p50 over the zones, spread over the repetitions",
    target: "-",
  },
  { key: "scale.p99Ms", unit: "ms", rule: "spread", measures: "the same, p99", target: "<= 5000" },
  {
    key: "scale.floorP99Ms",
    unit: "ms",
    rule: "spread",
    measures:
      "the floor: the change's frame over plain node:http2 streams to the same zone processes, p99",
    target: "-",
  },
  {
    key: "scale.p99PerFloor",
    unit: "ratio",
    rule: "spread",
    measures: "p99 over the floor's p99 of the same repetition",
    target: "-",
  },
  {
    key: "scale.failoverSeconds",
    unit: "s",
    rule: "positive",
    measures: "from SIGKILL of one instance until every zone holds a change made then",
    target: "<= 60",
  },
  {
    key: "scale.failoverResentPercent",
    unit: "%",
    rule: "finite",
    measures: "resources resent both ways over those the reconnected zones hold",
    target: "< 1",
  },
];
