// The bench's measure of other work on the machine (bench/other-work.ts),
// from /proc text; the figures are made up, the parsing and arithmetic are real.
import { describe, expect, it } from "vitest";
import {
  benchTicks,
  otherCpus,
  parseMachineSeconds,
  parseProcStat,
  type ProcStat,
} from "../../bench/other-work.ts";

/** A /proc/<pid>/stat line with these fields (the rest zero). */
const statLine = (
  pid: number,
  comm: string,
  ppid: number,
  ticks: [number, number, number, number],
) => `${pid} (${comm}) S ${ppid} 0 0 0 0 0 0 0 0 0 ${ticks.join(" ")} 20 0 1 0 0 0 0\n`;

describe("other work on the machine", () => {
  it("reads a process's stat line, a command name with spaces and parentheses included", () => {
    expect(parseProcStat(statLine(42, "node (bench) x", 7, [10, 5, 3, 2]))).toEqual({
      pid: 42,
      comm: "node (bench) x",
      ppid: 7,
      ticks: 20,
    });
    expect(parseProcStat("garbage")).toBeUndefined();
  });

  it("reads the machine's busy time from /proc/stat, leaving out idle and iowait", () => {
    // user nice system idle iowait irq softirq steal
    expect(parseMachineSeconds("cpu  1000 10 500 9000 300 5 20 15 0 0\ncpu0 1 2 3\n")).toBe(15.5);
    expect(parseMachineSeconds("intr 1 2 3\n")).toBeUndefined();
  });

  it("counts the bench's process tree and PostgreSQL's processes, and nothing else", () => {
    const processes: ProcStat[] = [
      { pid: 1, comm: "init", ppid: 0, ticks: 1_000 },
      { pid: 10, comm: "node", ppid: 1, ticks: 100 }, // the bench
      { pid: 11, comm: "node", ppid: 10, ticks: 50 }, // a scenario
      { pid: 12, comm: "node", ppid: 11, ticks: 25 }, // its zones
      { pid: 13, comm: "postgres", ppid: 10, ticks: 5 }, // the embedded server, in the tree: counted once
      { pid: 20, comm: "postgres", ppid: 1, ticks: 7 }, // the PostgreSQL server
      { pid: 30, comm: "node", ppid: 1, ticks: 400 }, // other work
    ];
    expect(benchTicks(processes, 10)).toBe(100 + 50 + 25 + 5 + 7);
  });

  it("is what the machine used beyond the bench, per second of wall time, never below zero", () => {
    const from = { at: 0, machineSeconds: 100, benchSeconds: 40 };
    expect(otherCpus(from, { at: 10_000, machineSeconds: 118, benchSeconds: 53 })).toBeCloseTo(0.5);
    expect(otherCpus(from, { at: 10_000, machineSeconds: 110, benchSeconds: 52 })).toBe(0);
    expect(otherCpus(from, from)).toBe(0);
  });
});
