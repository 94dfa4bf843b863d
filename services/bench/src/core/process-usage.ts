import { getHeapSpaceStatistics } from "node:v8";
import { nowMicros } from "./clock.js";

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
  /** Physical size of V8's young generation (new space): it grows under allocation bursts and is not given back. */
  youngGen: number;
}

/** This process's usage; with `gc` (and --expose-gc) after two full collections. */
export function sampleUsage(gc = false): ProcessUsage {
  const collect = (globalThis as { gc?: () => void }).gc;
  if (gc && collect !== undefined) {
    collect();
    collect();
  }
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

/** CPU use between two samples of one process, in % of one core. */
export function cpuPercent(before: ProcessUsage, after: ProcessUsage): number {
  const wall = after.atMicros - before.atMicros;
  return wall > 0 ? (100 * (after.cpuMicros - before.cpuMicros)) / wall : 0;
}
