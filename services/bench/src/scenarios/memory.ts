import { exposedUri } from "../core/bench-uris.js";
import { sleep } from "../core/clock.js";
import type { ProcessUsage } from "../core/process-usage.js";
import { fmt, kb, range } from "../report/format.js";
import { ratio, type ResultRow, type ScenarioResult } from "../report/result-model.js";
import type { BenchContext } from "./bench-context.js";
import { startBrokerPath, startRawPath } from "./delivery-paths.js";

const SCENARIO = "4. Memory";
const TARGET_KB = 30;
/** Sessions opened and ended before the "empty" sample, so one-time costs of a first use are not counted per session. */
const WARMUP_SESSIONS = 50;

interface MemoryPoint {
  sessions: number;
  rssPerSession: number;
  heapPerSession: number;
  rss: number;
  heapUsed: number;
}


interface Climb {
  points: MemoryPoint[];
  table: (string | number)[][];
  /** What the first sessions cost once, for the report. */
  warmup: string;
}

/**
 * Scenario 4: memory of idle subscribed sessions. Each server is sampled fresh, then after
 * WARMUP_SESSIONS sessions came and went ("empty"), then with sessions added up to each count (each
 * subscribed to one of `uriPool` resources): per session = (now − empty) ÷ sessions. Every sample is
 * taken after `settleMs` idle, settled (see settledUsage). Legacy sessions hold an initialize'd
 * session, its GET stream and one subscription; modern ones one listen stream with one resource.
 * Baseline: a plain Node SSE server holding the same number of idle streams. The three servers (raw,
 * legacy, modern) climb side by side, each in its own processes: memory is per process, and the
 * idle waits then overlap.
 */
export async function runMemory(ctx: BenchContext): Promise<ScenarioResult> {
  const { counts, uriPool, settleMs, sampleFresh } = ctx.plan.memory;
  const rows: ResultRow[] = [];

  const climb = async (
    label: string,
    sample: () => Promise<ProcessUsage>,
    open: (from: number, to: number) => Promise<unknown>,
    closeAll: () => Promise<void>,
    snapshot: (name: string) => Promise<void> = async () => undefined,
  ): Promise<Climb> => {
    const table: (string | number)[][] = [];
    const mb = (bytes: number): string => fmt(kb(bytes) / 1024);
    const reducer = (usage: ProcessUsage): string | number => usage.reducerGcs ?? "";
    const zeroRow = (sessions: string, usage: ProcessUsage): (string | number)[] => [label, sessions, "", mb(usage.rss), "", mb(usage.heapUsed), "", "", mb(usage.youngGen), reducer(usage)];
    // A process's first sessions load and compile code and fill caches once (about 5 MB in the
    // broker): that is not a cost per session, so the "empty" sample is taken after some sessions
    // came and went. The fresh process is sampled too, and the difference reported.
    let fresh: ProcessUsage | undefined;
    if (sampleFresh) {
      await sleep(settleMs);
      fresh = await sample();
      table.push(zeroRow("0 (fresh)", fresh));
    }
    await open(0, WARMUP_SESSIONS);
    await closeAll();
    await sleep(settleMs);
    const empty = await sample();
    table.push(zeroRow(`0 (after ${WARMUP_SESSIONS} came and went)`, empty));
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
      table.push([label, count, mb(empty.rss), mb(now.rss), fmt(kb(point.rssPerSession)), mb(now.heapUsed), fmt(kb(point.heapPerSession)), fmt(kb(heapTotalPerSession)), `${mb(empty.youngGen)} → ${mb(now.youngGen)}`, reducer(now)]);
      ctx.log(`  ${label} ${count}: RSS ${fmt(kb(point.rssPerSession))} KB/session, heap ${fmt(kb(point.heapPerSession))} KB/session`);
    }
    await snapshot(`${opened}-sessions`);
    const warmup = fresh === undefined ? `${label}: not sampled (quick run)` : `${label}: +${mb(empty.rss - fresh.rss)} MB RSS, +${mb(empty.heapUsed - fresh.heapUsed)} MB heap`;
    return { points, table, warmup };
  };

  const rawClimb = async (): Promise<Climb> => {
    const raw = await startRawPath(ctx, "memory-raw", [], { redis: false });
    try {
      return await climb("raw SSE", () => raw.memory(true), (from, to) => raw.fleet.open("raw", [raw.rawUrl], range(to - from, from).map((i) => String(i % uriPool))), () => raw.fleet.closeAll());
    } finally {
      await raw.stop();
    }
  };

  const brokerClimb = async (era: "legacy" | "modern"): Promise<Climb> => {
    const path = await startBrokerPath(ctx, ctx.memory, `memory-${era}`, era, []);
    try {
      const sample = async (): Promise<ProcessUsage> => {
        const [usage] = await path.deployment.usage(true);
        if (usage === undefined) throw new Error("no broker usage");
        return usage;
      };
      const result = await climb(
        `broker ${era}`,
        sample,
        (from, to) => path.fleet.open(era, path.deployment.urls, range(to - from, from).map((i) => exposedUri(i % uriPool))),
        () => path.fleet.closeAll(),
        (name) => path.deployment.heapSnapshot(name),
      );
      const [census] = await path.deployment.census();
      const held = era === "legacy" ? census?.legacySessions : census?.listens;
      if (held !== counts.at(-1)) throw new Error(`broker holds ${held ?? 0} ${era} sessions, expected ${counts.at(-1)}`);
      return result;
    } finally {
      await path.stop();
    }
  };

  ctx.log(`memory: raw SSE baseline, legacy and modern sessions on the ${ctx.memory.name} broker, side by side`);
  // All settle before a failure is reported, so no climb goes on into the next scenario.
  const settled = await Promise.allSettled([rawClimb(), brokerClimb("legacy"), brokerClimb("modern")]);
  const failed = settled.find((outcome) => outcome.status === "rejected");
  if (failed !== undefined) throw failed.reason;
  const [raw, legacy, modern] = settled.map((outcome) => (outcome as PromiseFulfilledResult<Climb>).value) as [Climb, Climb, Climb];
  for (const [era, { points }] of [["legacy", legacy], ["modern", modern]] as const) {
    points.forEach((p, i) => {
      const r = raw.points[i];
      const n = p.sessions.toLocaleString("en-US");
      rows.push({
        scenario: SCENARIO,
        engine: ctx.memory.name,
        measure: `RSS per idle ${era} session @ ${n}`,
        unit: "KB",
        broker: kb(p.rssPerSession),
        baseline: r === undefined ? null : kb(r.rssPerSession),
        ratio: ratio(p.rssPerSession, r?.rssPerSession ?? null),
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
  const climbs = [raw, legacy, modern];
  const table = climbs.flatMap((c) => c.table);
  const warmups = climbs.map((c) => c.warmup);
  const findings = rows
    .filter((r) => r.met === false && r.broker !== null)
    .map((r) => `${r.measure}: ${fmt(r.broker)} KB, ${fmt((r.broker ?? 0) - TARGET_KB)} KB over the ${TARGET_KB} KB target (raw SSE: ${fmt(r.baseline)} KB).`);
  return {
    id: "memory",
    title: SCENARIO,
    method:
      `Server process sampled settled, as V8 leaves an idle process (process.memoryUsage after ${settleMs / 1000} s idle, then a forced full GC, then until V8's memory reducer has compacted the heap (its round of GCs, waited for at most 30 s; the samples table counts them), then two more forced GCs so that V8 gives back a grown young generation; core/process-usage.ts settledUsage) ` +
      `${sampleFresh ? "fresh; then " : ""}after ${WARMUP_SESSIONS} sessions were opened and ended (legacy: DELETE) — the "empty" sample, so that one-time costs of the first sessions (code loaded and compiled, caches) are not counted per session; ` +
      `then with ${counts.join(" and ")} idle sessions, each subscribed to one of ${uriPool} resources; per session = growth over "empty" ÷ sessions. ` +
      "Sessions are opened by the load generators (not counted). Baseline: a plain Node SSE server process holding as many idle streams, sampled the same way. The three servers climb side by side (each its own processes).",
    rows,
    details: [{ title: `Samples (one-time cost of the first ${WARMUP_SESSIONS} sessions, not counted per session: ${warmups.join("; ")})`, columns: ["server", "sessions", "RSS empty MB", "RSS MB", "RSS/session KB", "heap used MB", "heap used/session KB", "heap committed/session KB", "young generation MB (empty → now)", "memory reducer GCs while settling"], rows: table }],
    findings,
  };
}
