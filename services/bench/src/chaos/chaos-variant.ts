/**
 * One chaos variant: deploy the fleet, open the clients, emit numbered updates while the chaos
 * happens (brokers SIGKILLed and restarted, or Redis restarted), settle, then read back what
 * every client saw, what the backend emitted and what the bus carried, and judge it (coverage.ts).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { BackendControlServer } from "../backend/backend-control-server.js";
import { keyOf, type EmitPlan } from "../core/bench-uris.js";
import { nowMicros, sleep } from "../core/clock.js";
import type { PacedResult } from "../core/paced-loop.js";
import { ProcessGroup, type ManagedChild } from "../core/process-group.js";
import { cpuPercent, type ProcessUsage } from "../core/process-usage.js";
import { scrapeCounter } from "../engines/worker-process.js";
import type { DetailTable } from "../report/result-model.js";
import { BusWitness } from "./bus-witness.js";
import { ChaosCluster, instanceOf, SERVER_HEADER } from "./chaos-cluster.js";
import { checkRegistry, type RegistryMismatch } from "./registry-check.js";
import type { ChaosGeneratorApi, ClientRecord, ClientSpec } from "./chaos-generator-api.js";
import { clientKeys, keyPool, type ChaosPlan, type VariantPlan } from "./chaos-plan.js";
import type { ChaosRow, ChaosVariantResult } from "./chaos-results.js";
import { analyseCoverage, beyondSdkRetries, quantile, sortedOf, type Basis, type CoverageReport } from "./coverage.js";

/** What a variant needs from the run. */
export interface VariantContext {
  plan: ChaosPlan;
  /** Every process group of the run (a variant adds its own), for the signal handler's last resort. */
  groups: ProcessGroup[];
  control: BackendControlServer;
  /** The machine's Redis (variants that do not restart it). */
  redisUrl: string;
  logDir: string;
  log: (message: string) => void;
}

/** A failover the harness caused. */
interface Failover {
  no: number;
  atMicros: number;
  what: string;
  /** Whether it took the backend's watcher down with it. */
  watcher: boolean;
  sessions: number;
  /** When the broker (or Redis) was back, µs (0: not yet). */
  backMicros: number;
  watchersAfter: string;
}

const TARGET_RESUME_P99_MS = 2_500;
const DUMP_CHUNK = 100;
const EMIT_LOG_CHUNK = 50_000;

export async function runVariant(ctx: VariantContext, variant: VariantPlan, step: number): Promise<ChaosVariantResult> {
  const { plan, control, log } = ctx;
  const logDir = join(ctx.logDir, variant.id);
  mkdirSync(logDir, { recursive: true });
  const group = new ProcessGroup(logDir);
  ctx.groups.push(group);
  const vlog = (message: string): void => log(`[${variant.id}] ${message}`);
  const deployStarted = Date.now();
  let cluster: ChaosCluster;
  try {
    cluster = await ChaosCluster.deploy(
      { group, control, log: vlog },
      { label: variant.id, brokers: plan.brokers, balancing: variant.balancing, redis: variant.redis === "own" ? "own" : { url: ctx.redisUrl }, logDir },
    );
  } catch (error) {
    await group.stopAll();
    throw error;
  }
  const generators: ManagedChild<ChaosGeneratorApi>[] = [];
  let witness: BusWitness | undefined;
  try {
    vlog(`fleet up in ${((Date.now() - deployStarted) / 1000).toFixed(1)} s: ${plan.brokers} brokers, a worker, HAProxy (${variant.balancing}) at ${cluster.lb.url}, Redis ${cluster.redisUrl} prefix ${cluster.keyPrefix}`);
    witness = await BusWitness.start(cluster.redisUrl, cluster.keyPrefix, step);
    for (let g = 0; g < plan.generators; g++) generators.push(group.fork<ChaosGeneratorApi>(new URL("./chaos-generator.js", import.meta.url), `chaos-gen-${variant.id}-${g + 1}`));

    // Clients: legacy first, then modern, dealt out to the generators in turn.
    const specs: ClientSpec[] = [];
    for (let c = 0; c < plan.legacyClients + plan.modernClients; c++) specs.push({ index: c, kind: c < plan.legacyClients ? "legacy" : "modern", keys: clientKeys(plan, c) });
    const opening = Date.now();
    const opened = await Promise.all(
      generators.map((gen, g) =>
        gen.rpc.call("open", { url: cluster.lb.url, clients: specs.filter((_, c) => c % generators.length === g), concurrency: plan.openConcurrency, serverHeader: SERVER_HEADER, step }),
      ),
    );
    const failedSetups = opened.reduce((sum, o) => sum + o.failed, 0);
    vlog(`${opened.reduce((sum, o) => sum + o.opened, 0)} clients set up in ${((Date.now() - opening) / 1000).toFixed(1)} s${failedSetups > 0 ? `, ${failedSetups} failed: ${opened.flatMap((o) => o.errors).slice(0, 3).join("; ")}` : ""}`);
    await sleep(plan.quietMs);
    const census = await cluster.backend.call("census", {});

    // Emission and chaos.
    const pool = keyPool(plan);
    const emitPlan: EmitPlan = { step, rate: plan.rate, count: plan.rate * variant.emitSeconds, uriCount: pool, uriOffset: 0, record: true };
    const usageBefore = await Promise.all(generators.map((gen) => gen.rpc.call("usage", { gc: false })));
    const t0 = nowMicros();
    const emitting = cluster.backend.call("emit", emitPlan);
    emitting.catch(() => undefined);
    const failovers: Failover[] = [];
    const progress = setInterval(() => {
      void Promise.all(generators.map((gen) => gen.rpc.call("status", {})))
        .then((statuses) => {
          const sum = (pick: (s: (typeof statuses)[number]) => number): number => statuses.reduce((total, s) => total + pick(s), 0);
          vlog(`+${((nowMicros() - t0) / 1e6).toFixed(0)} s: ${sum((s) => s.open)}/${sum((s) => s.clients)} streams open, ${sum((s) => s.reconnecting)} reconnecting, ${sum((s) => s.updates)} updated received, ${sum((s) => s.refusals)} 404s, ${sum((s) => s.restarts)} restarts`);
        })
        .catch(() => undefined);
    }, 10_000);
    const restarts: Promise<void>[] = [];
    try {
      await runChaos(variant, cluster, t0, failovers, restarts, vlog);
    } finally {
      clearInterval(progress);
    }
    const emitted: PacedResult = await emitting;
    await Promise.all(restarts);
    const emitEnd = nowMicros();
    vlog(`emission done: ${emitted.emitted} updates in ${(emitted.tookMs / 1000).toFixed(1)} s (${Math.round(emitted.emitted / (emitted.tookMs / 1000))}/s, lag up to ${emitted.maxLagMs.toFixed(0)} ms); settling ${plan.settleMs / 1000} s`);
    await sleep(plan.settleMs);
    const until = nowMicros();
    const usageAfter = await Promise.all(generators.map((gen) => gen.rpc.call("usage", { gc: false })));

    // Read everything back.
    const clients: ClientRecord[] = [];
    for (const gen of generators) {
      for (let from = 0; ; from += DUMP_CHUNK) {
        const chunk = await gen.rpc.call("dump", { from, count: DUMP_CHUNK });
        clients.push(...chunk);
        if (chunk.length < DUMP_CHUNK) break;
      }
    }
    clients.sort((a, b) => a.index - b.index);
    const micros = new Float64Array(emitPlan.count);
    const targets = new Uint8Array(emitPlan.count);
    for (let from = 0; from < emitPlan.count; from += EMIT_LOG_CHUNK) {
      const chunk = await cluster.backend.call("emitLog", { from, count: EMIT_LOG_CHUNK });
      micros.set(chunk.micros, from);
      targets.set(chunk.targets, from);
    }
    const gauges = await cluster.sessionGauges();
    const registry = await checkRegistry(cluster.redisUrl, cluster.keyPrefix, clients).catch((error: unknown) => ({ checked: 0, mismatches: [], error: (error as Error).message }));
    const workerInstance = await instanceOf(cluster.worker.url);
    const closed = await Promise.all(generators.map((gen) => gen.rpc.call("closeAll", {})));
    const published = [...witness.published].sort((a, b) => a.position - b.position);

    const input = {
      emission: { count: emitPlan.count, micros, keyOf: (seq: number) => keyOf(emitPlan, seq) },
      published,
      failovers: failovers.map((f) => f.atMicros),
      watcherFailovers: failovers.map((f) => f.watcher),
      clients,
      fromMicros: t0,
      untilMicros: until,
    };
    const reports: Record<Basis, CoverageReport> = { position: analyseCoverage({ ...input, basis: "position" }), time: analyseCoverage({ ...input, basis: "time" }) };
    writeFileSync(
      join(logDir, "analysis.json"),
      `${JSON.stringify(
        {
          t0,
          failovers,
          witness: { published: published.length, backwards: witness.backwards, backwardSamples: witness.backwardSamples, unreadable: witness.unreadable, connections: witness.connections },
          brokers: cluster.brokers,
          worker: workerInstance,
          gauges,
          registry,
          traces: clients.filter((c) => c.setupError !== undefined || c.refusals.length > 0 || registry.mismatches.some((x) => x.client === c.index) || reports.position.lost.all.some(([client]) => client === c.index)).map((c) => ({ client: c.index, keys: c.keys, sessionIds: c.sessionIds, setupError: c.setupError, trace: c.trace, streams: c.streams })),
          refusals: clients.flatMap((c) => c.refusals.map((r) => ({ client: c.index, ...r }))),
          restarts: clients.filter((c) => c.sessionIds.length > 1).map((c) => ({ client: c.index, sessionIds: c.sessionIds, initializedAt: c.initializedAt })),
          failedTries: clients.flatMap((c) => c.streams.filter((st) => st.openMicros === 0).map((st) => ({ client: c.index, kind: c.kind, sessionId: c.sessionIds[c.sessionIds.length - 1], ...st }))),
          reports: { position: strip(reports.position), time: strip(reports.time) },
        },
        null,
        1,
      )}\n`,
    );
    vlog(`analysed: position basis lost ${reports.position.lost.updates}, time basis lost ${reports.time.lost.updates}; details in ${join(logDir, "analysis.json")}`);
    const notHeard = Array.from(targets).filter((t, i) => t === 0 && (micros[i] ?? 0) > 0).length;
    return describe(ctx, variant, {
      cluster,
      census,
      failovers,
      clients,
      reports,
      emitted,
      emitEnd,
      t0,
      until,
      notHeard,
      witness,
      closed,
      cpu: usageBefore.map((before, g) => cpuPercent(before, usageAfter[g] as ProcessUsage)),
      failedSetups,
      registry,
      workerInstance,
      gauges,
    });
  } finally {
    await witness?.stop();
    await Promise.all(generators.map((gen) => gen.stop()));
    await cluster.stop();
    await group.stopAll();
  }
}

/** Kills (and restarts) brokers, or restarts Redis, on the variant's schedule, from `t0`. */
async function runChaos(variant: VariantPlan, cluster: ChaosCluster, t0: number, failovers: Failover[], restarts: Promise<void>[], log: (message: string) => void): Promise<void> {
  const at = async (seconds: number): Promise<void> => {
    const wait = t0 / 1000 + seconds * 1000 - nowMicros() / 1000;
    if (wait > 0) await sleep(wait);
  };
  const chaos = variant.chaos;
  if (chaos.kind === "restart-redis") {
    await at(chaos.atS);
    const watchers = await cluster.watchers();
    const { downMicros, upMicros } = await cluster.restartRedis(log);
    const failover: Failover = { no: 1, atMicros: downMicros, what: "Redis SIGKILLed, restarted empty", watcher: true, sessions: 0, backMicros: upMicros, watchersAfter: "" };
    failovers.push(failover);
    log(`Redis restarted (down ${((upMicros - downMicros) / 1000).toFixed(0)} ms; watcher was ${watchers.join(", ") || "none"})`);
    // Not awaited: the run's end does not wait for it (after the cluster stopped it reads "?").
    void sleep(15_000).then(async () => {
      failover.watchersAfter = (await cluster.watchers()).join(", ") || "none";
    });
    await at(variant.emitSeconds);
    return;
  }
  for (let n = 0, t = chaos.firstS; t < chaos.untilS; n++, t += chaos.everyS) {
    await at(t);
    const index = n % cluster.brokers.length;
    const slot = cluster.brokers[index];
    if (slot?.member === undefined) {
      log(`kill ${n + 1}: ${slot?.name ?? "?"} is not back yet; skipped`);
      continue;
    }
    const watchers = await cluster.watchers();
    const sessions = await scrapeCounter(`http://127.0.0.1:${slot.port}`, "mcp_broker_sessions");
    const { atMicros } = await cluster.kill(index);
    const failover: Failover = { no: n + 1, atMicros, what: `${slot.name} SIGKILLed`, watcher: watchers.includes(slot.name), sessions, backMicros: 0, watchersAfter: "" };
    failovers.push(failover);
    log(`kill ${n + 1}: ${slot.name} (${Number.isNaN(sessions) ? "?" : sessions} sessions and listen streams${failover.watcher ? ", the backend's watcher" : ""})`);
    restarts.push(
      cluster.restart(index).then(
        () => {
          failover.backMicros = nowMicros();
          // Not awaited: the run's end does not wait for it.
          void sleep(12_000).then(async () => {
            failover.watchersAfter = (await cluster.watchers()).join(", ") || "none";
          });
        },
        (error: unknown) => log(`${slot.name} did not start again: ${(error as Error).message}`),
      ),
    );
  }
  await at(variant.emitSeconds);
}

/** The report without its bulk arrays (for analysis.json). */
function strip(report: CoverageReport): Record<string, unknown> {
  const { delays, ...rest } = report;
  return { ...rest, delays: { count: delays.length, p50: quantile(delays, 0.5), p99: quantile(delays, 0.99), max: quantile(delays, 1) } };
}

interface Measured {
  cluster: ChaosCluster;
  census: { subscriptions: number[] };
  failovers: Failover[];
  clients: ClientRecord[];
  reports: Record<Basis, CoverageReport>;
  emitted: PacedResult;
  emitEnd: number;
  t0: number;
  until: number;
  notHeard: number;
  witness: BusWitness;
  closed: { deleted: number; failed: number }[];
  cpu: number[];
  failedSetups: number;
  registry: { checked: number; mismatches: RegistryMismatch[] };
  workerInstance: string;
  gauges: { name: string; legacy: number; modern: number }[];
}

/** The variant's rows, findings and detail tables. */
function describe(ctx: VariantContext, variant: VariantPlan, m: Measured): ChaosVariantResult {
  const { plan } = ctx;
  // Judged on positions unless the witness saw them go backwards (a counter that restarted lower makes them incomparable).
  const judged: Basis = m.witness.backwards > 0 ? "time" : "position";
  const other: Basis = judged === "time" ? "position" : "time";
  const pos = m.reports[judged];
  const time = m.reports[other];
  const basisNote = judged === "time" ? " (judged on the time basis: positions went backwards on the bus)" : "";
  const legacy = m.clients.filter((c) => c.kind === "legacy");
  const refusals = m.clients.flatMap((c) => c.refusals.map((r) => ({ client: c.index, ...r })));
  const liveRefusals = refusals.filter((r) => r.atMicros >= m.t0);
  const restarted = legacy.filter((c) => c.sessionIds.length > 1);
  const restartedLive = legacy.filter((c) => c.initializedAt.slice(1).some((at) => at >= m.t0));
  const setupFailed = m.clients.filter((c) => c.setupError !== undefined);
  const foreign = m.clients.reduce((sum, c) => sum + c.foreign, 0);
  const unreadable = m.clients.reduce((sum, c) => sum + c.unreadable, 0);
  const moved = m.clients.reduce((sum, c) => sum + c.movedRetries, 0);
  const attempts = beyondSdkRetries(m.clients, m.t0);
  const rate = m.emitted.emitted / (m.emitted.tookMs / 1000);
  const q = (values: Float64Array, at: number): number | null => (values.length === 0 ? null : quantile(values, at));

  // Resumptions: the strict figure (a notification covering what was missed), split by whether the failover took the watcher down.
  const resumes = pos.resumes;
  const missed = resumes.filter((r) => r.missed);
  const unresolved = missed.filter((r) => r.coverMs === null);
  const cover = sortedOf(missed.map((r) => r.coverMs));
  const coverWatcher = sortedOf(missed.filter((r) => r.watcherFailover).map((r) => r.coverMs));
  const coverOther = sortedOf(missed.filter((r) => !r.watcherFailover).map((r) => r.coverMs));
  const fromDrop = sortedOf(missed.map((r) => r.coverFromDropMs));
  const first = sortedOf(resumes.map((r) => r.firstMs));
  const reopen = (kind: string): Float64Array => sortedOf(resumes.filter((r) => r.kind === kind).map((r) => r.reopenMs));
  const reopenLegacy = reopen("legacy");
  const reopenModern = reopen("modern");
  const coverP99 = q(cover, 0.99);
  const partial = m.clients.flatMap((c) => c.streams.filter((st) => st.requestMicros >= m.t0 && st.honored !== undefined && st.honored < c.keys.length));
  const partialAck = sortedOf(partial.map((st) => (st.endMicros === 0 ? null : (st.endMicros - st.requestMicros) / 1000)));

  const row = (measure: string, value: number | null, unit: string, target: string | null, met: boolean | null, note?: string): ChaosRow => ({
    variant: variant.id,
    measure,
    value,
    unit,
    target,
    met,
    ...(note !== undefined && { note }),
  });
  const failoverWord = variant.chaos.kind === "kill-brokers" ? "failover (broker kill)" : "failover (Redis restart)";
  const rows: ChaosRow[] = [
    row("updates emitted (numbered, round-robin)", m.emitted.emitted, "", "≥ 2000/s", rate >= 2_000 * 0.98, `${Math.round(rate)}/s over ${(m.emitted.tookMs / 1000).toFixed(0)} s; ${m.notHeard} reached no broker (no upstream subscription at that moment)`),
    row("clients whose setup failed (an error answered to initialize, a subscribe or a stream)", setupFailed.length, "", "0", setupFailed.length === 0, setupFailed.length === 0 ? undefined : `first: ${setupFailed[0]?.setupError?.slice(0, 200) ?? ""}; their sessions are left out of the other rows`),
    row(`lost updates (${judged} basis)`, pos.lost.updates, "", "0", pos.lost.updates === 0, `${pos.lost.pairs} (session, URI) pairs, ${pos.lost.clients} clients${basisNote}`),
    row(`lost updates (${other} basis)`, time.lost.updates, "", null, null, `${time.lost.pairs} pairs`),
    row("granted subscriptions missing from the cluster's registry at the end", m.registry.mismatches.length, "", null, null, `legacy sessions of ${m.registry.checked} checked (see findings)`),
    row("404s for live sessions", liveRefusals.length, "", "0", liveRefusals.length === 0, `${new Set(liveRefusals.map((r) => r.client)).size} clients${refusals.length > liveRefusals.length ? `; ${refusals.length - liveRefusals.length} more during setup, before the first update` : ""}`),
    row("sessions that started over (re-initialized)", restartedLive.length, "", null, null, `of ${legacy.length} legacy sessions${restarted.length > restartedLive.length ? `; ${restarted.length - restartedLive.length} more during setup` : ""}`),
    row("resumed delivery after reconnect, p50", q(cover, 0.5), "ms", null, null, `request → first notification covering a missed update; ${missed.length} of ${resumes.length} re-opened streams had missed updates`),
    row("resumed delivery after reconnect, p99", coverP99, "ms", "≤ 2500 ms", coverP99 === null ? null : coverP99 <= TARGET_RESUME_P99_MS && unresolved.length === 0, `max ${fmtMs(q(cover, 1))}; ${unresolved.length} never got one`),
    row("… after failovers that took the watcher down, p99", q(coverWatcher, 0.99), "ms", null, null, `${coverWatcher.length} streams; p50 ${fmtMs(q(coverWatcher, 0.5))}`),
    row("… after the other failovers, p99", q(coverOther, 0.99), "ms", null, null, `${coverOther.length} streams; p50 ${fmtMs(q(coverOther, 0.5))}`),
    row("first updated on a re-opened stream, p99", q(first, 0.99), "ms", null, null, `p50 ${fmtMs(q(first, 0.5))}; request → its first updated, whatever it covers`),
    row("stream re-open (request → open), p99", q(reopenLegacy, 0.99), "ms", null, null, `legacy GET; modern listen (→ acknowledgement): p99 ${fmtMs(q(reopenModern, 0.99))}, max ${fmtMs(q(reopenModern, 1))}`),
    row("listen re-opens acknowledged without all their subscriptions", partial.length, "", null, null, partial.length === 0 ? undefined : `acknowledged ${fmtMs(q(partialAck, 0.5))} (p50) to ${fmtMs(q(partialAck, 1))} after the request, honoring ${[...new Set(partial.map((st) => st.honored))].join("/")} of 3; the client listened again`),
    row("resumed delivery after the stream dropped, p99", q(fromDrop, 0.99), "ms", null, null, `p50 ${fmtMs(q(fromDrop, 0.5))}: includes the client's reconnect delay (SDK: 1 s, or the server's retry) and failed tries`),
    row(`spurious updated per (session, URI) per ${failoverWord}, max`, pos.spurious.maxPerPairWindow, "", "≤ 1", pos.spurious.maxPerPairWindow <= 1 && pos.spurious.beforeAnyFailover === 0, `${pos.spurious.total} spurious in all; ${pos.spurious.pairWindowsOverOne} (pair, failover) with more than 1; ${pos.spurious.beforeAnyFailover} before any failover`),
    row("updated delivered in total", pos.delivered, "", null, null, `to ${pos.pairs} (session, URI) pairs`),
    row("coverage delay (update → first notification covering it), p99", q(pos.delays, 0.99), "ms", null, null, `p50 ${fmtMs(q(pos.delays, 0.5))}, max ${fmtMs(q(pos.delays, 1))}; ${countOver(pos.delays, 2_500)} of ${pos.delays.length} over 2.5 s`),
    row("updated for URIs the session never subscribed to", foreign, "", "0", foreign === 0, unreadable === 0 ? undefined : `${unreadable} unreadable`),
  ];

  const findings: string[] = [];
  if (pos.lost.updates > 0)
    findings.push(`Lost (${judged} basis): ${pos.lost.updates} updates over ${pos.lost.pairs} (session, URI) pairs of ${pos.lost.clients} clients (${other} basis: ${time.lost.updates}). Samples in "Lost updates"; every pair, with its client's requests and streams, in logs/${variant.id}/analysis.json.`);
  if (m.registry.mismatches.length > 0)
    findings.push(
      `${m.registry.mismatches.length} legacy sessions were granted subscriptions (resources/subscribe answered with a result) that the cluster's registry did not hold for them at the end: ${m.registry.mismatches
        .slice(0, 5)
        .map((x) => `client ${x.client} session ${x.sessionId} granted ${x.granted.join(",")} held ${x.held.join(",") || "none"}`)
        .join("; ")}. A broker that adopts such a session does not deliver the missing ones. Table "Registry", and the clients' request traces in analysis.json.`,
    );
  if (refusals.length > 0)
    findings.push(
      `${refusals.length} × HTTP 404 for sessions their clients still held (${liveRefusals.length} after the first update); first: ${refusals
        .slice(0, 3)
        .map((r) => `client ${r.client} session ${r.sessionId} on ${r.what} via ${r.server ?? "?"} at ${((r.atMicros - m.t0) / 1e6).toFixed(1)} s`)
        .join("; ")}. All in "404s" and analysis.json.`,
    );
  if (coverP99 !== null && coverP99 > TARGET_RESUME_P99_MS)
    findings.push(
      `Resumed delivery p99 ${fmtMs(coverP99)} after the reconnect request, over the 2.5 s target: after failovers that took the backend's watcher down p99 ${fmtMs(q(coverWatcher, 0.99))} (${coverWatcher.length} streams), after the others ${fmtMs(q(coverOther, 0.99))} (${coverOther.length}). Slowest in "Slowest resumptions".`,
    );
  if (partial.length > 0)
    findings.push(
      `${partial.length} listens re-opened after a failover were acknowledged ${fmtMs(q(partialAck, 0.5))} (p50; up to ${fmtMs(q(partialAck, 1))}) after their request with subscriptions left out of the honored filter (honored ${[...new Set(partial.map((st) => st.honored))].join("/")} of 3): their clients heard nothing of those resources meanwhile, and an SDK client that does not check the honored filter would hear nothing after either. These clients listened again (failed tries "HTTP 200, acknowledged without …"); the coverage delay and the resumption from the drop include the wait.`,
    );
  if (unresolved.length > 0) findings.push(`${unresolved.length} re-opened streams got no notification covering what they missed before they ended or the run did (see "Slowest resumptions").`);
  if (pos.spurious.maxPerPairWindow > 1 || pos.spurious.beforeAnyFailover > 0)
    findings.push(`Spurious re-notifications: up to ${pos.spurious.maxPerPairWindow} per (session, URI) in one failover window; ${pos.spurious.pairWindowsOverOne} (pair, window) over 1; ${pos.spurious.beforeAnyFailover} before any failover. Samples in "Spurious".`);
  if (foreign > 0) findings.push(`${foreign} updated for URIs the receiving session never subscribed to.`);
  if (m.failedSetups > 0) findings.push(`${m.failedSetups} clients failed to set up (before any chaos) and are left out.`);
  if (moved > 0) findings.push(`${moved} requests were answered "the session moved to another broker instance while this was on its way; retry it" (-32000, data.moved) and sent again.`);
  if (attempts.beyond > 0) findings.push(`${attempts.beyond} of ${attempts.reconnects} reconnects needed 2 or more failed tries first: an SDK client with its default reconnection options (maxRetries 2) would have given up on them.`);
  const holding = streamsHeld(m.clients);
  const extra = m.gauges.map((g) => ({ name: g.name, legacy: g.legacy - (holding.get(`${g.name} legacy`) ?? 0), modern: g.modern - (holding.get(`${g.name} modern`) ?? 0) }));
  // A listen still waiting for its acknowledgement is counted by its broker, not yet by its client (which does not know the broker yet).
  const waiting = m.clients.filter((c) => {
    const last = c.streams[c.streams.length - 1];
    return last !== undefined && last.openMicros === 0 && last.endMicros === 0;
  }).length;
  if (extra.reduce((sum, x) => sum + Math.max(0, x.legacy) + Math.max(0, x.modern), 0) > waiting)
    findings.push(
      `At the end the brokers counted more sessions and listen streams than clients held streams on them (mcp_broker_sessions{era} minus the clients' open streams there; ${waiting} clients were still waiting for a stream): ${extra.map((x) => `${x.name} legacy ${x.legacy >= 0 ? "+" : ""}${x.legacy}, modern ${x.modern >= 0 ? "+" : ""}${x.modern}`).join("; ")}. Table "Brokers at the end".`,
    );
  if (m.witness.backwards > 0)
    findings.push(
      `The bus witness saw positions go backwards ${m.witness.backwards} times (the counter restarted lower), so this variant is judged on the time basis: ${m.witness.backwardSamples
        .slice(0, 3)
        .map(([position, before, at]) => `position ${position} after ${before} at ${((at - m.t0) / 1e6).toFixed(2)} s`)
        .join("; ")}.`,
    );

  const s = (micros: number): string => (micros === 0 ? "—" : `${((micros - m.t0) / 1e6).toFixed(1)}`);
  const details: DetailTable[] = [
    {
      title: "Failovers (times in s from the first update)",
      columns: ["#", "at", "what", "was the watcher", "sessions + listen streams on it", "back at", "watching 12–15 s later"],
      rows: m.failovers.map((f) => [f.no, s(f.atMicros), f.what, f.watcher ? "yes" : "no", Number.isNaN(f.sessions) ? "?" : f.sessions, s(f.backMicros), f.watchersAfter || "?"]),
    },
    {
      title: "Clients and reconnects",
      columns: ["measure", "value"],
      rows: [
        ["clients (legacy + modern)", `${legacy.length} + ${m.clients.length - legacy.length}`],
        ["(session, URI) pairs", pos.pairs],
        ["re-opened streams after the first update: with missed updates / nothing missed / never covered", `${resumes.length}: ${missed.length} / ${resumes.length - missed.length} / ${unresolved.length}`],
        [`… ${other} basis: with missed / never covered`, `${time.resumes.filter((r) => r.missed).length} / ${time.resumes.filter((r) => r.missed && r.coverMs === null).length}`],
        ["failed tries by answer", Object.entries(attempts.failedByStatus).map(([k, v]) => `${k}: ${v}`).join("; ") || "none"],
        ["most failed tries before one reconnect", attempts.maxAttempts],
        ["modern acknowledgements of re-opened listens: resumed", resumedCounts(m.clients)],
        ["updates emitted / with a cluster position / heard by no watcher / re-announcements on the bus", `${pos.updates.emitted} / ${pos.updates.published} / ${pos.updates.heardByNoWatcher} / ${pos.updates.reannouncements}`],
        [`${other} basis: lost / spurious max per (pair, window) / coverage delay p99`, `${time.lost.updates} / ${time.spurious.maxPerPairWindow} / ${fmtMs(q(time.delays, 0.99))}`],
        ["backend census before the first update", `${m.census.subscriptions.length} MCP sessions holding ${m.census.subscriptions.join(" + ")} subscriptions`],
        ["sessions deleted at the end / failed", `${m.closed.reduce((a, c) => a + c.deleted, 0)} / ${m.closed.reduce((a, c) => a + c.failed, 0)}`],
        ["load generators' CPU during the run (% of a core)", m.cpu.map((c) => `${c.toFixed(0)}%`).join(" + ")],
      ],
    },
    {
      title: `Broker processes (incarnations; logs in results/chaos/logs/${variant.id}/)`,
      columns: ["slot", "instance", "pid", "log", "started", "ready", "killed"],
      rows: [
        ...m.cluster.brokers.flatMap((slot) => slot.incarnations.map((inc) => [slot.name, inc.instance, inc.pid, inc.log, s(inc.startedMicros), s(inc.readyMicros), s(inc.killedMicros)])),
        ["worker", m.workerInstance, m.cluster.worker.child.pid, `${m.cluster.worker.child.name}.log`, "—", "—", "—"],
      ],
    },
  ];
  details.push({
    title: "Brokers at the end: their own count (mcp_broker_sessions) against the clients' open streams on them",
    columns: ["broker", "legacy sessions (broker)", "legacy streams (clients)", "listen streams (broker)", "listen streams (clients)"],
    rows: m.gauges.map((g) => [g.name, g.legacy, holding.get(`${g.name} legacy`) ?? 0, g.modern, holding.get(`${g.name} modern`) ?? 0]),
  });
  if (m.registry.mismatches.length > 0)
    details.push({
      title: "Registry: legacy sessions whose granted subscriptions the registry did not hold at the end",
      columns: ["client", "session", "granted (keys)", "held (keys)", "record owner (instance)", "epoch"],
      rows: m.registry.mismatches.slice(0, 20).map((x) => [x.client, x.sessionId, x.granted.join(", "), x.held.join(", ") || "none", x.owner, x.epoch]),
    });
  if (pos.lost.samples.length > 0)
    details.push({
      title: `Lost updates (${judged} basis; first ${pos.lost.samples.length} pairs)`,
      columns: ["client", "era", "URI", "lost", "first lost (seq @ s)", "last received (s, id, stream)", "last streams"],
      rows: pos.lost.samples.map((l) => [
        l.client,
        l.kind,
        `bench+bench://r/${l.key}`,
        l.lost,
        `${l.firstLostSeq} @ ${s(l.firstLostMicros)}`,
        l.lastReceived === undefined ? "none" : `${s(l.lastReceived.atMicros)}, ${l.lastReceived.position}${l.lastReceived.local === 0 ? "" : `.${l.lastReceived.local}`}, #${l.lastReceived.stream}`,
        l.streams.slice(-4).join("<br>"),
      ]),
    });
  if (pos.spurious.samples.length > 0)
    details.push({
      title: `Spurious (pairs with more than 1 in a window, or any before the first failover; first ${pos.spurious.samples.length})`,
      columns: ["client", "era", "URI", "window", "count", "events (id, seq, ms into the window, stream)"],
      rows: pos.spurious.samples.map((x) => [x.client, x.kind, `bench+bench://r/${x.key}`, x.window, x.count, x.events.join("<br>")]),
    });
  const slowest = [...missed].sort((a, b) => (b.coverMs ?? Number.POSITIVE_INFINITY) - (a.coverMs ?? Number.POSITIVE_INFINITY)).slice(0, 20);
  if (slowest.length > 0)
    details.push({
      title: `Slowest resumptions (${judged} basis; no value: nothing covering what it missed came on that stream)`,
      columns: ["client", "era", "stream", "via", "failover", "resumed from", "re-open (ms)", "first updated (ms)", "covering (ms)", "from drop (ms)", "failed tries", "note"],
      rows: slowest.map((r) => [
        r.client,
        r.kind,
        r.stream,
        r.server,
        `${r.window}${r.watcherFailover ? " (watcher)" : ""}`,
        r.resumeFrom,
        fmtMs(r.reopenMs),
        fmtMs(r.firstMs),
        fmtMs(r.coverMs),
        fmtMs(r.coverFromDropMs),
        r.attempt,
        r.note,
      ]),
    });
  if (refusals.length > 0)
    details.push({
      title: `404s (first ${Math.min(20, refusals.length)}; times in s from the first update)`,
      columns: ["client", "session", "request", "via", "at", "the session's initializations"],
      rows: refusals.slice(0, 20).map((r) => [r.client, r.sessionId, r.what, r.server ?? "?", s(r.atMicros), (m.clients[r.client]?.initializedAt ?? []).map(s).join(", ")]),
    });

  const chaos =
    variant.chaos.kind === "kill-brokers"
      ? `one broker SIGKILLed every ${variant.chaos.everyS} s from ${variant.chaos.firstS} s (brokers 1, 2, 3, 1, …; broker 1 took the backend's watcher lease at deploy, and the worker, a preferred watcher, took it over from it), each started again at once on its port`
      : `the harness's redis-server (nothing on disk) SIGKILLed at ${variant.chaos.atS} s and started again, empty, on its port`;
  const method =
    `${plan.brokers} brokers (services/broker/dist/cli.js) and a worker on deploy/fleet.config.json (backend: the bench backend over Streamable HTTP; a key prefix of the run's own), ` +
    `HAProxy on deploy/haproxy.cfg with ${plan.brokers} server lines${variant.balancing === "round-robin" ? " and its stick lines left out (every request round-robin)" : " (sessions stick to their broker by Mcp-Session-Id)"}, ` +
    `Redis ${variant.redis === "own" ? "a redis-server of the harness" : "the machine's"}. ${legacy.length} legacy sessions and ${m.clients.length - legacy.length} listen streams through HAProxy, each subscribed to ${plan.keysPerClient} of ${keyPool(plan)} resources (${plan.subscribersPerKey} subscribers each). ` +
    `The backend emits ${plan.rate} numbered updates/s for ${variant.emitSeconds} s, round-robin over the resources; ${chaos}; then ${plan.settleMs / 1000} s to settle. ` +
    `Clients reconnect as the SDK client does (1 s, ×1.5 per failed try, or the server's retry), legacy with Last-Event-ID and the same Mcp-Session-Id, modern with the last cursor; a 404 makes a legacy client start over.`;
  return { id: variant.id, title: variant.title, method, rows, findings, details };
}

/** Clients' open streams at the end, by `<broker> <era>` (the broker that answered the stream's request). */
function streamsHeld(clients: readonly ClientRecord[]): Map<string, number> {
  const held = new Map<string, number>();
  for (const client of clients) {
    const last = client.streams[client.streams.length - 1];
    if (last === undefined || last.openMicros === 0 || last.endMicros !== 0) continue;
    const key = `${last.server ?? "?"} ${client.kind}`;
    held.set(key, (held.get(key) ?? 0) + 1);
  }
  return held;
}

function resumedCounts(clients: readonly ClientRecord[]): string {
  const counts: Record<string, number> = {};
  for (const client of clients) for (const stream of client.streams) if (stream.reason === "reconnect" && stream.openMicros !== 0 && client.kind === "modern") counts[stream.resumed ?? "(none)"] = (counts[stream.resumed ?? "(none)"] ?? 0) + 1;
  return Object.entries(counts).map(([k, v]) => `${k}: ${v}`).join("; ") || "—";
}

function countOver(sorted: Float64Array, limit: number): number {
  let n = 0;
  for (let i = sorted.length - 1; i >= 0 && (sorted[i] as number) > limit; i--) n++;
  return n;
}

function fmtMs(value: number | null): string {
  return value === null || Number.isNaN(value) ? "—" : value >= 100 ? `${Math.round(value)} ms` : `${value.toFixed(1)} ms`;
}
