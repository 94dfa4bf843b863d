import { constants, PerformanceObserver, type PerformanceEntry } from "node:perf_hooks";
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
  /** Settled samples: the GCs of V8's memory reducer seen while settling (0: it did not run in time). */
  reducerGcs?: number;
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
 * How an idle process settles, and so how the settled sample is taken:
 * - A burst of handshakes leaves V8's old space fragmented: pages half full of what the burst
 *   promoted and then dropped (measured: 16.4 MB committed per 10 MB used at 10 000 legacy
 *   sessions). A plain full GC keeps those pages; V8's memory reducer compacts them, in a round of
 *   up to three GCs, once a process has allocated little for a while (its first check is 8 s after a full GC).
 *   Every forced GC postpones that round, so the sample waits for it: one forced GC (the garbage
 *   gone, and the reducer's wait starts from it), then until the reducer's round is over (its GCs
 *   are the major GCs flagged "all external memory"), at most `REDUCER_WAIT_MS`.
 * - V8 gives its young generation back (after a burst grew it to up to 32 MB) only at a GC that
 *   follows at least 5 s of low allocation: two more forced GCs, then the sample.
 * In a process left idle, V8 does all of this by itself, within about half a minute.
 */
const REDUCER_WAIT_MS = 30_000;
/** The reducer's GCs follow each other within about 0.7 s: its round is over after this long without one. */
const REDUCER_ROUND_GAP_MS = 2_000;
const REDUCER_POLL_MS = 250;

/** This process's usage as it settles when idle (with --expose-gc; without, as it is). */
export async function settledUsage(): Promise<ProcessUsage> {
  const collect = (globalThis as { gc?: () => void }).gc;
  if (collect === undefined) return sampleUsage();
  let reducerGcs = 0;
  let lastReducerGc = 0;
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const { kind, flags } = (entry as PerformanceEntry & { detail: { kind: number; flags: number } }).detail;
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR && (flags & constants.NODE_PERFORMANCE_GC_FLAGS_ALL_EXTERNAL_MEMORY) !== 0) {
        reducerGcs++;
        lastReducerGc = Date.now();
      }
    }
  });
  observer.observe({ entryTypes: ["gc"] });
  try {
    collect();
    const deadline = Date.now() + REDUCER_WAIT_MS;
    const roundOver = () => reducerGcs > 0 && Date.now() - lastReducerGc >= REDUCER_ROUND_GAP_MS;
    while (Date.now() < deadline && !roundOver()) await new Promise((resolve) => setTimeout(resolve, REDUCER_POLL_MS));
  } finally {
    observer.disconnect();
  }
  collect();
  collect();
  return { ...sampleUsage(), reducerGcs };
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
