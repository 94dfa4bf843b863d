import { exposedUri } from "../core/bench-uris.js";
import { sleep } from "../core/clock.js";
import type { Histogram } from "../core/histogram.js";
import { fmt, range } from "../report/format.js";
import { notRun, ratio, type ResultRow, type ScenarioResult } from "../report/result-model.js";
import type { BenchContext } from "./bench-context.js";
import { RELEASE_GRACE_MS } from "../engines/bench-broker-config.js";
import { startBrokerPath, startRawPath } from "./delivery-paths.js";
import type { RpcLoadParams } from "../load/generator-api.js";
import type { LoadFleet } from "./load-fleet.js";
import type { RelayTransport } from "../baseline/raw-relay.js";

const SCENARIO = "5. Subscribe cost";
/** Resource keys of this scenario start here (fresh URIs: no upstream subscription yet). */
const FIRST_KEY = 1_000_000;
/** The warm-up subscribes these (and they stay held: the listen phases use them). */
const WARM_KEY = 500_000;
const WARM_KEYS = 1_024;
const OPS_TARGET = 0.8;
const FIRST_PHASE = "subscribe, first subscriber";
/** The relay baselines' transports: stdio (the memory engine's backend), Streamable HTTP (the Redis engine's). */
const RELAYS: readonly RelayTransport[] = ["stdio", "http"];
/** The relay warm-ups subscribe these (on the relay's own backend). */
const RELAY_WARM_KEY = 2_000_000;
/** URIs per listen request in the listen phases. */
const LISTEN_SIZES = [10, 100] as const;
const P99_TARGET = 1.5;

interface Phase {
  name: string;
  ops: number;
  errors: number;
  opsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  upstreamCalls: number;
  /** A listen phase's URIs per request. */
  listenSize?: number;
}

/**
 * Scenario 5: W workers, each on its own legacy session, run subscribe/unsubscribe requests back to
 * back. Phases: first subscriber (fresh URIs: the broker subscribes upstream before answering),
 * later subscriber (URIs another session already holds: no upstream call), unsubscribe while
 * others still hold the URI, and last unsubscribe (upstream release happens after the grace delay,
 * outside the request). Baseline: the same number of requests, same concurrency, to a plain Node
 * server answering JSON-RPC `{}` (the floor of an HTTP request/response on this machine); for the
 * first subscriber, whose answer waits for the upstream subscribe, that server relaying each
 * request to a bench backend of its own over the engine's backend transport (raw-relay.ts).
 */
export async function runSubscribeCost(ctx: BenchContext): Promise<ScenarioResult> {
  const { workers, opsPerWorker, listens } = ctx.plan.subscribe;
  const own = (w: number): string[] => range(opsPerWorker, FIRST_KEY + w * opsPerWorker).map(exposedUri);
  const neighbour = (w: number): string[] => own((w + 1) % workers);
  /** Listens of `size` URIs for worker w: resources the warm-up made held already (later-subscriber work per URI). */
  const listenLists = (size: number) => range(workers).map((w) => range(listens, 0).map((i) => range(size, (w * listens + i) * size).map((k) => exposedUri(WARM_KEY + (k % WARM_KEYS))).join(" ")));
  const rows: ResultRow[] = [];
  const table: (string | number)[][] = [];

  const withStore = ctx.redis.unavailableReason === undefined;
  ctx.log(`subscribe cost: raw request baselines${withStore ? ", without and with a Redis round trip" : ""}, ${workers} workers × ${opsPerWorker}`);
  const raw = await startRawPath(ctx, "subscribe-raw", [], { redis: false, relays: RELAYS, store: withStore });
  /** The raw server's floors: plain, and (for the Redis engine) with each request's subscriptions kept in Redis first. */
  const floors = { plain: emptyFloors(), redis: emptyFloors() };
  try {
    const perWorker = range(workers).map(own);
    await raw.fleet.rpcLoad({ method: "resources/subscribe", perWorker: perWorker.map((l) => l.slice(0, 20)), rawUrl: raw.rawUrl });
    for (const [floor, prefix, suffix] of withStore ? STORE_VARIANTS : STORE_VARIANTS.slice(0, 1)) {
      const into = floors[floor];
      into.post = await runPhase(`raw JSON-RPC POST${suffix}`, raw.fleet, { method: "resources/subscribe", perWorker, rawUrl: raw.rawUrl, rawPath: `${prefix}/rpc` }, async () => 0);
      for (const transport of floor === "plain" ? RELAYS : (["http"] as const)) {
        const rawPath = `${prefix}/relay/${transport}`;
        await raw.fleet.rpcLoad({ method: "resources/subscribe", perWorker: range(workers).map((w) => range(20, RELAY_WARM_KEY + w * 20).map(exposedUri)), rawUrl: raw.rawUrl, rawPath });
        into.relays.set(transport, await runPhase(`raw relay to a ${transport} backend${suffix}`, raw.fleet, { method: "resources/subscribe", perWorker, rawUrl: raw.rawUrl, rawPath }, async () => 0));
      }
      for (const size of LISTEN_SIZES) {
        into.listens.set(size, await runPhase(`raw listen stream, ${size} URIs${suffix}`, raw.fleet, { method: "subscriptions/listen", perWorker: listenLists(size), rawUrl: raw.rawUrl, rawPath: `${prefix}/listen` }, async () => 0));
      }
    }
  } finally {
    await raw.stop();
  }
  for (const into of withStore ? [floors.plain, floors.redis] : [floors.plain]) {
    table.push(...[into.post, ...into.relays.values(), ...into.listens.values()].filter((phase) => phase !== undefined).map((phase) => phaseRow("—", phase)));
  }

  for (const engine of [ctx.memory, ctx.redis]) {
    // The Redis engine keeps every subscription in Redis: its floor makes that round trip too.
    const floor = engine === ctx.memory ? floors.plain : floors.redis;
    const rawPost = floor.post ?? floors.plain.post;
    // The first subscriber's request waits for the upstream subscribe: its floor is the relay over the transport this engine's brokers reach the backend by.
    const relay = floor.relays.get(engine === ctx.memory ? "stdio" : "http") ?? rawPost;
    const baselineOf = (phase: Phase): Phase | undefined => (phase.listenSize !== undefined ? (floor.listens.get(phase.listenSize) ?? rawPost) : phase.name === FIRST_PHASE ? relay : rawPost);
    const phaseNames = [FIRST_PHASE, "subscribe, later subscriber", "unsubscribe, not last", "unsubscribe, last", ...LISTEN_SIZES.map((size) => `listen, ${size} URIs`)];
    if (engine.unavailableReason !== undefined) {
      for (const name of phaseNames) rows.push(notRun(SCENARIO, engine.name, `${name}: ops/s`, "/s", `≥ ${OPS_TARGET}× raw`, engine.unavailableReason));
      continue;
    }
    ctx.log(`subscribe cost: ${engine.name} broker, ${workers} legacy sessions`);
    const path = await startBrokerPath(ctx, engine, `subscribe-${engine.name}`, "legacy", range(workers).map(() => ""));
    const phases: Phase[] = [];
    try {
      const backend = path.deployment.backend;
      const upstream = async (): Promise<number> => {
        const counters = await backend.call("counters", {});
        return counters.subscribe + counters.unsubscribe;
      };
      // Warm-up on other keys (which stay held: the listens below subscribe to them), then the phases.
      await path.fleet.rpcLoad({ method: "resources/subscribe", perWorker: range(workers).map((w) => range(Math.ceil(WARM_KEYS / workers), WARM_KEY + w * Math.ceil(WARM_KEYS / workers)).map(exposedUri)) });
      await backend.call("resetCounters", {});
      const phase = (name: string, slug: string, params: RpcLoadParams): Promise<Phase> => path.deployment.profiled(slug, () => runPhase(name, path.fleet, params, upstream));
      phases.push(await phase(FIRST_PHASE, "subscribe-first", { method: "resources/subscribe", perWorker: range(workers).map(own) }));
      phases.push(await phase("subscribe, later subscriber", "subscribe-later", { method: "resources/subscribe", perWorker: range(workers).map(neighbour) }));
      phases.push(await phase("unsubscribe, not last", "unsubscribe-not-last", { method: "resources/unsubscribe", perWorker: range(workers).map(neighbour) }));
      phases.push(await phase("unsubscribe, last", "unsubscribe-last", { method: "resources/unsubscribe", perWorker: range(workers).map(own) }));
      // The upstream release follows after the grace delay: count it too, once it is over (on Redis
      // the watcher releases thousands for a while; a phase measured meanwhile would carry them).
      await sleep(RELEASE_GRACE_MS + 500);
      await settled(upstream);
      const last = phases.at(-1);
      if (last !== undefined) last.upstreamCalls = (await upstream()) - phases.reduce((n, p) => n + p.upstreamCalls, 0) + last.upstreamCalls;
      for (const size of LISTEN_SIZES) {
        phases.push({ ...(await phase(`listen, ${size} URIs`, `listen-${size}`, { method: "subscriptions/listen", perWorker: listenLists(size), urls: path.deployment.urls })), listenSize: size });
      }
    } finally {
      await path.stop();
    }
    for (const phase of phases) {
      const baseline = baselineOf(phase);
      table.push(phaseRow(engine.name, phase));
      if (baseline === undefined) continue;
      // A baseline with failed requests measured something else: no verdict against it.
      const opsRatio = baseline.errors > 0 ? null : ratio(phase.opsPerSec, baseline.opsPerSec);
      const p99Ratio = baseline.errors > 0 ? null : ratio(phase.p99Ms, baseline.p99Ms);
      const notes = [phase.errors > 0 ? `${phase.errors} requests failed` : "", baseline.errors > 0 ? `${baseline.errors} baseline requests failed (${baseline.name})` : ""].filter((note) => note !== "");
      const noted = notes.length > 0 ? { note: notes.join("; ") } : {};
      rows.push({ scenario: SCENARIO, engine: engine.name, measure: `${phase.name}: ops/s`, unit: "/s", broker: phase.opsPerSec, baseline: baseline.opsPerSec, ratio: opsRatio, target: `≥ ${OPS_TARGET}× raw`, met: opsRatio === null ? null : opsRatio >= OPS_TARGET && phase.errors === 0, status: "measured", ...noted });
      rows.push({ scenario: SCENARIO, engine: engine.name, measure: `${phase.name}: p99`, unit: "ms", broker: phase.p99Ms, baseline: baseline.p99Ms, ratio: p99Ratio, target: `≤ ${P99_TARGET}× raw`, met: p99Ratio === null ? null : p99Ratio <= P99_TARGET, status: "measured", ...noted });
    }
  }

  const findings = rows
    .filter((r) => r.met === false)
    .map((r) => `${r.engine} · ${r.measure}: ${fmt(r.broker)} vs raw ${fmt(r.baseline)} (${r.ratio?.toFixed(2) ?? "?"}×; target ${r.target ?? ""}).`);
  return {
    id: "subscribe",
    title: SCENARIO,
    method:
      `${workers} concurrent workers, each on its own legacy session, ${opsPerWorker} requests each per phase, back to back. ` +
      "Upstream calls are the resources/subscribe and resources/unsubscribe requests the bench backend received during the phase (the last-unsubscribe releases are counted after the release grace, 1 s in the bench config). " +
      `Listen phases: ${workers} workers each open ${listens} modern subscriptions/listen streams in a row, timed until the acknowledgement, then close them; their URIs are held by the legacy sessions already (no upstream call). ` +
      `Baselines, measured first in the same run: for subscribe and unsubscribe, ${workers} workers POSTing the same JSON-RPC requests to a plain Node HTTP server that answers {} (the floor of a request/response on this machine); ` +
      "for the first subscriber, whose answer waits for the upstream subscribe, the same requests to that server, which relays each to a bench backend of its own over the transport the engine's brokers use (stdio for the memory engine, Streamable HTTP with one MCP session for the Redis engine): the request written as it is, the backend's answer passed back, no SDK and no validation (the floor of a request that needs one upstream round trip; until 2026-11-27 the first subscriber was compared with the {} floor, which stays in the table as raw JSON-RPC POST); " +
      "for listens, the same workers sending the same subscriptions/listen requests (same URIs) to the plain server, which reads the JSON body, adds the stream to a set per URI and answers with an SSE stream whose first event acknowledges them all, timed until that acknowledgement, then closing it (the floor of opening a stream for that request; until 2026-11-26 the listen baseline was a bare GET stream of one key, whatever the request's size). " +
      "The Redis engine keeps every subscription in Redis (the cluster's limits are exact), so its phases are compared with the same floors plus one round trip to the same Redis per request, made before the answer: one script (ioredis, auto-pipelined, as the brokers' registry scripts are) that adds the request's URIs to one set (an unsubscribe removes its URI) and counts them in a hash; a listen stream's URIs are removed the same way when it closes (rows '+ Redis round trip' in the phase table; until 2026-11-29 the Redis engine was compared with the floors without it, which stay in the table). " +
      `Redis engine: ${ctx.redis.description}; the workers' sessions spread over both brokers.`,
    rows,
    details: [
      {
        title: "Phases",
        columns: ["engine", "phase", "requests", "errors", "ops/s", "p50 ms", "p99 ms", "upstream calls"],
        rows: table,
      },
    ],
    findings,
  };
}

/** The raw server's routes for each floor: prefix and the suffix of its phases' names. */
const STORE_VARIANTS: readonly (readonly ["plain" | "redis", string, string])[] = [
  ["plain", "", ""],
  ["redis", "/store", " + Redis round trip"],
];

interface Floors {
  post: Phase | undefined;
  relays: Map<RelayTransport, Phase>;
  listens: Map<number, Phase>;
}

function emptyFloors(): Floors {
  return { post: undefined, relays: new Map(), listens: new Map() };
}

function phaseRow(engine: string, p: Phase): (string | number)[] {
  return [engine, p.name, p.ops, p.errors, fmt(p.opsPerSec), fmt(p.p50Ms), fmt(p.p99Ms), p.upstreamCalls];
}

/** Waits until the backend's subscribe/unsubscribe count holds still for 1 s (at most 30 s). */
async function settled(count: () => Promise<number>): Promise<void> {
  const deadline = Date.now() + 30_000;
  let seen = await count();
  while (Date.now() < deadline) {
    await sleep(1_000);
    const now = await count();
    if (now === seen) return;
    seen = now;
  }
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
