import { exposedUri } from "../core/bench-uris.js";
import { sleep } from "../core/clock.js";
import type { Histogram } from "../core/histogram.js";
import { fmt, range } from "../report/format.js";
import { ratio, type ResultRow, type ScenarioResult } from "../report/result-model.js";
import type { BenchContext } from "./bench-context.js";
import { RELEASE_GRACE_MS } from "../engines/bench-broker-config.js";
import { startBrokerPath, startRawPath } from "./delivery-paths.js";
import type { RpcLoadParams } from "../load/generator-api.js";
import type { LoadFleet } from "./load-fleet.js";

const SCENARIO = "5. Subscribe cost";
/** Resource keys of this scenario start here (fresh URIs: no upstream subscription yet). */
const FIRST_KEY = 1_000_000;

interface Phase {
  name: string;
  ops: number;
  errors: number;
  opsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  upstreamCalls: number;
}

/**
 * Scenario 5: W workers, each on its own legacy session, run subscribe/unsubscribe requests back to
 * back. Phases: first subscriber (fresh URIs: the broker subscribes upstream before answering),
 * later subscriber (URIs another session already holds: no upstream call), unsubscribe while
 * others still hold the URI, and last unsubscribe (upstream release happens after the grace delay,
 * outside the request). Baseline: the same number of requests, same concurrency, to a plain Node
 * server answering JSON-RPC `{}` (the floor of an HTTP request/response on this machine).
 */
export async function runSubscribeCost(ctx: BenchContext): Promise<ScenarioResult> {
  const { workers, opsPerWorker } = ctx.plan.subscribe;
  const own = (w: number): string[] => range(opsPerWorker, FIRST_KEY + w * opsPerWorker).map(exposedUri);
  const neighbour = (w: number): string[] => own((w + 1) % workers);
  const phases: Phase[] = [];

  ctx.log(`subscribe cost: raw request baseline, ${workers} workers × ${opsPerWorker}`);
  const raw = await startRawPath(ctx, "subscribe-raw", [], { redis: false });
  let rawPhase: Phase;
  try {
    const perWorker = range(workers).map(own);
    await raw.fleet.rpcLoad({ method: "resources/subscribe", perWorker: perWorker.map((l) => l.slice(0, 20)), rawUrl: raw.rawUrl });
    rawPhase = await runPhase("raw JSON-RPC POST", raw.fleet, { method: "resources/subscribe", perWorker, rawUrl: raw.rawUrl }, async () => 0);
  } finally {
    await raw.stop();
  }

  ctx.log(`subscribe cost: ${ctx.memory.name} broker, ${workers} legacy sessions`);
  const path = await startBrokerPath(ctx, ctx.memory, "subscribe", "legacy", range(workers).map(() => ""));
  try {
    const backend = path.deployment.backend;
    const upstream = async (): Promise<number> => {
      const counters = await backend.call("counters", {});
      return counters.subscribe + counters.unsubscribe;
    };
    // Warm-up on other keys, then the four phases.
    await path.fleet.rpcLoad({ method: "resources/subscribe", perWorker: range(workers).map((w) => range(10, FIRST_KEY / 2 + w * 10).map(exposedUri)) });
    await backend.call("resetCounters", {});
    const phase = (name: string, slug: string, params: RpcLoadParams): Promise<Phase> => path.deployment.profiled(slug, () => runPhase(name, path.fleet, params, upstream));
    phases.push(await phase("subscribe, first subscriber", "subscribe-first", { method: "resources/subscribe", perWorker: range(workers).map(own) }));
    phases.push(await phase("subscribe, later subscriber", "subscribe-later", { method: "resources/subscribe", perWorker: range(workers).map(neighbour) }));
    phases.push(await phase("unsubscribe, not last", "unsubscribe-not-last", { method: "resources/unsubscribe", perWorker: range(workers).map(neighbour) }));
    phases.push(await phase("unsubscribe, last", "unsubscribe-last", { method: "resources/unsubscribe", perWorker: range(workers).map(own) }));
    // The upstream release follows after the grace delay: count it too.
    await sleep(RELEASE_GRACE_MS + 500);
    const last = phases.at(-1);
    if (last !== undefined) last.upstreamCalls = (await upstream()) - phases.reduce((n, p) => n + p.upstreamCalls, 0) + last.upstreamCalls;
  } finally {
    await path.stop();
  }

  const rows: ResultRow[] = [];
  for (const phase of phases) {
    rows.push({
      scenario: SCENARIO,
      engine: ctx.memory.name,
      measure: `${phase.name}: p99`,
      unit: "ms",
      broker: phase.p99Ms,
      baseline: rawPhase.p99Ms,
      ratio: ratio(phase.p99Ms, rawPhase.p99Ms),
      target: null,
      met: null,
      status: "measured",
    });
    rows.push({
      scenario: SCENARIO,
      engine: ctx.memory.name,
      measure: `${phase.name}: ops/s`,
      unit: "/s",
      broker: phase.opsPerSec,
      baseline: rawPhase.opsPerSec,
      ratio: ratio(phase.opsPerSec, rawPhase.opsPerSec),
      target: null,
      met: null,
      status: "measured",
      ...(phase.errors > 0 && { note: `${phase.errors} requests failed` }),
    });
  }
  return {
    id: "subscribe",
    title: SCENARIO,
    method:
      `${workers} concurrent workers, each on its own legacy session, ${opsPerWorker} requests each per phase, back to back. ` +
      "Upstream calls are the resources/subscribe and resources/unsubscribe requests the bench backend received during the phase (the last-unsubscribe releases are counted after the release grace, 1 s in the bench config). " +
      `Baseline: ${workers} workers POSTing the same JSON-RPC requests to a plain Node HTTP server that answers {}.`,
    rows,
    details: [
      {
        title: "Phases",
        columns: ["phase", "requests", "errors", "ops/s", "p50 ms", "p99 ms", "upstream calls"],
        rows: [rawPhase, ...phases].map((p) => [p.name, p.ops, p.errors, fmt(p.opsPerSec), fmt(p.p50Ms), fmt(p.p99Ms), p.upstreamCalls]),
      },
    ],
    findings: [],
  };
}

async function runPhase(name: string, fleet: LoadFleet, params: RpcLoadParams, upstreamCount: () => Promise<number>): Promise<Phase> {
  const before = await upstreamCount();
  const result = await fleet.rpcLoad(params);
  const histogram: Histogram = result.merged;
  return {
    name,
    ops: result.ops,
    errors: result.errors,
    opsPerSec: result.ops / (result.ms / 1000),
    p50Ms: histogram.quantile(0.5) / 1000,
    p99Ms: histogram.quantile(0.99) / 1000,
    upstreamCalls: (await upstreamCount()) - before,
  };
}
