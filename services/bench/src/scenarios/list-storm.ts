import { listVersionMarker } from "../core/bench-uris.js";
import { nowMicros, sleep } from "../core/clock.js";
import { fmt, range } from "../report/format.js";
import type { ResultRow, ScenarioResult } from "../report/result-model.js";
import type { BenchContext } from "./bench-context.js";
import { startBrokerPath } from "./delivery-paths.js";
import { LoadFleet } from "./load-fleet.js";

const SCENARIO = "6. List storm";
const MAX_RELOADS = 2;
const MAX_NOTIFICATIONS = 1;
const HOLD_TIMEOUT_MS = 15_000;

/**
 * Scenario 6: the backend changes its tool list `changes` times within `durationMs`, sending
 * tools/list_changed after each change. Legacy sessions (GET stream) and modern listen streams
 * (toolsListChanged) re-list tools on every notification, as a client would. Measured: list
 * reloads the broker made upstream (tools/list calls without a cursor reaching the backend),
 * list_changed per session, and the time until every session holds the final list. No baseline:
 * the targets are absolute.
 */
export async function runListStorm(ctx: BenchContext): Promise<ScenarioResult> {
  const { sessionsPerEra, changes, durationMs } = ctx.plan.listStorm;
  ctx.log(`list storm: ${sessionsPerEra} legacy + ${sessionsPerEra} modern sessions, ${changes} list changes in ${durationMs} ms`);
  const path = await startBrokerPath(ctx, ctx.memory, "list-storm", "legacy", range(sessionsPerEra).map(() => ""));
  const modern = LoadFleet.start(ctx.group, "list-storm-modern", ctx.plan.generators);
  try {
    await modern.open("modern", path.deployment.urls, range(sessionsPerEra).map(() => ""), { toolsListChanged: true });
    const backend = path.deployment.backend;
    await sleep(500);
    await backend.call("resetCounters", {});
    await Promise.all([path.fleet.watchLists(), modern.watchLists()]);
    const brokerBefore = await path.deployment.usage(false);
    const storm = await path.deployment.profiled("storm", async () => {
      const outcome = await backend.call("listStorm", { count: changes, durationMs });
      const marker = listVersionMarker(outcome.finalVersion);
      const deadline = Date.now() + HOLD_TIMEOUT_MS;
      let held = await Promise.all([path.fleet.listReport(marker), modern.listReport(marker)]);
      while (held.some((r) => r.holding < r.sessions) && Date.now() < deadline) {
        await sleep(50);
        held = await Promise.all([path.fleet.listReport(marker), modern.listReport(marker)]);
      }
      return outcome;
    });
    const marker = listVersionMarker(storm.finalVersion);
    const allHeldAt = nowMicros();
    // Stay past another debounce period so late reloads and late notifications are counted.
    await sleep(2_500);
    const reports = await Promise.all([path.fleet.listReport(marker), modern.listReport(marker)]);
    const counters = await backend.call("counters", {});
    const brokerAfter = await path.deployment.usage(false);
    const sessions = reports.reduce((n, r) => n + r.sessions, 0);
    const holding = reports.reduce((n, r) => n + r.holding, 0);
    const lastHeld = Math.max(...reports.map((r) => r.lastHeldMicros));
    const perEra = reports.map((r, i) => ({ era: i === 0 ? "legacy" : "modern", ...r }));
    const maxNotifications = Math.max(0, ...reports.flatMap((r) => r.notificationCounts.filter(([, n]) => n > 0).map(([count]) => count)));
    const minNotifications = Math.min(...reports.flatMap((r) => r.notificationCounts.filter(([, n]) => n > 0).map(([count]) => count)));
    const totalNotifications = reports.reduce((n, r) => n + r.notificationCounts.reduce((m, [count, s]) => m + count * s, 0), 0);
    const fromLast = holding === sessions ? (lastHeld - storm.lastMicros) / 1000 : Number.NaN;
    const fromFirst = holding === sessions ? (lastHeld - storm.firstMicros) / 1000 : Number.NaN;
    const brokerCpuMs = ((brokerAfter[0]?.cpuMicros ?? 0) - (brokerBefore[0]?.cpuMicros ?? 0)) / 1000;
    ctx.log(`  reloads ${counters.toolsListReloads}, notifications/session ${minNotifications}…${maxNotifications}, all ${sessions} hold the list ${fmt(fromLast)} ms after the last change (${holding}/${sessions}; waited until ${fmt((allHeldAt - storm.lastMicros) / 1000)} ms)`);

    const rows: ResultRow[] = [
      {
        scenario: SCENARIO,
        engine: ctx.memory.name,
        measure: `reloads for ${changes} list_changed in ${durationMs / 1000} s`,
        unit: "",
        broker: counters.toolsListReloads,
        baseline: null,
        ratio: null,
        target: `≤ ${MAX_RELOADS}`,
        met: counters.toolsListReloads <= MAX_RELOADS,
        status: "measured",
      },
      {
        scenario: SCENARIO,
        engine: ctx.memory.name,
        measure: "list_changed per session (max)",
        unit: "",
        broker: maxNotifications,
        baseline: null,
        ratio: null,
        target: `≤ ${MAX_NOTIFICATIONS}`,
        met: maxNotifications <= MAX_NOTIFICATIONS && minNotifications >= 1,
        status: "measured",
        note: `min ${minNotifications}, total ${totalNotifications} over ${sessions} sessions`,
      },
      {
        scenario: SCENARIO,
        engine: ctx.memory.name,
        measure: "time until every client holds the new list (from the last change)",
        unit: "ms",
        broker: fromLast,
        baseline: null,
        ratio: null,
        target: null,
        met: null,
        status: "measured",
        note: `${fmt(fromFirst)} ms from the first change; ${holding}/${sessions} sessions hold it`,
      },
    ];
    const findings: string[] = [];
    if (counters.toolsListReloads > MAX_RELOADS) findings.push(`${counters.toolsListReloads} reloads, ${counters.toolsListReloads - MAX_RELOADS} over the target of ${MAX_RELOADS}.`);
    if (maxNotifications > MAX_NOTIFICATIONS) findings.push(`Up to ${maxNotifications} list_changed per session, ${maxNotifications - MAX_NOTIFICATIONS} over the target of ${MAX_NOTIFICATIONS}.`);
    if (holding < sessions) findings.push(`${sessions - holding} of ${sessions} sessions never saw the final list within ${HOLD_TIMEOUT_MS / 1000} s.`);
    return {
      id: "list-storm",
      title: SCENARIO,
      method:
        `${sessionsPerEra} legacy sessions and ${sessionsPerEra} modern listen streams (toolsListChanged); the backend makes ${changes} tool-list changes in ${durationMs} ms, each followed by tools/list_changed. ` +
        "Each client re-lists tools on every list_changed it gets. Reloads = tools/list calls without a cursor reaching the backend.",
      rows,
      details: [
        {
          title: "Per era",
          columns: ["era", "sessions", "list_changed per session [count: sessions]", "tools/list calls", "errors", "holding the final list"],
          rows: perEra.map((r) => [r.era, r.sessions, r.notificationCounts.map(([c, s]) => `${c}: ${s}`).join(", "), r.listCalls, r.listErrors, r.holding]),
        },
        {
          title: "Storm",
          columns: ["changes", "emitted over ms", "reloads", "broker CPU ms during storm+settle", "time to all holding, from last change ms", "from first change ms"],
          rows: [[storm.emitted, fmt((storm.lastMicros - storm.firstMicros) / 1000), counters.toolsListReloads, fmt(brokerCpuMs), fmt(fromLast), fmt(fromFirst)]],
        },
      ],
      findings,
    };
  } finally {
    await modern.stop();
    await path.stop();
  }
}
