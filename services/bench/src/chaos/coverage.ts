/**
 * What the clients of a chaos run were told, judged against what happened (pure: data in, figures
 * out). Definitions (README, "Chaos"):
 *
 * - An **update** is one emission of the backend (seq i, for key k, at t_i), whether or not a
 *   broker heard it. Its **requirement** is what a notification must carry to tell of it:
 *   - *position basis* (the brief's definition): the cluster position the watcher gave it (from the
 *     witness on the bus, or from any client that received it live); an update no watcher heard
 *     (between a watcher's death and its successor's re-subscription) requires the position of the
 *     next publish for its resource (the next update, or the successor's re-announcement);
 *   - *time basis* (a client re-reads what it is told about): its emission time.
 *   A notification `updated` for the resource (or a sub-resource) **covers** an update when it
 *   carries a position at or after the requirement (position basis: its event id's or cursor's
 *   position, `<p>` or `<p>.<n>` both count as p) or arrived after it was emitted (time basis).
 * - **Lost**: an update of a resource a client subscribed to that no notification it received
 *   before the end of the run (emission end + settle) covers. Counted per (client, resource).
 * - **Coverage delay**: per (update, subscribed client), from the emission to the arrival of the
 *   first notification covering it.
 * - **Spurious**: a received notification that covers no update the client's earlier
 *   notifications for that resource did not already cover (a duplicate, or a re-announcement when
 *   nothing was missed). Attributed to the failover window it arrived in (window w: after the w-th
 *   failover and before the next; window 0: before any), counted per (client, resource, window).
 * - **Resumption**: per re-opened stream (reconnect, not a new session) that had missed updates
 *   (requirements beyond what it had been told, emitted before the reconnect request), the time
 *   from that request, and from the end of the previous stream, to the first notification on the
 *   new stream covering a missed update.
 */
import { SDK_RECONNECTION } from "./chaos-client.js";
import { EV, EVENT_FIELDS, type ClientKind, type ClientRecord, type StreamRecord } from "./chaos-generator-api.js";

export type Basis = "position" | "time";

/** One resource update as the witness saw it published on the bus (seq -1: a re-announcement, not an emission). */
export interface PublishedUpdate {
  position: number;
  key: number;
  seq: number;
  atMicros: number;
}

export interface AnalysisInput {
  basis: Basis;
  /** Update i: key `keyOf(i)`, emitted at `micros[i]` (0: never emitted). */
  emission: { count: number; micros: ArrayLike<number>; keyOf(seq: number): number };
  /** In position order. */
  published: readonly PublishedUpdate[];
  /** When each failover began (broker killed, Redis restarted), µs, ascending. */
  failovers: readonly number[];
  /** Whether each failover took the backend's watcher down (its updates went unheard until another member took the lease). */
  watcherFailovers: readonly boolean[];
  clients: readonly ClientRecord[];
  /** The emission's start: what arrived before is setup. */
  fromMicros: number;
  /** Emission end + settle: what arrives later is not counted. */
  untilMicros: number;
}

export interface LostSample {
  client: number;
  kind: ClientKind;
  key: number;
  lost: number;
  firstLostSeq: number;
  firstLostMicros: number;
  lastSeq: number;
  /** The last notification it got for the key: arrival, position, stream; undefined: none in the run. */
  lastReceived: { atMicros: number; position: number; local: number; stream: number } | undefined;
  sessionIds: string[];
  /** Its streams: `no reason status open→end server`. */
  streams: string[];
}

export interface SpuriousSample {
  client: number;
  kind: ClientKind;
  key: number;
  window: number;
  count: number;
  /** Each: `position[.local] seq@ms-after-window-start stream`. */
  events: string[];
}

/** One re-opened stream (a reconnect of a session or listen, after the first update). */
export interface Resumption {
  client: number;
  kind: ClientKind;
  stream: number;
  /** The failover window its request fell in (0: before any). */
  window: number;
  /** That failover took the backend's watcher down. */
  watcherFailover: boolean;
  server: string;
  resumeFrom: string;
  /** Failed tries before it. */
  attempt: number;
  /** Request → stream open (legacy: the response; modern: the acknowledgement), ms. */
  reopenMs: number;
  /** Request → the first `updated` on it, ms; null: none came. */
  firstMs: number | null;
  /** Whether it had missed updates (requirements beyond what it had been told, emitted before the request). */
  missed: boolean;
  /** Request → the first `updated` on it covering a missed update, ms; null: none came (or nothing was missed). */
  coverMs: number | null;
  /** The previous stream's end → that notification, ms. */
  coverFromDropMs: number | null;
  /** How the stream ended, when it ended before covering what it missed. */
  note: string;
}

export interface CoverageReport {
  basis: Basis;
  updates: { emitted: number; published: number; heardByNoWatcher: number; reannouncements: number };
  pairs: number;
  delivered: number;
  /** `all`: every pair with a loss, as [client, key, lost]. */
  lost: { updates: number; pairs: number; clients: number; samples: LostSample[]; all: [number, number, number][] };
  /** Coverage delays, ms, sorted (per update and subscriber). */
  delays: Float64Array;
  /** `all`: every (pair, window) with more than 1, or any before the first failover, as [client, key, window, count]. */
  spurious: { total: number; maxPerPairWindow: number; pairWindowsOverOne: number; beforeAnyFailover: number; perWindow: number[]; samples: SpuriousSample[]; all: [number, number, number, number][] };
  resumes: Resumption[];
}

const SAMPLES = 20;

interface KeyUpdates {
  /** Seqs of the key's updates, in emission order. */
  seqs: number[];
  /** Their requirements (non-decreasing). */
  reqs: number[];
  /** Their emission times. */
  times: number[];
}

/** Requirement of each update, per key (see the module comment). */
function requirements(input: AnalysisInput): { perKey: Map<number, KeyUpdates>; published: number; heardByNoWatcher: number; reannouncements: number } {
  const position = new Map<number, number>();
  for (const p of input.published) if (p.seq >= 0 && !position.has(p.seq)) position.set(p.seq, p.position);
  // Live deliveries name the position too (the witness may have missed a message).
  for (const client of input.clients) {
    for (const events of client.events) {
      for (let j = 0; j < events.length; j += EVENT_FIELDS) {
        const seq = events[j + EV.seq] as number;
        if (seq >= 0 && (events[j + EV.local] as number) === 0 && !position.has(seq)) position.set(seq, events[j + EV.position] as number);
      }
    }
  }
  // Publishes per key in position order: the real ones (seq) and the re-announcements (seq -1).
  const publishes = new Map<number, { position: number; seq: number; at: number }[]>();
  const seen = new Set<number>();
  const addPublish = (key: number, entry: { position: number; seq: number; at: number }): void => {
    if (seen.has(entry.position)) return;
    seen.add(entry.position);
    const list = publishes.get(key) ?? [];
    list.push(entry);
    publishes.set(key, list);
  };
  let reannouncements = 0;
  for (const p of input.published) {
    if (p.seq < 0) reannouncements++;
    addPublish(p.key, { position: p.position, seq: p.seq, at: p.atMicros });
  }
  for (const [seq, pos] of position) addPublish(input.emission.keyOf(seq), { position: pos, seq, at: input.emission.micros[seq] ?? 0 });
  for (const list of publishes.values()) list.sort((a, b) => a.position - b.position);

  const perKey = new Map<number, KeyUpdates>();
  let published = 0;
  let heardByNoWatcher = 0;
  for (let seq = 0; seq < input.emission.count; seq++) {
    const at = input.emission.micros[seq] ?? 0;
    if (at === 0) continue;
    const key = input.emission.keyOf(seq);
    let entry = perKey.get(key);
    if (entry === undefined) {
      entry = { seqs: [], reqs: [], times: [] };
      perKey.set(key, entry);
    }
    entry.seqs.push(seq);
    entry.times.push(at);
    const own = position.get(seq);
    if (own !== undefined) published++;
    else heardByNoWatcher++;
    entry.reqs.push(input.basis === "time" ? at : (own ?? Number.NaN));
  }
  if (input.basis === "position") {
    // An update no watcher heard requires the next publish of its key: a later update, or a re-announcement made after it.
    for (const [key, entry] of perKey) {
      const list = publishes.get(key) ?? [];
      let j = 0;
      for (let u = 0; u < entry.seqs.length; u++) {
        if (!Number.isNaN(entry.reqs[u])) continue;
        const seq = entry.seqs[u] as number;
        const at = entry.times[u] as number;
        while (j < list.length && !(((list[j] as { seq: number }).seq > seq) || ((list[j] as { seq: number }).seq < 0 && (list[j] as { at: number }).at > at))) j++;
        entry.reqs[u] = j < list.length ? (list[j] as { position: number }).position : Number.POSITIVE_INFINITY;
      }
      // Requirements follow emission order; a position the witness saw out of order must not break the searches below.
      for (let u = 1; u < entry.reqs.length; u++) if ((entry.reqs[u] as number) < (entry.reqs[u - 1] as number)) entry.reqs[u] = entry.reqs[u - 1] as number;
    }
  }
  return { perKey, published, heardByNoWatcher, reannouncements };
}

/** Index of the first element > value in a non-decreasing array. */
function upperBound(values: readonly number[], value: number): number {
  let lo = 0;
  let hi = values.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((values[mid] as number) <= value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Number of failovers at or before `at` (the window it falls in). */
function windowOf(failovers: readonly number[], at: number): number {
  return upperBound(failovers, at);
}

/** One client's notifications for one key, within the run: arrival, coverage value and fields. */
interface Received {
  at: number[];
  cov: number[];
  position: number[];
  local: number[];
  seq: number[];
  stream: number[];
}

function received(events: readonly number[], input: AnalysisInput): Received {
  const out: Received = { at: [], cov: [], position: [], local: [], seq: [], stream: [] };
  for (let j = 0; j < events.length; j += EVENT_FIELDS) {
    const at = events[j + EV.at] as number;
    const position = events[j + EV.position] as number;
    if (at < input.fromMicros || at > input.untilMicros || position < 0) continue;
    out.at.push(at);
    out.cov.push(input.basis === "time" ? at : position);
    out.position.push(position);
    out.local.push(events[j + EV.local] as number);
    const seq = events[j + EV.seq] as number;
    out.seq.push(seq);
    out.stream.push(events[j + EV.stream] as number);
  }
  return out;
}

export function analyseCoverage(input: AnalysisInput): CoverageReport {
  const { perKey, published, heardByNoWatcher, reannouncements } = requirements(input);
  const empty: KeyUpdates = { seqs: [], reqs: [], times: [] };
  const delays: number[] = [];
  const lostSamples: LostSample[] = [];
  const lostAll: [number, number, number][] = [];
  const spuriousAll: [number, number, number, number][] = [];
  const spuriousSamples: SpuriousSample[] = [];
  const perWindow = new Array<number>(input.failovers.length + 1).fill(0);
  let pairs = 0;
  let delivered = 0;
  let lostUpdates = 0;
  let lostPairs = 0;
  const lostClients = new Set<number>();
  let spuriousTotal = 0;
  let maxPerPairWindow = 0;
  let pairWindowsOverOne = 0;
  const resumes: Resumption[] = [];
  for (const client of input.clients) {
    if (client.setupError !== undefined) continue;
    const perKeyReceived: Received[] = [];
    client.keys.forEach((key, i) => {
      pairs++;
      const updates = perKey.get(key) ?? empty;
      const got = received(client.events[i] ?? [], input);
      perKeyReceived.push(got);
      delivered += got.at.length;

      // Coverage: the first notification whose running maximum reaches each requirement.
      let j = 0;
      let max = Number.NEGATIVE_INFINITY;
      let lost = 0;
      let firstLost = -1;
      for (let u = 0; u < updates.reqs.length; u++) {
        const req = updates.reqs[u] as number;
        while (j < got.cov.length && max < req) max = Math.max(max, got.cov[j++] as number);
        if (max >= req) delays.push(((got.at[j - 1] as number) - (updates.times[u] as number)) / 1000);
        else {
          lost++;
          if (firstLost < 0) firstLost = u;
        }
      }
      if (lost > 0) {
        lostUpdates += lost;
        lostPairs++;
        lostClients.add(client.index);
        lostAll.push([client.index, key, lost]);
        if (lostSamples.length < SAMPLES) {
          const n = got.at.length;
          lostSamples.push({
            client: client.index,
            kind: client.kind,
            key,
            lost,
            firstLostSeq: updates.seqs[firstLost] as number,
            firstLostMicros: updates.times[firstLost] as number,
            lastSeq: updates.seqs[updates.seqs.length - 1] as number,
            lastReceived: n === 0 ? undefined : { atMicros: got.at[n - 1] as number, position: got.position[n - 1] as number, local: got.local[n - 1] as number, stream: got.stream[n - 1] as number },
            sessionIds: client.sessionIds,
            streams: client.streams.map(describeStream),
          });
        }
      }

      // Spurious: a notification that covers nothing new.
      const counts = new Map<number, { count: number; events: string[] }>();
      let covered = Number.NEGATIVE_INFINITY;
      const seenSeqs = new Set<number>();
      for (let e = 0; e < got.at.length; e++) {
        const seq = got.seq[e] as number;
        let spurious: boolean;
        let reaches: number;
        if (input.basis === "position") {
          reaches = got.cov[e] as number;
          spurious = upperBound(updates.reqs, reaches) - upperBound(updates.reqs, covered) <= 0;
        } else {
          // A live delivery tells of its own update; a resumption or re-announcement of everything up to its arrival.
          reaches = seq >= 0 ? (input.emission.micros[seq] ?? 0) : (got.at[e] as number);
          spurious = seq >= 0 ? seenSeqs.has(seq) : upperBound(updates.times, reaches) - upperBound(updates.times, covered) <= 0;
          if (seq >= 0) seenSeqs.add(seq);
        }
        covered = Math.max(covered, reaches);
        if (!spurious) continue;
        const window = windowOf(input.failovers, got.at[e] as number);
        spuriousTotal++;
        perWindow[window] = (perWindow[window] ?? 0) + 1;
        const entry = counts.get(window) ?? { count: 0, events: [] };
        entry.count++;
        const windowStart = window === 0 ? input.fromMicros : (input.failovers[window - 1] as number);
        const local = got.local[e] as number;
        entry.events.push(`${got.position[e] ?? 0}${local === 0 ? "" : `.${local}`} ${seq < 0 ? "(resource)" : `seq ${seq}`} @+${Math.round(((got.at[e] as number) - windowStart) / 1000)}ms s${got.stream[e] ?? 0}`);
        counts.set(window, entry);
      }
      for (const [window, { count, events }] of counts) {
        maxPerPairWindow = Math.max(maxPerPairWindow, count);
        if (count > 1 || window === 0) {
          if (count > 1) pairWindowsOverOne++;
          spuriousAll.push([client.index, key, window, count]);
          if (spuriousSamples.length < SAMPLES) spuriousSamples.push({ client: client.index, kind: client.kind, key, window, count, events: events.slice(0, 8) });
        }
      }
    });

    // Resumption of each re-opened stream.
    client.streams.forEach((stream, s) => {
      if (stream.reason !== "reconnect" || stream.openMicros === 0 || stream.requestMicros < input.fromMicros || stream.requestMicros > input.untilMicros) return;
      const previous = lastOpened(client.streams, s);
      let firstAny = Number.POSITIVE_INFINITY;
      let firstCover = Number.POSITIVE_INFINITY;
      let missed = false;
      client.keys.forEach((key, i) => {
        const updates = perKey.get(key) ?? empty;
        const got = perKeyReceived[i] as Received;
        // What it had been told before this stream.
        let told = Number.NEGATIVE_INFINITY;
        for (let e = 0; e < got.at.length && (got.stream[e] as number) < stream.no; e++) told = Math.max(told, got.cov[e] as number);
        // The earliest requirement beyond that among updates emitted before the reconnect.
        let need = Number.POSITIVE_INFINITY;
        for (let u = upperBound(updates.reqs, told); u < updates.reqs.length; u++) {
          if ((updates.times[u] as number) < stream.requestMicros) {
            need = updates.reqs[u] as number;
            break;
          }
        }
        if (need !== Number.POSITIVE_INFINITY) missed = true;
        for (let e = 0; e < got.at.length; e++) {
          if (got.stream[e] !== stream.no) continue;
          firstAny = Math.min(firstAny, got.at[e] as number);
          if ((got.cov[e] as number) >= need) {
            firstCover = Math.min(firstCover, got.at[e] as number);
            break;
          }
        }
      });
      const window = windowOf(input.failovers, stream.requestMicros);
      const ms = (at: number, from: number): number | null => (at === Number.POSITIVE_INFINITY ? null : (at - from) / 1000);
      resumes.push({
        client: client.index,
        kind: client.kind,
        stream: stream.no,
        window,
        watcherFailover: window > 0 && input.watcherFailovers[window - 1] === true,
        server: stream.server ?? "?",
        resumeFrom: stream.resumeFrom ?? "(none)",
        attempt: stream.attempt,
        reopenMs: (stream.openMicros - stream.requestMicros) / 1000,
        firstMs: ms(firstAny, stream.requestMicros),
        missed,
        coverMs: missed ? ms(firstCover, stream.requestMicros) : null,
        coverFromDropMs: missed && previous !== undefined && previous.endMicros !== 0 ? ms(firstCover, previous.endMicros) : null,
        note: missed && firstCover === Number.POSITIVE_INFINITY ? `nothing covering what it missed came on it (it ${stream.endMicros === 0 ? "was still open at the end" : `ended: ${stream.endReason ?? "?"}`})` : "",
      });
    });
  }

  return {
    basis: input.basis,
    updates: { emitted: published + heardByNoWatcher, published, heardByNoWatcher, reannouncements },
    pairs,
    delivered,
    lost: { updates: lostUpdates, pairs: lostPairs, clients: lostClients.size, samples: lostSamples, all: lostAll },
    delays: Float64Array.from(delays).sort(),
    spurious: { total: spuriousTotal, maxPerPairWindow, pairWindowsOverOne, beforeAnyFailover: perWindow[0] ?? 0, perWindow, samples: spuriousSamples, all: spuriousAll },
    resumes,
  };
}

/** The stream that opened last before `streams[index]`. */
function lastOpened(streams: readonly StreamRecord[], index: number): StreamRecord | undefined {
  for (let s = index - 1; s >= 0; s--) if ((streams[s] as StreamRecord).openMicros !== 0) return streams[s];
  return undefined;
}

function describeStream(stream: StreamRecord): string {
  const open = stream.openMicros === 0 ? "failed" : `open ${(stream.openMicros / 1e6).toFixed(3)}`;
  const end = stream.endMicros === 0 ? "" : ` → end ${(stream.endMicros / 1e6).toFixed(3)} (${stream.endReason ?? "?"})`;
  return `#${stream.no} ${stream.reason} HTTP ${stream.status} ${open}${end} via ${stream.server ?? "?"}${stream.resumeFrom === undefined ? "" : ` from ${stream.resumeFrom}`}${stream.error === undefined ? "" : ` — ${stream.error}`}`;
}

/** Ascending, without nulls. */
export function sortedOf(values: Iterable<number | null>): Float64Array {
  return Float64Array.from([...values].filter((v): v is number => v !== null)).sort();
}

/** Nearest-rank quantile of an ascending array; NaN when empty. */
export function quantile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? Number.NaN;
}

/** Re-opened streams that needed more failed tries than the SDK client makes by default (it gives up after `maxRetries`). */
export function beyondSdkRetries(clients: readonly ClientRecord[], fromMicros: number): { reconnects: number; beyond: number; maxAttempts: number; failedByStatus: Record<string, number> } {
  let reconnects = 0;
  let beyond = 0;
  let maxAttempts = 0;
  const failedByStatus: Record<string, number> = {};
  for (const client of clients) {
    for (const stream of client.streams) {
      if (stream.requestMicros < fromMicros) continue;
      if (stream.openMicros === 0) {
        const why = (stream.error ?? "?").replace(/\d+/g, "N").slice(0, 60);
        const label = stream.status === 0 ? `no response (${why})` : stream.status === 200 ? `HTTP 200, ${why}` : `HTTP ${stream.status}`;
        failedByStatus[label] = (failedByStatus[label] ?? 0) + 1;
        continue;
      }
      if (stream.reason === "initial") continue;
      reconnects++;
      maxAttempts = Math.max(maxAttempts, stream.attempt);
      if (stream.attempt >= SDK_RECONNECTION.maxRetries) beyond++;
    }
  }
  return { reconnects, beyond, maxAttempts, failedByStatus };
}
