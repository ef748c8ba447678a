// The summary keys of the churn scenario (bench/churn.ts), apart from it so a
// test can read them without running it. Targets are issue 48's, at 1,000
// zones of 1,000 resources each and 1,000 changes a second for 10 minutes.
import type { SummaryKey } from "./summary.ts";

/** The scenario's summary keys, in the order a run writes them (the smoke test checks both). */
export const CHURN_KEYS: readonly SummaryKey[] = [
  {
    key: "churn.zones",
    unit: "count",
    rule: "positive",
    measures: "zones (a connection and mux stream each, one global instance)",
    target: "-",
  },
  {
    key: "churn.resources",
    unit: "count",
    rule: "positive",
    measures: "zone-to-global resources (Dataplanes) the global holds: zones x resources per zone",
    target: "-",
  },
  {
    key: "churn.changesPerSecond",
    unit: "changes/s",
    rule: "positive",
    measures:
      "achieved rate: changes written over the time from the schedule's start to the last write's end (an absolute schedule, so slowness shows as lag, not as a lower rate)",
    target: "= --rate (1000)",
  },
  {
    key: "churn.seconds",
    unit: "s",
    rule: "positive",
    measures: "how long the changes were made (the schedule's length)",
    target: "-",
  },
  {
    key: "churn.lagP50Ms",
    unit: "ms",
    rule: "positive",
    measures:
      "change-to-ACK lag, p50 over every change: from the zone's store reporting the write on its change feed (inside the write) until the global's ACK of the response carrying it arrives on the zone's session (the zone's sync-lag metric)",
    target: "-",
  },
  {
    key: "churn.lagP99Ms",
    unit: "ms",
    rule: "positive",
    measures: "the same, p99",
    target: "<= 1000",
  },
  {
    key: "churn.lagMaxMs",
    unit: "ms",
    rule: "positive",
    measures: "the same, the largest",
    target: "-",
  },
  {
    key: "churn.heapStartMiB",
    unit: "MiB",
    rule: "positive",
    measures: "the global's V8 heap after GC, every zone's resources held, before the changes",
    target: "-",
  },
  {
    key: "churn.heapEndMiB",
    unit: "MiB",
    rule: "positive",
    measures: "the same after the changes, once every zone's changes were ACKed",
    target: "-",
  },
  {
    key: "churn.heapGrowthPercent",
    unit: "%",
    rule: "finite",
    measures: "heapEndMiB over heapStartMiB, minus 1, in percent",
    target: "<= 5",
  },
  {
    key: "churn.rssStartMiB",
    unit: "MiB",
    rule: "positive",
    measures: "the global's RSS after GC, when heapStartMiB was read",
    target: "-",
  },
  {
    key: "churn.rssEndMiB",
    unit: "MiB",
    rule: "positive",
    measures: "the same when heapEndMiB was read",
    target: "-",
  },
  {
    key: "churn.storeMismatches",
    unit: "count",
    rule: "finite",
    measures:
      "resources where the global's store and the union of the zones' stores differ at the end: a zone resource missing at the global, one the global holds that no zone does, or one whose spec or origin version differs (the run fails unless 0)",
    target: "0",
  },
];
