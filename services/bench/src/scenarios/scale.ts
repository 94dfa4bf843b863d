import { exposedUri } from "../core/bench-uris.js";
import { sleep } from "../core/clock.js";
import { raiseOpenFileLimit } from "../core/open-files.js";
import type { ProcessUsage } from "../core/process-usage.js";
import { H2_STREAMS_PER_CONNECTION } from "../load/h2-client.js";
import { fmt, kb, quantileOf } from "../report/format.js";
import { ratio, type ResultRow, type ScenarioResult } from "../report/result-model.js";
import type { BenchContext } from "./bench-context.js";
import { startBrokerPath, startRawPath, type BrokerPath, type RawPath } from "./delivery-paths.js";
import { runInterleaved, type StepOutcome } from "./rate-step.js";

const SCENARIO = "10. Sessions at scale";
const RSS_TARGET_KB = 20;
const BROADCAST_TARGET = 1.5;
/** Descriptors a process needs beside its sessions' streams (modules, pipes, keep-alive pools, Redis). */
const FD_RESERVE = 1_000;
/**
 * Streams per source address: a socket bound to a local address takes its port at bind time, from
 * the ephemeral range (32768–60999, ~28k) less the ports still in TIME_WAIT on that address, so a
 * source serves at most this many, and each server's climb has sources of its own.
 */
const STREAMS_PER_SOURCE = 10_000;
/** The third octet of each climb's loopback sources (127.0.<block>.1 and up). */
const SOURCE_BLOCK = { raw: 1, legacy: 2, modern: 3 } as const;

interface Point {
  era: "legacy" | "modern" | "raw";
  sessions: number;
  acceptMs: number;
  held: number;
  empty: ProcessUsage;
  full: ProcessUsage;
}

const perSession = (p: Point, field: "rss" | "heapUsed"): number => (p.full[field] - p.empty[field]) / p.sessions;
const fdsPerSession = (p: Point): number | null => (p.full.fds === undefined || p.empty.fds === undefined ? null : (p.full.fds - p.empty.fds) / p.sessions);

/**
 * `count` legacy sessions on a fresh memory-engine broker, each initialized and subscribed, with no
 * GET stream open: the broker's own state per session, without a socket each.
 */
async function streamlessClimb(ctx: BenchContext, count: number, settled: boolean): Promise<Point> {
  ctx.log(`scale: ${count.toLocaleString("en-US")} idle legacy sessions without streams`);
  const path = await startBrokerPath(ctx, ctx.memory, `scale-streamless-${count}`, "legacy", []);
  try {
    const sample = async (): Promise<ProcessUsage> => {
      const [usage] = await path.deployment.usage(settled);
      if (usage === undefined) throw new Error("no broker usage");
      return usage;
    };
    await sleep(ctx.plan.memory.settleMs);
    const empty = await sample();
    const acceptMs = await path.fleet.open("legacy", path.deployment.urls, Array.from({ length: count }, () => exposedUri(0)), { concurrency: 96, withoutStreams: true });
    await sleep(ctx.plan.memory.settleMs);
    const [census] = await path.deployment.census();
    const point: Point = { era: "legacy", sessions: count, acceptMs, held: census?.legacySessions ?? 0, empty, full: await sample() };
    ctx.log(`  legacy without streams: accepted in ${fmt(acceptMs / 1000)} s, RSS ${fmt(kb(perSession(point, "rss")))} KB/session, heap ${fmt(kb(perSession(point, "heapUsed")))} KB, fds ${fmt(fdsPerSession(point))}`);
    return point;
  } finally {
    await path.stop();
  }
}

/**
 * Scenario 10: one memory-engine broker holding `counts` idle subscribed sessions (legacy: session,
 * GET stream, one subscription; modern: one listen stream with one resource), all on one resource.
 * Per session: RSS, heap and file descriptors over the empty process; the time to accept them all;
 * sessions lost while they were set up (the broker's census against the count). Then, legacy
 * sessions, a broadcast: single updates to all of them, time until the last has it, against the
 * raw SSE server holding as many streams (measured in turns). Counts past what this machine's
 * open-file limit allows are reported as not run, with the limit; the largest count it allows is
 * measured instead.
 */
export async function runScale(ctx: BenchContext): Promise<ScenarioResult> {
  const { counts, broadcastUpdates, intervalMs, slices } = ctx.plan.scale;
  // The settled sample (GC, 6 s, GC) only in the full run: --quick checks that it all runs.
  const settled = ctx.plan.mode === "full";
  const rows: ResultRow[] = [];
  const findings: string[] = [];
  const table: (string | number)[][] = [];
  const broadcastTable: (string | number)[][] = [];
  const largest = Math.max(...counts);
  const limit = raiseOpenFileLimit(largest + FD_RESERVE);
  const capacity = Math.floor(Math.max(0, limit.soft - FD_RESERVE) / 1_000) * 1_000;
  const reachable = counts.filter((n) => n + FD_RESERVE <= limit.soft);
  // Counts the open-file limit keeps from HTTP/1.1 (a connection per stream) are held over HTTP/2,
  // many streams per connection (as behind a load balancer speaking HTTP/2 to the broker); the
  // largest count the limit allows is measured over HTTP/1.1 as well.
  const measured: { count: number; http2: boolean }[] = counts.map((count) => ({ count, http2: !reachable.includes(count) }));
  if (reachable.length < counts.length && capacity >= 1_000 && !counts.includes(capacity)) measured.unshift({ count: capacity, http2: false });
  const why = (n: number): string =>
    `${n.toLocaleString("en-US")} sessions over HTTP/1.1 need ${(n + FD_RESERVE).toLocaleString("en-US")} open files in the broker process (one per session stream), and this machine's limit is ${limit.soft.toLocaleString("en-US")} (hard ${limit.hard.toLocaleString("en-US")}; ${limit.refused ?? "raising it failed"})`;
  for (const n of counts.filter((c) => !reachable.includes(c))) {
    findings.push(`${n.toLocaleString("en-US")} sessions are held over HTTP/2 (h2c, ${H2_STREAMS_PER_CONNECTION.toLocaleString("en-US")} streams per connection): ${why(n)}.`);
  }

  for (const { count, http2 } of measured) {
    const at = count.toLocaleString("en-US");
    const over = http2 ? " over HTTP/2" : "";
    const stand = count === capacity && !counts.includes(count) ? ` (the most this machine's open-file limit allows over HTTP/1.1; targets stated for ${largest.toLocaleString("en-US")})` : over;
    // Each generator holds its share of the streams; more sources than one loopback address give more source ports.
    const generators = http2 ? ctx.plan.generators : Math.max(ctx.plan.generators, Math.ceil(count / Math.max(1, limit.soft - FD_RESERVE)));
    const sources = (era: keyof typeof SOURCE_BLOCK): string[] => Array.from({ length: Math.max(1, Math.ceil(count / STREAMS_PER_SOURCE)) }, (_, i) => `127.0.${SOURCE_BLOCK[era]}.${1 + i}`);
    const open = (era: keyof typeof SOURCE_BLOCK) => (http2 ? { http2: true, concurrency: 96 } : { localAddresses: sources(era), concurrency: 96 });
    const uris = Array.from({ length: count }, () => exposedUri(0));
    ctx.log(`scale: ${at} idle sessions (${generators} generators, ${http2 ? `over HTTP/2, ${H2_STREAMS_PER_CONNECTION} streams per connection` : `streams from ${sources("legacy").length} loopback addresses per server`})`);

    const climb = async <P extends RawPath | BrokerPath>(era: Point["era"], start: () => Promise<P>, openAll: (path: P) => Promise<number>, held: (path: P) => Promise<number>, sample: (path: P) => Promise<ProcessUsage>) => {
      const path = await start();
      try {
        await sleep(ctx.plan.memory.settleMs);
        const empty = await sample(path);
        const acceptMs = await openAll(path);
        await sleep(ctx.plan.memory.settleMs);
        const point: Point = { era, sessions: count, acceptMs, held: await held(path), empty, full: await sample(path) };
        ctx.log(`  ${era}: accepted in ${fmt(acceptMs / 1000)} s, RSS ${fmt(kb(perSession(point, "rss")))} KB/session, heap ${fmt(kb(perSession(point, "heapUsed")))} KB, fds ${fmt(fdsPerSession(point))}`);
        return { point, path };
      } catch (error) {
        await path.stop();
        throw error;
      }
    };
    const brokerSample = async (path: BrokerPath): Promise<ProcessUsage> => {
      const [usage] = await path.deployment.usage(settled);
      if (usage === undefined) throw new Error("no broker usage");
      return usage;
    };
    const census = async (path: BrokerPath, era: "legacy" | "modern"): Promise<number> => {
      const [c] = await path.deployment.census();
      return (era === "legacy" ? c?.legacySessions : c?.listens) ?? 0;
    };
    const brokerClimb = (era: "legacy" | "modern") =>
      climb(
        era,
        () => startBrokerPath(ctx, ctx.memory, `scale-${era}-${count}`, era, [], { generators }),
        (path) => path.fleet.open(era, path.deployment.urls, uris, open(era)),
        (path) => census(path, era),
        brokerSample,
      );
    const raw = await climb(
      "raw",
      () => startRawPath(ctx, `scale-raw-${count}`, [], { redis: ctx.redisUnavailable === undefined, generators, http2 }),
      (path) => path.fleet.open("raw", [path.rawUrl], uris.map(() => "0"), open("raw")),
      async () => count,
      (path) => path.memory(settled),
    );
    let legacy: Awaited<ReturnType<typeof brokerClimb>> | undefined;
    try {
      legacy = await brokerClimb("legacy");
      const legacyPath = legacy.path;
      // Broadcast to all of them, broker and raw taking turns.
      // Step numbers are integers (the update URI carries them): 100 per measured count.
      let step = 1_000 + measured.findIndex((m) => m.count === count && m.http2 === http2) * 100;
      const plan = { rate: 1000 / intervalMs, count: broadcastUpdates, uriCount: 1, uriOffset: 0 };
      const paths = ctx.redisUnavailable === undefined ? [raw.path, legacyPath] : [legacyPath];
      await runInterleaved(paths, { ...plan, count: 2 }, 1, () => ++step, () => ({ fanout: count, drainMs: ctx.plan.drainMs, trackSeq: true }));
      const outcomes = await runInterleaved(paths, plan, slices, () => ++step, (p) => ({ fanout: count, drainMs: ctx.plan.drainMs, trackSeq: true, ...(p === legacyPath && { profileAs: `broadcast-${count}` }) }));
      const b = outcomes.at(-1) as StepOutcome;
      const r = paths.length === 2 ? outcomes[0] : undefined;
      const p99 = quantileOf(b.lastReceiverMs, 0.99);
      const rawP99 = r === undefined ? null : quantileOf(r.lastReceiverMs, 0.99);
      const rt = ratio(p99, rawP99);
      for (const [label, o] of [["raw", r], ["broker (legacy)", b]] as const) {
        if (o !== undefined) broadcastTable.push([`${at}${over}`, label, o.emitted, o.incomplete, fmt(quantileOf(o.lastReceiverMs, 0.5)), fmt(quantileOf(o.lastReceiverMs, 0.99)), fmt(Math.max(...o.lastReceiverMs))]);
      }
      rows.push({
        scenario: SCENARIO,
        engine: "memory",
        measure: `broadcast to ${at}: time to last, p99${stand}`,
        unit: "ms",
        broker: p99,
        baseline: rawP99,
        ratio: rt,
        target: `≤ ${BROADCAST_TARGET}× raw`,
        met: rt === null ? null : rt <= BROADCAST_TARGET && b.incomplete === 0,
        status: "measured",
        ...(ctx.redisUnavailable !== undefined && { note: `baseline not run: ${ctx.redisUnavailable}` }),
        ...(b.incomplete > 0 && { note: `${b.incomplete} of ${b.emitted} updates did not reach every session` }),
      });
      if (rt !== null && rt > BROADCAST_TARGET) findings.push(`broadcast to ${at}${over}: p99 ${fmt(p99)} ms vs raw ${fmt(rawP99)} ms (${rt.toFixed(2)}×, target ≤ ${BROADCAST_TARGET}×).`);
    } finally {
      await legacy?.path.stop();
      await raw.path.stop();
    }
    const modern = await brokerClimb("modern");
    await modern.path.stop();

    if (legacy === undefined) throw new Error("the legacy climb did not finish");
    for (const point of [raw.point, legacy.point, modern.point]) {
      table.push([`${point.era}${over}`, at, fmt(point.acceptMs / 1000), point.held, fmt(kb(perSession(point, "rss"))), fmt(kb(perSession(point, "heapUsed"))), fmt(fdsPerSession(point)), fmt(point.full.rss / 1024 / 1024), point.full.reducerGcs ?? ""]);
      if (point.era === "raw") continue;
      const rss = kb(perSession(point, "rss"));
      const rawRss = kb(perSession(raw.point, "rss"));
      const lost = count - point.held;
      const base = { scenario: SCENARIO, engine: "memory" as const, status: "measured" as const };
      rows.push({ ...base, measure: `RSS per idle ${point.era} session @ ${at}${stand}`, unit: "KB", broker: rss, baseline: rawRss, ratio: ratio(rss, rawRss), target: `≤ ${RSS_TARGET_KB} KB`, met: rss <= RSS_TARGET_KB });
      rows.push({ ...base, measure: `heap per idle ${point.era} session @ ${at}${over}`, unit: "KB", broker: kb(perSession(point, "heapUsed")), baseline: kb(perSession(raw.point, "heapUsed")), ratio: ratio(perSession(point, "heapUsed"), perSession(raw.point, "heapUsed")), target: null, met: null });
      rows.push({ ...base, measure: `file descriptors per idle ${point.era} session @ ${at}${over}`, unit: "", broker: fdsPerSession(point), baseline: fdsPerSession(raw.point), ratio: ratio(fdsPerSession(point), fdsPerSession(raw.point)), target: null, met: null });
      rows.push({ ...base, measure: `time to accept ${at} ${point.era} sessions${over}`, unit: "ms", broker: point.acceptMs, baseline: raw.point.acceptMs, ratio: ratio(point.acceptMs, raw.point.acceptMs), target: null, met: null });
      rows.push({ ...base, measure: `${point.era} sessions lost while ${at} were set up${over}`, unit: "", broker: lost, baseline: null, ratio: null, target: "0", met: lost === 0 });
      if (rss > RSS_TARGET_KB) findings.push(`${point.era} @ ${at}${over}: ${fmt(rss)} KB RSS per session, over the ${RSS_TARGET_KB} KB target.`);
    }
  }

  // Sessions without a stream need no descriptor each: the largest count is reached that way
  // whatever the open-file limit, which measures what the broker itself keeps per session.
  const streamless = await streamlessClimb(ctx, largest, settled);
  const at = largest.toLocaleString("en-US");
  const base = { scenario: SCENARIO, engine: "memory" as const, status: "measured" as const, baseline: null, ratio: null, target: null, met: null };
  rows.push({ ...base, measure: `RSS per idle legacy session without an open stream @ ${at}`, unit: "KB", broker: kb(perSession(streamless, "rss")) });
  rows.push({ ...base, measure: `heap per idle legacy session without an open stream @ ${at}`, unit: "KB", broker: kb(perSession(streamless, "heapUsed")) });
  rows.push({ ...base, measure: `time to accept ${at} legacy sessions without streams (initialize, initialized, subscribe)`, unit: "ms", broker: streamless.acceptMs });
  rows.push({ ...base, measure: `legacy sessions without streams lost while ${at} were set up`, unit: "", broker: largest - streamless.held, target: "0", met: streamless.held === largest });
  table.push(["legacy, no stream", at, fmt(streamless.acceptMs / 1000), streamless.held, fmt(kb(perSession(streamless, "rss"))), fmt(kb(perSession(streamless, "heapUsed"))), fmt(fdsPerSession(streamless)), fmt(streamless.full.rss / 1024 / 1024), streamless.full.reducerGcs ?? ""]);
  findings.push(
    `${at} legacy sessions without an open stream (each initialized and subscribed, its client away: what an agent between turns leaves; updates wait in its resume history): ${fmt(kb(perSession(streamless, "rss")))} KB RSS and ${fmt(kb(perSession(streamless, "heapUsed")))} KB heap per session, accepted in ${fmt(streamless.acceptMs / 1000)} s, ${largest - streamless.held} lost. This is the broker's own state per session; a stream adds its socket (compare the rows with streams at the counts measured).`,
  );

  return {
    id: "scale",
    title: SCENARIO,
    method:
      `Counts ${counts.map((n) => n.toLocaleString("en-US")).join(" and ")}, each over HTTP/1.1 (one connection per stream) when the machine's open-file limit allows it, else over HTTP/2 without TLS (h2c: the generators' sessions share connections, ${H2_STREAMS_PER_CONNECTION.toLocaleString("en-US")} streams each, as behind a load balancer that speaks HTTP/2 to the broker; the raw server is reached the same way), and then the largest count the limit allows over HTTP/1.1. One memory-engine broker process per era; all sessions subscribed to bench+bench://r/0. ` +
      `Each server is sampled ${settled ? "settled (as in scenario 4)" : "as it is (quick run: not settled, so RSS figures are rough)"}, after ${ctx.plan.memory.settleMs / 1000} s idle, before any session and again with all of them: per session = growth ÷ sessions (file descriptors from /proc/<pid>/fd). ` +
      "Time to accept = from the first handshake until every session is open (the generators open 96 at a time each). Lost = sessions the broker's census does not hold once all opened. " +
      `Then ${largest.toLocaleString("en-US")} legacy sessions on a fresh broker without streams (initialize, initialized, one subscribe each, no GET stream: a client away between turns), sampled the same way: they need no open file each, so this count is reached whatever the limit; no baseline (the raw server keeps nothing for a client without a stream). ` +
      `Broadcast: ${broadcastUpdates} single updates ${intervalMs} ms apart to all legacy sessions, in ${slices} slices alternating with the raw SSE server holding as many streams (fed from Redis), time until the last session has each; p99 over the updates. ` +
      `Setup the bench does itself: the open-file limit is raised with prlimit before any process starts (children inherit it; this machine: soft ${limit.soft}, hard ${limit.hard}${limit.refused === undefined ? "" : `; ${limit.refused}`}); ` +
      `streams connect from loopback aliases (127.0.1.1 and up for the raw server, 127.0.2.x legacy, 127.0.3.x modern; Linux routes all of 127/8 to lo), one per ${STREAMS_PER_SOURCE.toLocaleString("en-US")} streams: a socket bound to a source address takes its port from that address's ~28k ephemeral ports, less those still in TIME_WAIT; more generator processes when one cannot hold its share.`,
    rows,
    details: [
      { title: "Idle sessions", columns: ["server", "sessions", "accepted in s", "held", "RSS/session KB", "heap/session KB", "fds/session", "RSS MB", "memory reducer GCs while settling"], rows: table },
      { title: "Broadcast", columns: ["sessions", "path", "updates", "incomplete", "last-receiver p50 ms", "last-receiver p99 ms", "worst ms"], rows: broadcastTable },
    ],
    findings,
  };
}
