import { exposedUri } from "../core/bench-uris.js";
import { fmt, quantileOf } from "../report/format.js";
import { notRun, ratio, type ResultRow, type ScenarioResult } from "../report/result-model.js";
import type { BenchContext } from "./bench-context.js";
import { describeEngines, startBrokerPath, startRawPath, upstreamNote, type RunningPath } from "./delivery-paths.js";
import { describeCpu, describeLoadCpu, runInterleaved, type StepOutcome } from "./rate-step.js";

const SCENARIO = "3. Broadcast";
const TARGET_RATIO = 1.5;

/**
 * Scenario 3: N sessions subscribed to one resource; single updates spaced `intervalMs` apart (so
 * each broadcast completes before the next). Per update, the latency of the last receiver; the
 * figure is p50/p99 of that over the updates. Baseline: the plain SSE server fanning out one
 * pre-encoded frame to N streams (fed from Redis). Both are set up first, then take turns in slices.
 */
export async function runBroadcast(ctx: BenchContext): Promise<ScenarioResult> {
  const { sessions, updates, slices, intervalMs } = ctx.plan.broadcast;
  const rows: ResultRow[] = [];
  const table: (string | number)[][] = [];
  const findings: string[] = [];
  const n = sessions.toLocaleString("en-US");
  let step = 300;
  const nextStep = (): number => ++step;
  const plan = (count: number) => ({ rate: 1000 / intervalMs, count, uriCount: 1, uriOffset: 0 });
  const addRow = (label: string, o: StepOutcome, openMs: number): void => {
    table.push([label, o.emitted, o.incomplete, fmt(quantileOf(o.lastReceiverMs, 0.5)), fmt(quantileOf(o.lastReceiverMs, 0.99)), fmt(Math.max(...o.lastReceiverMs)), fmt(o.p50Ms), fmt(openMs / 1000), describeCpu(o.cpu)]);
  };

  let raw: RunningPath | undefined;
  try {
    if (ctx.redisUnavailable === undefined) {
      ctx.log(`broadcast: raw baseline, ${sessions} streams`);
      raw = await startRawPath(ctx, "broadcast-raw", Array.from({ length: sessions }, () => "0"));
    }
    for (const engine of ctx.engines) {
      if (engine.unavailableReason !== undefined) {
        rows.push(notRun(SCENARIO, engine.name, `time to last of ${n}, p99`, "ms", `≤ ${TARGET_RATIO}× raw`, engine.unavailableReason));
        rows.push(notRun(SCENARIO, engine.name, `time to last of ${n}, p50`, "ms", null, engine.unavailableReason));
        continue;
      }
      ctx.log(`broadcast: ${engine.name} broker, ${sessions} legacy sessions`);
      const broker = await startBrokerPath(ctx, engine, `broadcast-${engine.name}`, "legacy", Array.from({ length: sessions }, () => exposedUri(0)));
      let b: StepOutcome;
      // The baseline is measured again beside each engine, so every ratio compares figures taken side by side.
      let rawOutcome: StepOutcome | undefined;
      try {
        const paths = raw !== undefined ? [raw, broker] : [broker];
        await runInterleaved(paths, plan(3), 1, nextStep, () => ({ fanout: sessions, drainMs: ctx.plan.drainMs, trackSeq: true }));
        const outcomes = await runInterleaved(paths, plan(updates), slices, nextStep, (path) => ({
          fanout: sessions,
          drainMs: ctx.plan.drainMs,
          trackSeq: true,
          ...(path === broker && { profileAs: "updates" }),
        }));
        b = outcomes.at(-1) as StepOutcome;
        const r = outcomes[0];
        if (raw !== undefined && r !== undefined) {
          rawOutcome = r;
          addRow(`raw (beside ${engine.name})`, r, raw.openMs);
          log(ctx, "raw", r);
        }
        addRow(`broker (${engine.name})`, b, broker.openMs);
        log(ctx, `broker (${engine.name})`, b);
      } finally {
        await broker.stop();
      }
      const p99 = quantileOf(b.lastReceiverMs, 0.99);
      const rawP99 = rawOutcome === undefined ? null : quantileOf(rawOutcome.lastReceiverMs, 0.99);
      const rt = ratio(p99, rawP99);
      const note = [
        `${b.incomplete} of ${b.emitted} updates did not reach every session`,
        ctx.redisUnavailable !== undefined ? `baseline not run: ${ctx.redisUnavailable}` : "",
        upstreamNote(broker),
      ]
        .filter((s) => s !== "")
        .join("; ");
      rows.push({ scenario: SCENARIO, engine: engine.name, measure: `time to last of ${n}, p99`, unit: "ms", broker: p99, baseline: rawP99, ratio: rt, target: `≤ ${TARGET_RATIO}× raw`, met: rt === null ? null : rt <= TARGET_RATIO && b.incomplete === 0, status: "measured", note, cpu: describeLoadCpu(b.cpu) });
      const p50 = quantileOf(b.lastReceiverMs, 0.5);
      const rawP50 = rawOutcome === undefined ? null : quantileOf(rawOutcome.lastReceiverMs, 0.5);
      rows.push({ scenario: SCENARIO, engine: engine.name, measure: `time to last of ${n}, p50`, unit: "ms", broker: p50, baseline: rawP50, ratio: ratio(p50, rawP50), target: null, met: null, status: "measured" });
      if (rt !== null && rt > TARGET_RATIO) findings.push(`${engine.name}: the last of ${n} sessions gets an update after ${fmt(p99)} ms at p99 vs ${fmt(rawP99)} ms raw: ${rt.toFixed(2)}×, ${(rt / TARGET_RATIO).toFixed(2)}× over the ${TARGET_RATIO}× target.`);
    }
  } finally {
    await raw?.stop();
  }
  return {
    id: "broadcast",
    title: SCENARIO,
    method:
      `${sessions} legacy sessions (over ${ctx.plan.generators} generator processes) subscribed to bench+bench://r/0; ${updates} single updates ${intervalMs} ms apart, in ${slices} slices alternating with the baseline, which is measured again beside each engine. ` +
      `Per update: time from emission until the last session read it; reported as p50/p99 over the updates. Baseline: Redis → plain Node SSE server writing one pre-encoded frame to all ${sessions} streams. ` +
      describeEngines(ctx),
    rows,
    details: [
      {
        title: `${sessions} sessions on one URI, ${updates} updates ${intervalMs} ms apart`,
        columns: ["path", "updates", "incomplete", "last-receiver p50 ms", "last-receiver p99 ms", "worst ms", "per-delivery p50 ms", "setup s", "CPU (% of a core)"],
        rows: table,
      },
    ],
    findings,
  };
}

function log(ctx: BenchContext, label: string, o: StepOutcome): void {
  ctx.log(`  ${label}: last receiver p50 ${fmt(quantileOf(o.lastReceiverMs, 0.5))} p99 ${fmt(quantileOf(o.lastReceiverMs, 0.99))} ms, incomplete ${o.incomplete} (${describeCpu(o.cpu)})`);
}
