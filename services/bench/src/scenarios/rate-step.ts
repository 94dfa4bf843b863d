import type { EmitPlan } from "../core/bench-uris.js";
import { Histogram } from "../core/histogram.js";
import type { PacedResult } from "../core/paced-loop.js";
import { cpuPercent, type ProcessUsage } from "../core/process-usage.js";
import type { LoadFleet } from "./load-fleet.js";

/** Where updates come from (the bench backend, or the Redis publisher of the baseline). */
export interface UpdateSource {
  emit(plan: EmitPlan): Promise<PacedResult>;
  usage(): Promise<ProcessUsage>;
}

/** One path under test: its server processes, its source and its readers. */
export interface DeliveryPath {
  readonly label: string;
  readonly source: UpdateSource;
  readonly fleet: LoadFleet;
  serverUsage(): Promise<ProcessUsage[]>;
  /** Runs `run`, profiling the server for that span when the run is profiled (see BrokerDeployment.profiled). */
  profiled<T>(name: string, run: () => Promise<T>): Promise<T>;
}

export interface StepOptions {
  /** Receivers per update. */
  fanout: number;
  drainMs: number;
  /** Keep the latency of the last receiver of every update (broadcast). */
  trackSeq?: boolean;
  /** Profile the server during this step under this name (only when the run is profiled). */
  profileAs?: string;
}

/** CPU of every process of a path during a step, % of one core. */
export interface StepCpu {
  server: number[];
  source: number;
  generators: number[];
}

export interface StepOutcome {
  offeredRate: number;
  emitted: number;
  /** Emission rate actually achieved (a back-pressured source shows here). */
  achievedRate: number;
  emitMaxLagMs: number;
  expected: number;
  received: number;
  lost: number;
  strays: number;
  histogram: Histogram;
  p50Ms: number;
  p99Ms: number;
  p999Ms: number;
  maxMs: number;
  /** Received ÷ (last receipt − first emission). */
  deliveredPerSec: number;
  /** With trackSeq: per update that reached all `fanout` receivers, when the last one had it, ms. */
  lastReceiverMs: number[];
  /** With trackSeq: updates that did not reach every receiver. */
  incomplete: number;
  /** Emission time and delivery span, µs (for merging slices). */
  emissionMicros: number;
  spanMicros: number;
  cpu: StepCpu;
}

/**
 * One measurement step: reset the readers, emit `plan`, wait until every update reached all its
 * `fanout` receivers (or the drain time passed), then collect latencies and CPU.
 */
export async function runStep(path: DeliveryPath, plan: EmitPlan, options: StepOptions): Promise<StepOutcome> {
  const { fanout, drainMs, trackSeq = false, profileAs } = options;
  await path.fleet.reset(plan.step, trackSeq);
  const [serverBefore, sourceBefore, generatorsBefore] = await Promise.all([path.serverUsage(), path.source.usage(), path.fleet.usage()]);
  const deliver = async (): Promise<PacedResult> => {
    const sent = await path.source.emit(plan);
    await path.fleet.waitFor(sent.emitted * fanout, drainMs);
    return sent;
  };
  const emission = profileAs === undefined ? await deliver() : await path.profiled(profileAs, deliver);
  const expected = emission.emitted * fanout;
  const [snapshot, serverAfter, sourceAfter] = await Promise.all([path.fleet.snapshot(), path.serverUsage(), path.source.usage()]);
  const spanMicros = Math.max(emission.tookMs * 1000, snapshot.lastMicros - emission.startMicros, 1);
  const lastReceiverMs: number[] = [];
  let complete = 0;
  for (const { receivers, max } of snapshot.perSeq.values()) {
    if (receivers < fanout) continue;
    complete++;
    lastReceiverMs.push(max / 1000);
  }
  return summarise({
    offeredRate: plan.rate,
    emitted: emission.emitted,
    emissionMicros: emission.tookMs * 1000,
    emitMaxLagMs: emission.maxLagMs,
    expected,
    received: snapshot.received,
    strays: snapshot.strays,
    histogram: snapshot.histogram,
    spanMicros,
    lastReceiverMs,
    incomplete: trackSeq ? emission.emitted - complete : 0,
    cpu: {
      server: serverAfter.map((after, i) => (serverBefore[i] === undefined ? 0 : cpuPercent(serverBefore[i], after))),
      source: cpuPercent(sourceBefore, sourceAfter),
      generators: snapshot.usages.map((after, i) => (generatorsBefore[i] === undefined ? 0 : cpuPercent(generatorsBefore[i], after))),
    },
  });
}

type Raw = Omit<StepOutcome, "achievedRate" | "lost" | "p50Ms" | "p99Ms" | "p999Ms" | "maxMs" | "deliveredPerSec">;

function summarise(raw: Raw): StepOutcome {
  const ms = (q: number): number => raw.histogram.quantile(q) / 1000;
  return {
    ...raw,
    achievedRate: raw.emissionMicros > 0 ? Math.max(0, raw.emitted - 1) / (raw.emissionMicros / 1e6) : raw.offeredRate,
    lost: Math.max(0, raw.expected - raw.received),
    p50Ms: ms(0.5),
    p99Ms: ms(0.99),
    p999Ms: ms(0.999),
    maxMs: raw.histogram.max / 1000,
    deliveredPerSec: raw.received / (raw.spanMicros / 1e6),
  };
}

/** Slices of one step taken at different times, as one step: counts add up, histograms merge, CPU averages. */
export function mergeOutcomes(slices: StepOutcome[]): StepOutcome {
  const first = slices[0];
  if (first === undefined) throw new Error("no slices to merge");
  const histogram = new Histogram();
  for (const s of slices) histogram.merge(s.histogram.toData());
  const sum = (f: (s: StepOutcome) => number): number => slices.reduce((n, s) => n + f(s), 0);
  const mean = (values: number[][]): number[] => (values[0] ?? []).map((_, i) => values.reduce((n, v) => n + (v[i] ?? 0), 0) / values.length);
  return summarise({
    offeredRate: first.offeredRate,
    emitted: sum((s) => s.emitted),
    emissionMicros: sum((s) => s.emissionMicros),
    emitMaxLagMs: Math.max(...slices.map((s) => s.emitMaxLagMs)),
    expected: sum((s) => s.expected),
    received: sum((s) => s.received),
    strays: sum((s) => s.strays),
    histogram,
    spanMicros: sum((s) => s.spanMicros),
    lastReceiverMs: slices.flatMap((s) => s.lastReceiverMs),
    incomplete: sum((s) => s.incomplete),
    cpu: {
      server: mean(slices.map((s) => s.cpu.server)),
      source: sum((s) => s.cpu.source) / slices.length,
      generators: mean(slices.map((s) => s.cpu.generators)),
    },
  });
}

/**
 * Measures several paths at one load, interleaved: the plan is cut into `slices` parts and the
 * paths take turns (A B, B A, …), so slow phases of a shared machine hit every path alike. Returns
 * one merged outcome per path, in the order of `paths`.
 */
export async function runInterleaved(
  paths: DeliveryPath[],
  plan: Omit<EmitPlan, "step" | "start">,
  slices: number,
  nextStep: () => number,
  optionsFor: (path: DeliveryPath) => StepOptions,
): Promise<StepOutcome[]> {
  const parts = paths.map((): StepOutcome[] => []);
  const count = Math.max(1, Math.round(plan.count / slices));
  for (let slice = 0; slice < slices; slice++) {
    // A B, B A, A B …: neither path always goes first.
    const order = [...paths.entries()];
    if (slice % 2 === 1) order.reverse();
    for (const [i, path] of order) {
      // Only the last slice is profiled: one profile per path and load.
      const { profileAs, ...options } = optionsFor(path);
      const slicePlan = { ...plan, count, start: slice * count, step: nextStep() };
      parts[i]?.push(await runStep(path, slicePlan, slice === slices - 1 ? { ...options, profileAs } : options));
    }
  }
  return parts.map(mergeOutcomes);
}

/** "gens 40%+38% · broker 85% · backend 7%", for the summary table. */
export function describeLoadCpu(cpu: StepCpu): string {
  const pct = (n: number): string => `${Math.round(n)}%`;
  return `gens ${cpu.generators.map(pct).join("+")} · broker ${cpu.server.map(pct).join("+")} · backend ${pct(cpu.source)}`;
}

/** "server 85% · source 12% · gens 40%+38%" */
export function describeCpu(cpu: StepCpu): string {
  const pct = (n: number): string => `${Math.round(n)}%`;
  return `server ${cpu.server.map(pct).join("+")} · source ${pct(cpu.source)} · gens ${cpu.generators.map(pct).join("+")}`;
}
