import { ProtocolError, type FetchLike } from "@modelcontextprotocol/client";
import { isJsonObject } from "@mcp-broker/shared";

/** The server→client requests a backend may make of the client behind a call. */
export const INTERACTION_METHODS = ["sampling/createMessage", "elicitation/create", "roots/list"] as const;
export type InteractionMethod = (typeof INTERACTION_METHODS)[number];

/** What the client that made a call can answer (from the capabilities it declared). */
export interface InteractionSupport {
  readonly sampling: boolean;
  readonly elicitationForm: boolean;
  readonly elicitationUrl: boolean;
  readonly roots: boolean;
}

/**
 * The client behind one call in flight, as the backend's server→client requests reach it: `ask`
 * sends a request to that client (on the call's own response stream) and resolves with its result,
 * or rejects with its error (a `ProtocolError`) or when `signal` aborts.
 */
export interface ClientInteraction {
  /** Whose client it is: a request that cannot be tied to a call never goes to another principal's (see `InteractionRouter`). */
  readonly principal: string;
  readonly supports: InteractionSupport;
  ask(method: InteractionMethod, params: Record<string, unknown>, signal: AbortSignal): Promise<Record<string, unknown>>;
}

/** The client's declared capabilities (an `initialize`'s `capabilities`, or a modern request's envelope) as what it can answer. */
export function interactionSupport(capabilities: unknown): InteractionSupport {
  const caps = isJsonObject(capabilities) ? capabilities : {};
  const elicitation = isJsonObject(caps.elicitation) ? caps.elicitation : undefined;
  // An elicitation capability that names no mode means form mode (the spec's back-compatibility rule).
  const form = elicitation !== undefined && (isJsonObject(elicitation.form) || !isJsonObject(elicitation.url));
  return { sampling: isJsonObject(caps.sampling), elicitationForm: form, elicitationUrl: elicitation !== undefined && isJsonObject(elicitation.url), roots: isJsonObject(caps.roots) };
}

/** Error codes a backend gets from the broker for a request of its own. */
const METHOD_NOT_FOUND = -32601;
const INVALID_PARAMS = -32602;
const INVALID_REQUEST = -32600;
const REQUEST_TIMEOUT = -32001;

/** The header that tells the transport's fetch which call a POST belongs to (taken off before it is sent). */
const CALL_HEADER = "x-mcp-broker-call";

/**
 * Ties a backend's server→client requests (sampling, elicitation, roots) to the client call they
 * belong to, for one connection. Each request to the backend is numbered, and its POST carries
 * the number in a header that the transport's fetch takes off again; the fetch taps that POST's
 * event stream for the ids of the requests the backend sends on it (the spec's place for a request
 * related to a call), so the request handler finds the call by the request's id. A request that
 * came another way (the backend's standalone stream, or stdio, which has no stream per call)
 * belongs to a client's call only when that is the one client call in flight and none ended early
 * within the backend's `timeoutMs` (a backend may still be working on a call the broker gave up);
 * otherwise it is refused, never sent to an arbitrary client.
 */
export class InteractionRouter {
  private nextCall = 0;
  /** Requests to the backend in flight, by number: clients' calls and the broker's own. */
  private readonly calls = new Map<number, Call>();
  /** Requests seen on a call's stream, by the backend's request id. */
  private readonly tied = new Map<string | number, Call>();
  /** Client calls in flight (those with an interaction). */
  private clientCalls = 0;
  /** Client calls that ended early (failed, cancelled, timed out): until when (ms) each keeps the fallback from other principals' calls. */
  private readonly endedEarly: { principal: string; until: number }[] = [];

  /**
   * Runs `send` (one request to the backend) as a call of `interaction`'s client (undefined: a
   * client that cannot be asked, or the broker); `send` passes `headers` with the request.
   */
  async run<T>(interaction: ClientInteraction | undefined, timeoutMs: number, send: (headers: Record<string, string>) => Promise<T>): Promise<T> {
    const number = ++this.nextCall;
    const call: Call = { interaction, ended: new AbortController() };
    this.calls.set(number, call);
    if (interaction !== undefined) this.clientCalls++;
    let early = true;
    try {
      const result = await send({ [CALL_HEADER]: String(number) });
      early = false;
      return result;
    } finally {
      this.calls.delete(number);
      if (interaction !== undefined) {
        this.clientCalls--;
        if (early) this.endedEarly.push({ principal: interaction.principal, until: Date.now() + timeoutMs });
      }
      // A question of a call that is over can no longer change its answer: it ends with it.
      call.ended.abort(new Error("the call it belongs to ended"));
      for (const [id, tied] of this.tied) if (tied === call) this.tied.delete(id);
    }
  }

  /** The connection is gone: what was tied to it is too. */
  reset(): void {
    this.tied.clear();
  }

  /** Wraps the transport's fetch: takes the call header off a POST and taps its event stream for the backend's request ids. */
  fetch(inner: FetchLike): FetchLike {
    return async (url, init) => {
      const headers = new Headers(init?.headers);
      const number = headers.get(CALL_HEADER);
      if (number === null) return inner(url, init);
      headers.delete(CALL_HEADER);
      const response = await inner(url, { ...init, headers });
      const call = this.calls.get(Number(number));
      if (call === undefined || response.body === null || response.headers.get("content-type")?.startsWith("text/event-stream") !== true) return response;
      const tap = requestIdTap((id) => this.tied.set(id, call));
      return new Response(response.body.pipeThrough(tap), { status: response.status, statusText: response.statusText, headers: response.headers });
    };
  }

  /**
   * Answers one server→client request of the backend: the calling client's answer, or the error a
   * client would give (see `askClient`); -32600 when it cannot be tied to a client's call.
   * `roots/list` outside any call answers no roots.
   */
  async handle(method: InteractionMethod, requestId: string | number, params: Record<string, unknown>, signal: AbortSignal, timeoutMs: number): Promise<Record<string, unknown>> {
    const tied = this.tied.get(requestId);
    this.tied.delete(requestId);
    const call = tied ?? this.onlyClientCall();
    if (call === undefined) {
      if (method === "roots/list") return { roots: [] };
      const why = this.clientCalls === 0 ? "no client call is in flight" : "it came on no call's stream, and more than one client call, or another principal's, may be waiting for it";
      throw new ProtocolError(INVALID_REQUEST, `${method} cannot be tied to a client's call (${why}): send it on the response stream of the call it belongs to (related to that request).`);
    }
    return askClient(call.interaction, method, params, AbortSignal.any([signal, call.ended.signal]), timeoutMs);
  }

  /**
   * The one client call in flight, unless a call of another principal ended early within the
   * backend's `timeoutMs` (the backend may still be working on it, and ask for it).
   */
  private onlyClientCall(): Call | undefined {
    if (this.clientCalls !== 1) return undefined;
    let only: Call | undefined;
    for (const call of this.calls.values()) if (call.interaction !== undefined) only = call;
    const now = Date.now();
    while (this.endedEarly.length > 0 && (this.endedEarly[0]?.until ?? 0) <= now) this.endedEarly.shift();
    if (only?.interaction === undefined || this.endedEarly.some((ended) => ended.until > now && ended.principal !== only.interaction?.principal)) return undefined;
    return only;
  }
}

/**
 * Asks the client behind a call one request of the backend (a legacy backend's server→client
 * request, or an entry of a modern backend's InputRequiredResult): its answer, or the error a
 * client would give: no such capability -32601; an elicitation mode it did not declare -32602; no
 * answer within `timeoutMs` -32001. A client that cannot be asked at all (undefined: a modern
 * client of a legacy backend is asked through held calls instead, the broker's own requests never)
 * gives -32601. `roots/list` of a client without roots answers no roots: the broker shares one
 * connection among many clients and exposes none of its own.
 */
export async function askClient(
  interaction: ClientInteraction | undefined,
  method: InteractionMethod,
  params: Record<string, unknown>,
  signal: AbortSignal,
  timeoutMs: number,
): Promise<Record<string, unknown>> {
  if (interaction === undefined) {
    if (method === "roots/list") return { roots: [] };
    throw new ProtocolError(METHOD_NOT_FOUND, `Method not found: the client that made this call cannot be asked ${method} through the broker.`);
  }
  const { supports } = interaction;
  if (method === "roots/list" && !supports.roots) return { roots: [] };
  if (method === "sampling/createMessage" && !supports.sampling) throw new ProtocolError(METHOD_NOT_FOUND, "Method not found: the client that made this call does not support sampling.");
  if (method === "elicitation/create") {
    const mode = params.mode === "url" ? "url" : "form";
    if (!(mode === "url" ? supports.elicitationUrl : supports.elicitationForm)) {
      if (!supports.elicitationForm && !supports.elicitationUrl) throw new ProtocolError(METHOD_NOT_FOUND, "Method not found: the client that made this call does not support elicitation.");
      throw new ProtocolError(INVALID_PARAMS, `The client that made this call does not support ${mode}-mode elicitation.`);
    }
  }
  const timeout = AbortSignal.timeout(timeoutMs);
  try {
    return await interaction.ask(method, params, AbortSignal.any([signal, timeout]));
  } catch (error) {
    if (timeout.aborted && !signal.aborted) throw new ProtocolError(REQUEST_TIMEOUT, `The client did not answer ${method} within ${timeoutMs} ms.`);
    throw error;
  }
}

/** One request to the backend in flight, and the client behind it (none: one that cannot be asked, or the broker itself). */
interface Call {
  readonly interaction: ClientInteraction | undefined;
  /** Aborted when the request is answered or fails. */
  readonly ended: AbortController;
}

/** An event ends at a blank line; lines end with CRLF, LF or CR (the SSE spec). */
const EVENT_END = /\r\n\r\n|\n\n|\r\r/;
const LINE_END = /\r\n|\n|\r/;

/** Passes an event stream through unchanged, telling `onRequest` the id of each JSON-RPC request in it. */
export function requestIdTap(onRequest: (id: string | number) => void): TransformStream<Uint8Array, Uint8Array> {
  const decoder = new TextDecoder();
  /** The event under way, in pieces (joined once it ends: a large event costs linear time). */
  let parts: string[] = [];
  /** The last characters of the text under way, which an event end may continue. */
  let tail = "";
  return new TransformStream({
    transform(chunk, controller) {
      const text = decoder.decode(chunk, { stream: true });
      // Only the new text (and the few characters before it) can hold the end of the event under way.
      if (EVENT_END.test(tail + text)) {
        let pending = parts.join("") + text;
        for (let match = EVENT_END.exec(pending); match !== null; match = EVENT_END.exec(pending)) {
          const id = requestIdOf(pending.slice(0, match.index));
          if (id !== undefined) onRequest(id);
          pending = pending.slice(match.index + match[0].length);
        }
        parts = pending === "" ? [] : [pending];
        tail = pending.slice(-3);
      } else {
        parts.push(text);
        tail = (tail + text).slice(-3);
      }
      // Told before the chunk that completes the request goes on to the SDK, which then handles it.
      controller.enqueue(chunk);
    },
  });
}

function requestIdOf(event: string): string | number | undefined {
  const data = event
    .split(LINE_END)
    .filter((line) => line.startsWith("data:"))
    .map((line) => line.slice(line.startsWith("data: ") ? 6 : 5))
    .join("\n");
  // Cheap check first: most events on a call's stream are progress, logs and the result.
  if (!data.includes('"method"') || !data.includes('"id"')) return undefined;
  try {
    const message = JSON.parse(data) as unknown;
    if (!isJsonObject(message) || typeof message.method !== "string") return undefined;
    return typeof message.id === "string" || typeof message.id === "number" ? message.id : undefined;
  } catch {
    return undefined;
  }
}
