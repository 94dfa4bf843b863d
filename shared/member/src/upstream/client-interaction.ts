import { ProtocolError } from "@modelcontextprotocol/client";
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
  /**
   * Principals whose client calls ended early (failed, cancelled, timed out), with until when (ms)
   * the latest of them keeps the fallback from other principals' calls: one entry per principal (a
   * list of every such call, pruned only when a backend asked outside a call, grew by one for each
   * failed call for good).
   */
  private readonly endedEarly = new Map<string, number>();

  /**
   * Runs `send` (one request to the backend) as a call of `interaction`'s client (undefined: a
   * client that cannot be asked, or the broker); `send` passes `headers` with the request.
   */
  async run<T>(interaction: ClientInteraction | undefined, timeoutMs: number, send: (headers: Record<string, string>) => Promise<T>): Promise<T> {
    const number = ++this.nextCall;
    const call: Call = { interaction, ended: undefined, over: false };
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
        if (early) this.endedEarly.set(interaction.principal, Math.max(this.endedEarly.get(interaction.principal) ?? 0, Date.now() + timeoutMs));
      }
      // A question of a call that is over can no longer change its answer: it ends with it.
      call.over = true;
      call.ended?.abort(new Error("the call it belongs to ended"));
      for (const [id, tied] of this.tied) if (tied === call) this.tied.delete(id);
    }
  }

  /** The connection is gone: what was tied to it is too. */
  reset(): void {
    this.tied.clear();
  }

  /**
   * For the backend's fetch (see `BackendHttp`), before a request goes out: takes the call header
   * off a POST, and gives the tap that ties the requests the backend sends on that POST's event
   * stream to its call.
   */
  prepare(init: RequestInit | undefined): { init: RequestInit | undefined; tap?: (event: string) => void } {
    if (init?.headers === undefined) return { init };
    const headers = new Headers(init.headers);
    const number = headers.get(CALL_HEADER);
    if (number === null) return { init };
    headers.delete(CALL_HEADER);
    const key = Number(number);
    const call = this.calls.get(key);
    if (call === undefined) return { init: { ...init, headers } };
    return {
      init: { ...init, headers },
      tap: (event) => {
        // Told before the event goes on to the SDK, which then handles the request in it.
        const id = requestIdOf(event);
        if (id !== undefined && this.calls.get(key) === call) this.tied.set(id, call);
      },
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
    return askClient(call.interaction, method, params, AbortSignal.any([signal, endedSignal(call)]), timeoutMs);
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
    for (const [principal, until] of this.endedEarly) if (until <= now) this.endedEarly.delete(principal);
    if (only?.interaction === undefined) return undefined;
    for (const principal of this.endedEarly.keys()) if (principal !== only.interaction.principal) return undefined;
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
  /** Aborted when the request is answered or fails; made only when a question of the backend needs it (most calls have none). */
  ended: AbortController | undefined;
  /** The request was answered or failed. */
  over: boolean;
}

/** A signal aborted once the call is over. */
function endedSignal(call: Call): AbortSignal {
  if (call.ended === undefined) {
    call.ended = new AbortController();
    if (call.over) call.ended.abort(new Error("the call it belongs to ended"));
  }
  return call.ended.signal;
}

/** Lines end with CRLF, LF or CR (the SSE spec). */
const LINE_END = /\r\n|\n|\r/;

/** The id of the JSON-RPC request an event of a call's stream carries, if it carries one. */
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
