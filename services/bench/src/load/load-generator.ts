/**
 * A load generator: a child process holding many lightweight client sessions (raw node:http and a
 * minimal SSE parser, no SDK), recording end-to-end latency of every update it reads, and
 * reporting its own CPU so a run can show it was not the bottleneck. Driven over IPC (GeneratorApi).
 */
import { Agent } from "node:http";
import { NOTIFICATION } from "@mcp-broker/shared";
import { nowMicros } from "../core/clock.js";
import { Histogram } from "../core/histogram.js";
import { parentLink } from "../core/links.js";
import { exitWithParent } from "../core/process-group.js";
import { reportUsage, sampleUsage } from "../core/process-usage.js";
import { serveRpc } from "../core/rpc.js";
import { ClientSession, type Agents } from "./client-session.js";
import type { GeneratorApi, ListWatchCounts, ListWatchReport, OpenParams, OpenResult, RpcLoadParams, RpcLoadResult, StormParams, StormResult, CoverageParams, CoverageResult } from "./generator-api.js";
import { H2_STREAMS_PER_CONNECTION, H2Pool } from "./h2-client.js";
import { UpdateRecorder } from "./update-recorder.js";

const URI_FIELD = '"uri":"';
const LIST_CHANGED = NOTIFICATION.toolsListChanged;
const ACKNOWLEDGED = NOTIFICATION.subscriptionsAcknowledged;

/** Per-session state of the list-storm watch. */
interface ListWatch {
  notifications: number;
  fetching: boolean;
  again: boolean;
  body: string;
  /** When each distinct list body first arrived, µs. */
  bodyAt: number;
}

const agents: Agents = {
  // Idle sockets are dropped after 4 s, before the server's keep-alive timeout (5 s) closes them
  // under a request that reuses one (a "socket hang up" that is the client's own race).
  requests: new Agent({ keepAlive: true, maxSockets: 64, maxFreeSockets: 64, timeout: 4_000 }),
  streams: new Agent({ keepAlive: false, maxSockets: Number.POSITIVE_INFINITY }),
  h2: new H2Pool(H2_STREAMS_PER_CONNECTION),
};
const sessions: ClientSession[] = [];
/** Every endpoint sessions were opened on, in order. */
const endpoints: string[] = [];
const recorder = new UpdateRecorder();
const lists = new Map<ClientSession, ListWatch>();
let watching = false;
let listCalls = 0;
let listErrors = 0;

function onData(session: ClientSession, data: string): void {
  const uri = data.indexOf(URI_FIELD);
  if (uri >= 0) {
    const start = uri + URI_FIELD.length;
    const end = data.indexOf('"', start);
    recorder.onUpdate(data, start, end);
    if (session.heard !== undefined) hear(session.heard, data.slice(start, end));
  } else if (data.includes(LIST_CHANGED)) onListChanged(session);
  else if (data.includes(ACKNOWLEDGED)) session.markAcknowledged();
}

function onListChanged(session: ClientSession): void {
  if (!watching) return;
  const watch = lists.get(session);
  if (watch === undefined) return;
  watch.notifications++;
  if (watch.fetching) watch.again = true;
  else void fetchList(session, watch);
}

/** Re-lists tools as a client would on list_changed; one fetch in flight per session, plus one more if notified meanwhile. */
async function fetchList(session: ClientSession, watch: ListWatch): Promise<void> {
  watch.fetching = true;
  do {
    watch.again = false;
    listCalls++;
    try {
      const body = await session.call("tools/list", {});
      if (body !== watch.body) {
        watch.body = body;
        watch.bodyAt = nowMicros();
      }
    } catch {
      listErrors++;
    }
  } while (watch.again);
  watch.fetching = false;
}

async function open(params: OpenParams): Promise<OpenResult> {
  const started = Date.now();
  for (const url of params.urls) if (!endpoints.includes(url)) endpoints.push(url);
  const urls = params.urls.map((u) => new URL(u));
  let next = 0;
  let opened = 0;
  const errors: string[] = [];
  const worker = async (): Promise<void> => {
    while (next < params.uris.length) {
      const index = next++;
      const session = new ClientSession(params.kind, urls[index % urls.length] as URL, agents, onData, params.trackEventIds === true);
      const from = params.localAddresses;
      if (params.http2 === true) session.http2 = true;
      else if (from !== undefined && from.length > 0) session.localAddress = from[index % from.length];
      try {
        await session.open(params.uris[index] ?? "", params.toolsListChanged, params.withoutStreams !== true);
        sessions.push(session);
        opened++;
      } catch (error) {
        session.close();
        if (errors.length < 5) errors.push((error as Error).message);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(params.concurrency, params.uris.length) }, worker));
  return { opened, failed: params.uris.length - opened, errors, ms: Date.now() - started };
}

/** One listen opened until acknowledged (raw: the same request to the baseline server), then closed. */
async function listenOnce(url: URL, raw: boolean, uris: string): Promise<void> {
  const session = new ClientSession(raw ? "raw-listen" : "modern", url, agents, onData);
  try {
    await session.open(uris, false);
  } finally {
    session.close();
  }
}

async function rpcLoad(params: RpcLoadParams): Promise<RpcLoadResult> {
  if (params.method === "subscriptions/listen") {
    const urls = params.rawUrl !== undefined ? [new URL(params.rawPath ?? "/listen", params.rawUrl)] : (params.urls ?? []).map((u) => new URL(u));
    if (urls.length === 0) throw new Error("subscriptions/listen load needs urls or rawUrl");
    return timedWorkers(params.perWorker, (w) => (uris) => listenOnce(urls[w % urls.length] as URL, params.rawUrl !== undefined, uris));
  }
  const legacy = sessions.filter((s) => s.kind === "legacy");
  const rawUrl = params.rawUrl === undefined ? undefined : new URL(params.rawPath ?? "/rpc", params.rawUrl);
  if (rawUrl === undefined && legacy.length < params.perWorker.length) throw new Error(`rpcLoad needs ${params.perWorker.length} legacy sessions, has ${legacy.length}`);
  const method = params.method;
  return timedWorkers(params.perWorker, (w) => {
    const session = rawUrl !== undefined ? new ClientSession("raw", rawUrl, agents, onData) : (legacy[w] as ClientSession);
    return (uri) => session.call(method, { uri });
  });
}

/** Worker w runs `op` on each item of its list in order, back to back; every op timed. */
async function timedWorkers(perWorker: string[][], opFor: (w: number) => (item: string) => Promise<unknown>): Promise<RpcLoadResult> {
  const histogram = new Histogram();
  let ops = 0;
  let errors = 0;
  let firstError: string | undefined;
  const started = nowMicros();
  await Promise.all(
    perWorker.map(async (items, w) => {
      const op = opFor(w);
      for (const item of items) {
        const t0 = nowMicros();
        try {
          await op(item);
          histogram.record(nowMicros() - t0);
          ops++;
        } catch (error) {
          errors++;
          firstError ??= (error as Error).message;
        }
      }
    }),
  );
  return { ops, errors, firstError, ms: (nowMicros() - started) / 1000, histogram: histogram.toData() };
}

/** `…/r/<key>` (the resource itself) or `…/r/<key>/<step>.<seq>.<µs>` (one update of it). */
const BENCH_RESOURCE = /\/r\/(\d+)(?:\/(\d+)\.(\d+)\.\d+)?$/;
let coverageStep = -1;

function hear(heard: NonNullable<ClientSession["heard"]>, uri: string): void {
  const match = BENCH_RESOURCE.exec(uri);
  if (match === null) return;
  const key = Number(match[1]);
  let entry = heard.get(key);
  if (entry === undefined) heard.set(key, (entry = { seqs: new Set(), lastBare: 0 }));
  if (match[2] === undefined) entry.lastBare = nowMicros();
  else if (Number(match[2]) === coverageStep) entry.seqs.add(Number(match[3]));
}

function coverage(params: CoverageParams): CoverageResult {
  const result: CoverageResult = { expected: 0, exact: 0, renotified: 0, lost: 0, renotifiedPairs: 0 };
  for (const session of sessions) {
    if (session.heard === undefined) continue;
    for (const uri of session.uris) {
      const key = Number(BENCH_RESOURCE.exec(uri)?.[1] ?? -1);
      const entry = session.heard.get(key);
      const lastBare = entry?.lastBare ?? 0;
      if (lastBare > 0) result.renotifiedPairs++;
      for (let seq = key; seq < params.emitMicros.length; seq += params.keys) {
        result.expected++;
        if (entry?.seqs.has(seq) === true) result.exact++;
        else if (lastBare >= (params.emitMicros[seq] ?? Number.POSITIVE_INFINITY)) result.renotified++;
        else result.lost++;
      }
    }
  }
  return result;
}

/** From now on, what the tracked sessions hear counts for `step` (see coverage). */
function trackStep(step: number): void {
  coverageStep = step;
  for (const session of sessions) session.heard?.clear();
}

/** Tries of one client's reconnect in a storm. */
const STORM_ATTEMPTS = 5;

async function storm(params: StormParams): Promise<StormResult> {
  const legacy = sessions.filter((s) => s.kind === "legacy");
  const urls = params.urls.map((u) => new URL(u));
  const target = (session: ClientSession, i: number): URL => {
    if (!params.moveOn) return urls[i % urls.length] as URL;
    const at = urls.findIndex((u) => u.href === session.url.href);
    return urls[(at + 1) % urls.length] as URL;
  };
  const started = nowMicros();
  // Every stream is cut before any client reconnects: the storm hits all at once.
  for (const session of legacy) session.close();
  const readyMicros: number[] = [];
  const errors: string[] = [];
  let failed = 0;
  let retries = 0;
  await Promise.all(
    legacy.map(async (session, i) => {
      const url = target(session, i);
      // As a client's transport does, a reconnect that fails is tried again after a short, jittered wait.
      for (let attempt = 1; ; attempt++) {
        try {
          await (params.mode === "reattach" ? session.reattach(url) : session.reinitialize(url));
          readyMicros.push(nowMicros() - started);
          return;
        } catch (error) {
          if (attempt < STORM_ATTEMPTS) {
            retries++;
            await new Promise((resolve) => setTimeout(resolve, 250 + Math.random() * 750));
            continue;
          }
          failed++;
          if (errors.length < 5) errors.push((error as Error).message);
          return;
        }
      }
    }),
  );
  return { sessions: legacy.length, failed, errors, readyMicros, retries };
}

function listCounts(watches: Iterable<ListWatch>, marker: string): ListWatchCounts {
  const counts = new Map<number, number>();
  let sessionCount = 0;
  let holding = 0;
  let lastHeldMicros = 0;
  for (const watch of watches) {
    sessionCount++;
    counts.set(watch.notifications, (counts.get(watch.notifications) ?? 0) + 1);
    if (watch.body.includes(marker)) {
      holding++;
      lastHeldMicros = Math.max(lastHeldMicros, watch.bodyAt);
    }
  }
  return { sessions: sessionCount, notificationCounts: [...counts].sort((a, b) => a[0] - b[0]), holding, lastHeldMicros };
}

function listReport(marker: string): ListWatchReport {
  const byUrl = endpoints.map((url): [string, ListWatchCounts] => {
    const href = new URL(url).href;
    return [url, listCounts([...lists].filter(([session]) => session.url.href === href).map(([, watch]) => watch), marker)];
  });
  return { ...listCounts(lists.values(), marker), listCalls, listErrors, byUrl };
}

const api: GeneratorApi = {
  open,
  reset: ({ step, trackSeq }) => recorder.reset(step, trackSeq),
  progress: () => ({ received: recorder.received }),
  snapshot: () => ({
    received: recorder.received,
    strays: recorder.strays,
    histogram: recorder.histogram.toData(),
    firstMicros: recorder.firstMicros,
    lastMicros: recorder.lastMicros,
    perSeq: recorder.perSeqEntries(),
    usage: sampleUsage(),
  }),
  watchLists: () => {
    watching = true;
    listCalls = listErrors = 0;
    lists.clear();
    for (const session of sessions) if (session.kind !== "raw") lists.set(session, { notifications: 0, fetching: false, again: false, body: "", bodyAt: 0 });
  },
  listReport: ({ marker }) => listReport(marker),
  rpcLoad,
  storm,
  coverage,
  trackStep: ({ step }) => trackStep(step),
  usage: reportUsage,
  closeAll: async () => {
    await Promise.all(sessions.splice(0).map((session) => session.end()));
    lists.clear();
    watching = false;
  },
  stop: () => {
    for (const session of sessions.splice(0)) session.close();
    setTimeout(() => process.exit(0), 20);
  },
};

serveRpc(parentLink(), api);
exitWithParent(() => {
  for (const session of sessions) session.close();
});
