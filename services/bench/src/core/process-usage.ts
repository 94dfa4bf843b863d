import { getHeapSpaceStatistics } from "node:v8";
import { nowMicros } from "./clock.js";
import { openFileCount } from "./open-files.js";

/** CPU and memory of one process, as a helper reports them. */
export interface ProcessUsage {
  pid: number;
  /** Cumulative CPU time (user + system), µs. */
  cpuMicros: number;
  /** Wall clock when sampled, µs (see nowMicros). */
  atMicros: number;
  rss: number;
  heapUsed: number;
  heapTotal: number;
  external: number;
  /** Physical size of V8's young generation (new space): it grows under allocation bursts; see settledUsage. */
  youngGen: number;
  /** Open file descriptors (samples of the `usage` RPC, on Linux only). */
  fds?: number;
}

/** This process's usage, as it is. */
export function sampleUsage(): ProcessUsage {
  const cpu = process.cpuUsage();
  const memory = process.memoryUsage();
  return {
    pid: process.pid,
    cpuMicros: cpu.user + cpu.system,
    atMicros: nowMicros(),
    rss: memory.rss,
    heapUsed: memory.heapUsed,
    heapTotal: memory.heapTotal,
    external: memory.external,
    youngGen: getHeapSpaceStatistics().find((space) => space.space_name === "new_space")?.physical_space_size ?? 0,
  };
}

/**
 * V8 gives its young generation back (after a burst grew it to up to 32 MB) only at a collection
 * that follows at least 5 s of low allocation; in a process left idle its memory reducer does that
 * by itself, a while later. So the settled sample is: a full collection, 6 s, two more, then the sample.
 */
const SETTLE_GC_GAP_MS = 6_000;

/** This process's usage as it settles when idle (with --expose-gc; without, as it is). */
export async function settledUsage(): Promise<ProcessUsage> {
  const collect = (globalThis as { gc?: () => void }).gc;
  if (collect !== undefined) {
    collect();
    await new Promise((resolve) => setTimeout(resolve, SETTLE_GC_GAP_MS));
    collect();
    collect();
  }
  return sampleUsage();
}

/** The `usage` RPC of every helper: with `gc`, settled (see settledUsage). */
export function reportUsage({ gc }: { gc: boolean }): ProcessUsage | Promise<ProcessUsage> {
  return gc ? settledUsage().then(withOpenFiles) : withOpenFiles(sampleUsage());
}

function withOpenFiles(usage: ProcessUsage): ProcessUsage {
  const fds = openFileCount();
  return fds === undefined ? usage : { ...usage, fds };
}

/** CPU use between two samples of one process, in % of one core. */
export function cpuPercent(before: ProcessUsage, after: ProcessUsage): number {
  const wall = after.atMicros - before.atMicros;
  return wall > 0 ? (100 * (after.cpuMicros - before.cpuMicros)) / wall : 0;
}
