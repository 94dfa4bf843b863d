import { randomUUID } from "node:crypto";
import { ProtocolError } from "@modelcontextprotocol/client";
import { interactionSupport, type InteractionSupport } from "@mcp-broker/member";
import { NOTIFICATION, isJsonObject } from "@mcp-broker/shared";

/** The JSON-RPC request or notification `send` is to put on the call's stream (the caller encodes it). */
type Outgoing = { jsonrpc: "2.0"; id?: string; method: string; params: Record<string, unknown> };

/** The session a question was asked in, as its answers must name it. */
export interface QuestionOwner {
  readonly id: string;
  readonly principal: string;
}

/**
 * The broker's own requests to legacy clients (a backend's sampling, elicitation and roots requests
 * during a client's call, passed on), for every session of one member: each goes out on the call's
 * stream with an id that names this member (`askerOf`), and the client's answer (a JSON-RPC
 * response it POSTs, or writes on stdin) settles it, on whichever member it reaches first: one
 * that did not ask passes it to the one that did. A question belongs to its call, not to the
 * session's holding: it outlives the session moving to another member (its call's stream is still
 * here), and fails when the session ends. Aborting the signal (the backend cancelled, the call
 * ended, the client went away, the backend's timeout) tells the client `notifications/cancelled`
 * and rejects.
 */
export class ClientRequests {
  private readonly pending = new Map<string, { owner: QuestionOwner; resolve: (result: Record<string, unknown>) => void; reject: (error: Error) => void }>();

  /** `asker`: this member's instance id, which every question's id carries. */
  constructor(private readonly asker: string) {}

  /** Whether a question asked in `session` waits for its answer. */
  hasOpen(session: QuestionOwner): boolean {
    for (const { owner } of this.pending.values()) if (owner.id === session.id) return true;
    return false;
  }

  ask(owner: QuestionOwner, send: (message: Outgoing) => boolean, method: string, params: Record<string, unknown>, signal: AbortSignal): Promise<Record<string, unknown>> {
    if (signal.aborted) return Promise.reject(cancelled(method, signal));
    // Never reused (a late answer to a withdrawn question must match nothing), here or on another member.
    const id = `${QUESTION_PREFIX}${randomUUID()}@${this.asker}`;
    return new Promise((resolve, reject) => {
      const onAbort = (): void => {
        if (!this.pending.delete(id)) return;
        send({ jsonrpc: "2.0", method: NOTIFICATION.cancelled, params: { requestId: id, reason: reasonOf(signal) } });
        reject(cancelled(method, signal));
      };
      this.pending.set(id, {
        owner,
        resolve: (result) => {
          signal.removeEventListener("abort", onAbort);
          resolve(result);
        },
        reject: (error) => {
          signal.removeEventListener("abort", onAbort);
          reject(error);
        },
      });
      signal.addEventListener("abort", onAbort, { once: true });
      if (!send({ jsonrpc: "2.0", id, method, params })) {
        this.pending.delete(id);
        signal.removeEventListener("abort", onAbort);
        reject(new ProtocolError(-32603, `The client's call ended before ${method} could be sent to it.`));
      }
    });
  }

  /**
   * A JSON-RPC response from the client of `session`; false when it answers nothing asked here
   * (unknown id, answered already, or asked in another session).
   */
  answer(message: Record<string, unknown>, session: QuestionOwner): boolean {
    const id = message.id;
    if (typeof id !== "string") return false;
    const waiter = this.pending.get(id);
    if (waiter === undefined || waiter.owner.id !== session.id || waiter.owner.principal !== session.principal) return false;
    this.pending.delete(id);
    const error = message.error;
    if (isJsonObject(error)) {
      waiter.reject(new ProtocolError(typeof error.code === "number" ? error.code : -32603, typeof error.message === "string" ? error.message : "The client answered with an error.", error.data));
    } else if (isJsonObject(message.result)) {
      waiter.resolve(message.result);
    } else {
      waiter.reject(new ProtocolError(-32603, "The client's answer had neither a result object nor an error."));
    }
    return true;
  }

  /** Questions waiting for a client's answer (`mcp_broker_client_questions`). */
  get size(): number {
    return this.pending.size;
  }

  /** `session` ended: whatever it was asked fails. */
  failSession(session: QuestionOwner, reason: string): void {
    for (const [id, waiter] of this.pending) {
      if (waiter.owner.id !== session.id || waiter.owner.principal !== session.principal) continue;
      this.pending.delete(id);
      waiter.reject(new ProtocolError(-32603, reason));
    }
  }
}

const QUESTION_PREFIX = "mcp-broker-";
/** "mcp-broker-" and a UUID, then "@" */
const ASKER_AT = QUESTION_PREFIX.length + 36 + 1;

/** The member that asked the question a client's answer `id` answers (see `ClientRequests.ask`); undefined for any other id. */
export function askerOf(id: unknown): string | undefined {
  if (typeof id !== "string" || !id.startsWith(QUESTION_PREFIX) || id[ASKER_AT - 1] !== "@" || id.length === ASKER_AT) return undefined;
  return id.slice(ASKER_AT);
}

/** The support of the 16 combinations, shared by every session with the same capabilities (no object per session). */
const SUPPORT = new Map<string, InteractionSupport>();

/** What a client that declared `capabilities` can answer, as one shared object. */
export function supportOf(capabilities: unknown): InteractionSupport {
  const support = interactionSupport(capabilities);
  const key = `${+support.sampling}${+support.elicitationForm}${+support.elicitationUrl}${+support.roots}`;
  const known = SUPPORT.get(key);
  if (known !== undefined) return known;
  SUPPORT.set(key, support);
  return support;
}

export const NO_SUPPORT: InteractionSupport = supportOf(undefined);

function cancelled(method: string, signal: AbortSignal): ProtocolError {
  return new ProtocolError(-32603, `${method} was not answered: ${reasonOf(signal)}.`);
}

function reasonOf(signal: AbortSignal): string {
  const reason: unknown = signal.reason;
  if (reason instanceof Error) return reason.message;
  return typeof reason === "string" ? reason : "cancelled";
}
