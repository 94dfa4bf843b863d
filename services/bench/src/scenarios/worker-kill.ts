import { listVersionMarker } from "../core/bench-uris.js";
import { nowMicros, pollUntil, sleep } from "../core/clock.js";
import { scrapeCounter } from "../engines/worker-process.js";
import { fmt } from "../report/format.js";
import { notRun, type DetailTable, type ResultRow, type ScenarioResult } from "../report/result-model.js";
import type { BenchContext } from "./bench-context.js";
import { ClusterSessions, describeCounts, notificationSpread } from "./cluster-sessions.js";

const SCENARIO = "8. Worker killed mid-reload";
const MAX_LOST = 0;
/** How long the worker's reload may take to reach the backend (debounce 1 s, then the job). */
const REQUEST_TIMEOUT_MS = 15_000;
/** How long every client gets to hold the final list once the new worker runs. */
const HOLD_TIMEOUT_MS = 30_000;
const SETTLE_MS = 2_500;

/**
 * Scenario 8 (Redis engine): the cluster of scenario 7 with a small `jobs.lockMs`. The backend
 * answers tools/list only after `listDelayMs`; its tool list changes once, with one
 * tools/list_changed. Once the worker's reload job has reached the backend (the brokers never list
 * it), the worker is SIGKILLed while that request is held, the delay is lifted, and a new worker
 * is started. Measured: the clients that never get the final list (lost list changes) and the time
 * until every client holds it.
 */
export async function runWorkerKill(ctx: BenchContext): Promise<ScenarioResult> {
  const { brokers, sessionsPerEra, lockMs, listDelayMs } = ctx.plan.workerKill;
  const measures = {
    lost: `list changes lost (clients without the final list ${HOLD_TIMEOUT_MS / 1000} s after the new worker runs)`,
    hold: "time until every client holds the final list (from the change)",
  };
  const method =
    `Redis engine: the cluster of scenario 7 (${brokers} brokers with jobs.process false, broker 1 the backend's watcher, 1 worker), every member with jobs.lockMs ${lockMs}. ` +
    `${sessionsPerEra} legacy sessions and ${sessionsPerEra} modern listen streams (toolsListChanged), spread over the brokers, re-listing tools on each list_changed. ` +
    `The backend holds every tools/list ${listDelayMs} ms; its tool list changes once, followed by one tools/list_changed. ` +
    "As soon as the worker's reload (debounced 1 s) reaches the backend, the worker is SIGKILLed while its request is held; the hold is lifted and a new worker is started (same config), " +
    "whose stalled-job recovery must run the reload again. Lost = clients that never hold the final list.";
  const unavailable = ctx.redis.clusterUnavailableReason();
  if (unavailable !== undefined) {
    return {
      id: "worker-kill",
      title: SCENARIO,
      method,
      rows: [notRun(SCENARIO, "redis", measures.lost, "", `${MAX_LOST}`, unavailable), notRun(SCENARIO, "redis", measures.hold, "ms", null, unavailable)],
      details: [],
      findings: [],
    };
  }

  ctx.log(`worker killed mid-reload: ${brokers} brokers + 1 worker (jobs.lockMs ${lockMs}), ${sessionsPerEra} legacy + ${sessionsPerEra} modern sessions, tools/list held ${listDelayMs} ms`);
  const sessions = await ClusterSessions.start(ctx, "worker-kill", { brokers, sessionsPerEra, lockMs });
  try {
    const { cluster } = sessions;
    const backend = cluster.backend;
    const first = cluster.workers[0];
    if (first === undefined) throw new Error("the cluster has no worker");
    await backend.call("resetCounters", {});
    await sessions.watch();
    await backend.call("listDelay", { ms: listDelayMs });
    const change = await backend.call("listStorm", { count: 1, durationMs: 1, change: "last" });
    const marker = listVersionMarker(change.finalVersion);
    const since = (micros: number): number => (micros - change.changedMicros) / 1000;

    await pollUntil(async () => (await backend.call("counters", {})).toolsListReloads > 0, REQUEST_TIMEOUT_MS, "the worker's reload to reach the backend", 10);
    const requestAt = nowMicros();
    const inFlight = await backend.call("census", {});
    await cluster.killWorker(first);
    const killedAt = nowMicros();
    await backend.call("listDelay", { ms: 0 });
    const atKill = await sessions.report(marker);
    const second = await cluster.startWorker();
    const secondAt = nowMicros();
    const held = await sessions.waitHolding(marker, HOLD_TIMEOUT_MS);
    const allHeldAt = held.all.holding === held.all.sessions ? held.all.lastHeldMicros : Number.NaN;
    await sleep(SETTLE_MS);
    const report = await sessions.report(marker);
    const counters = await backend.call("counters", {});
    const census = await backend.call("census", {});
    const secondReloads = await scrapeCounter(second.opsUrl, "mcp_broker_list_reloads_total");

    const { all, perBroker } = report;
    const lost = all.sessions - all.holding;
    const spread = notificationSpread(all);
    const member = (i: number): string => cluster.backendSessions[i] ?? `session ${i + 1}`;
    const who = (counts: readonly number[]): string =>
      counts
        .map((n, i) => [member(i), n] as const)
        .filter(([, n]) => n > 0)
        .map(([name, n]) => `${name} ${n}`)
        .join(", ") || "none";
    const fromChange = since(allHeldAt);
    const fromKill = (allHeldAt - killedAt) / 1000;
    ctx.log(
      `  reload reached the backend ${fmt(since(requestAt))} ms after the change (${who(inFlight.toolsListReloads)}); worker killed; new worker ready ${fmt((secondAt - killedAt) / 1000)} ms after the kill; ` +
        `${all.holding}/${all.sessions} hold the final list, all ${fmt(fromChange)} ms after the change (${fmt(fromKill)} ms after the kill); list requests ${counters.toolsListReloads} (${who(census.toolsListReloads)})`,
    );

    const rows: ResultRow[] = [
      {
        scenario: SCENARIO,
        engine: "redis",
        measure: measures.lost,
        unit: "",
        broker: lost,
        baseline: null,
        ratio: null,
        target: `${MAX_LOST}`,
        met: lost <= MAX_LOST,
        status: "measured",
        note: `${all.holding}/${all.sessions} sessions hold the final list; ${atKill.all.holding} held it when the worker was killed; list_changed per session ${spread.min}…${spread.max}`,
      },
      {
        scenario: SCENARIO,
        engine: "redis",
        measure: measures.hold,
        unit: "ms",
        broker: fromChange,
        baseline: null,
        ratio: null,
        target: null,
        met: null,
        status: "measured",
        note:
          `${fmt(fromKill)} ms from the kill; the new worker was ready ${fmt((secondAt - killedAt) / 1000)} ms after the kill; ` +
          `list requests to the backend: ${counters.toolsListReloads} (${who(census.toolsListReloads)}); reload jobs the new worker completed: ${fmt(secondReloads)}`,
      },
    ];
    const findings: string[] = [];
    if (atKill.all.holding > 0) findings.push(`${atKill.all.holding} sessions already held the final list when the worker was killed: the reload killed was not the only one in flight.`);
    if (lost > MAX_LOST) {
      findings.push(
        `${lost} of ${all.sessions} sessions never got the final list (${perBroker.map((c, i) => `broker ${i + 1}: ${c.holding}/${c.sessions}`).join("; ")}); ` +
          `list requests after the kill: ${who(census.toolsListReloads.map((n, i) => n - (inFlight.toolsListReloads[i] ?? 0)))}.`,
      );
    }
    const timeline: DetailTable = {
      title: "Timeline (ms after the change)",
      columns: ["event", "ms"],
      rows: [
        ["tools/list_changed sent (one real change)", 0],
        [`the worker's reload reached the backend (${who(inFlight.toolsListReloads)}); held ${listDelayMs} ms`, fmt(since(requestAt))],
        ["worker 1 SIGKILLed (gone)", fmt(since(killedAt))],
        ["worker 2 ready (/readyz 200)", fmt(since(secondAt))],
        ...counters.toolsListReloadMicros.slice(1).map((t, i): [string, string] => [`list request ${i + 2} reached the backend`, fmt(since(t))]),
        [`every client holds the final list (${all.holding}/${all.sessions})`, fmt(fromChange)],
      ],
    };
    return {
      id: "worker-kill",
      title: SCENARIO,
      method,
      rows,
      details: [
        timeline,
        {
          title: "Per instance",
          columns: ["broker", "sessions", "list_changed per session [count: sessions]", "holding the final list", "time to all holding, from the change ms"],
          rows: perBroker.map((counts, i) => [
            `broker ${i + 1}${i === 0 ? " (watcher)" : ""}`,
            counts.sessions,
            describeCounts(counts),
            counts.holding,
            counts.holding === counts.sessions ? fmt(since(counts.lastHeldMicros)) : "—",
          ]),
        },
      ],
      findings,
    };
  } finally {
    await sessions.stop();
  }
}
