import { describe, expect, it } from "vitest";
import type { ClientRecord, StreamRecord } from "../../src/chaos/chaos-generator-api.js";
import { analyseCoverage, type AnalysisInput, type PublishedUpdate } from "../../src/chaos/coverage.js";

/** Key 7: update seq i emitted at 1000 + 100·i µs, published with position 10 + i unless `unheard`. */
const KEY = 7;
const T0 = 1_000;

function emission(count: number): AnalysisInput["emission"] {
  return { count, micros: Array.from({ length: count }, (_, i) => T0 + 100 * i), keyOf: () => KEY };
}

function published(count: number, unheard: number[] = [], reannounced: { position: number; at: number }[] = []): PublishedUpdate[] {
  const out: PublishedUpdate[] = [];
  for (let i = 0; i < count; i++) if (!unheard.includes(i)) out.push({ position: 10 + i, key: KEY, seq: i, atMicros: T0 + 100 * i + 5 });
  for (const r of reannounced) out.push({ position: r.position, key: KEY, seq: -1, atMicros: r.at });
  return out.sort((a, b) => a.position - b.position);
}

function stream(no: number, reason: StreamRecord["reason"], requestMicros: number, openMicros: number, endMicros = 0): StreamRecord {
  return { no, reason, attempt: 0, requestMicros, openMicros, status: 200, endMicros };
}

/** A legacy client on KEY that received `events` ([at, position, local, seq, stream]). */
function client(events: number[][], streams: StreamRecord[] = [stream(1, "initial", 0, 1)]): ClientRecord {
  return {
    index: 0,
    kind: "legacy",
    keys: [KEY],
    sessionIds: ["s"],
    initializedAt: [0],
    streams,
    events: [events.flat()],
    foreign: 0,
    unreadable: 0,
    other: {},
    refusals: [],
    movedRetries: 0,
    trace: [],
  };
}

function input(count: number, clients: ClientRecord[], extra: Partial<AnalysisInput> = {}): AnalysisInput {
  return {
    basis: "position",
    emission: emission(count),
    published: published(count),
    failovers: [],
    watcherFailovers: [],
    clients,
    fromMicros: T0,
    untilMicros: 1_000_000,
    ...extra,
  };
}

const live = (seq: number, stream = 1, delay = 50): number[] => [T0 + 100 * seq + delay, 10 + seq, 0, seq, stream];

describe("analyseCoverage", () => {
  it("counts nothing lost or spurious when every update arrives once", () => {
    const report = analyseCoverage(input(5, [client([0, 1, 2, 3, 4].map((i) => live(i)))]));
    expect(report.lost.updates).toBe(0);
    expect(report.spurious.total).toBe(0);
    expect(report.delivered).toBe(5);
    expect(Array.from(report.delays)).toEqual([50, 50, 50, 50, 50].map((d) => d / 1000));
  });

  it("counts updates after the last notification as lost, per pair", () => {
    const report = analyseCoverage(input(5, [client([0, 1, 2].map((i) => live(i)))]));
    expect(report.lost).toMatchObject({ updates: 2, pairs: 1, clients: 1 });
    expect(report.lost.samples[0]).toMatchObject({ key: KEY, lost: 2, firstLostSeq: 3 });
  });

  it("lets a later notification cover earlier misses (position basis: at or after)", () => {
    const report = analyseCoverage(input(5, [client([live(0), live(4)])]));
    expect(report.lost.updates).toBe(0);
    expect(report.spurious.total).toBe(0);
    // Updates 1–3 are covered by update 4's notification, when it arrives.
    expect(Math.max(...report.delays)).toBeCloseTo((T0 + 450 - (T0 + 100)) / 1000);
  });

  it("counts a duplicate, and a re-announcement when nothing was missed, as spurious in their failover window", () => {
    const duplicate = [T0 + 260, 12, 0, 2, 2];
    const reannounced = [T0 + 270, 12, 3, -1, 2]; // id 12.3: nothing after position 12 happened yet
    const report = analyseCoverage(input(5, [client([live(0), live(1), live(2), duplicate, reannounced, live(3), live(4)])], { failovers: [T0 + 255], watcherFailovers: [false] }));
    expect(report.spurious).toMatchObject({ total: 2, maxPerPairWindow: 2, pairWindowsOverOne: 1, beforeAnyFailover: 0, perWindow: [0, 2] });
  });

  it("requires an update no watcher heard to be covered by the next publish of its key", () => {
    // Seqs 2–4 went unheard (the watcher was dead); the new watcher re-announced the key at position 20, after them.
    const data = input(5, [], { published: published(5, [2, 3, 4], [{ position: 20, at: T0 + 500 }]) });
    const onlyLive = analyseCoverage({ ...data, clients: [client([live(0), live(1)])] });
    expect(onlyLive.lost.updates).toBe(3);
    expect(onlyLive.updates).toMatchObject({ published: 2, heardByNoWatcher: 3, reannouncements: 1 });
    const withReannouncement = analyseCoverage({ ...data, clients: [client([live(0), live(1), [T0 + 520, 20, 0, -1, 1]])] });
    expect(withReannouncement.lost.updates).toBe(0);
    expect(withReannouncement.spurious.total).toBe(0);
    // A later update heard by the watcher covers the unheard ones before it (the client re-reads the resource).
    const later = analyseCoverage({ ...input(5, [], { published: published(5, [2, 3]) }), clients: [client([live(0), live(1), live(4)])] });
    expect(later.lost.updates).toBe(0);
  });

  it("times a resumption from the reconnect request to the first notification covering what was missed", () => {
    const streams = [stream(1, "initial", 0, 1, T0 + 160), stream(2, "reconnect", T0 + 300, T0 + 310)];
    // Stream 1 saw seq 0 and 1, then dropped; seq 2 was missed; stream 2 tells of it (resumed, id 12) at +350, then live 3 and 4.
    const events = [live(0), live(1), [T0 + 350, 12, 0, -1, 2], live(3, 2), live(4, 2)];
    const report = analyseCoverage(input(5, [client(events, streams)], { failovers: [T0 + 150], watcherFailovers: [true] }));
    expect(report.lost.updates).toBe(0);
    expect(report.resumes).toHaveLength(1);
    expect(report.resumes[0]).toMatchObject({ stream: 2, missed: true, window: 1, watcherFailover: true, reopenMs: 0.01, coverMs: 0.05, coverFromDropMs: 0.19, firstMs: 0.05 });
  });

  it("judges by arrival on the time basis", () => {
    // A re-announcement with a stale id (0.4) arriving after every update covers them on the time basis only.
    const report = analyseCoverage(input(3, [client([live(0), [T0 + 900, 0, 4, -1, 1]])]));
    expect(report.lost.updates).toBe(2);
    const time = analyseCoverage({ ...input(3, [client([live(0), [T0 + 900, 0, 4, -1, 1]])]), basis: "time" });
    expect(time.lost.updates).toBe(0);
    expect(time.spurious.total).toBe(0);
  });
});
