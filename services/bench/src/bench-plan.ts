/** The knobs of one run: `--quick` is the reduced plan (under 3 minutes), the default the full one. */
export interface BenchPlan {
  mode: "quick" | "full";
  /** Load generator processes per target. */
  generators: number;
  /** `slices`: each step is cut into this many parts, broker and baseline taking turns. */
  /** `target`: the step at the target rate (5k/s), where the verdict is made, runs longer, in more slices: a p99 over more of the machine's stalls moves less between runs. */
  unicast: { sessions: number; rates: number[]; stepSeconds: number; slices: number; warmupSeconds: number; target: { stepSeconds: number; slices: number } };
  hotUri: { sessions: number; rates: number[]; stepSeconds: number; slices: number; p99LimitMs: number };
  broadcast: { sessions: number; updates: number; slices: number; intervalMs: number };
  /**
   * `settleMs`: idle time before each memory sample (idle keep-alive sockets of the handshakes close after 5 s); the sample itself then takes about 10 s more (see settledUsage).
   * `sampleFresh`: also sample the server before any session, to report what the first sessions cost once.
   */
  memory: { counts: number[]; uriPool: number; settleMs: number; sampleFresh: boolean };
  /** `listens`: listen streams each worker opens per listen phase. */
  subscribe: { workers: number; opsPerWorker: number; listens: number };
  listStorm: { sessionsPerEra: number; changes: number; durationMs: number };
  /** Scenario 7: `brokers` brokers (jobs.process false) and one worker; `changes` list_changed in `durationMs`, the last after the one real change. */
  clusterListStorm: { brokers: number; sessionsPerEra: number; changes: number; durationMs: number };
  /**
   * Scenario 8: the same cluster with `jobs.lockMs` = `lockMs`; the backend holds each tools/list
   * `listDelayMs` (the worker is killed while its reload waits for the answer).
   */
  workerKill: { brokers: number; sessionsPerEra: number; lockMs: number; listDelayMs: number };
  /** Scenario 9: `sessions` legacy sessions × `subsPerSession` subscriptions reconnect at once; `rate` updates/s for `emitSeconds` around a re-attach storm. */
  storm: { sessions: number; subsPerSession: number; rate: number; emitSeconds: number };
  /** Scenario 10: idle sessions per instance at these counts (past the machine's open-file limit: the largest it allows), and a broadcast to them. */
  scale: { counts: number[]; broadcastUpdates: number; intervalMs: number; slices: number };
  /** Longest wait for stragglers after an emission ends. */
  drainMs: number;
}

export function benchPlan(quick: boolean): BenchPlan {
  if (quick) {
    return {
      mode: "quick",
      generators: 2,
      unicast: { sessions: 500, rates: [5_000], stepSeconds: 1.2, slices: 2, warmupSeconds: 1, target: { stepSeconds: 1.2, slices: 2 } },
      hotUri: { sessions: 500, rates: [400], stepSeconds: 1.2, slices: 2, p99LimitMs: 100 },
      broadcast: { sessions: 1_000, updates: 8, slices: 2, intervalMs: 250 },
      memory: { counts: [1_000], uriPool: 100, settleMs: 1_000, sampleFresh: false },
      subscribe: { workers: 12, opsPerWorker: 40, listens: 6 },
      listStorm: { sessionsPerEra: 200, changes: 1_000, durationMs: 1_000 },
      clusterListStorm: { brokers: 3, sessionsPerEra: 200, changes: 1_000, durationMs: 1_000 },
      workerKill: { brokers: 3, sessionsPerEra: 200, lockMs: 1_000, listDelayMs: 5_000 },
      storm: { sessions: 200, subsPerSession: 10, rate: 200, emitSeconds: 2 },
      scale: { counts: [500], broadcastUpdates: 4, intervalMs: 300, slices: 2 },
      drainMs: 3_000,
    };
  }
  return {
    mode: "full",
    generators: 2,
    unicast: { sessions: 1_000, rates: [1_000, 5_000, 10_000, 20_000], stepSeconds: 10, slices: 5, warmupSeconds: 3, target: { stepSeconds: 30, slices: 15 } },
    hotUri: { sessions: 1_000, rates: [10, 25, 50, 100, 150, 200, 300, 400, 600, 800, 1_200], stepSeconds: 5, slices: 5, p99LimitMs: 100 },
    broadcast: { sessions: 10_000, updates: 60, slices: 5, intervalMs: 300 },
    memory: { counts: [1_000, 10_000], uriPool: 100, settleMs: 8_000, sampleFresh: true },
    subscribe: { workers: 32, opsPerWorker: 250, listens: 40 },
    listStorm: { sessionsPerEra: 500, changes: 1_000, durationMs: 1_000 },
    clusterListStorm: { brokers: 3, sessionsPerEra: 500, changes: 1_000, durationMs: 1_000 },
    workerKill: { brokers: 3, sessionsPerEra: 500, lockMs: 1_000, listDelayMs: 5_000 },
    storm: { sessions: 10_000, subsPerSession: 10, rate: 2_000, emitSeconds: 8 },
    scale: { counts: [50_000, 100_000], broadcastUpdates: 30, intervalMs: 1_000, slices: 3 },
    drainMs: 5_000,
  };
}
