// How busy the machine was with work other than the bench's own. The 1-minute
// load average cannot say: the bench itself keeps two or three processes
// busy (a global, its zones, a PostgreSQL server), so on an otherwise idle
// 2-core machine it reads 2 to 4 during every scenario. Instead, between two
// marks, this takes the CPU time every process used (/proc/stat) minus the
// CPU time of the bench's own processes: this process and its descendants
// (each with the time of its children already reaped, so a scenario's
// processes that ended are counted too) and the PostgreSQL server's
// processes (named "postgres"), which on a quiet machine only the bench
// uses. What is left, per second of wall time, is how many CPUs other work
// kept busy. Linux only (/proc); elsewhere a mark is undefined and the run
// falls back to the load average.
import { readFileSync, readdirSync } from "node:fs";

/** CPU time counters at one moment. */
export interface CpuMark {
  /** performance.now() */
  readonly at: number;
  /** CPU seconds all processes used since boot (busy time of every CPU). */
  readonly machineSeconds: number;
  /** CPU seconds the bench's own processes used, as described at the top of this file. */
  readonly benchSeconds: number;
}

/** Clock ticks per second of /proc's counters (USER_HZ, 100 on Linux). */
const TICKS = 100;

/** One process's line of /proc/<pid>/stat, the fields this file needs. */
export interface ProcStat {
  readonly pid: number;
  readonly comm: string;
  readonly ppid: number;
  /** utime + stime + cutime + cstime, in ticks: its own CPU time and that of its children it reaped. */
  readonly ticks: number;
}

/** Parses /proc/<pid>/stat (the command name is in parentheses and may hold spaces or parentheses). */
export function parseProcStat(text: string): ProcStat | undefined {
  const open = text.indexOf("(");
  const close = text.lastIndexOf(")");
  if (open < 0 || close < open) return undefined;
  // After the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime ...
  const f = text
    .slice(close + 2)
    .trim()
    .split(" ");
  const n = (i: number): number => Number(f[i]);
  const ticks = n(11) + n(12) + n(13) + n(14);
  if (!Number.isFinite(ticks)) return undefined;
  return {
    pid: Number(text.slice(0, open).trim()),
    comm: text.slice(open + 1, close),
    ppid: n(1),
    ticks,
  };
}

/** Busy CPU seconds of the whole machine from /proc/stat's first line (every field but idle and iowait). */
export function parseMachineSeconds(procStat: string): number | undefined {
  const line = procStat.split("\n", 1)[0] ?? "";
  if (!line.startsWith("cpu ")) return undefined;
  const [user, nice, system, , , irq, softirq, steal] = line
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number);
  const busy = [user, nice, system, irq, softirq, steal].reduce<number>((a, b) => a + (b ?? 0), 0);
  return Number.isFinite(busy) ? busy / TICKS : undefined;
}

/**
 * CPU ticks of the process tree under `root` (its own processes and their
 * reaped children) plus every process named "postgres" outside it, from
 * the processes' stat lines.
 */
export function benchTicks(processes: readonly ProcStat[], root: number): number {
  const children = new Map<number, ProcStat[]>();
  for (const p of processes) {
    const list = children.get(p.ppid) ?? [];
    list.push(p);
    children.set(p.ppid, list);
  }
  const inTree = new Set<number>();
  const stack = processes.filter((p) => p.pid === root);
  let ticks = 0;
  for (let guard = 0; stack.length > 0 && guard < 1_000_000; guard++) {
    const p = stack.pop() as ProcStat;
    if (inTree.has(p.pid)) continue;
    inTree.add(p.pid);
    ticks += p.ticks;
    for (const c of children.get(p.pid) ?? []) stack.push(c);
  }
  for (const p of processes) if (p.comm === "postgres" && !inTree.has(p.pid)) ticks += p.ticks;
  return ticks;
}

/** The counters now; undefined where /proc is missing (not Linux). */
export function cpuMark(): CpuMark | undefined {
  let machineSeconds: number | undefined;
  try {
    machineSeconds = parseMachineSeconds(readFileSync("/proc/stat", "utf8"));
  } catch {
    return undefined; // no /proc: the caller falls back to the load average
  }
  if (machineSeconds === undefined) return undefined;
  const processes: ProcStat[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = parseProcStat(readFileSync(`/proc/${name}/stat`, "utf8"));
      if (stat !== undefined) processes.push(stat);
    } catch {
      // The process ended between the listing and the read: its time is in its parent's reaped-children time.
    }
  }
  return {
    at: performance.now(),
    machineSeconds,
    benchSeconds: benchTicks(processes, process.pid) / TICKS,
  };
}

/** CPUs other work kept busy on average between two marks (never below 0). */
export function otherCpus(from: CpuMark, to: CpuMark): number {
  const wallSeconds = (to.at - from.at) / 1000;
  if (!(wallSeconds > 0)) return 0;
  const other = to.machineSeconds - from.machineSeconds - (to.benchSeconds - from.benchSeconds);
  return Math.max(0, other / wallSeconds);
}

/**
 * CPU seconds `pids` used so far (each process's own and its reaped
 * children's, from /proc/<pid>/stat), summed; a process that is gone counts
 * nothing. Undefined without /proc.
 */
export function cpuSecondsOf(pids: readonly (number | undefined)[]): number | undefined {
  let ticks = 0;
  let read = false;
  for (const pid of pids) {
    if (pid === undefined) continue;
    let text: string;
    try {
      text = readFileSync(`/proc/${pid}/stat`, "utf8");
    } catch {
      // Gone (or no /proc): it adds nothing; without /proc no pid is read and the caller gets undefined.
      continue;
    }
    const stat = parseProcStat(text);
    if (stat === undefined) continue;
    ticks += stat.ticks;
    read = true;
  }
  return read ? ticks / TICKS : undefined;
}
