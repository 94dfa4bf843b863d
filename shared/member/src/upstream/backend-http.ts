import http, { type IncomingMessage } from "node:http";
import https from "node:https";
import { StringDecoder } from "node:string_decoder";
import { STDIO_DEFAULT_MAX_BUFFER_SIZE, type FetchLike } from "@modelcontextprotocol/client";
import { lastMemberId } from "./stdio-read-buffer.js";

/**
 * Sees each complete event of an event-stream response (its text, without the blank line that
 * ends it) before the SDK does; returns false to take it out of the stream.
 */
export type EventTap = (event: string) => boolean;

/** How long a request waits for its response's headers (undici's default for `fetch`). */
export const HEADERS_TIMEOUT_MS = 300_000;

/** Keep-alive connection pools, one per scheme (a backend connection keeps its own across reconnects). */
export interface HttpAgents {
  readonly http: http.Agent;
  readonly https: https.Agent;
}

export function keepAliveAgents(): HttpAgents {
  return { http: new http.Agent({ keepAlive: true }), https: new https.Agent({ keepAlive: true }) };
}

/** Closes every connection of `agents` (their backend connection is closed for good). */
export function closeAgents(agents: HttpAgents): void {
  agents.http.destroy();
  agents.https.destroy();
}

export interface BackendHttpOptions {
  agents: HttpAgents;
  /**
   * Per request, before it is sent: the request as it goes out (a header taken off, say) and the
   * tap for the events of its response, if that is an event stream.
   */
  prepare?(init: RequestInit | undefined): { init: RequestInit | undefined; tap?: EventTap };
  /**
   * After a tapped chunk: a promise while what the tap took in is still being handled (reading
   * waits for it: TCP backpressure to the backend), undefined to read on.
   */
  backlog?(): Promise<void> | undefined;
  headersTimeoutMs?: number;
  /**
   * The most one message may take: a JSON answer's body, or one event of an event stream (default
   * the SDK's stdio limit, 10 MiB). Past it, the message is not read on: an answer to a request
   * is replaced with the error response `oversized` gives (the request fails, the connection
   * stays), another event stream ends there (its events before that one still pass), and a plain
   * body fails (`tooLargeError`).
   */
  maxMessageBytes?: number;
  /** The error response that stands for request `id`'s answer once it passed the limit. */
  oversized?(bytes: number, id: string | number): { code: number; message: string; data?: unknown };
  /** A message passed the limit (for the log). */
  onOversized?(bytes: number, id: string | number | undefined): void;
}

/** The code in the `cause` of a body that passed `maxMessageBytes` (see `tooLargeError`). */
export const TOO_LARGE = "MCP_BROKER_MESSAGE_TOO_LARGE";

/** A response body, or one event of it, over the size limit: as `fetch` fails a body (a `TypeError` with a `cause` that has a `code`), with its own code. */
export function tooLargeError(limit: number): TypeError {
  return new TypeError(`a message over the ${limit}-byte limit`, { cause: Object.assign(new Error(`message over ${limit} bytes`), { code: TOO_LARGE }) });
}

/** Whether `error` is `tooLargeError`'s. */
export function isTooLarge(error: unknown): boolean {
  return error instanceof TypeError && (error.cause as { code?: unknown } | undefined)?.code === TOO_LARGE;
}

/**
 * The `fetch` of one backend connection's Streamable HTTP transport, on node:http(s) with
 * keep-alive agents of its own. Measured against the platform `fetch` (undici) on the broker's
 * upstream requests, it spends about half the CPU per request: undici builds several web streams
 * per request (the request body, its tee for a clone, the response body) and its fetch algorithm
 * around them, and each abort listener it adds to the transport's long-lived signal stays until
 * garbage collection, so a busy connection's signal collects thousands of them (a
 * MaxListenersExceededWarning, and a linear scan per request). Here a response body is one web
 * stream, fed from the socket, and the listener on the request's signal is removed when the
 * response ends. Event-stream responses go through `tap` event by event on the way, in the same
 * pass (the broker's fast path for `resources/updated`, and the ties of a backend's requests to
 * the call whose stream carried them).
 *
 * What it does not do, because the SDK transport does not need it: follow redirects (every
 * redirect comes back as it is, like `redirect: "manual"`; the transport follows same-origin ones
 * itself), decompress (it asks for no encoding), cookies, or bodies other than text and bytes
 * (those go to the platform `fetch`). Network failures reject with a `TypeError` whose `cause`
 * holds the socket error and its `code`, as `fetch` does; an abort rejects with the signal's reason.
 */
export class BackendHttp {
  private readonly headersTimeoutMs: number;
  /**
   * Whether event-stream answers are read for a lone response (see `probeAnswer`): no longer once
   * this backend left a stream open after its response, which would delay every answer by the grace.
   */
  private probeAnswers = true;

  private readonly maxMessageBytes: number;

  constructor(private readonly options: BackendHttpOptions) {
    this.headersTimeoutMs = options.headersTimeoutMs ?? HEADERS_TIMEOUT_MS;
    this.maxMessageBytes = options.maxMessageBytes ?? STDIO_DEFAULT_MAX_BUFFER_SIZE;
  }

  /**
   * The requests this connection sent whose answer is still being read, by JSON-RPC id: how to end
   * each (see `cancelled`).
   */
  private readonly answering = new Map<string | number, () => void>();

  readonly fetch: FetchLike = (url, init) => {
    const prepared = this.options.prepare?.(init) ?? { init };
    const body = prepared.init?.body;
    if (body !== undefined && body !== null && typeof body !== "string" && !(body instanceof Uint8Array)) return fetch(url, prepared.init);
    if (typeof body === "string" && body.includes('"notifications/cancelled"')) this.cancelled(body);
    return this.send(new URL(url), prepared.init, body ?? undefined, prepared.tap, typeof body === "string" ? requestIdOf(body) : undefined);
  };

  /**
   * A legacy-era request this connection cancelled (the caller gave up, or it timed out): the SDK
   * client sends `notifications/cancelled` and drops the request, but leaves its POST's answer
   * open, and a server need not answer a cancelled request (the SDK's does not): each left a
   * connection open for good. Its answer is ended here, with a -32800 response in its place, so
   * the SDK takes it as answered (it would otherwise try to resume the stream) and the connection
   * closes.
   */
  private cancelled(body: string): void {
    let requestId: unknown;
    try {
      const message = JSON.parse(body) as { method?: unknown; params?: { requestId?: unknown } };
      if (message.method === "notifications/cancelled") requestId = message.params?.requestId;
    } catch {
      return;
    }
    if (typeof requestId === "string" || typeof requestId === "number") this.answering.get(requestId)?.();
  }

  private send(url: URL, init: RequestInit | undefined, body: string | Uint8Array | undefined, tap: EventTap | undefined, id?: string | number): Promise<Response> {
    const signal = init?.signal ?? undefined;
    if (signal?.aborted === true) return Promise.reject(abortReason(signal));
    const headers: Record<string, string> = {};
    // The transport passes a `Headers` (read as it is; copying it cost as much again), others a record or pairs.
    const given = init?.headers;
    (given instanceof Headers ? given : new Headers(given)).forEach((value, name) => {
      headers[name] = value;
    });
    if (body !== undefined) headers["content-length"] = String(typeof body === "string" ? Buffer.byteLength(body) : body.byteLength);
    headers["accept-encoding"] ??= "identity";
    const secure = url.protocol === "https:";
    return new Promise<Response>((resolve, reject) => {
      let settled = false;
      let bodyController: ReadableStreamDefaultController<Uint8Array> | undefined;
      /** While an event-stream answer is read before it is handed over (see `probeAnswer`): how to fail the request. */
      let probing: ((error: Error) => void) | undefined;
      const onAbort = (): void => {
        const reason = abortReason(signal);
        request.destroy();
        if (!settled) fail(reason);
        else if (probing !== undefined) probing(reason);
        else bodyController?.error(reason);
      };
      const unlisten = signal === undefined ? () => undefined : whenAborted(signal, onAbort);
      /** Ends this request's answer early: it was cancelled (see `cancelled`). */
      let cutStream: ((tail: Uint8Array) => void) | undefined;
      const cut = (): void => {
        const reason = new DOMException("The request was cancelled", "AbortError");
        if (!settled || probing !== undefined) {
          request.destroy();
          if (!settled) fail(reason);
          else {
            probing?.(reason);
            done();
          }
          return;
        }
        cutStream?.(cancelledAnswer(id as string | number));
      };
      if (id !== undefined) this.answering.set(id, cut);
      const done = (): void => {
        unlisten();
        if (id !== undefined && this.answering.get(id) === cut) this.answering.delete(id);
      };
      const fail = (error: Error): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        done();
        reject(error);
      };
      const request = (secure ? https : http).request(
        url,
        { method: init?.method ?? "GET", headers, agent: secure ? this.options.agents.https : this.options.agents.http },
        (response) => {
          if (settled) {
            response.destroy();
            return;
          }
          const status = response.statusCode ?? 0;
          if (status < 200 || status > 599) {
            // fetch's Response cannot hold it (an informational or made-up status): a bad answer, not a crash.
            response.destroy();
            fail(new TypeError("fetch failed", { cause: Object.assign(new Error(`invalid response status ${status}`), { code: "UND_ERR_INVALID_STATUS" }) }));
            return;
          }
          settled = true;
          clearTimeout(timer);
          const responseHeaders = new Headers();
          const raw = response.rawHeaders;
          for (let i = 0; i + 1 < raw.length; i += 2) responseHeaders.append(raw[i] as string, raw[i + 1] as string);
          const empty = status === 204 || status === 205 || status === 304 || init?.method === "HEAD";
          const eventStream = tap !== undefined && responseHeaders.get("content-type")?.startsWith("text/event-stream") === true;
          const respond = (responseBody: string | ReadableStream<Uint8Array> | null): void => {
            probing = undefined;
            const responseInit = { status, statusText: response.statusMessage ?? "", headers: responseHeaders };
            resolve(typeof responseBody === "string" ? new TextResponse(responseBody, responseInit) : new Response(responseBody, responseInit));
          };
          const max = this.maxMessageBytes;
          /** What stands for request `id`'s answer past the limit: its error response, as JSON. */
          const standIn = (bytes: number): string | undefined => {
            this.options.onOversized?.(bytes, id);
            const error = id === undefined ? undefined : this.options.oversized?.(bytes, id);
            return error === undefined ? undefined : JSON.stringify({ jsonrpc: "2.0", id, error });
          };
          const streamed = (events: EventSplitter | undefined, prefix?: Buffer): ReadableStream<Uint8Array> =>
            bodyStream(
              response,
              events,
              () => this.options.backlog?.(),
              {
                started: (controller, end) => {
                  bodyController = controller;
                  cutStream = end;
                },
                ended: done,
                max,
                // An event stream ends there (an answer to a request with its stand-in); a plain body fails.
                over: (bytes) => {
                  if (events === undefined) {
                    this.options.onOversized?.(bytes, id);
                    return undefined;
                  }
                  const json = standIn(bytes);
                  return new TextEncoder().encode(json === undefined ? "" : `\n\nevent: message\ndata: ${json}\n\n`);
                },
              },
              prefix,
            );
          if (eventStream && !empty && this.probeAnswers && mayCollapse(init, body)) {
            probing = reject;
            probeAnswer(response, new EventSplitter(tap), max, {
              answered: (json) => {
                done();
                responseHeaders.set("content-type", "application/json");
                responseHeaders.delete("content-length");
                respond(json);
              },
              streamed: (prefix, events) => respond(streamed(events, prefix)),
              ended: (text, error) => {
                done();
                respond(error === undefined ? text : textThenError(text, error));
              },
              lingered: () => (this.probeAnswers = false),
              over: (bytes) => {
                done();
                const json = standIn(bytes);
                if (json === undefined) {
                  probing = undefined;
                  reject(tooLargeError(max));
                  return;
                }
                responseHeaders.set("content-type", "application/json");
                responseHeaders.delete("content-length");
                respond(json);
              },
            });
            return;
          }
          if (empty) {
            response.resume();
            response.once("close", done);
          }
          respond(empty ? null : streamed(eventStream ? new EventSplitter(tap) : undefined));
        },
      );
      const timer = setTimeout(() => {
        request.destroy(Object.assign(new Error("Headers Timeout Error"), { code: "UND_ERR_HEADERS_TIMEOUT" }));
      }, this.headersTimeoutMs);
      timer.unref();
      request.on("error", (error: NodeJS.ErrnoException) => {
        if (settled) return;
        // A kept-alive socket the server had closed (its idle timeout) before this member, busy,
        // noticed: nothing reached the server, so the request goes again. Each such socket is
        // destroyed as it fails, so this ends at the latest on a fresh connection.
        if (request.reusedSocket && (error.code === "ECONNRESET" || error.code === "EPIPE")) {
          settled = true;
          clearTimeout(timer);
          done();
          this.send(url, init, body, tap, id).then(resolve, reject);
          return;
        }
        fail(new TypeError("fetch failed", { cause: error }));
      });
      request.end(body);
    });
  }
}

/** Per signal, what to do when it aborts: one listener on the signal however many requests share it. */
const abortHandlers = new WeakMap<AbortSignal, Set<() => void>>();

/**
 * Calls `handler` when `signal` aborts, until the function returned is called. A transport passes
 * its one signal to every request; each adding a listener of its own would set off Node's
 * MaxListenersExceededWarning with more than 10 requests in flight.
 */
function whenAborted(signal: AbortSignal, handler: () => void): () => void {
  let handlers = abortHandlers.get(signal);
  if (handlers === undefined) {
    const added = new Set<() => void>();
    handlers = added;
    abortHandlers.set(signal, added);
    signal.addEventListener(
      "abort",
      () => {
        const due = [...added];
        added.clear();
        for (const handle of due) handle();
      },
      { once: true },
    );
  }
  handlers.add(handler);
  const own = handlers;
  return () => own.delete(handler);
}

/** Why `signal` aborted, as `fetch` rejects with it (an abort without a reason is an AbortError). */
function abortReason(signal: AbortSignal | undefined): Error {
  const reason: unknown = signal?.reason;
  if (reason instanceof Error) return reason;
  return new DOMException(typeof reason === "string" ? reason : "This operation was aborted", "AbortError");
}

/**
 * The response body as one web stream, read from the socket as the reader asks (backpressure),
 * through `tap` event by event when given, and no faster than `backlog` allows. An event not yet complete when the body ends is passed
 * on as it is.
 */
function bodyStream(
  response: IncomingMessage,
  events: EventSplitter | undefined,
  backlog: (() => Promise<void> | undefined) | undefined,
  hooks: {
    /** `end` ends the body early, after `tail`, and drops the connection (see `BackendHttp.cancelled`). */
    started(controller: ReadableStreamDefaultController<Uint8Array>, end: (tail: Uint8Array) => void): void;
    ended(): void;
    /** The most one message may take: the whole body, or one event of an event stream. */
    max: number;
    /** A message passed `max` after `bytes`: what ends the body in its place (the rest is dropped; empty: nothing), or undefined to fail it. */
    over(bytes: number): Uint8Array | undefined;
  },
  prefix?: Buffer,
): ReadableStream<Uint8Array> {
  let finished = false;
  /** Bytes of a body that is not an event stream, so far. */
  let received = prefix?.byteLength ?? 0;
  /** Paused until the reader asks for more (its queue is full). */
  let full = false;
  /** Paused until the tap's backlog is handled. */
  let waiting = false;
  const finish = (): void => {
    if (finished) return;
    finished = true;
    hooks.ended();
  };
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        hooks.started(controller, (tail) => {
          if (finished) return;
          finish();
          response.destroy();
          const rest = events?.end();
          if (rest !== undefined && rest.byteLength > 0) controller.enqueue(new Uint8Array(rest.buffer, rest.byteOffset, rest.byteLength));
          controller.enqueue(tail);
          controller.close();
        });
        if (prefix !== undefined && prefix.byteLength > 0) controller.enqueue(new Uint8Array(prefix.buffer, prefix.byteOffset, prefix.byteLength));
        response.on("data", (chunk: Buffer) => {
          if (finished) return;
          received += chunk.byteLength;
          const out = events === undefined ? chunk : events.push(chunk);
          const held = events === undefined ? received : events.pending;
          if (held > hooks.max) {
            // Not read on: what it held so far is dropped, and so is the connection; the events
            // this chunk completed before it still pass.
            finish();
            response.destroy();
            const tail = hooks.over(held);
            if (tail === undefined) {
              controller.error(tooLargeError(hooks.max));
              return;
            }
            if (events !== undefined && out !== undefined && out.byteLength > 0) controller.enqueue(new Uint8Array(out.buffer, out.byteOffset, out.byteLength));
            if (tail.byteLength > 0) controller.enqueue(tail);
            controller.close();
            return;
          }
          if (out !== undefined && out.byteLength > 0) controller.enqueue(new Uint8Array(out.buffer, out.byteOffset, out.byteLength));
          if ((controller.desiredSize ?? 1) <= 0) {
            full = true;
            response.pause();
          }
          const pending = events === undefined || waiting ? undefined : backlog?.();
          if (pending !== undefined) {
            waiting = true;
            response.pause();
            void pending.then(() => {
              waiting = false;
              if (!full && !finished) response.resume();
            });
          }
        });
        response.on("end", () => {
          if (finished) return;
          const rest = events?.end();
          if (rest !== undefined && rest.byteLength > 0) controller.enqueue(new Uint8Array(rest.buffer, rest.byteOffset, rest.byteLength));
          finish();
          controller.close();
        });
        response.on("error", (error) => {
          if (finished) return;
          finish();
          controller.error(new TypeError("terminated", { cause: error }));
        });
        response.on("close", () => {
          if (finished) return;
          // Closed before its end (the server or the network dropped it).
          finish();
          controller.error(new TypeError("terminated", { cause: Object.assign(new Error("other side closed"), { code: "UND_ERR_SOCKET" }) }));
        });
      },
      pull() {
        full = false;
        if (!waiting) response.resume();
      },
      cancel() {
        finish();
        response.destroy();
      },
    },
    { highWaterMark: 1 },
  );
}

/** An event ends at a blank line; lines end with CRLF, LF or CR (the SSE spec). */
const EVENT_END = /\r\n\r\n|\n\n|\r\r/;

/**
 * Splits an event stream into its events, byte chunks in, the text of the events `tap` keeps out
 * (each with the blank line that ends it). Text of an event under way waits for the rest of it.
 */
export class EventSplitter {
  private readonly decoder = new StringDecoder("utf8");
  /** Text of the event under way, in pieces: joined only once an event end has arrived (a large event costs linear time). */
  private parts: string[] = [];
  /** The last characters of the text under way, which an event end may continue. */
  private tail = "";
  /** Events the tap kept out so far. */
  taken = 0;
  /** Characters of the event under way (what waits for its end). */
  private held = 0;

  constructor(private readonly tap: EventTap) {}

  /** What passes of the text so far that completes events (empty when nothing does yet). */
  push(chunk: Buffer): Buffer | undefined {
    const passed = this.pushText(chunk);
    return passed === "" ? undefined : Buffer.from(passed);
  }

  /** `push`, as text. */
  pushText(chunk: Buffer): string {
    return this.take(this.decoder.write(chunk));
  }

  /** The body ended: whatever was left under way (an unterminated event) passes as it is. */
  end(): Buffer | undefined {
    const passed = this.endText();
    return passed === "" ? undefined : Buffer.from(passed);
  }

  /** `end`, as text. */
  endText(): string {
    const passed = this.take(this.decoder.end()) + this.parts.join("");
    this.parts = [];
    this.held = 0;
    return passed;
  }

  /** How much of an event is under way, waiting for its end (characters). */
  get pending(): number {
    return this.held;
  }

  private take(text: string): string {
    if (text === "") return "";
    const window = this.tail + text;
    this.parts.push(text);
    this.held += text.length;
    if (!EVENT_END.test(window)) {
      this.tail = window.slice(-3);
      return "";
    }
    let pending = this.parts.join("");
    let passed = "";
    for (let match = EVENT_END.exec(pending); match !== null; match = EVENT_END.exec(pending)) {
      const end = match.index + match[0].length;
      if (this.tap(pending.slice(0, match.index))) passed += pending.slice(0, end);
      else this.taken++;
      pending = pending.slice(end);
    }
    this.parts = pending === "" ? [] : [pending];
    this.held = pending.length;
    this.tail = pending.slice(-3);
    return passed;
  }
}

/**
 * How long an event stream may stay open after the response it carried before it is handed over
 * as it is (a server SHOULD close it then; one that does not must not hold the response back).
 */
const ANSWER_END_GRACE_MS = 20;

/**
 * Whether a request's event-stream answer may come back to the SDK as JSON when it turns out to
 * hold nothing but the request's JSON-RPC response (see `probeAnswer`). Not a listen: the SDK
 * hears the end of its stream, which a JSON answer does not have.
 */
function mayCollapse(init: RequestInit | undefined, body: string | Uint8Array | undefined): boolean {
  return init?.method === "POST" && typeof body === "string" && !body.includes('"subscriptions/listen"');
}

/**
 * Reads a request's event-stream answer before handing it over: when it holds the JSON-RPC
 * response alone (after events without data, such as a resumption priming event) and then ends,
 * the SDK gets it as an `application/json` answer, which it parses in one step; an event stream
 * costs it a text decoder and an SSE parser of web streams per request (about a quarter of a
 * watcher's CPU on a storm of first subscribers). Anything else on the way (a notification, a
 * request of the backend's, a `retry` field, a second message) hands the stream over at once,
 * with what was read so far in front of the rest, so nothing waits for the response, and so do a
 * stream on which the tap takes events (updates: reading on then waits for the tap's backlog) and
 * a stream that stays open after the response (and that backend's answers are no longer read
 * first); a stream cut off before its end is handed over with what it had, then the error, so the
 * SDK can resume it.
 */
function probeAnswer(
  response: IncomingMessage,
  events: EventSplitter,
  max: number,
  outcome: {
    answered(json: string): void;
    streamed(prefix: Buffer, events: EventSplitter): void;
    ended(text: string, error?: TypeError): void;
    /** The stream stayed open after the response (it is handed over next). */
    lingered(): void;
    /** What was read passed `max` after `bytes` (the response is dropped). */
    over(bytes: number): void;
  },
): void {
  let text = "";
  let json: string | undefined;
  /** Set once the response came: the stream must end soon after it, or it is handed over as it is. */
  let grace: NodeJS.Timeout | undefined;
  const stop = (): void => {
    clearTimeout(grace);
    response.off("data", onData);
    response.off("end", onEnd);
    response.off("error", onError);
    response.off("close", onClose);
  };
  const onData = (chunk: Buffer): void => {
    const taken = events.taken;
    const passed = events.pushText(chunk);
    text += passed;
    if (text.length + events.pending > max) {
      stop();
      response.destroy();
      outcome.over(text.length + events.pending);
      return;
    }
    // The tap took events (updates sent on this request's stream): not an answer alone, and
    // reading on is for the stream's reader, which waits for the tap's backlog.
    if (events.taken !== taken) {
      handOver();
      return;
    }
    if (passed === "") return;
    for (const event of passed.split(EVENT_END)) {
      if (event === "") continue;
      const message = onlyResponse(event);
      if (message === "") continue;
      if (message !== undefined && json === undefined) {
        json = message;
        grace = setTimeout(() => {
          outcome.lingered();
          handOver();
        }, ANSWER_END_GRACE_MS);
        continue;
      }
      handOver();
      return;
    }
  };
  const handOver = (): void => {
    stop();
    outcome.streamed(Buffer.from(text), events);
  };
  const onEnd = (): void => {
    stop();
    const rest = events.endText();
    if (json !== undefined && rest.trim() === "") outcome.answered(json);
    else outcome.ended(text + rest);
  };
  const onError = (error: Error): void => {
    stop();
    outcome.ended(text, new TypeError("terminated", { cause: error }));
  };
  const onClose = (): void => {
    stop();
    outcome.ended(text, new TypeError("terminated", { cause: Object.assign(new Error("other side closed"), { code: "UND_ERR_SOCKET" }) }));
  };
  response.on("data", onData);
  response.on("end", onEnd);
  response.on("error", onError);
  response.on("close", onClose);
}

/**
 * The data of a plain message event (data lines, and optionally an id, comments and
 * `event: message`), its lines joined; undefined for any other field (`retry`, another event type).
 */
export function messageData(event: string): string | undefined {
  const data: string[] = [];
  for (const line of event.split(LINE_END)) {
    if (line.startsWith("data:")) data.push(line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5));
    else if (line.startsWith("event:")) {
      if (line.slice(line.charCodeAt(6) === 32 ? 7 : 6) !== "message") return undefined;
    } else if (!line.startsWith("id:") && !line.startsWith(":")) return undefined;
  }
  return data.join("\n");
}

/** An event's JSON-RPC response (its data); "" for an event without data (a priming event: the SDK skips it too); otherwise undefined. */
function onlyResponse(event: string): string | undefined {
  const json = messageData(event);
  if (json === "" || json === undefined) return json;
  let message: unknown;
  try {
    message = JSON.parse(json);
  } catch {
    return undefined;
  }
  const candidate = message as { jsonrpc?: unknown; id?: unknown; method?: unknown; result?: unknown; error?: unknown } | null;
  if (candidate === null || typeof candidate !== "object" || Array.isArray(candidate) || candidate.jsonrpc !== "2.0") return undefined;
  const isResponse = candidate.method === undefined && (typeof candidate.id === "string" || typeof candidate.id === "number") && ("result" in candidate || "error" in candidate);
  return isResponse ? json : undefined;
}

/** A body of `text`, then `error` once it was read (erroring at once would drop the text). */
/**
 * A response whose whole body is already a string (an answer read before it was handed over, see
 * `probeAnswer`). `new Response(text)` wraps the text in a web stream that `text()` and `json()`
 * then read back (about 6 % of a watcher's CPU on a storm of first subscribers, over Streamable
 * HTTP): here they return the text itself, and the stream is made only when something asks for
 * `body` (or for a form of the body other than text). Otherwise it is a `Response` like any other:
 * a body is used once (a second read rejects with a `TypeError`), `clone` copies it.
 */
export class TextResponse extends Response {
  readonly #text: string;
  readonly #init: ResponseInit;
  /** The response with a real body stream, made once something needs the stream. */
  #full: Response | undefined;
  #used = false;

  constructor(text: string, init: ResponseInit) {
    super(null, init);
    this.#text = text;
    this.#init = init;
  }

  #streamed(): Response {
    this.#full ??= new Response(this.#used ? null : this.#text, this.#init);
    return this.#full;
  }

  #take(): string {
    if (this.bodyUsed) throw new TypeError("Body is unusable: Body has already been read");
    this.#used = true;
    return this.#text;
  }

  override get body(): ReadableStream<Uint8Array<ArrayBuffer>> | null {
    return this.#streamed().body;
  }

  override get bodyUsed(): boolean {
    return this.#used || (this.#full?.bodyUsed ?? false);
  }

  override async text(): Promise<string> {
    return this.#full !== undefined ? this.#full.text() : this.#take();
  }

  override async json(): Promise<unknown> {
    return JSON.parse(await this.text()) as unknown;
  }

  override arrayBuffer(): Promise<ArrayBuffer> {
    return this.#read((full) => full.arrayBuffer());
  }

  override blob(): Promise<Blob> {
    return this.#read((full) => full.blob());
  }

  override formData(): Promise<FormData> {
    return this.#read((full) => full.formData());
  }

  override bytes(): Promise<Uint8Array<ArrayBuffer>> {
    return this.#read((full) => full.bytes());
  }

  /** The body read in another form, through the streamed response (used once, as always). */
  #read<T>(read: (full: Response) => Promise<T>): Promise<T> {
    if (this.#full === undefined && this.#used) return Promise.reject(new TypeError("Body is unusable: Body has already been read"));
    return read(this.#streamed());
  }

  override clone(): Response {
    if (this.#full !== undefined) return this.#full.clone();
    if (this.bodyUsed) throw new TypeError("Response.clone: Body has already been consumed.");
    return new TextResponse(this.#text, this.#init);
  }
}

function textThenError(text: string, error: Error): ReadableStream<Uint8Array> {
  let sent = text === "";
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (sent) {
        controller.error(error);
        return;
      }
      sent = true;
      controller.enqueue(new TextEncoder().encode(text));
    },
  });
}

const LINE_END = /\r\n|\n|\r/;

/** The JSON-RPC id of a request the SDK serialized (`{"method":…,"jsonrpc":"2.0","id":…}`), or undefined for anything else. */
function requestIdOf(body: string): string | number | undefined {
  return body.startsWith('{"method":') ? lastMemberId(body.slice(-80)) : undefined;
}

/** The event that stands for a cancelled request's answer (see `BackendHttp.cancelled`). */
function cancelledAnswer(id: string | number): Uint8Array {
  // The blank line first ends whatever event was cut short (the SDK drops it), so this one parses alone.
  return new TextEncoder().encode(`\n\nevent: message\ndata: ${JSON.stringify({ jsonrpc: "2.0", id, error: { code: -32800, message: "Request cancelled" } })}\n\n`);
}
