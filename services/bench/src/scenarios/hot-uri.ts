import { exposedUri } from "../core/bench-uris.js";
import { fmt } from "../report/format.js";
import { notRun, ratio, type ChartSeries, type DetailTable, type ResultRow, type ScenarioResult } from "../report/result-model.js";
import type { BenchContext } from "./bench-context.js";
import { describeEngines, startBrokerPath, startRawPath, upstreamNote, type RunningPath } from "./delivery-paths.js";
import { describeCpu, describeLoadCpu, runInterleaved, type StepOutcome } from "./rate-step.js";

const SCENARIO = "2. Hot URI";
const MEASURE = "deliveries/s at p99 ≤ 100 ms";
const TARGET = "≥ 0.5× raw";
/** A step passes when p99 is within the limit and (almost) nothing is lost. */
const MAX_LOSS = 0.001;

interface Ladder {
  path: RunningPath;
  outcomes: StepOutcome[];
  /** Consecutive failing steps; the path leaves the ladder at FAILS_TO_STOP. */
  fails: number;
}

/** One unlucky step on a shared machine does not end a path's climb; two in a row do. */
const FAILS_TO_STOP = 2;

/**
 * Scenario 2: N sessions all subscribed to one resource; the source emits on it at rising rates
 * (each update fans out to N). The figure is the highest delivered/s of a step whose p99 stayed
 * ≤ 100 ms with no loss; each path stops climbing after its first failing step. Baseline: the
 * plain SSE server writing one pre-encoded frame per update to all N streams (fed from Redis).
 */
export async function runHotUri(ctx: BenchContext): Promise<ScenarioResult> {
  const { sessions, rates, stepSeconds, slices, p99LimitMs } = ctx.plan.hotUri;
  const rows: ResultRow[] = [];
  const details: DetailTable[] = [];
  const series: ChartSeries[] = [];
  const findings: string[] = [];
  let step = 200;
  const nextStep = (): number => ++step;
  const plan = (rate: number, seconds: number) => ({ rate, count: Math.max(1, Math.round(rate * seconds)), uriCount: 1, uriOffset: 0 });
  const passes = (o: StepOutcome): boolean => o.p99Ms <= p99LimitMs && o.lost <= o.expected * MAX_LOSS;
  const bestStep = (ladder: Ladder): StepOutcome | undefined =>
    ladder.outcomes.filter(passes).reduce<StepOutcome | undefined>((top, o) => (top === undefined || o.deliveredPerSec > top.deliveredPerSec ? o : top), undefined);
  const best = (ladder: Ladder | undefined): number | null => {
    if (ladder === undefined) return null;
    const ok = ladder.outcomes.filter(passes).map((o) => o.deliveredPerSec);
    return ok.length === 0 ? 0 : Math.max(...ok);
  };

  for (const engine of ctx.engines) {
    if (engine.unavailableReason !== undefined) {
      rows.push(notRun(SCENARIO, engine.name, MEASURE, "/s", TARGET, engine.unavailableReason));
      continue;
    }
    ctx.log(`hot URI: ${engine.name} broker, ${sessions} legacy sessions on one URI`);
    const broker = await startBrokerPath(ctx, engine, `hot-${engine.name}`, "legacy", Array.from({ length: sessions }, () => exposedUri(0)));
    let raw: RunningPath | undefined;
    let rawLadder: Ladder | undefined;
    try {
      // The baseline climbs again beside each engine, so every ratio compares figures taken side by side.
      if (ctx.redisUnavailable === undefined) raw = await startRawPath(ctx, `hot-raw-${engine.name}`, Array.from({ length: sessions }, () => "0"), { redis: true, cluster: engine.redisCluster });
      const ladders: Ladder[] = [{ path: broker, outcomes: [], fails: 0 }];
      if (raw !== undefined) {
        rawLadder = { path: raw, outcomes: [], fails: 0 };
        ladders.push(rawLadder);
      }
      await runInterleaved(ladders.map((l) => l.path), plan(rates[0] ?? 10, 1), 1, nextStep, () => ({ fanout: sessions, drainMs: ctx.plan.drainMs }));
      for (const rate of rates) {
        // Paths still climbing take turns in slices.
        const climbing = ladders.filter((l) => l.fails < FAILS_TO_STOP);
        const outcomes = await runInterleaved(climbing.map((l) => l.path), plan(rate, stepSeconds), slices, nextStep, (path) => ({
          fanout: sessions,
          drainMs: ctx.plan.drainMs,
          ...(path === broker && { profileAs: `${rate}-per-s` }),
        }));
        climbing.forEach((ladder, i) => {
          const o = outcomes[i] as StepOutcome;
          ladder.outcomes.push(o);
          ladder.fails = passes(o) ? 0 : ladder.fails + 1;
          ctx.log(`  ${ladder.path.label.padEnd(10)} @${rate}/s ×${sessions}: p99 ${fmt(o.p99Ms)} ms, ${fmt(o.deliveredPerSec)}/s, lost ${o.lost}${passes(o) ? "" : " (over the limit)"} (${describeCpu(o.cpu)})`);
        });
        if (ladders.every((l) => l.fails >= FAILS_TO_STOP)) break;
      }
      const brokerLadder = ladders[0] as Ladder;
      const b = best(brokerLadder);
      const r = best(rawLadder);
      const rt = ratio(b, r);
      const rawTopped = rawLadder !== undefined && rawLadder.fails < FAILS_TO_STOP;
      rows.push({
        scenario: SCENARIO,
        engine: engine.name,
        measure: MEASURE,
        unit: "/s",
        broker: b,
        baseline: r,
        ratio: rt,
        target: TARGET,
        met: rt === null ? null : rt >= 0.5,
        status: "measured",
        ...(bestStep(brokerLadder) !== undefined && { cpu: describeLoadCpu((bestStep(brokerLadder) as StepOutcome).cpu) }),
        note: [
          rawTopped ? `raw was still climbing at the top of the ladder (${rates.at(-1)}/s): its figure is a lower bound, so the ratio is an upper bound` : "",
          brokerLadder.fails < FAILS_TO_STOP ? "the broker was still climbing at the top of the ladder: its figure is a lower bound" : "",
          ctx.redisUnavailable !== undefined ? `baseline not run: ${ctx.redisUnavailable}` : "",
          upstreamNote(broker),
        ]
          .filter((s) => s !== "")
          .join("; "),
      });
      if (rt !== null && rt < 0.5) findings.push(`${engine.name}: ${fmt(b)} deliveries/s vs raw ${fmt(r)}/s = ${(rt * 100).toFixed(0)} % of raw fan-out (target ≥ 50 %, short by ${fmt((0.5 * (r ?? 0)) - (b ?? 0))}/s).`);
      details.push(ladderTable(`${engine.name} engine vs raw fan-out, ${sessions} sessions on one URI, ${stepSeconds} s per rate`, sessions, ladders));
      for (const ladder of ladders) {
        series.push({ chart: "hot-uri", label: `${ladder === rawLadder ? `raw (beside ${engine.name})` : `broker (${engine.name})`} p99`, points: ladder.outcomes.map((o) => [o.offeredRate * sessions, o.p99Ms]) });
      }
    } finally {
      await broker.stop();
      await raw?.stop();
    }
  }
  return {
    id: "hot-uri",
    title: SCENARIO,
    method:
      `${sessions} legacy sessions subscribed to bench+bench://r/0; the backend emits updates of bench://r/0/… at rising rates (updates/s × ${sessions} = offered deliveries/s), ${stepSeconds} s per step in ${slices} slices alternating with the baseline, which climbs again beside each engine. ` +
      `Figure: the best delivered/s of a step with p99 ≤ ${p99LimitMs} ms and loss ≤ ${MAX_LOSS * 100} %; a path stops climbing after ${FAILS_TO_STOP} failing steps in a row. Baseline: Redis → plain Node SSE server writing one pre-encoded frame to all ${sessions} streams (beside the redis-cluster engine, SPUBLISH and SSUBSCRIBE on the same Redis Cluster, since 2026-11-28). ` +
      describeEngines(ctx),
    rows,
    details,
    findings,
    series,
  };
}

function ladderTable(title: string, sessions: number, ladders: Ladder[]): DetailTable {
  const rows: (string | number)[][] = [];
  for (const ladder of ladders) {
    for (const o of ladder.outcomes) {
      rows.push([ladder.path.label, o.offeredRate, fmt(o.offeredRate * sessions), fmt(o.deliveredPerSec), fmt(o.p50Ms), fmt(o.p99Ms), fmt(o.maxMs), o.lost, describeCpu(o.cpu)]);
    }
  }
  return { title, columns: ["path", "updates/s", "offered deliveries/s", "delivered/s", "p50 ms", "p99 ms", "max ms", "lost", "CPU (% of a core)"], rows };
}
