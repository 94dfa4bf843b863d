import { exposedUri } from "../core/bench-uris.js";
import { fmt, range } from "../report/format.js";
import { notRun, ratio, type ChartSeries, type DetailTable, type ResultRow, type ScenarioResult } from "../report/result-model.js";
import type { BenchContext } from "./bench-context.js";
import { describeEngines, startBrokerPath, startRawPath, upstreamNote, type RunningPath } from "./delivery-paths.js";
import { describeCpu, describeLoadCpu, runInterleaved, type StepOutcome } from "./rate-step.js";

const SCENARIO = "1. Unicast";
/** The rate measured longest (its p99 over more of the machine's stalls moves less between runs). */
const TARGET_RATE = 5_000;
/** The rates whose p99 has a target (issue 19 added 10k and 20k/s to 5k/s). */
const TARGET_RATES: readonly number[] = [5_000, 10_000, 20_000];
const TARGET_RATIO = 2;

/**
 * Scenario 1: N sessions, session k subscribed to resource k alone; the source emits round-robin
 * over the N resources at rising rates, so each update has exactly one receiver. At each rate the
 * broker and the baseline take turns in slices (see runInterleaved).
 */
export async function runUnicast(ctx: BenchContext): Promise<ScenarioResult> {
  const { sessions, rates, stepSeconds, slices, warmupSeconds, target } = ctx.plan.unicast;
  const stepOf = (rate: number) => (rate === TARGET_RATE ? target : { stepSeconds, slices });
  const stepsText =
    target.stepSeconds === stepSeconds && target.slices === slices
      ? `${stepSeconds} s per rate in ${slices} slices`
      : `${stepSeconds} s per rate in ${slices} slices (at ${TARGET_RATE.toLocaleString("en-US")}/s: ${target.stepSeconds} s in ${target.slices})`;
  const rows: ResultRow[] = [];
  const details: DetailTable[] = [];
  const series: ChartSeries[] = [];
  const findings: string[] = [];
  const keys = range(sessions);
  const measure = (rate: number): string => `p99 latency @ ${rate.toLocaleString("en-US")} updates/s`;
  const targetOf = (rate: number): string | null => (TARGET_RATES.includes(rate) ? `≤ ${TARGET_RATIO}× raw` : null);
  const rawReason = ctx.redisUnavailable;
  let step = 100;
  const nextStep = (): number => ++step;

  for (const engine of ctx.engines) {
    if (engine.unavailableReason !== undefined) {
      for (const rate of rates) rows.push(notRun(SCENARIO, engine.name, measure(rate), "ms", targetOf(rate), engine.unavailableReason));
      continue;
    }
    ctx.log(`unicast: ${engine.name} broker, ${sessions} legacy sessions`);
    const broker = await startBrokerPath(ctx, engine, `unicast-${engine.name}`, "legacy", keys.map(exposedUri));
    let raw: RunningPath | undefined;
    try {
      // The baseline is measured again with each engine, in slices alternating with it, so every
      // ratio compares figures taken side by side.
      if (rawReason === undefined) raw = await startRawPath(ctx, `unicast-raw-${engine.name}`, keys.map(String), { redis: true, cluster: engine.redisCluster });
      const paths = raw === undefined ? [broker] : [raw, broker];
      const plan = (rate: number, seconds: number) => ({ rate, count: Math.round(rate * seconds), uriCount: sessions, uriOffset: 0 });
      await runInterleaved(paths, plan(1_000, warmupSeconds), 1, nextStep, () => ({ fanout: 1, drainMs: ctx.plan.drainMs }));
      const brokerOutcomes: StepOutcome[] = [];
      const rawOutcomes: StepOutcome[] = [];
      for (const rate of rates) {
        const step = stepOf(rate);
        const outcomes = await runInterleaved(paths, plan(rate, step.stepSeconds), step.slices, nextStep, (path) => ({
          fanout: 1,
          drainMs: ctx.plan.drainMs,
          ...(path === broker && { profileAs: `${rate}-per-s` }),
        }));
        const b = outcomes.at(-1) as StepOutcome;
        brokerOutcomes.push(b);
        if (raw !== undefined) {
          const r = outcomes[0] as StepOutcome;
          rawOutcomes.push(r);
          ctx.log(`  raw    @${rate}/s: p50 ${fmt(r.p50Ms)} p99 ${fmt(r.p99Ms)} ms, ${fmt(r.deliveredPerSec)}/s, lost ${r.lost} (${describeCpu(r.cpu)})`);
        }
        ctx.log(`  broker @${rate}/s: p50 ${fmt(b.p50Ms)} p99 ${fmt(b.p99Ms)} ms, ${fmt(b.deliveredPerSec)}/s, lost ${b.lost} (${describeCpu(b.cpu)})`);
      }
      rates.forEach((rate, i) => {
        const b = brokerOutcomes[i];
        const r = rawOutcomes[i];
        if (b === undefined) return;
        const rt = ratio(b.p99Ms, r?.p99Ms ?? null);
        const target = targetOf(rate);
        rows.push({
          scenario: SCENARIO,
          engine: engine.name,
          measure: measure(rate),
          unit: "ms",
          broker: b.p99Ms,
          baseline: r?.p99Ms ?? null,
          ratio: rt,
          target,
          met: target === null || rt === null ? null : rt <= TARGET_RATIO,
          status: "measured",
          cpu: describeLoadCpu(b.cpu),
          note: [
            `p50 ${fmt(b.p50Ms)} vs ${fmt(r?.p50Ms)} ms; p99.9 ${fmt(b.p999Ms)} vs ${fmt(r?.p999Ms)} ms; delivered ${fmt(b.deliveredPerSec)} vs ${fmt(r?.deliveredPerSec)}/s`,
            b.lost > 0 ? `broker lost ${b.lost}` : "",
            b.achievedRate < 0.95 * rate ? `the broker back-pressured the backend: only ${fmt(b.achievedRate)} updates/s could be emitted` : "",
            rawReason !== undefined ? `baseline not run: ${rawReason}` : "",
            upstreamNote(broker),
          ]
            .filter((s) => s !== "")
            .join("; "),
        });
        if (target !== null && rt !== null && rt > TARGET_RATIO) {
          findings.push(`${engine.name}: p99 at ${rate}/s is ${rt.toFixed(2)}× the raw path (${fmt(b.p99Ms)} ms vs ${fmt(r?.p99Ms)} ms), ${(rt / TARGET_RATIO).toFixed(2)}× over the ${TARGET_RATIO}× target.`);
        }
      });
      details.push(stepTable(`${engine.name} engine vs raw (ioredis → Node SSE), ${sessions} sessions, ${stepsText}, alternating`, rates, brokerOutcomes, rawOutcomes));
      series.push(
        { chart: "unicast", label: `broker p50 (${engine.name})`, points: brokerOutcomes.map((o) => [o.offeredRate, o.p50Ms]) },
        { chart: "unicast", label: `broker p99 (${engine.name})`, points: brokerOutcomes.map((o) => [o.offeredRate, o.p99Ms]) },
      );
      if (raw !== undefined) {
        series.push(
          { chart: "unicast", label: `raw p50 (beside ${engine.name})`, points: rawOutcomes.map((o) => [o.offeredRate, o.p50Ms]) },
          { chart: "unicast", label: `raw p99 (beside ${engine.name})`, points: rawOutcomes.map((o) => [o.offeredRate, o.p99Ms]) },
        );
      }
    } finally {
      await broker.stop();
      await raw?.stop();
    }
  }
  return {
    id: "unicast",
    title: SCENARIO,
    method:
      `${sessions} legacy sessions, session k subscribed to bench+bench://r/k; the backend emits resources/updated for bench://r/k/<step>.<seq>.<µs> round-robin over k at each rate, ` +
      `${stepsText} alternating with the baseline, which is measured again beside each engine. Latency = reader clock − emit timestamp in the URI. ` +
      "Baseline: the same updates published on Redis (ioredis) to a plain Node SSE server that writes one frame per update to the one stream of that key; " +
      "beside the redis-cluster engine, on the same Redis Cluster (since 2026-11-28; one Redis before): SPUBLISH of each key's own sharded channel, so the keys spread over the masters by slot, and the server holds one SSUBSCRIBE connection per master (ioredis `shardedSubscribers`). " +
      describeEngines(ctx),
    rows,
    details,
    findings,
    series,
  };
}

function stepTable(title: string, rates: number[], broker: StepOutcome[], raw: StepOutcome[]): DetailTable {
  const rows: (string | number)[][] = [];
  rates.forEach((rate, i) => {
    for (const [path, o] of [
      ["broker", broker[i]],
      ["raw", raw[i]],
    ] as const) {
      if (o === undefined) continue;
      rows.push([rate, path, fmt(o.achievedRate), fmt(o.deliveredPerSec), fmt(o.p50Ms), fmt(o.p99Ms), fmt(o.p999Ms), fmt(o.maxMs), o.lost, describeCpu(o.cpu)]);
    }
  });
  return { title, columns: ["offered/s", "path", "emitted/s", "delivered/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "lost", "CPU (% of a core)"], rows };
}
