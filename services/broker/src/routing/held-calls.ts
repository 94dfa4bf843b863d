import { createHmac, randomUUID, timingSafeEqual } from "node:crypto";
import type { ClientInteraction, InteractionMethod, InteractionSupport } from "@mcp-broker/member";
import { ProtocolError } from "@modelcontextprotocol/client";
import { BrokerError, CHANNEL, wireCode, type Bus, type BusMessage, type Clock } from "@mcp-broker/shared";

type Params = Record<string, unknown>;

/**
 * The broker's `requestState` (2026-07-28): what it hands a modern client with an
 * `InputRequiredResult`, sealed (HMAC-SHA256 with `interaction.stateKey`, or else the cluster's
 * shared secret: the same key on every instance of a cluster) so that the retry cannot name
 * another call (backend, method, tool, prompt or resource), another principal's call or a state
 * the backend never issued, and expires after `interaction.heldCallMs`.
 */
export class RequestStateSeal {
  /**
   * @param key the configured key, or the cluster's shared secret (read at each use: it is known
   *   once the member started, and may change when Redis lost its data).
   */
  constructor(
    private readonly key: () => string,
    private readonly clock: Clock,
    readonly ttlMs: number,
  ) {}

  seal(payload: Params): string {
    const body = Buffer.from(JSON.stringify({ ...payload, x: this.clock.now() + this.ttlMs })).toString("base64url");
    return `mcpb1.${body}.${this.mac(body)}`;
  }

  /** The payload of a state this broker sealed for `principal`; BAD_PARAMS for anything else (changed, foreign, expired). */
  open(state: unknown, principal: string): Params {
    const parts = typeof state === "string" ? state.split(".") : [];
    const [version, body, mac] = parts;
    if (parts.length !== 3 || version !== "mcpb1" || body === undefined || mac === undefined || !this.verifies(body, mac)) {
      throw new BrokerError("BAD_PARAMS", "requestState was not issued by this broker, or was changed: call again without it (and without inputResponses).");
    }
    const payload = JSON.parse(Buffer.from(body, "base64url").toString("utf8")) as Params;
    if (payload.p !== principal) throw new BrokerError("BAD_PARAMS", "requestState belongs to another principal's call: call again without it.");
    if (typeof payload.x !== "number" || payload.x <= this.clock.now()) {
      throw new BrokerError("BAD_PARAMS", `requestState expired (a retry must come within ${this.ttlMs} ms of its InputRequiredResult): call again without it.`);
    }
    return payload;
  }

  private mac(body: string): string {
    return createHmac("sha256", this.key()).update(body).digest("base64url");
  }

  private verifies(body: string, mac: string): boolean {
    const expected = Buffer.from(this.mac(body));
    const given = Buffer.from(mac);
    return expected.length === given.length && timingSafeEqual(expected, given);
  }
}

/** What one round of a held call ends with: the call's result, or the broker's questions for the client. */
type Round = { kind: "result"; result: Params } | { kind: "input"; result: Params };

interface Question {
  readonly key: string;
  readonly method: InteractionMethod;
  readonly params: Params;
  resolve(answer: Params): void;
  reject(error: Error): void;
}

/**
 * A legacy backend's call for a modern client, held between rounds: the backend's requests during
 * it (sampling, elicitation, roots) cannot be sent to a modern client, so each ends the client's
 * request with an `InputRequiredResult` whose sealed `requestState` names this call, and the
 * client's retry (with `inputResponses`) answers them and waits for the next round. The upstream
 * call stays open meanwhile, on this instance, for at most `heldCallMs` between rounds.
 */
class HeldCall {
  readonly id = randomUUID();
  private readonly questions = new Map<string, Question>();
  private asked = 0;
  private wake: (() => void) | undefined;
  /** A round is waiting (`next`). */
  private waiting = false;
  private outcome: { ok: true; result: Params } | { ok: false; error: unknown } | undefined;
  private expiry: ReturnType<Clock["setTimeout"]> | undefined;
  readonly abort = new AbortController();
  readonly interaction: ClientInteraction;

  constructor(
    readonly principal: string,
    supports: InteractionSupport,
    /** What its state is bound to (backend, method, tool, prompt or resource: see the router), sealed with it. */
    private readonly bound: Params,
    private readonly deps: { clock: Clock; seal: RequestStateSeal; instanceId: string; forget: (call: HeldCall) => void },
  ) {
    this.interaction = {
      principal,
      supports,
      ask: (method, params, signal) =>
        new Promise<Params>((resolve, reject) => {
          if (signal.aborted || this.outcome !== undefined) {
            reject(new Error(`${method} was withdrawn: ${String(signal.reason ?? "the call ended")}`));
            return;
          }
          const key = `q${++this.asked}`;
          const withdraw = (): void => {
            if (this.questions.delete(key)) reject(new Error(`${method} was withdrawn: ${String(signal.reason)}`));
          };
          signal.addEventListener("abort", withdraw, { once: true });
          const done = <T>(settle: (value: T) => void) => (value: T) => {
            signal.removeEventListener("abort", withdraw);
            settle(value);
          };
          this.questions.set(key, { key, method, params, resolve: done(resolve), reject: done(reject) });
          this.wake?.();
        }),
    };
  }

  /** Runs the upstream call; the first round follows. */
  start(upstream: Promise<Params>): void {
    upstream.then(
      (result) => this.settle({ ok: true, result }),
      (error: unknown) => this.settle({ ok: false, error }),
    );
  }

  /** The client's answers to this round's questions (bare results by key); unknown keys are ignored. */
  answer(responses: unknown): void {
    if (typeof responses !== "object" || responses === null) return;
    for (const [key, answer] of Object.entries(responses as Params)) {
      const question = this.questions.get(key);
      if (question === undefined || typeof answer !== "object" || answer === null) continue;
      this.questions.delete(key);
      question.resolve(answer as Params);
    }
  }

  /**
   * Waits for the call's result or its next questions (those still unanswered included). One round
   * at a time: a second retry of the same state while one waits gets -32602.
   */
  async next(signal: AbortSignal): Promise<Round> {
    if (this.waiting) throw new BrokerError("BAD_PARAMS", "A retry of this call is already waiting for its answer: wait for it (or call again without requestState).");
    if (signal.aborted) {
      this.cancel("the client's request ended");
      throw new BrokerError("BAD_PARAMS", "The call ended: its client's request was cancelled.");
    }
    this.waiting = true;
    this.disarm();
    const onAbort = () => this.cancel("the client's request ended");
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      for (;;) {
        while (this.outcome === undefined && this.questions.size === 0) await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = undefined;
        if (this.outcome !== undefined) break;
        // Questions the backend asks together (in one tick) go out in one round.
        await new Promise((resolve) => setImmediate(resolve));
        // All withdrawn meanwhile: wait on.
        if (this.outcome !== undefined || this.questions.size > 0) break;
      }
    } finally {
      this.waiting = false;
      signal.removeEventListener("abort", onAbort);
    }
    if (this.outcome !== undefined) {
      this.deps.forget(this);
      if (this.outcome.ok) return { kind: "result", result: this.outcome.result };
      throw this.outcome.error;
    }
    this.arm();
    const inputRequests: Params = {};
    for (const question of this.questions.values()) inputRequests[question.key] = { method: question.method, params: question.params };
    return { kind: "input", result: { resultType: "input_required", inputRequests, requestState: this.deps.seal.seal({ ...this.bound, h: this.id, p: this.principal, i: this.deps.instanceId }) } };
  }

  /** Ends the held call: the upstream call is aborted, its questions withdrawn, and a waiting round gets the error. */
  cancel(reason: string): void {
    this.disarm();
    this.abort.abort(new Error(reason));
    this.settle({ ok: false, error: new BrokerError("BAD_PARAMS", `The call ended (${reason}): call again without requestState.`) });
    this.deps.forget(this);
  }

  private settle(outcome: NonNullable<HeldCall["outcome"]>): void {
    if (this.outcome !== undefined) return;
    this.outcome = outcome;
    for (const question of this.questions.values()) question.reject(new Error("the call ended"));
    this.questions.clear();
    this.wake?.();
  }

  /** Between rounds the call waits for the client's retry at most `heldCallMs`. */
  private arm(): void {
    this.expiry = this.deps.clock.setTimeout(() => this.cancel(`no retry came within ${this.deps.seal.ttlMs} ms`), this.deps.seal.ttlMs);
  }

  private disarm(): void {
    if (this.expiry !== undefined) this.deps.clock.clearTimeout(this.expiry);
    this.expiry = undefined;
  }
}

/** The held calls of this instance (see `HeldCall`), by id. */
export class HeldCalls {
  private readonly calls = new Map<string, HeldCall>();
  /** Retries sent to the member holding their call, by request id. */
  private readonly remote = new Map<number, { resolve: (result: Params) => void; reject: (error: Error) => void }>();
  private nextRemote = 0;
  /** Retries other members passed on, whose rounds run here: their clients' requests, by `passedOnKey` (origin and id), aborted by `held.cancel`. */
  private readonly passedOn = new Map<string, AbortController>();

  constructor(private readonly deps: { clock: Clock; seal: RequestStateSeal; bus: Bus; instanceId: string }) {}

  get size(): number {
    return this.calls.size;
  }

  /** Starts a call that may be held: `send` runs it upstream with the interaction its questions go through; `bound` goes into its sealed states. */
  async begin(principal: string, supports: InteractionSupport, bound: Params, signal: AbortSignal, send: (interaction: ClientInteraction, signal: AbortSignal) => Promise<Params>): Promise<Params> {
    const call = new HeldCall(principal, supports, bound, { clock: this.deps.clock, seal: this.deps.seal, instanceId: this.deps.instanceId, forget: (done) => this.calls.delete(done.id) });
    this.calls.set(call.id, call);
    call.start(send(call.interaction, call.abort.signal));
    return (await call.next(signal)).result;
  }

  /**
   * A retry naming a held call (its sealed `requestState`, opened): answers its questions and waits
   * for its next round, here or (over the bus) on the member that holds the call. `waitMs`: how
   * long another member may take to answer (the backend's timeout: a round ends with it).
   */
  async resume(payload: Params, inputResponses: unknown, signal: AbortSignal, waitMs: number): Promise<Params> {
    const callId = typeof payload.h === "string" ? payload.h : "";
    const principal = String(payload.p);
    if (typeof payload.i === "string" && payload.i !== this.deps.instanceId) return this.resumeElsewhere(payload.i, callId, principal, inputResponses, signal, waitMs);
    const call = this.calls.get(callId);
    if (call === undefined || call.principal !== principal) {
      throw new BrokerError("BAD_PARAMS", "The call this requestState belongs to is over (answered, timed out, or its broker instance stopped): call again without it.");
    }
    call.answer(inputResponses);
    return (await call.next(signal)).result;
  }

  /**
   * Another member's `held.retry`: the round runs here, its outcome goes back. Its client's request
   * is on that member: a `held.cancel` for it (see `retryCancelled`) ends the call, as that
   * request's end would here.
   */
  retried(message: Extract<BusMessage, { kind: "held.retry" }>): void {
    const key = passedOnKey(message);
    const request = new AbortController();
    this.passedOn.set(key, request);
    void this.resume({ h: message.call, p: message.principal, i: this.deps.instanceId }, message.inputResponses, request.signal, 0)
      .then(
        (result) => this.reply(message, { result }),
        (error: unknown) => this.reply(message, { error: wireError(error) }),
      )
      .finally(() => {
        if (this.passedOn.get(key) === request) this.passedOn.delete(key);
      });
  }

  /**
   * Another member's `held.cancel`: the client gave up on a retry it passed on here. Its round, if
   * still running, ends the call (the upstream call is cancelled); one already answered is left
   * as it is (the call, if held again, waits for its next retry at most `heldCallMs`).
   */
  retryCancelled(message: Extract<BusMessage, { kind: "held.cancel" }>): void {
    this.passedOn.get(passedOnKey(message))?.abort(new Error("the client's request ended"));
  }

  /** The holder's `held.round`. */
  round(message: Extract<BusMessage, { kind: "held.round" }>): void {
    const waiter = this.remote.get(message.id);
    if (waiter === undefined) return;
    this.remote.delete(message.id);
    if (message.error !== undefined) waiter.reject(new ProtocolError(message.error.code, message.error.message, message.error.data));
    else waiter.resolve(message.result ?? {});
  }

  /**
   * Sends a retry to the member holding its call (`held.retry`) and waits for its round. The
   * client's request ending (`signal`: cancelled, or its connection closed) sends that member a
   * `held.cancel` for it, at most once and after the retry (one channel, one publisher: in order).
   */
  private resumeElsewhere(holder: string, call: string, principal: string, inputResponses: unknown, signal: AbortSignal, waitMs: number): Promise<Params> {
    const id = ++this.nextRemote;
    return new Promise<Params>((resolve, reject) => {
      const timer = this.deps.clock.setTimeout(() => {
        this.remote.get(id)?.reject(new BrokerError("BACKEND_UNAVAILABLE", "The broker instance holding this call did not answer (it may have stopped): call again without requestState."));
      }, waitMs);
      const withdraw = (): void => {
        this.remote.get(id)?.reject(new BrokerError("BAD_PARAMS", "The call ended: its client's request was cancelled."));
        this.deps.bus.publish(CHANNEL.replies(holder), { kind: "held.cancel", v: 1, origin: this.deps.instanceId, id }).catch(() => undefined);
      };
      const settle = <T>(done: (value: T) => void) => (value: T) => {
        this.remote.delete(id);
        this.deps.clock.clearTimeout(timer);
        signal.removeEventListener("abort", withdraw);
        done(value);
      };
      this.remote.set(id, { resolve: settle(resolve), reject: settle(reject) });
      const message = { kind: "held.retry" as const, v: 1 as const, origin: this.deps.instanceId, id, replyTo: CHANNEL.replies(this.deps.instanceId), call, principal, inputResponses };
      this.deps.bus.publish(CHANNEL.replies(holder), message).catch((error: unknown) => this.round({ kind: "held.round", v: 1, origin: holder, id, error: wireError(error) }));
      if (signal.aborted) withdraw();
      else signal.addEventListener("abort", withdraw, { once: true });
    });
  }

  private reply(to: Extract<BusMessage, { kind: "held.retry" }>, outcome: { result?: Params; error?: { code: number; message: string; data?: unknown } }): void {
    void this.deps.bus.publish(to.replyTo, { kind: "held.round", v: 1, origin: this.deps.instanceId, id: to.id, ...outcome }).catch(() => undefined);
  }

  close(): void {
    for (const call of [...this.calls.values()]) call.cancel("the broker is shutting down");
  }
}

/** A passed-on retry's key on its holder: the member that passed it on, and its id there. */
function passedOnKey(message: { origin: string; id: number }): string {
  return `${message.origin} ${message.id}`;
}

/** An error as the bus carries it: its JSON-RPC code, message and data. */
function wireError(error: unknown): { code: number; message: string; data?: unknown } {
  // Held calls are modern clients' (the era of the codes).
  if (error instanceof BrokerError) return { code: wireCode(error, "modern"), message: error.message, ...(error.data !== undefined && { data: error.data }) };
  if (error instanceof ProtocolError) return { code: error.code, message: error.message, ...(error.data !== undefined && { data: error.data }) };
  return { code: -32603, message: (error as Error).message };
}
