import { listVersionMarker } from "../core/bench-uris.js";
import { sleep } from "../core/clock.js";
import { scrapeCounter } from "../engines/worker-process.js";
import { fmt } from "../report/format.js";
import { notRun, type ResultRow, type ScenarioResult } from "../report/result-model.js";
import type { BenchContext } from "./bench-context.js";
import { ClusterSessions, describeCounts, notificationSpread } from "./cluster-sessions.js";

const SCENARIO = "7. Cluster list storm";
const MAX_LIST_REQUESTS = 2;
const MAX_NOTIFICATIONS = 1;
const HOLD_TIMEOUT_MS = 15_000;
/** Past the hold, longer than another debounce period, so late reloads and late notifications are counted. */
const SETTLE_MS = 2_500;

/**
 * Scenario 7 (Redis engine): a cluster of `brokers` brokers with `jobs.process: false` and one
 * worker; broker 1 is the backend's watcher, so only it takes the backend's list_changed in, and
 * the worker runs the reload jobs. The backend sends `changes` tools/list_changed within
 * `durationMs` on every member's session; only the last follows a real change of its tool list.
 * Measured: the backend's list requests for the whole cluster (tools/list without a cursor),
 * list_changed per session on every broker, and the time until every client on every broker holds
 * the new list. No baseline: the targets are absolute.
 */
export async function runClusterListStorm(ctx: BenchContext): Promise<ScenarioResult> {
  const { brokers, sessionsPerEra, changes, durationMs } = ctx.plan.clusterListStorm;
  const storm = `${changes} list_changed in ${durationMs / 1000} s`;
  const measures = {
    requests: `backend list requests for ${storm}, whole cluster`,
    notifications: "list_changed per session, max over every instance",
    hold: "time until every client on every instance holds the new list (from the change)",
  };
  const method =
    `Redis engine: ${brokers} broker processes with jobs.process false and 1 worker process (services/worker, run as deployed), one cluster on one Redis and key prefix, fed by one bench backend over Streamable HTTP (one MCP session per member). ` +
    `Broker 1 starts first and takes the backend's watcher lease (the only member taking its list_changed in); the worker runs the reload jobs (lists.debounceMs default, 1 s). ` +
    `${sessionsPerEra} legacy sessions and ${sessionsPerEra} modern listen streams (toolsListChanged), each era spread round-robin over the ${brokers} brokers; every client re-lists tools on each list_changed it gets. ` +
    `The backend sends ${changes} tools/list_changed in ${durationMs} ms on every member's session; only the last follows a real change of its tool list (a tool's description carries a version). ` +
    "List requests = tools/list calls without a cursor reaching the backend, from any member.";
  const unavailable = ctx.redis.clusterUnavailableReason();
  if (unavailable !== undefined) {
    return {
      id: "cluster-list-storm",
      title: SCENARIO,
      method,
      rows: [
        notRun(SCENARIO, "redis", measures.requests, "", `≤ ${MAX_LIST_REQUESTS}`, unavailable),
        notRun(SCENARIO, "redis", measures.notifications, "", `≤ ${MAX_NOTIFICATIONS}`, unavailable),
        notRun(SCENARIO, "redis", measures.hold, "ms", null, unavailable),
      ],
      details: [],
      findings: [],
    };
  }

  ctx.log(`cluster list storm: ${brokers} brokers + 1 worker, ${sessionsPerEra} legacy + ${sessionsPerEra} modern sessions, ${storm} (one real change, the last)`);
  const sessions = await ClusterSessions.start(ctx, "cluster-storm", { brokers, sessionsPerEra });
  try {
    const { cluster } = sessions;
    const backend = cluster.backend;
    const worker = cluster.workers[0];
    const reloadsBefore = worker === undefined ? Number.NaN : await scrapeCounter(worker.opsUrl, "mcp_broker_list_reloads_total");
    await backend.call("resetCounters", {});
    await sessions.watch();
    const brokerBefore = await cluster.usage(false);
    const outcome = await cluster.profiled("storm", async () => {
      const sent = await backend.call("listStorm", { count: changes, durationMs, change: "last" });
      await sessions.waitHolding(listVersionMarker(sent.finalVersion), HOLD_TIMEOUT_MS);
      return sent;
    });
    const marker = listVersionMarker(outcome.finalVersion);
    await sleep(SETTLE_MS);
    const report = await sessions.report(marker);
    const counters = await backend.call("counters", {});
    const census = await backend.call("census", {});
    const reloadsAfter = worker === undefined ? Number.NaN : await scrapeCounter(worker.opsUrl, "mcp_broker_list_reloads_total");
    const brokerAfter = await cluster.usage(false);

    const { all, perBroker } = report;
    const spread = notificationSpread(all);
    const allHeld = all.holding === all.sessions;
    const sinceChange = (micros: number): number => (micros - outcome.changedMicros) / 1000;
    const fromChange = allHeld ? sinceChange(all.lastHeldMicros) : Number.NaN;
    const fromFirst = allHeld ? (all.lastHeldMicros - outcome.firstMicros) / 1000 : Number.NaN;
    const perInstance = perBroker.map((counts, i) => {
      const s = notificationSpread(counts);
      return `broker ${i + 1}: ${s.min}…${s.max} over ${counts.sessions} sessions`;
    });
    const requests = counters.toolsListReloads;
    const byMember = census.toolsListReloads.map((n, i) => `${cluster.backendSessions[i] ?? `session ${i + 1}`} ${n}`).join(", ");
    ctx.log(
      `  list requests ${requests} (${byMember}), list_changed per session ${spread.min}…${spread.max}, ` +
        `all ${all.sessions} hold the new list ${fmt(fromChange)} ms after the change (${all.holding}/${all.sessions})`,
    );

    const rows: ResultRow[] = [
      {
        scenario: SCENARIO,
        engine: "redis",
        measure: measures.requests,
        unit: "",
        broker: requests,
        baseline: null,
        ratio: null,
        target: `≤ ${MAX_LIST_REQUESTS}`,
        met: requests <= MAX_LIST_REQUESTS,
        status: "measured",
        note: `by member: ${byMember}; reload jobs the worker completed: ${fmt(reloadsAfter - reloadsBefore)}`,
      },
      {
        scenario: SCENARIO,
        engine: "redis",
        measure: measures.notifications,
        unit: "",
        broker: spread.max,
        baseline: null,
        ratio: null,
        target: `≤ ${MAX_NOTIFICATIONS}`,
        met: spread.max <= MAX_NOTIFICATIONS && spread.min >= 1,
        status: "measured",
        note: `min ${spread.min}, total ${spread.total} over ${all.sessions} sessions; ${perInstance.join("; ")}`,
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
        note: `${fmt(fromFirst)} ms from the first list_changed; ${all.holding}/${all.sessions} sessions hold it; per instance: ${perBroker
          .map((counts, i) => `broker ${i + 1} ${counts.holding === counts.sessions ? `${fmt(sinceChange(counts.lastHeldMicros))} ms` : `${counts.holding}/${counts.sessions}`}`)
          .join(", ")}`,
      },
    ];
    const findings: string[] = [];
    if (requests > MAX_LIST_REQUESTS) findings.push(`${requests} list requests reached the backend (${byMember}), ${requests - MAX_LIST_REQUESTS} over the target of ${MAX_LIST_REQUESTS}.`);
    if (spread.max > MAX_NOTIFICATIONS) findings.push(`Up to ${spread.max} list_changed per session (${perInstance.join("; ")}), ${spread.max - MAX_NOTIFICATIONS} over the target of ${MAX_NOTIFICATIONS}.`);
    if (spread.min < 1) findings.push(`Some sessions got no list_changed at all (${perInstance.join("; ")}).`);
    if (!allHeld) findings.push(`${all.sessions - all.holding} of ${all.sessions} sessions never saw the new list within ${HOLD_TIMEOUT_MS / 1000} s.`);
    const brokerCpuMs = brokerAfter.map((after, i) => (after.cpuMicros - (brokerBefore[i]?.cpuMicros ?? 0)) / 1000);
    return {
      id: "cluster-list-storm",
      title: SCENARIO,
      method,
      rows,
      details: [
        {
          title: "Per instance",
          columns: ["broker", "era", "sessions", "list_changed per session [count: sessions]", "holding the new list", "time to all holding, from the change ms", "broker CPU ms during storm+settle"],
          rows: perBroker.flatMap((counts, i) =>
            (["legacy", "modern"] as const).map((era) => {
              const part = report[era].byUrl.find(([url]) => url === cluster.urls[i])?.[1];
              return [
                `broker ${i + 1}${i === 0 ? " (watcher)" : ""}`,
                era,
                part?.sessions ?? 0,
                part === undefined ? "" : describeCounts(part),
                part?.holding ?? 0,
                part !== undefined && part.holding === part.sessions ? fmt(sinceChange(part.lastHeldMicros)) : "—",
                era === "legacy" ? fmt(brokerCpuMs[i]) : "",
              ];
            }),
          ),
        },
        {
          title: "Storm",
          columns: [
            "list_changed sent (per member session)",
            "emitted over ms",
            "list requests to the backend",
            "they arrived, ms from the first list_changed",
            "… from the change",
            "client tools/list calls",
            "client errors",
            "time to all holding, from the change ms",
            "from the first list_changed ms",
          ],
          rows: [
            [
              outcome.emitted,
              fmt((outcome.lastMicros - outcome.firstMicros) / 1000),
              requests,
              counters.toolsListReloadMicros.map((t) => fmt((t - outcome.firstMicros) / 1000)).join(", "),
              counters.toolsListReloadMicros.map((t) => fmt(sinceChange(t))).join(", "),
              report.legacy.listCalls + report.modern.listCalls,
              report.legacy.listErrors + report.modern.listErrors,
              fmt(fromChange),
              fmt(fromFirst),
            ],
          ],
        },
      ],
      findings,
    };
  } finally {
    await sessions.stop();
  }
}
