import { sleep } from "../core/clock.js";
import { Histogram } from "../core/histogram.js";
import type { ManagedChild, ProcessGroup } from "../core/process-group.js";
import type { ProcessUsage } from "../core/process-usage.js";
import type { GeneratorApi, ListWatchCounts, ListWatchReport, OpenParams, RpcLoadParams, RpcLoadResult, StormParams, StormResult, TargetKind, CoverageParams, CoverageResult } from "../load/generator-api.js";

/** Updates received by the whole fleet in one step. */
export interface FleetSnapshot {
  received: number;
  strays: number;
  histogram: Histogram;
  firstMicros: number;
  lastMicros: number;
  /** seq → receivers and the latency of the last receiver, µs. */
  perSeq: Map<number, { receivers: number; max: number }>;
  usages: ProcessUsage[];
}

/**
 * The load generator processes aimed at one target. Sessions are split into contiguous slices,
 * one per generator; figures from all generators are merged here.
 */
export class LoadFleet {
  private constructor(private readonly generators: ManagedChild<GeneratorApi>[]) {}

  static start(group: ProcessGroup, label: string, count: number): LoadFleet {
    return new LoadFleet(Array.from({ length: count }, (_, i) => group.fork<GeneratorApi>(new URL("../load/load-generator.js", import.meta.url), `gen-${label}-${i}`)));
  }

  get size(): number {
    return this.generators.length;
  }

  /** Opens one session per URI; throws when any fails (a benchmark needs all of them). */
  async open(kind: TargetKind, urls: string[], uris: string[], options: { concurrency?: number; toolsListChanged?: boolean; trackEventIds?: boolean; localAddresses?: string[]; withoutStreams?: boolean; http2?: boolean } = {}): Promise<number> {
    const started = Date.now();
    const slices = split(uris, this.generators.length);
    const results = await Promise.all(
      this.generators.map((g, i) => {
        const params: OpenParams = { kind, urls, uris: slices[i] ?? [], concurrency: options.concurrency ?? 48, toolsListChanged: options.toolsListChanged ?? false, trackEventIds: options.trackEventIds ?? false, ...(options.localAddresses !== undefined && { localAddresses: options.localAddresses }), ...(options.withoutStreams === true && { withoutStreams: true }), ...(options.http2 === true && { http2: true }) };
        return g.rpc.call("open", params);
      }),
    );
    const failed = results.reduce((n, r) => n + r.failed, 0);
    if (failed > 0) throw new Error(`${failed} of ${uris.length} ${kind} sessions failed to open: ${results.flatMap((r) => r.errors).slice(0, 3).join(" | ")}`);
    return Date.now() - started;
  }

  async reset(step: number, trackSeq = false): Promise<void> {
    await Promise.all(this.generators.map((g) => g.rpc.call("reset", { step, trackSeq })));
  }

  async received(): Promise<number> {
    const progress = await Promise.all(this.generators.map((g) => g.rpc.call("progress", {})));
    return progress.reduce((n, p) => n + p.received, 0);
  }

  /**
   * Waits until `expected` updates arrived or `timeoutMs` passed, then (if short) until the count
   * stops moving for 300 ms, at most `quietMaxMs` more. Returns the count.
   */
  async waitFor(expected: number, timeoutMs: number, quietMaxMs = 10_000): Promise<number> {
    const deadline = Date.now() + timeoutMs;
    let received = await this.received();
    while (received < expected && Date.now() < deadline) {
      await sleep(25);
      received = await this.received();
    }
    const quietDeadline = Date.now() + quietMaxMs;
    while (received < expected && Date.now() < quietDeadline) {
      await sleep(300);
      const now = await this.received();
      if (now === received) break;
      received = now;
    }
    return received;
  }

  async snapshot(): Promise<FleetSnapshot> {
    const parts = await Promise.all(this.generators.map((g) => g.rpc.call("snapshot", {})));
    const histogram = new Histogram();
    const perSeq = new Map<number, { receivers: number; max: number }>();
    let firstMicros = Number.POSITIVE_INFINITY;
    let lastMicros = 0;
    for (const part of parts) {
      histogram.merge(part.histogram);
      if (part.firstMicros > 0) firstMicros = Math.min(firstMicros, part.firstMicros);
      lastMicros = Math.max(lastMicros, part.lastMicros);
      for (const [seq, receivers, max] of part.perSeq) {
        const entry = perSeq.get(seq);
        if (entry === undefined) perSeq.set(seq, { receivers, max });
        else {
          entry.receivers += receivers;
          entry.max = Math.max(entry.max, max);
        }
      }
    }
    return {
      received: parts.reduce((n, p) => n + p.received, 0),
      strays: parts.reduce((n, p) => n + p.strays, 0),
      histogram,
      firstMicros: Number.isFinite(firstMicros) ? firstMicros : 0,
      lastMicros,
      perSeq,
      usages: parts.map((p) => p.usage),
    };
  }

  async usage(): Promise<ProcessUsage[]> {
    return Promise.all(this.generators.map((g) => g.rpc.call("usage", { gc: false })));
  }

  async watchLists(): Promise<void> {
    await Promise.all(this.generators.map((g) => g.rpc.call("watchLists", {})));
  }

  async listReport(marker: string): Promise<ListWatchReport> {
    const parts = await Promise.all(this.generators.map((g) => g.rpc.call("listReport", { marker })));
    const urls = [...new Set(parts.flatMap((p) => p.byUrl.map(([url]) => url)))];
    return {
      ...mergeListCounts(parts),
      listCalls: parts.reduce((n, p) => n + p.listCalls, 0),
      listErrors: parts.reduce((n, p) => n + p.listErrors, 0),
      byUrl: urls.map((url) => [url, mergeListCounts(parts.flatMap((p) => p.byUrl.filter(([u]) => u === url).map(([, counts]) => counts)))]),
    };
  }

  /** Runs request workers split over the generators like their sessions; ms is the slowest generator's. */
  async rpcLoad(params: RpcLoadParams): Promise<RpcLoadResult & { merged: Histogram }> {
    const slices = split(params.perWorker, this.generators.length);
    const parts = await Promise.all(this.generators.map((g, i) => g.rpc.call("rpcLoad", { ...params, perWorker: slices[i] ?? [] })));
    const merged = new Histogram();
    for (const part of parts) merged.merge(part.histogram);
    return {
      ops: parts.reduce((n, p) => n + p.ops, 0),
      errors: parts.reduce((n, p) => n + p.errors, 0),
      firstError: parts.find((p) => p.firstError !== undefined)?.firstError,
      ms: Math.max(...parts.map((p) => p.ms)),
      histogram: merged.toData(),
      merged,
    };
  }

  /** A reconnect storm on every generator at once (see StormParams); the sessions' ready times merged. */
  async storm(params: StormParams): Promise<StormResult> {
    const parts = await Promise.all(this.generators.map((g) => g.rpc.call("storm", params)));
    return {
      sessions: parts.reduce((n, p) => n + p.sessions, 0),
      failed: parts.reduce((n, p) => n + p.failed, 0),
      errors: parts.flatMap((p) => p.errors).slice(0, 5),
      readyMicros: parts.flatMap((p) => p.readyMicros),
      retries: parts.reduce((n, p) => n + p.retries, 0),
    };
  }

  async trackStep(step: number): Promise<void> {
    await Promise.all(this.generators.map((g) => g.rpc.call("trackStep", { step })));
  }

  /** What the tracked sessions of every generator heard of a step's emission (see CoverageParams). */
  async coverage(params: CoverageParams): Promise<CoverageResult> {
    const parts = await Promise.all(this.generators.map((g) => g.rpc.call("coverage", params)));
    const sum = (field: keyof CoverageResult): number => parts.reduce((n, p) => n + p[field], 0);
    return { expected: sum("expected"), exact: sum("exact"), renotified: sum("renotified"), lost: sum("lost"), renotifiedPairs: sum("renotifiedPairs") };
  }

  /** Ends every session of the fleet, as leaving clients do (legacy: DELETE). */
  async closeAll(): Promise<void> {
    await Promise.all(this.generators.map((g) => g.rpc.call("closeAll", {})));
  }

  async stop(): Promise<void> {
    await Promise.all(this.generators.map((g) => g.stop(() => g.rpc.call("stop", {}))));
  }
}

/** The list watches of several sets of sessions as one. */
export function mergeListCounts(parts: readonly ListWatchCounts[]): ListWatchCounts {
  const counts = new Map<number, number>();
  for (const part of parts) for (const [count, sessions] of part.notificationCounts) counts.set(count, (counts.get(count) ?? 0) + sessions);
  return {
    sessions: parts.reduce((n, p) => n + p.sessions, 0),
    notificationCounts: [...counts].sort((a, b) => a[0] - b[0]),
    holding: parts.reduce((n, p) => n + p.holding, 0),
    lastHeldMicros: Math.max(0, ...parts.map((p) => p.lastHeldMicros)),
  };
}

/** Contiguous slices, sizes differing by at most one. */
function split<T>(items: T[], parts: number): T[][] {
  const out: T[][] = [];
  let offset = 0;
  for (let i = 0; i < parts; i++) {
    const size = Math.floor(items.length / parts) + (i < items.length % parts ? 1 : 0);
    out.push(items.slice(offset, offset + size));
    offset += size;
  }
  return out;
}
