import type { ClientRequest, IncomingMessage } from "node:http";
import { LEGACY_PROTOCOL_VERSIONS, META, MODERN_PROTOCOL_VERSION, NOTIFICATION } from "@mcp-broker/shared";
import { nowMicros } from "../core/clock.js";
import { exposedUri } from "../core/bench-uris.js";
import { drain, fetchText, openStream, type HttpCall, type HttpResponse } from "../load/http-client.js";
import type { Agents } from "../load/client-session.js";
import { EVENT_FIELDS, type ClientRecord, type ClientSpec, type StreamReason, type StreamRecord } from "./chaos-generator-api.js";
import { SseReader } from "./sse-reader.js";

const LEGACY_VERSION = LEGACY_PROTOCOL_VERSIONS[0];
const CLIENT_INFO = { name: "mcp-broker-chaos", version: "1.0.0" };
const ENVELOPE = { [META.protocolVersion]: MODERN_PROTOCOL_VERSION, [META.clientCapabilities]: {}, [META.clientInfo]: CLIENT_INFO };
const JSON_AND_SSE = "application/json, text/event-stream";
const UPDATED = `"method":"${NOTIFICATION.resourceUpdated}"`;
const ACKNOWLEDGED = `"method":"${NOTIFICATION.subscriptionsAcknowledged}"`;
const URI_FIELD = '"uri":"';
const RESOURCE_PREFIX = exposedUri(0).slice(0, -1); // bench+bench://r/
const CURSOR_FIELD = `"${META.cursor}":"`;
const RESUMED_FIELD = `"${META.resumed}":"`;
const METHOD_FIELD = '"method":"';
const EVENT_ID = /^(\d+)(?:\.(\d+))?$/;
/** The broker's answer to a request that raced with another broker adopting the session. */
const MOVED = '"moved":true';
const MOVED_RETRIES = 5;
/** Requests traced per client (its setup and restarts; streams have their own records). */
const TRACE_LIMIT = 40;

/**
 * The official SDK client's reconnection (StreamableHTTPClientTransport's defaults): the first try
 * `initialReconnectionDelay` after a stream ends, each failed try waits `growFactor` times longer,
 * up to `maxDelay`; a `retry:` the server sent replaces all of these from then on. The SDK gives up
 * after `maxRetries` failed tries; these clients keep trying (a run measures the broker, not the
 * give-up), and the report counts the reconnects that needed more.
 */
export const SDK_RECONNECTION = { initialDelayMs: 1_000, growFactor: 1.5, maxDelayMs: 30_000, maxRetries: 2 } as const;
/** A stream or request without a response within this long counts as failed (the SDK waits for ever; a run cannot). */
const RESPONSE_TIMEOUT_MS = 15_000;
/**
 * A listen is acknowledged only once its subscriptions are made, which may wait for the backend's
 * watcher up to `redis.watcherTimeoutMs` (35 s by default): its acknowledgement gets longer.
 */
const ACK_TIMEOUT_MS = 60_000;

export interface ClientEnv {
  readonly url: URL;
  readonly agents: Agents;
  /** The load balancer's response header naming the broker that answered. */
  readonly serverHeader: string;
  /** This run's emission step (see EV.seq). */
  readonly step: number;
}

interface OpenStream {
  readonly req: ClientRequest;
  readonly res: IncomingMessage;
  readonly record: StreamRecord;
  /** Legacy: from its response on; modern: from its acknowledgement on. Only an established stream's end is reconnected by `ended`. */
  established: boolean;
}

/** How one try at a stream went: open, failed (tried again later), or refused with 404 (the session is gone: start over). */
type Outcome = "open" | "failed" | "refused";

/**
 * One client of the chaos run, over raw HTTP (thousands fit in one process), reconnecting as the
 * SDK client does. Legacy: a session (initialize, initialized, GET stream, resources/subscribe per
 * key); when its stream ends it re-opens the GET with the same Mcp-Session-Id and Last-Event-ID =
 * the last event id it received; a 404 for its session makes it start over (a new session,
 * subscribed again). Modern: one subscriptions/listen stream; when it ends it listens again with
 * the last cursor it received in `_meta["io.mcp-broker/cursor"]`. Every `updated` is recorded with
 * its arrival, position, seq and stream (see ClientRecord).
 */
export class ChaosClient {
  readonly record: ClientRecord;
  private readonly keyIndex = new Map<number, number>();
  private sessionId: string | undefined;
  private lastEventId: string | undefined;
  private lastCursor: string | undefined;
  /** The server's `retry:` hint; once given, every later reconnect waits this long (as the SDK keeps it). */
  private retryMs: number | undefined;
  /** Failed tries since the last stream that opened. */
  private attempt = 0;
  private stream: OpenStream | undefined;
  private timer: NodeJS.Timeout | undefined;
  private nextId = 0;
  private closing = false;
  /** Waiting for the first stream's acknowledgement (modern). */
  private acknowledged: ((ok: boolean) => void) | undefined;

  constructor(
    spec: ClientSpec,
    private readonly env: ClientEnv,
  ) {
    this.record = {
      index: spec.index,
      kind: spec.kind,
      keys: spec.keys,
      sessionIds: [],
      initializedAt: [],
      streams: [],
      events: spec.keys.map(() => []),
      foreign: 0,
      unreadable: 0,
      other: {},
      refusals: [],
      movedRetries: 0,
      trace: [],
    };
    spec.keys.forEach((key, i) => this.keyIndex.set(key, i));
  }

  get isOpen(): boolean {
    return this.stream !== undefined;
  }

  get isReconnecting(): boolean {
    return this.stream === undefined && !this.closing;
  }

  get updates(): number {
    return this.record.events.reduce((sum, events) => sum + events.length / EVENT_FIELDS, 0);
  }

  /** Opens the session or listen stream and subscribes; throws when that fails (setup is before any chaos). */
  async setup(): Promise<void> {
    if (this.record.kind === "legacy") {
      await this.startSession("initial");
      return;
    }
    if ((await this.listen("initial")) !== "open") throw new Error(`listen: ${this.lastStream()?.error ?? `HTTP ${this.lastStream()?.status ?? 0}`}`);
  }

  /** Stops reconnecting; a legacy session is deleted (DELETE), then the stream closed. Resolves whether the DELETE succeeded (modern: true). */
  async close(): Promise<boolean> {
    this.closing = true;
    clearTimeout(this.timer);
    let deleted = true;
    if (this.record.kind === "legacy" && this.sessionId !== undefined) {
      const response = await this.call({ method: "DELETE", headers: this.legacyHeaders() }).catch(() => undefined);
      deleted = response !== undefined && response.status < 300;
    }
    this.endStream("closed by the client");
    return deleted;
  }

  /** A new legacy session: initialize, initialized, the GET stream, then one subscribe per key. */
  private async startSession(reason: StreamReason): Promise<void> {
    const previous = this.stream;
    if (previous !== undefined) {
      previous.established = false; // not reconnected: this session is left
      this.endStream("starting over");
    }
    this.sessionId = undefined;
    this.lastEventId = undefined;
    const init = await this.post({ jsonrpc: "2.0", id: ++this.nextId, method: "initialize", params: { protocolVersion: LEGACY_VERSION, capabilities: {}, clientInfo: CLIENT_INFO } });
    const id = init.headers["mcp-session-id"];
    if (init.status !== 200 || typeof id !== "string") throw new Error(`initialize: HTTP ${init.status} ${init.body.slice(0, 200)}`);
    this.record.initializedAt.push(nowMicros());
    this.sessionId = id;
    this.record.sessionIds.push(id);
    const initialized = await this.post({ jsonrpc: "2.0", method: NOTIFICATION.initialized });
    if (initialized.status === 404) this.record.refusals.push({ atMicros: nowMicros(), sessionId: id, what: "notifications/initialized", ...serverOf(initialized, this.env.serverHeader) });
    if (initialized.status !== 202) throw new Error(`notifications/initialized: HTTP ${initialized.status} ${initialized.body.slice(0, 200)}`);
    // The stream first, so that nothing announced after a subscribe is missed.
    const stream = await this.openGet(reason);
    if (stream === "refused") throw new Error("GET stream: HTTP 404 for a session just initialized");
    if (stream === "failed") {
      this.attempt++;
      this.later(() => this.reconnect());
    }
    for (const key of this.record.keys) await this.subscribe(key);
  }

  /**
   * resources/subscribe; one the broker answers "the session moved to another broker instance
   * while this was on its way; retry it" (`data.moved`: another broker adopted the session
   * meanwhile, as round-robin balancing does on every request) is sent again, as its message asks.
   */
  private async subscribe(key: number): Promise<void> {
    for (let tries = 1; ; tries++) {
      const response = await this.post({ jsonrpc: "2.0", id: ++this.nextId, method: "resources/subscribe", params: { uri: exposedUri(key) } });
      if (response.status === 200 && response.body.includes('"result"')) return;
      if (response.status === 200 && response.body.includes(MOVED) && tries < MOVED_RETRIES) {
        this.record.movedRetries++;
        continue;
      }
      if (response.status === 404) this.record.refusals.push({ atMicros: nowMicros(), sessionId: this.sessionId ?? "", what: "resources/subscribe", ...serverOf(response, this.env.serverHeader) });
      throw new Error(`resources/subscribe: HTTP ${response.status} ${response.body.slice(0, 200)}`);
    }
  }

  /** One try at the legacy GET stream; a 404 is recorded as a refusal of the session. */
  private async openGet(reason: StreamReason): Promise<Outcome> {
    const headers: Record<string, string> = { accept: "text/event-stream", ...this.legacyHeaders() };
    if (this.lastEventId !== undefined) headers["last-event-id"] = this.lastEventId;
    const record = this.newStream(reason, this.lastEventId);
    const outcome = await this.attach(record, { method: "GET", headers }, true);
    if (outcome === "refused") this.record.refusals.push({ atMicros: nowMicros(), sessionId: this.sessionId ?? "", what: "GET stream", ...(record.server !== undefined && { server: record.server }) });
    return outcome;
  }

  /** One try at a listen stream (with the last cursor); open once it is acknowledged. */
  private async listen(reason: StreamReason): Promise<Outcome> {
    const cursor = this.lastCursor;
    const _meta = cursor === undefined ? ENVELOPE : { ...ENVELOPE, [META.cursor]: cursor };
    const body = JSON.stringify({
      jsonrpc: "2.0",
      id: `listen-${++this.nextId}`,
      method: "subscriptions/listen",
      params: { notifications: { resourceSubscriptions: this.record.keys.map(exposedUri) }, _meta },
    });
    const record = this.newStream(reason, cursor === undefined ? undefined : cursor.slice(cursor.lastIndexOf(":") + 1));
    const acknowledged = new Promise<boolean>((resolve) => (this.acknowledged = resolve));
    const opened = await this.attach(
      record,
      {
        method: "POST",
        headers: { accept: JSON_AND_SSE, "content-type": "application/json", "mcp-protocol-version": MODERN_PROTOCOL_VERSION, "mcp-method": "subscriptions/listen" },
        body,
      },
      false,
      ACK_TIMEOUT_MS,
    );
    if (opened !== "open") {
      this.acknowledged = undefined;
      return "failed";
    }
    const timer = setTimeout(() => {
      record.error = `no acknowledgement within ${ACK_TIMEOUT_MS} ms`;
      this.endStream("no acknowledgement");
    }, ACK_TIMEOUT_MS);
    const ok = await acknowledged;
    clearTimeout(timer);
    if (!ok && this.stream?.record === record) this.endStream(record.error ?? "not acknowledged");
    return ok ? "open" : "failed";
  }

  /** Sends the stream request; on a 200 event stream, reads it. */
  private async attach(record: StreamRecord, call: HttpCall, established: boolean, timeoutMs = RESPONSE_TIMEOUT_MS): Promise<Outcome> {
    let req: ClientRequest;
    let res: IncomingMessage;
    try {
      ({ req, res } = await openStream(this.env.agents.streams, this.env.url, { ...call, timeoutMs }));
    } catch (error) {
      record.error = (error as Error).message;
      return "failed";
    }
    record.status = res.statusCode ?? 0;
    const server = res.headers[this.env.serverHeader];
    if (typeof server === "string") record.server = server;
    if (record.status !== 200 || !(res.headers["content-type"] ?? "").startsWith("text/event-stream")) {
      record.error = (await drain(res)).slice(0, 200);
      return record.status === 404 ? "refused" : "failed";
    }
    if (this.closing) {
      res.destroy();
      return "failed";
    }
    // A listen counts as open once acknowledged with everything it asked for (see onEvent).
    if (established) record.openMicros = nowMicros();
    const stream: OpenStream = { req, res, record, established };
    this.stream = stream;
    if (established) this.attempt = 0;
    const reader = new SseReader({ event: (data, id) => this.onEvent(stream, data, id), retry: (ms) => (this.retryMs = ms) });
    res.setEncoding("utf8");
    res.on("data", (chunk: string) => reader.push(chunk));
    res.once("end", () => this.ended(stream, "ended by the server"));
    res.once("error", (error) => this.ended(stream, `error: ${error.message}`));
    res.once("close", () => this.ended(stream, "connection closed"));
    req.on("error", () => undefined);
    return "open";
  }

  private onEvent(stream: OpenStream, data: string, id: string | undefined): void {
    if (id !== undefined) this.lastEventId = id;
    if (data.includes(UPDATED)) {
      this.onUpdated(stream, data, id);
      return;
    }
    if (this.record.kind === "modern") {
      const cursor = stringField(data, CURSOR_FIELD);
      if (cursor !== undefined) this.lastCursor = cursor;
      if (data.includes(ACKNOWLEDGED)) {
        const resumed = stringField(data, RESUMED_FIELD);
        if (resumed !== undefined) stream.record.resumed = resumed;
        // The honored filter names the subscriptions the broker made; one left out is not heard on this stream.
        const honored = data.split(RESOURCE_PREFIX).length - 1;
        stream.record.honored = honored;
        if (honored < this.record.keys.length) {
          // As @mcp-broker/client retries refused subscriptions: this listen is left, another tried later.
          stream.record.error = `acknowledged without ${this.record.keys.length - honored} of its ${this.record.keys.length} subscriptions`;
          this.acknowledged?.(false);
        } else {
          stream.established = true;
          stream.record.openMicros = nowMicros();
          this.attempt = 0;
          this.acknowledged?.(true);
        }
        this.acknowledged = undefined;
        return;
      }
    }
    const method = stringField(data, METHOD_FIELD) ?? (data.includes('"result"') ? "(result)" : data.includes('"error"') ? "(error)" : "(other)");
    this.record.other[method] = (this.record.other[method] ?? 0) + 1;
  }

  private onUpdated(stream: OpenStream, data: string, id: string | undefined): void {
    const at = nowMicros();
    let eventId = id;
    if (this.record.kind === "modern") {
      const cursor = stringField(data, CURSOR_FIELD);
      if (cursor !== undefined) {
        this.lastCursor = cursor;
        eventId = cursor.slice(cursor.lastIndexOf(":") + 1);
      }
    }
    const parsedId = eventId === undefined ? null : EVENT_ID.exec(eventId);
    const uri = stringField(data, URI_FIELD);
    if (uri === undefined || !uri.startsWith(RESOURCE_PREFIX) || parsedId === null) {
      this.record.unreadable++;
      return;
    }
    const rest = uri.slice(RESOURCE_PREFIX.length);
    const slash = rest.indexOf("/");
    const key = Number(slash < 0 ? rest : rest.slice(0, slash));
    let seq = -1;
    if (slash >= 0) {
      const [step, seqText] = rest.slice(slash + 1).split(".");
      if (Number(step) !== this.env.step || seqText === undefined) {
        this.record.unreadable++;
        return;
      }
      seq = Number(seqText);
    }
    const index = this.keyIndex.get(key);
    if (index === undefined) {
      this.record.foreign++;
      return;
    }
    (this.record.events[index] as number[]).push(at, Number(parsedId[1]), parsedId[2] === undefined ? 0 : Number(parsedId[2]), seq, stream.record.no);
  }

  private ended(stream: OpenStream, reason: string): void {
    if (stream.record.endMicros !== 0) return;
    stream.record.endMicros = nowMicros();
    stream.record.endReason = reason;
    if (this.stream === stream) this.stream = undefined;
    // A listen stream that ends before its acknowledgement failed to open.
    this.acknowledged?.(false);
    this.acknowledged = undefined;
    stream.res.destroy();
    if (stream.established && !this.closing) this.later(() => this.reconnect());
  }

  private endStream(reason: string): void {
    const stream = this.stream;
    if (stream === undefined) return;
    this.ended(stream, reason);
    stream.req.destroy();
  }

  /** Runs `next` after the SDK's delay for this attempt (one timer at a time). */
  private later(next: () => Promise<void>): void {
    if (this.closing || this.timer !== undefined) return;
    const delay = this.retryMs ?? Math.min(SDK_RECONNECTION.initialDelayMs * SDK_RECONNECTION.growFactor ** this.attempt, SDK_RECONNECTION.maxDelayMs);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void next();
    }, delay);
  }

  private async reconnect(): Promise<void> {
    if (this.closing || this.stream !== undefined) return;
    const outcome = this.record.kind === "legacy" ? await this.openGet("reconnect") : await this.listen("reconnect");
    if (outcome === "open" || this.closing) return;
    if (outcome === "refused") {
      void this.restart();
      return;
    }
    this.attempt++;
    this.later(() => this.reconnect());
  }

  /** The broker does not know the session (404): the client starts over, as the transport spec says. */
  private async restart(): Promise<void> {
    if (this.closing) return;
    try {
      await this.startSession("restart");
    } catch {
      this.attempt++;
      this.later(() => this.restart());
    }
  }

  private newStream(reason: StreamReason, resumeFrom: string | undefined): StreamRecord {
    const record: StreamRecord = {
      no: this.record.streams.length + 1,
      reason,
      attempt: this.attempt,
      requestMicros: nowMicros(),
      openMicros: 0,
      status: 0,
      endMicros: 0,
      ...(resumeFrom !== undefined && { resumeFrom }),
    };
    this.record.streams.push(record);
    return record;
  }

  private lastStream(): StreamRecord | undefined {
    return this.record.streams[this.record.streams.length - 1];
  }

  /** A POST on the session; each is traced (time, method, answer, broker) for the evidence of a lost subscription or a 404. */
  private async post(message: Record<string, unknown>): Promise<HttpResponse> {
    const at = nowMicros();
    const method = typeof message.method === "string" ? message.method : "?";
    const subject = typeof (message.params as { uri?: unknown } | undefined)?.uri === "string" ? ` ${String((message.params as { uri: string }).uri)}` : "";
    try {
      const response = await this.call({ method: "POST", headers: { "content-type": "application/json", accept: JSON_AND_SSE, ...this.legacyHeaders() }, body: JSON.stringify(message) });
      const outcome = response.body.includes(MOVED) ? " moved" : response.body.includes('"error"') ? " error" : "";
      this.trace(at, `${method}${subject} → ${response.status}${outcome} via ${serverOf(response, this.env.serverHeader).server ?? "?"}`);
      return response;
    } catch (error) {
      this.trace(at, `${method}${subject} → ${(error as Error).message}`);
      throw error;
    }
  }

  private trace(atMicros: number, what: string): void {
    if (this.record.trace.length < TRACE_LIMIT) this.record.trace.push(`${(atMicros / 1e6).toFixed(3)} ${this.sessionId ?? "(no session)"} ${what}`);
  }

  private call(call: HttpCall): Promise<HttpResponse> {
    return fetchText(this.env.agents.requests, this.env.url, { ...call, timeoutMs: RESPONSE_TIMEOUT_MS });
  }

  private legacyHeaders(): Record<string, string> {
    return this.sessionId === undefined ? {} : { "mcp-session-id": this.sessionId, "mcp-protocol-version": LEGACY_VERSION };
  }
}

/** The JSON string value after `field` (which ends with its opening quote); no escapes expected. */
function stringField(data: string, field: string): string | undefined {
  const at = data.indexOf(field);
  if (at < 0) return undefined;
  const start = at + field.length;
  const end = data.indexOf('"', start);
  return end < 0 ? undefined : data.slice(start, end);
}

function serverOf(response: HttpResponse, header: string): { server?: string } {
  const server = response.headers[header];
  return typeof server === "string" ? { server } : {};
}
