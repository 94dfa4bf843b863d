import { exposedUri } from "../core/bench-uris.js";
import { sleep } from "../core/clock.js";
import type { ProcessUsage } from "../core/process-usage.js";
import { fmt, kb, range } from "../report/format.js";
import { ratio, type ResultRow, type ScenarioResult } from "../report/result-model.js";
import type { BenchContext } from "./bench-context.js";
import { startBrokerPath, startRawPath } from "./delivery-paths.js";

const SCENARIO = "4. Memory";
const TARGET_KB = 30;

interface MemoryPoint {
  sessions: number;
  rssPerSession: number;
  heapPerSession: number;
  rss: number;
  heapUsed: number;
}


/**
 * Scenario 4: memory of idle subscribed sessions. A fresh server is sampled after `settleMs` idle
 * and two full GCs, then sessions are added up to each count (each subscribed to one of `uriPool` resources, then
 * idle for `settleMs`), and sampled again: per session = (now − empty) ÷ sessions. Legacy sessions hold an
 * initialize'd session, its GET stream and one subscription; modern ones one listen stream with one
 * resource. Baseline: a plain Node SSE server holding the same number of idle streams.
 */
export async function runMemory(ctx: BenchContext): Promise<ScenarioResult> {
  const { counts, uriPool, settleMs } = ctx.plan.memory;
  const rows: ResultRow[] = [];
  const table: (string | number)[][] = [];

  const climb = async (
    label: string,
    sample: () => Promise<ProcessUsage>,
    open: (from: number, to: number) => Promise<unknown>,
    snapshot: (name: string) => Promise<void> = async () => undefined,
  ): Promise<MemoryPoint[]> => {
    await sleep(settleMs);
    const empty = await sample();
    await snapshot("empty");
    const points: MemoryPoint[] = [];
    let opened = 0;
    for (const count of counts) {
      await open(opened, count);
      opened = count;
      await sleep(settleMs);
      const now = await sample();
      const point = { sessions: count, rssPerSession: (now.rss - empty.rss) / count, heapPerSession: (now.heapUsed - empty.heapUsed) / count, rss: now.rss, heapUsed: now.heapUsed };
      points.push(point);
      const heapTotalPerSession = (now.heapTotal - empty.heapTotal) / count;
      table.push([label, count, fmt(kb(empty.rss) / 1024), fmt(kb(now.rss) / 1024), fmt(kb(point.rssPerSession)), fmt(kb(now.heapUsed) / 1024), fmt(kb(point.heapPerSession)), fmt(kb(heapTotalPerSession)), `${fmt(kb(empty.youngGen) / 1024)} → ${fmt(kb(now.youngGen) / 1024)}`]);
      ctx.log(`  ${label} ${count}: RSS ${fmt(kb(point.rssPerSession))} KB/session, heap ${fmt(kb(point.heapPerSession))} KB/session`);
    }
    await snapshot(`${opened}-sessions`);
    return points;
  };

  ctx.log("memory: raw SSE baseline");
  const raw = await startRawPath(ctx, "memory-raw", [], { redis: false });
  let rawPoints: MemoryPoint[];
  try {
    rawPoints = await climb("raw SSE", () => raw.memory(true), (from, to) => raw.fleet.open("raw", [raw.rawUrl], range(to - from, from).map((i) => String(i % uriPool))));
  } finally {
    await raw.stop();
  }

  for (const era of ["legacy", "modern"] as const) {
    ctx.log(`memory: ${era} sessions on the ${ctx.memory.name} broker`);
    const path = await startBrokerPath(ctx, ctx.memory, `memory-${era}`, era, []);
    let points: MemoryPoint[];
    try {
      const sample = async (): Promise<ProcessUsage> => {
        const [usage] = await path.deployment.usage(true);
        if (usage === undefined) throw new Error("no broker usage");
        return usage;
      };
      points = await climb(
        `broker ${era}`,
        sample,
        (from, to) => path.fleet.open(era, path.deployment.urls, range(to - from, from).map((i) => exposedUri(i % uriPool))),
        (name) => path.deployment.heapSnapshot(name),
      );
      const [census] = await path.deployment.census();
      const held = era === "legacy" ? census?.legacySessions : census?.listens;
      if (held !== counts.at(-1)) throw new Error(`broker holds ${held ?? 0} ${era} sessions, expected ${counts.at(-1)}`);
    } finally {
      await path.stop();
    }
    points.forEach((p, i) => {
      const r = rawPoints[i];
      const n = p.sessions.toLocaleString("en-US");
      const rssRatio = ratio(p.rssPerSession, r?.rssPerSession ?? null);
      rows.push({
        scenario: SCENARIO,
        engine: ctx.memory.name,
        measure: `RSS per idle ${era} session @ ${n}`,
        unit: "KB",
        broker: kb(p.rssPerSession),
        baseline: r === undefined ? null : kb(r.rssPerSession),
        ratio: rssRatio,
        target: `≤ ${TARGET_KB} KB`,
        met: kb(p.rssPerSession) <= TARGET_KB,
        status: "measured",
      });
      rows.push({
        scenario: SCENARIO,
        engine: ctx.memory.name,
        measure: `heap per idle ${era} session @ ${n}`,
        unit: "KB",
        broker: kb(p.heapPerSession),
        baseline: r === undefined ? null : kb(r.heapPerSession),
        ratio: ratio(p.heapPerSession, r?.heapPerSession ?? null),
        target: null,
        met: null,
        status: "measured",
      });
    });
  }
  const findings = rows
    .filter((r) => r.met === false && r.broker !== null)
    .map((r) => `${r.measure}: ${fmt(r.broker)} KB, ${fmt((r.broker ?? 0) - TARGET_KB)} KB over the ${TARGET_KB} KB target (raw SSE: ${fmt(r.baseline)} KB).`);
  return {
    id: "memory",
    title: SCENARIO,
    method:
      `Server process sampled (process.memoryUsage after ${settleMs / 1000} s idle and two forced GCs) empty, then with ${counts.join(" and ")} idle sessions, each subscribed to one of ${uriPool} resources; per session = growth ÷ sessions. ` +
      "Sessions are opened by the load generators (not counted). Baseline: a plain Node SSE server process holding as many idle streams.",
    rows,
    details: [{ title: "Samples", columns: ["server", "sessions", "RSS empty MB", "RSS MB", "RSS/session KB", "heap used MB", "heap used/session KB", "heap committed/session KB", "young generation MB (empty → now)"], rows: table }],
    findings,
  };
}
