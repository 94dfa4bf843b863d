import { randomUUID } from "node:crypto";
import {
  BrokerError,
  CHANNEL,
  decodeBusMessage,
  type Bus,
  type BusMessage,
  type Clock,
  type ListName,
  type SessionRecord,
  type SessionStore,
  type SubscriptionLimits,
  type SubscriptionRef,
  type SubscriptionRegistry,
  type TimerHandle,
} from "@mcp-broker/shared";
import { createActor, fromCallback, fromPromise } from "xstate";
import type { Catalog } from "../catalog/catalog.js";
import type { Logger } from "@mcp-broker/member";
import type { UpstreamPort } from "@mcp-broker/member";
import type { Fanout } from "../fanout/fanout.js";
import type { NotificationSink } from "../fanout/interest-table.js";
import { PreparedNotification } from "../fanout/prepared-notification.js";
import { askerOf, ClientRequests, supportOf } from "./client-requests.js";
import type { MemberCensus } from "@mcp-broker/shared";
import { LegacySession, type SessionEnv } from "./legacy-session.js";
import type { SessionResume } from "./session-resume.js";
import type { ResumeCursors } from "./resume-cursor.js";
import type { EventId } from "../fanout/event-ids.js";
import { legacySessionMachine } from "./legacy-session-machine.js";
import { listenMachine, targetsOf, type ListenEmitted, type ListenFlags } from "./listen-machine.js";
import { subscribeMany, type HonoredUri, type SubscribeManyInput, type SubscribeManyOutput } from "./subscribe-many.js";
import { movedError, runSubscriptionFlow, type FlowSteps, type SubscriptionTarget } from "./subscription-flow.js";
import { LOG_LEVELS, type LogLevel } from "../routing/request-context.js";

/** Subscription flows one listen request runs at once. */
const LISTEN_CONCURRENCY = 16;
/** The event a parent gets when a child actor fails (followed by the child's id). */
const ACTOR_ERROR = "xstate.error.actor.";
/** URIs of one listen validated between yields to the event loop. */
const VALIDATE_BATCH = 512;

export interface SessionHostDeps {
  catalog: Catalog;
  /** Where a client URI may be subscribed (see Router.subscriptionTarget); throws the error to answer. */
  subscriptionTarget: (uri: string) => SubscriptionTarget;
  registry: SubscriptionRegistry;
  upstream: UpstreamPort;
  /** Where notifications go out: the interest of this member's sessions and streams. */
  fanout: Fanout;
  /** The legacy sessions' records in the cluster. */
  sessions: SessionStore;
  bus: Bus;
  instanceId: string;
  clock: Clock;
  logger: Logger;
  limits: SubscriptionLimits;
  idleTimeoutMs: number;
  maxSessionsPerPrincipal: number;
  /** Events each legacy session keeps for Last-Event-ID resumption. */
  resumeHistory: number;
  /** What the cluster can tell a session that resumes with an id its history does not cover. */
  resume: Pick<SessionResume, "since" | "current" | "caughtUp">;
  cursors: ResumeCursors;
}

/** A modern listen stream as the host sees it (it hears the list changes its flags ask for: `wants`). */
export interface ListenSink extends NotificationSink {
  readonly flags: ListenFlags;
  /** Ends the stream from the broker's side (its listen failed). */
  end?(): void;
  /** Ends the stream with an error answer to its listen request. */
  fail?(error: BrokerError): void;
  /** Holds what is delivered from now on (a resumption is being read). */
  hold?(): void;
  /** Writes `told` merged in order with what was held, then `late` (see `resumeOrder`), and delivers as before. */
  release?(told: readonly PreparedNotification[], late: readonly PreparedNotification[]): void;
}

/**
 * How a listen started: rejected, or acknowledged with the cursor to resume from should the stream
 * break before its first notification (and, when it was given a cursor, how it resumed).
 */
export type ListenOutcome =
  | Extract<ListenEmitted, { type: "listen.rejected" }>
  | { type: "listen.acknowledged"; honored: string[]; refused: readonly { uri: string; error: BrokerError }[]; cursor: string; resumed?: "exact" | "everything" };

const LIST_NAMES: readonly ListName[] = ["tools", "prompts", "resources"];

type SubscriptionsRevoked = Extract<BusMessage, { kind: "subscriptions.revoked" }>;

/** Session records read at once when the sessions are checked after a bus gap (see `verifyHeld`). */
const VERIFY_BATCH = 256;

/** Subscriptions listed per session or stream in a console census (the census stays small on the bus). */
const CENSUS_SUBSCRIPTIONS = 100;

/**
 * Runs the session and listen actors: provides their I/O (catalog validation, registry, upstream),
 * performs their effects (local interest, through the fan-out's interest table).
 */
export class SessionHost {
  private readonly legacy = new Map<string, LegacySession>();
  private readonly listens = new Set<ListenSink>();
  /** Adoptions in flight, by session id (concurrent requests for one session adopt it once). */
  private readonly adopting = new Map<string, Promise<LegacySession | undefined>>();
  /** Sessions being adopted here that another member adopted meanwhile, with its epoch. */
  private readonly superseded = new Map<string, number>();
  /** Acknowledged listen streams by id (its actor's, which is its registry session id). */
  private readonly listensById = new Map<string, ListenSink>();
  /** What each acknowledged listen stream holds, by id (written back if Redis loses it). */
  private readonly listenHoldings = new Map<string, { principal: string; honored: () => SubscriptionTarget[]; since: number }>();
  /** What to release when a listen's actor fails (a bug): by actor id (a legacy session's is `legacyFailed`). */
  private readonly failureCleanups = new Map<string, () => void>();
  /** Idle timers of legacy sessions without a stream, by session id (armed and disarmed by their actors). */
  private readonly idleTimers = new Map<string, TimerHandle>();
  /** Legacy sessions plus listen streams, per principal, for `maxSessionsPerPrincipal`. */
  private readonly sessionsHeld = new Map<string, number>();
  /**
   * Sessions held here when the bus last reconnected, whose records are read again once Redis is
   * known to have kept this member's writes (`doubtHeld`, `verifyHeld`).
   */
  private doubted = new Set<LegacySession>();
  private verifying = false;
  /** Releases of ended sessions and streams still on their way to the registry. */
  private readonly releasing = new Set<Promise<void>>();
  /** Ended sessions and streams whose release failed, to try again (principal NUL session id). */
  private readonly unreleased = new Map<string, { principal: string; sessionId: string }>();
  private readonly steps: FlowSteps;
  private readonly legacyMachine;
  /** What every legacy session shares. */
  private readonly env: SessionEnv;

  /**
   * Every session and listen actor is a child of this one, so they share one actor system (and
   * its clock): a system per actor cost about 2 KB per idle session. It hears their failures.
   */
  private readonly root;

  constructor(private readonly deps: SessionHostDeps) {
    this.root = createActor(
      fromCallback(({ receive }) => {
        receive((event) => {
          if (!event.type.startsWith(ACTOR_ERROR)) return;
          const id = event.type.slice(ACTOR_ERROR.length);
          deps.logger.error({ session: id, err: (event as { error?: unknown }).error }, "a session actor failed; releasing what it held");
          const session = this.legacy.get(id);
          if (session !== undefined) this.legacyFailed(session);
          else this.failureCleanups.get(id)?.();
        });
      }),
      { clock: deps.clock },
    );
    this.root.start();
    this.env = {
      events: deps.fanout.events,
      historyLimit: deps.resumeHistory,
      questions: new ClientRequests(deps.instanceId),
      since: (targets, position) => deps.resume.since(targets, position),
      catchUp: () => this.catchUp().then(() => undefined),
      now: () => deps.clock.now(),
      touched: (session) => {
        deps.sessions.touch({ principal: session.principal, sessionId: session.id }, deps.clock.now()).catch(() => undefined);
      },
      logLevelSet: (session, level) => {
        deps.sessions.setLogLevel({ principal: session.principal, sessionId: session.id }, level).catch((error: unknown) => deps.logger.warn({ session: session.id, err: (error as Error).message }, "cannot record the log level"));
      },
      exposeUri: (target) => deps.catalog.exposeUri(target.backendId, target.uri),
      streamAttached: (session, attached) => {
        if (attached) this.disarmIdle(session.id);
        // Only a session still running here waits for its idle timeout (a closing or departed one is gone).
        else if (this.legacy.get(session.id) === session && !session.closed) this.armIdle(session, deps.idleTimeoutMs);
      },
    };
    this.steps = {
      validate: (uri) => this.validate(uri),
      epoch: (principal, sessionId) => this.epochOf(principal, sessionId),
      reserve: async (ref) => {
        const outcome = await deps.registry.add(ref, deps.limits);
        if (outcome.status === "moved") this.stale(ref);
        return outcome;
      },
      reserveMany: async (refs) => {
        const outcomes = await deps.registry.addMany(refs, deps.limits);
        if (refs[0] !== undefined && outcomes[0]?.status === "moved") this.stale(refs[0]);
        return outcomes;
      },
      ensureUpstream: (target) => deps.upstream.ensure(target.backendId, target.uri),
      upstreamWatched: (target) => deps.upstream.watching?.(target.backendId, target.uri) === true,
      release: (ref) => this.release(ref),
    };
    const releaseAll = fromPromise<void, { principal: string; sessionId: string }>(async ({ input }) => this.releaseAll(input.principal, input.sessionId));
    this.legacyMachine = legacySessionMachine.provide({ actors: { releaseAll } });
  }

  /**
   * A listen's `subscribe.run`: only the URIs that will be tried (the first maxPerSession) are
   * checked first; an unknown one rejects the request, one on a backend that is down is just left
   * out (refused). Then subscribeMany, which takes each URI as the check resolved it.
   */
  private async subscribeListen(input: SubscribeManyInput, signal: { readonly aborted: boolean }): Promise<SubscribeManyOutput> {
    const tried = Math.min(input.uris.length, this.deps.limits.perSession);
    /** What each URI resolved to (or the refusal of one on a backend that is down). */
    const checked = new Map<string, SubscriptionTarget | BrokerError>();
    for (let i = 0; i < tried; i++) {
      const uri = input.uris[i] as string;
      try {
        checked.set(uri, this.validate(uri));
      } catch (error) {
        if (!(error instanceof BrokerError && error.code === "BACKEND_UNAVAILABLE")) throw error;
        checked.set(uri, error);
      }
      if (i % VALIDATE_BATCH === VALIDATE_BATCH - 1) await new Promise<void>((resolve) => setImmediate(resolve));
    }
    const validate = (uri: string): SubscriptionTarget => {
      const known = checked.get(uri);
      if (known instanceof BrokerError) throw known;
      return known ?? this.validate(uri);
    };
    const output = await subscribeMany({ ...this.steps, validate }, input, { concurrency: LISTEN_CONCURRENCY, maxPerSession: this.deps.limits.perSession, signal });
    // The stream closed meanwhile: its release may have run before these flows reserved
    // (subscribeMany waits for the flows it started), so what they made is released here.
    if (signal.aborted) await this.releaseAll(input.principal, input.sessionId);
    return output;
  }

  /**
   * Creates a legacy session for an authenticated principal (on `initialize`), and its record in
   * the cluster, so that any member can take it over.
   * @throws BrokerError (SESSION_LIMIT) when the principal holds its maximum already; CLUSTER_UNAVAILABLE when the record cannot be written.
   */
  async createLegacySession(principal: string, init: { protocolVersion: string; clientInfo?: unknown; capabilities?: unknown } = { protocolVersion: "2025-11-25" }): Promise<LegacySession> {
    this.holdSession(principal);
    const id = randomUUID();
    const session = this.start(id, principal, { epoch: 1, protocolVersion: init.protocolVersion });
    session.supports = supportOf(init.capabilities);
    try {
      await this.deps.sessions.create({ sessionId: id, principal, ...init }, this.deps.instanceId, this.deps.clock.now());
    } catch (error) {
      session.handOff("its record could not be written");
      throw error;
    }
    this.deps.logger.info({ session: id, principal }, "session started");
    return session;
  }

  /**
   * Takes over a session this member does not hold (its holder died, stopped, or the client came
   * to another member): the record moves here with the next epoch, what the session holds in the
   * registry becomes its local interest (subscribed on the bus before this resolves), and the
   * previous holder is told to let go. Undefined when no such session exists for this principal.
   */
  adoptLegacySession(id: string, principal: string): Promise<LegacySession | undefined> {
    const pending = this.adopting.get(id);
    if (pending !== undefined) return pending.then((session) => (session?.principal === principal ? session : undefined));
    const adoption = this.adopt(id, principal).finally(() => this.adopting.delete(id));
    this.adopting.set(id, adoption);
    return adoption;
  }

  private async adopt(id: string, principal: string): Promise<LegacySession | undefined> {
    // The principal's slot here is taken before the record moves: refused after (the principal
    // holds its maximum here), the record named this member while its holder kept the session,
    // unaware, so a DELETE here later ended the record and not the session. A stale local copy
    // (this member held it before) gives its slot back when it is handed off, below.
    const stale = this.legacy.get(id);
    if (stale === undefined) {
      try {
        this.holdSession(principal);
      } catch (error) {
        // At its limit here: a session that does not exist (ended, never was, not this principal's)
        // is still a 404 (initialize again), not the limit's 503 its client would retry for good.
        if ((await this.deps.sessions.get({ principal, sessionId: id })) === undefined) return undefined;
        throw error;
      }
    }
    let adopted: Awaited<ReturnType<SessionStore["adopt"]>>;
    try {
      adopted = await this.deps.sessions.adopt({ principal, sessionId: id }, this.deps.instanceId, this.deps.clock.now());
    } catch (error) {
      if (stale === undefined) this.releaseSession(principal);
      throw error;
    }
    if (adopted === undefined) {
      if (stale === undefined) this.releaseSession(principal);
      return undefined;
    }
    const { record, previous, notices } = adopted;
    const subscriptions = Object.create(null) as Record<string, SubscriptionTarget>;
    for (const ref of await this.deps.registry.ofSession(principal, id)) {
      if (this.deps.catalog.hasBackend(ref.backendId)) subscriptions[this.deps.catalog.exposeUri(ref.backendId, ref.uri)] = { backendId: ref.backendId, uri: ref.uri };
    }
    if (stale !== undefined) {
      stale.handOff("adopted again");
      this.holdSession(principal);
    }
    const session = this.start(id, principal, { epoch: record.epoch, subscriptions, logLevel: record.logLevel, protocolVersion: record.protocolVersion });
    session.supports = supportOf(record.capabilities);
    // Subscriptions a limits job removed while nobody held it: told once a stream is attached.
    for (const notice of notices) {
      const message = revocationNotice(notice);
      if (message === undefined || message.principal !== principal || message.sessionId !== id) continue;
      const uris = message.resources.filter((r) => this.deps.catalog.hasBackend(r.backendId)).map((r) => this.deps.catalog.exposeUri(r.backendId, r.uri));
      session.tellOnAttach({ message: `${revocationText(message)} while no broker instance held the session; subscribe again once under the limit`, limit: message.limit, max: message.max, uris });
    }
    // Subscribed on the bus before anything is read for resumption: nothing falls between.
    await this.interestIn(Object.values(subscriptions), session);
    // What the cluster handed out before now is the cluster's to tell a resuming client; this
    // member's history holds what comes after (unknown: every resumption asks the cluster).
    session.coversFrom(await this.deps.resume.current().catch(() => undefined));
    // The previous holder lost the session to this adoption, even when a newer one supersedes it
    // below: told nothing, it would keep a stale copy (and a stream that hears nothing of what the
    // session subscribes to at its new holder).
    if (previous !== undefined) {
      await this.deps.bus
        .publish(CHANNEL.replies(previous), { kind: "session.moved", v: 1, origin: this.deps.instanceId, principal, sessionId: id, epoch: record.epoch, to: this.deps.instanceId })
        .catch((error: unknown) => this.deps.logger.warn({ session: id, to: previous, err: (error as Error).message }, "cannot tell the session's previous holder"));
    }
    const superseded = this.superseded.get(id);
    this.superseded.delete(id);
    if (superseded !== undefined && superseded > record.epoch) {
      session.handOff("adopted by another member meanwhile");
      throw movedError();
    }
    this.deps.logger.info({ session: id, principal, epoch: record.epoch, from: previous ?? "(nobody)", subscriptions: Object.keys(subscriptions).length }, "session adopted");
    return session;
  }

  /**
   * A client's JSON-RPC response (its answer to a backend's request the broker passed on to it) in
   * session `sessionId`: settles the question when this member asked it, or goes to the member
   * that did (its id names it; an id that names none goes to the session's holder). False when the
   * session is unknown here and in the cluster (it ended, never existed, or is another
   * principal's); an answer to nothing open anywhere (late, after a cancellation) is dropped.
   */
  async answerQuestion(sessionId: string, principal: string, answer: Record<string, unknown>): Promise<boolean> {
    const owner = { id: sessionId, principal };
    if (this.env.questions.answer(answer, owner)) return true;
    let holder: string | undefined;
    if (this.legacySession(sessionId, principal) !== undefined) holder = this.deps.instanceId;
    else {
      let record: SessionRecord | undefined;
      try {
        record = await this.deps.sessions.get({ principal, sessionId });
      } catch {
        // The cluster cannot say: the question (if any) times out; the client is not told its session is gone.
        return true;
      }
      if (record === undefined) return false;
      holder = record.owner;
    }
    const asker = askerOf(answer.id) ?? holder;
    if (asker === "" || asker === this.deps.instanceId) return true;
    await this.deps.bus
      .publish(CHANNEL.replies(asker), { kind: "client.answer", v: 1, origin: this.deps.instanceId, principal, sessionId, answer })
      .catch((error: unknown) => this.deps.logger.warn({ session: sessionId, err: (error as Error).message }, "cannot pass a client's answer on to the member that asked"));
    return true;
  }

  /** A client's answer that reached another member (`client.answer`). */
  clientAnswered(message: { principal: string; sessionId: string; answer: Record<string, unknown> }): void {
    this.env.questions.answer(message.answer, { id: message.sessionId, principal: message.principal });
  }

  /** A session that had moved ended on another member (`session.ended`): what this member asked its client before the move fails. */
  endedElsewhere(message: { origin: string; principal: string; sessionId: string }): void {
    if (message.origin === this.deps.instanceId) return;
    this.env.questions.failSession({ id: message.sessionId, principal: message.principal }, "the client's session ended");
  }

  /** Another member took the session over (`session.moved`): this member lets go of it, unless it holds a newer epoch. */
  moved(message: { principal: string; sessionId: string; epoch: number; to: string }): void {
    const session = this.legacy.get(message.sessionId);
    if (session !== undefined && session.principal === message.principal && session.epoch < message.epoch) {
      this.deps.logger.info({ session: message.sessionId, to: message.to, epoch: message.epoch }, "session moved to another member");
      session.handOff("the session moved to another broker instance");
      return;
    }
    if (this.adopting.has(message.sessionId)) this.superseded.set(message.sessionId, Math.max(this.superseded.get(message.sessionId) ?? 0, message.epoch));
  }

  /** Runs a legacy session here: its actor, effects, stream and idle timer. */
  private start(id: string, principal: string, options: { epoch: number; protocolVersion: string; subscriptions?: Record<string, SubscriptionTarget>; logLevel?: string }): LegacySession {
    const actor = createActor(this.legacyMachine, {
      parent: this.root,
      id,
      input: { id, principal, ...(options.subscriptions !== undefined && { subscriptions: options.subscriptions }) },
      clock: this.deps.clock,
    });
    const session = new LegacySession(id, principal, actor, this.env, options.epoch, options.protocolVersion);
    if (options.logLevel !== undefined && (LOG_LEVELS as readonly string[]).includes(options.logLevel)) session.logLevel = options.logLevel as LogLevel;
    /** The bus SUBSCRIBE of the subscribe being answered, when still under way: the answer waits for it. */
    let subscribing: Promise<void> | undefined;
    // One listener for all effects (a listener per event type costs a Set each, per session).
    actor.on("*", (effect) => {
      switch (effect.type) {
        case "reply": {
          const { replyTo, error } = effect;
          if (subscribing === undefined) session.settle(replyTo, error);
          else void subscribing.then(() => session.settle(replyTo, error));
          subscribing = undefined;
          break;
        }
        case "subscribe.run": {
          const { replyTo } = effect;
          // A reservation that lands after the session ended or left is released (see runSubscriptionFlow).
          void runSubscriptionFlow(this.steps, { principal, sessionId: id, uri: effect.uri }, () => session.closed).then((output) => actor.send({ type: "subscribe.done", replyTo, output }));
          break;
        }
        case "unsubscribe.run": {
          const { replyTo } = effect;
          const done = () => actor.send({ type: "unsubscribe.done", replyTo });
          this.release({ principal, sessionId: id, backendId: effect.target.backendId, uri: effect.target.uri, epoch: this.epochOf(principal, id) }).then(done, done);
          break;
        }
        case "interest.add":
          // Its reply comes next, in the same step (see the machine's finishHead).
          subscribing = this.deps.fanout.interest.add(effect.target, session);
          break;
        case "interest.remove":
          this.deps.fanout.interest.remove(effect.target, session);
          break;
        case "session.ended":
          session.failAsked("the client's session ended");
          // Adopted at least once: a member it left may wait for an answer to a question asked before the move.
          if (session.epoch > 1) {
            this.deps.bus.publish(CHANNEL.sessions, { kind: "session.ended", v: 1, origin: this.deps.instanceId, principal, sessionId: id }).catch((error: unknown) => this.deps.logger.warn({ session: id, err: (error as Error).message }, "cannot tell the cluster the session ended"));
          }
          this.forgetLegacy(session);
          this.deps.sessions.delete({ principal, sessionId: id }).catch((error: unknown) => this.deps.logger.warn({ session: id, err: (error as Error).message }, "cannot delete the ended session's record; it expires"));
          this.deps.logger.info({ session: id, principal }, "session ended");
          break;
        case "session.handedOff":
          this.forgetLegacy(session);
          this.deps.logger.debug({ session: id, principal, reason: effect.reason }, "session left this member");
          break;
      }
    });
    this.legacy.set(id, session);
    this.deps.fanout.listen(session);
    actor.start();
    // No stream yet: the idle timer runs until one is attached (see `streamAttached`).
    this.armIdle(session, this.deps.idleTimeoutMs);
    return session;
  }

  /** The session, only if it exists and belongs to this principal. */
  legacySession(id: string, principal: string): LegacySession | undefined {
    const session = this.legacy.get(id);
    return session !== undefined && session.principal === principal && !session.closed ? session : undefined;
  }

  /**
   * Ends a legacy session on its client's DELETE. Its record goes first, so that from the answer on
   * no member adopts it (a request anywhere gets 404); then it closes here and releases what it held.
   */
  async endLegacySession(session: LegacySession, reason: string): Promise<void> {
    await this.deps.sessions.delete({ principal: session.principal, sessionId: session.id }).catch((error: unknown) => this.deps.logger.warn({ session: session.id, err: (error as Error).message }, "cannot delete the ended session's record; it expires"));
    const ended = session.ended();
    session.close(reason);
    // Once it has released what it held, and its slot of the principal's session limit: a client
    // told its session ended may start another at once (it was refused while this one closed).
    await ended;
  }

  /**
   * Whether the cluster's record still names this member, at the session's epoch, as its holder
   * (checked before a stream is attached: a stream on a stale copy would hear nothing of what the
   * session subscribes to at its holder). A stale copy is handed off. When the record cannot be
   * read, or is gone (Redis lost it; this member writes it back), the local copy is trusted.
   */
  async stillHeld(session: LegacySession): Promise<boolean> {
    let record: SessionRecord | undefined;
    try {
      record = await this.deps.sessions.get({ principal: session.principal, sessionId: session.id });
    } catch {
      return true;
    }
    if (record === undefined || (record.owner === this.deps.instanceId && record.epoch === session.epoch)) return true;
    this.deps.logger.info({ session: session.id, epoch: session.epoch, holder: record.owner || "(nobody)", holderEpoch: record.epoch }, "session held by another member by now; handing off the stale copy");
    session.handOff("another member holds the session");
    return false;
  }

  /**
   * The bus reconnected: a `session.moved` to this member may have been lost meanwhile, so each
   * session it holds may be a stale copy of one another member adopted or ended (a DELETE there).
   * Their records are read again at the next heartbeat that finds this member's writes kept
   * (`verifyHeld`): until then a missing record may be Redis's loss, which the write-back restores.
   */
  doubtHeld(): void {
    for (const session of this.legacy.values()) this.doubted.add(session);
  }

  /**
   * Reads the record of each session doubted since the bus reconnected: one held elsewhere by now,
   * or gone (ended on another member), is handed off (its stream ends; its client's next request
   * adopts it, or gets 404 and initializes again). Redis kept this member's writes (see
   * `MemberHooks.steady`), so a missing record was removed, not lost.
   */
  async verifyHeld(): Promise<void> {
    if (this.verifying || this.doubted.size === 0) return;
    this.verifying = true;
    const doubted = [...this.doubted];
    this.doubted = new Set();
    const current = (session: LegacySession) => !session.closed && this.legacy.get(session.id) === session;
    try {
      for (let i = 0; i < doubted.length; i += VERIFY_BATCH) {
        await Promise.all(
          doubted.slice(i, i + VERIFY_BATCH).map(async (session) => {
            if (!current(session)) return;
            let record: SessionRecord | undefined;
            try {
              record = await this.deps.sessions.get({ principal: session.principal, sessionId: session.id });
            } catch {
              this.doubted.add(session);
              return;
            }
            if (!current(session) || (record !== undefined && record.owner === this.deps.instanceId && record.epoch === session.epoch)) return;
            this.deps.logger.info({ session: session.id, epoch: session.epoch, holder: record?.owner ?? "(ended)", holderEpoch: record?.epoch }, "session ended or held elsewhere while the bus was away; handing off the stale copy");
            session.handOff(record === undefined ? "the session ended on another broker instance" : "another member holds the session");
          }),
        );
      }
    } finally {
      this.verifying = false;
    }
  }

  legacySessions(): LegacySession[] {
    return [...this.legacy.values()];
  }

  listenCount(): number {
    return this.listens.size;
  }

  /** Backends' questions this member asked clients that wait for an answer. */
  questionsPending(): number {
    return this.env.questions.size;
  }

  /** This member's sessions and listen streams as the operator console shows them, at most `limit` of each (see `ConsoleCensus`). */
  census(limit: number): MemberCensus {
    const sessions = [...this.legacy.values()].slice(0, limit).map((session) => ({
      sessionId: session.id,
      principal: session.principal,
      protocolVersion: session.protocolVersion,
      subscriptions: Object.keys(session.actor.getSnapshot().context.subscriptions).slice(0, CENSUS_SUBSCRIPTIONS),
      streaming: session.streaming,
      lastActive: session.lastActive,
    }));
    const streams = [...this.listenHoldings].slice(0, limit).map(([id, { principal, honored, since }]) => ({
      id,
      principal,
      subscriptions: honored()
        .slice(0, CENSUS_SUBSCRIPTIONS)
        .map((target) => this.deps.catalog.exposeUri(target.backendId, target.uri)),
      since,
    }));
    return { legacy: { count: this.legacy.size, sessions }, listens: { count: this.listenHoldings.size, streams } };
  }

  /** What every cursor of this principal's listen streams begins with (see `ResumeCursors`). */
  cursorPrefix(principal: string): string {
    return this.deps.cursors.prefix(principal);
  }

  /**
   * Opens a listen actor. `onOutcome` hears exactly one of rejected / acknowledged (with the
   * honored URIs, the cursor to resume from, and how it resumed from `cursor` when one was given),
   * before any notification reaches `sink`; nothing, when the stream closes while its resumption
   * is asked. With a cursor, what happened since the event it names comes right after the
   * acknowledgement (see `resumeListen`).
   */
  openListen(
    principal: string,
    flags: ListenFlags,
    uris: string[],
    makeSink: (streamId: string) => ListenSink,
    onOutcome: (outcome: ListenOutcome) => void,
    cursor?: unknown,
  ): { close(): void } {
    try {
      this.holdSession(principal);
    } catch (error) {
      onOutcome({ type: "listen.rejected", error: error as BrokerError });
      return { close: () => undefined };
    }
    const id = `listen-${randomUUID()}`;
    const sink = makeSink(id);
    const actor = createActor(listenMachine, { parent: this.root, id, input: { id, principal, flags, uris: [...new Set(uris)] }, clock: this.deps.clock });
    /**
     * Stops a subscribe still running when the stream closes (or the actor failed). A plain flag:
     * an AbortController's `abort()` made a DOMException with its stack each time (~4 % of a
     * broker's CPU in the bench's listen phases), and the controller and its signal stayed with
     * every open stream.
     */
    const subscribing = { aborted: false };
    let acknowledged = false;
    /** The subscribe (`subscribeListen`), then the actor told how it went. */
    let subscribeRun: Promise<void> | undefined;
    /** Its stream closed (it is released, then forgotten), or the listen failed: nothing is acknowledged or told from then on. */
    let closed = false;
    let forgotten = false;
    /** Once per listen, however it ends (closed, rejected, failed). */
    const forget = () => {
      if (forgotten) return;
      forgotten = true;
      closed = true;
      this.failureCleanups.delete(id);
      this.listens.delete(sink);
      this.listensById.delete(id);
      this.listenHoldings.delete(id);
      this.deps.fanout.forget(sink);
      this.releaseSession(principal);
    };
    actor.on("*", (effect) => {
      switch (effect.type) {
        case "subscribe.run":
          subscribeRun = this.subscribeListen(effect.input, subscribing).then(
            (output) => actor.send({ type: "subscribe.done", output }),
            (error: unknown) => actor.send({ type: "subscribe.failed", error }),
          );
          break;
        case "listen.acknowledged": {
          if (effect.refused.length > 0) {
            const sample = effect.refused.slice(0, 5).map(({ uri, error }) => ({ uri, code: error.code }));
            this.deps.logger.info({ principal, stream: id, refused: effect.refused.length, sample }, "listen: subscriptions left out of the honored filter");
          }
          // The acknowledgement waits for the bus SUBSCRIBEs under way for the honored targets.
          const subscribingBus = this.interestIn(targetsOf(effect.honored), sink);
          if (subscribingBus === undefined) acknowledge(effect.honored, effect.refused);
          else
            void subscribingBus.then(() => {
              if (!closed) acknowledge(effect.honored, effect.refused);
            });
          break;
        }
        case "listen.rejected":
          onOutcome(effect);
          break;
        case "listen.closed":
          closed = true;
          subscribing.aborted = true;
          // A subscribe still under way releases what it reserved once it stops: a stop waits for that too.
          if (subscribeRun !== undefined) this.track(subscribeRun);
          // Not written back from now on (see `reregister`), nor shown in the console.
          this.listenHoldings.delete(id);
          for (const target of effect.targets) this.deps.fanout.interest.remove(target, sink);
          // Forgotten once released (its principal's session slot is free only then, as a legacy
          // session's); the release is tracked until it reached the registry (see `drain`).
          void this.releaseAll(effect.principal, effect.sessionId).then(forget);
          break;
      }
    });
    const acknowledge = (honored: readonly HonoredUri[], refused: readonly { uri: string; error: BrokerError }[]): void => {
      acknowledged = true;
      this.listens.add(sink);
      this.listensById.set(id, sink);
      this.listenHoldings.set(id, { principal, honored: () => targetsOf(actor.getSnapshot().context.honored), since: Date.now() });
      this.deps.fanout.listen(sink);
      const outcome = { type: "listen.acknowledged" as const, honored: honored.map(({ uri }) => uri), refused };
      const cursorAt = (position: number) => this.deps.cursors.format(principal, { position, local: 0 });
      if (cursor === undefined) {
        // A position handed out now, after the honored URIs' upstream watches began, once every
        // event before it has reached this broker (a list change among them is applied, and the
        // client that lists after the acknowledgement has it): a stream resumed from it is told
        // what changes later, and nothing from before it opened.
        void this.catchUp().then((position) => {
          if (!closed) onOutcome({ ...outcome, cursor: cursorAt(position) });
        });
        return;
      }
      const from = this.deps.cursors.parse(cursor, principal);
      if (from === undefined) this.deps.logger.info({ principal, stream: id }, "listen: a cursor not of this cluster and principal; everything it honors is announced once");
      // Held from before the acknowledgement: nothing that arrived meanwhile may precede what the resumption tells.
      sink.hold?.();
      void this.resumeListen(targetsOf(honored), sink, from, (exact, at) => {
        // Closed while the cluster was asked: nothing to acknowledge or tell.
        if (closed) return false;
        // The cursor it resumed from: broken before what follows arrives, it is told the same again.
        onOutcome({ ...outcome, resumed: exact ? "exact" : "everything", cursor: typeof cursor === "string" ? cursor : cursorAt(at) });
        return true;
      });
    };
    this.failureCleanups.set(id, () => {
      subscribing.aborted = true;
      for (const target of targetsOf(actor.getSnapshot().context.honored)) {
        this.deps.fanout.interest.remove(target, sink);
      }
      if (acknowledged) sink.end?.();
      else onOutcome({ type: "listen.rejected", error: new BrokerError("INTERNAL", "The listen failed inside the broker; open a new one.") });
      forget();
      void this.releaseAll(principal, id).catch((error: unknown) => this.deps.logger.warn({ stream: id, err: (error as Error).message }, "release after a failed listen failed"));
    });
    actor.start();
    return {
      close: () => {
        this.listens.delete(sink);
        this.deps.fanout.forget(sink);
        // Idempotent: a rejected or already closed listen has finished.
        if (actor.getSnapshot().status === "active") actor.send({ type: "stream.closed" });
      },
    };
  }

  /**
   * The cluster removed subscriptions of a session or listen stream (a limit was lowered): a legacy
   * session stops delivering them and is told with a `notifications/message` at warning; a listen
   * stream, whose filter can no longer be honored, ends with the limit's error. Not held here: nothing to do
   * (a legacy session nobody holds is told by the member that adopts it: see `SessionStore.remind`).
   */
  revoke(message: SubscriptionsRevoked): void {
    const wanted = new Set(message.resources.map((r) => `${r.backendId}\u0000${r.uri}`));
    const what = revocationText(message);
    const session = this.legacy.get(message.sessionId);
    if (session !== undefined && session.principal === message.principal && !session.closed) {
      const uris = Object.entries(session.actor.getSnapshot().context.subscriptions)
        .filter(([, target]) => wanted.has(`${target.backendId}\u0000${target.uri}`))
        .map(([uri]) => uri);
      session.actor.send({ type: "subscription.revoked", uris });
      session.deliver(PreparedNotification.brokerMessage("warning", { message: `${what}; subscribe again once under the limit`, limit: message.limit, max: message.max, uris }, this.env.events.next()));
      return;
    }
    const listen = this.listensById.get(message.sessionId);
    if (listen === undefined || listen.principal !== message.principal) return;
    const uris = message.resources.map((r) => this.deps.catalog.exposeUri(r.backendId, r.uri));
    listen.fail?.(new BrokerError("SUBSCRIPTION_LIMIT", `${what}; open a new listen within the limit.`, { limit: message.limit, max: message.max, uris }));
  }

  /** Adds `sink`'s interest in each target; the bus SUBSCRIBEs still under way for them, if any. */
  private interestIn(targets: readonly SubscriptionTarget[], sink: NotificationSink): Promise<unknown> | undefined {
    const under = targets.map((target) => this.deps.fanout.interest.add(target, sink)).filter((p) => p !== undefined);
    return under.length > 0 ? Promise.all(under) : undefined;
  }

  /**
   * A listen stream resumes from `from` (the event its cursor names): it is acknowledged once the
   * cluster was asked (exact when it could tell), then gets what the cluster reports happened
   * since, merged with what arrives meanwhile in position order, then, once, what nobody can tell
   * (or, without a usable cursor or when the cluster cannot tell, everything it honors).
   */
  private async resumeListen(targets: readonly SubscriptionTarget[], sink: ListenSink, from: EventId | undefined, acknowledge: (exact: boolean, at: number) => boolean): Promise<void> {
    // Subscribed on the bus before anything is read: nothing falls between.
    if (from !== undefined) await this.interestIn(targets, sink);
    const report = from === undefined ? undefined : await this.deps.resume.since(targets, from.position).catch(() => undefined);
    // Nothing goes out before everything handed out so far has arrived (and is held with the rest):
    // the stamps came from Redis, which this broker's bus may lag, and a list change still on its way
    // would otherwise follow the updates told, with a lower cursor. What nobody can tell is then
    // announced at the position caught up with: its cursor resumes after the watches of what it
    // announces began, and nothing that came before it in the cluster's order follows it.
    const at = await this.catchUp();
    // Exact only once the cluster could tell (a position it never handed out cannot be told about).
    if (!acknowledge(report !== undefined, at)) return;
    const wanted = LIST_NAMES.filter((list) => sink.wants?.(list) ?? true);
    const told =
      report === undefined
        ? []
        : [
            ...report.updated.map(({ target, position }) => PreparedNotification.resourceUpdated(this.deps.catalog.exposeUri(target.backendId, target.uri), { position, local: 0 })),
            ...report.lists.filter(({ list }) => wanted.includes(list)).map(({ list, position }) => PreparedNotification.listChanged(list, { position, local: 0 })),
          ];
    const unknown = report === undefined ? targets : report.unknown;
    const late = [
      ...unknown.map((target) => PreparedNotification.resourceUpdated(this.deps.catalog.exposeUri(target.backendId, target.uri), this.env.events.next())),
      ...(report === undefined ? wanted : []).map((list) => PreparedNotification.listChanged(list, this.env.events.next())),
    ];
    sink.release?.(told, late);
  }

  /**
   * Moves this broker's event clock up to a position reserved in the cluster's order once every
   * event handed out before it has arrived here (see `SessionResume.caughtUp`), and resolves with
   * that position: not the clock, which events after it may have moved further (a stream's cursor
   * at the clock would resume past those, still on their way to its client). When Redis or the bus
   * cannot say, the clock stays, and names the position: what is made up next comes after what this
   * broker passed on.
   */
  private async catchUp(): Promise<number> {
    try {
      const position = await this.deps.resume.caughtUp();
      this.env.events.caughtUp(position);
      return position;
    } catch (error) {
      this.deps.logger.debug({ err: (error as Error).message }, "cannot catch up with the cluster's order; this broker's clock names the position");
      return this.env.events.newest();
    }
  }

  /**
   * Redis lost the cluster's state: every session this member holds gets its record back (with
   * its epoch), and every session and listen stream its subscriptions (within the limits, as they
   * were admitted). The watchers then find them wanted again.
   */
  async reregister(): Promise<void> {
    const now = this.deps.clock.now();
    let sessions = 0;
    let subscriptions = 0;
    /** False when the session's record is at a newer epoch: another member adopted it meanwhile. */
    const add = async (principal: string, sessionId: string, targets: Iterable<SubscriptionTarget>, epoch?: number): Promise<boolean> => {
      for (const target of targets) {
        const outcome = await this.deps.registry.add({ principal, sessionId, backendId: target.backendId, uri: target.uri, ...(epoch !== undefined && { epoch }) }, this.deps.limits);
        if (outcome.status === "moved") return false;
        if (outcome.status === "added") subscriptions++;
      }
      return true;
    };
    for (const session of [...this.legacy.values()]) {
      if (session.closed) continue;
      // A record at a newer epoch stays (the store refuses to go back), and the adds fenced by this
      // member's epoch then say so: the session is not this member's any more.
      await this.deps.sessions.create({ sessionId: session.id, principal: session.principal, protocolVersion: session.protocolVersion }, this.deps.instanceId, now, session.epoch);
      if (!(await add(session.principal, session.id, Object.values(session.actor.getSnapshot().context.subscriptions), session.epoch))) {
        session.handOff("the session moved to another broker instance");
        continue;
      }
      // Closed meanwhile: its release may have read its holdings before these adds landed.
      if (session.closed) void this.releaseAll(session.principal, session.id);
      else sessions++;
    }
    for (const [id, holding] of [...this.listenHoldings]) {
      await add(holding.principal, id, holding.honored());
      // Closed meanwhile (it leaves listenHoldings as it closes): the same.
      if (this.listenHoldings.get(id) !== holding) void this.releaseAll(holding.principal, id);
    }
    this.deps.logger.warn({ sessions, listens: this.listenHoldings.size, subscriptions }, "wrote back the sessions and subscriptions this member holds");
  }

  /**
   * This instance was presumed dead by the cluster: the member that reaped it let its legacy
   * sessions go (their records wait for adoption, what they hold is kept), so they leave this member
   * without ending; each is let go here too, in case that reap was cut short before it got to them
   * (fenced by the session's epoch: a no-op for one let go or adopted already). Its listen streams
   * end (what they held may have been released): their clients open new ones.
   */
  async endAll(reason: string, idleMs: number): Promise<void> {
    for (const listen of [...this.listens]) listen.end?.();
    // Each leaves either way (see `handOffAll`): what it held may be released already, so it is not served from here.
    await this.handOffAll(reason, idleMs);
  }

  /**
   * This member stops and hands its legacy sessions to the cluster: each record is let go (any
   * member adopts it when its client comes back; it expires after `idleMs` otherwise) and the
   * session leaves this member without ending, keeping what it holds. Its stream ends, so its
   * client reconnects (to another member) right away. With the memory engine there is no one to
   * hand them to: they end, as before. Resolves with how many records could not be let go.
   */
  async handOffAll(reason: string, idleMs: number): Promise<number> {
    // Each leaves either way: a record that could not be let go (Redis away) still names this member,
    // whose sessions the cluster's reap lets go once its heartbeat has lapsed.
    const outcomes = await Promise.allSettled([...this.legacy.values()].map((session) => this.deps.sessions.letGo({ principal: session.principal, sessionId: session.id }, this.deps.instanceId, session.epoch, idleMs).finally(() => session.handOff(reason))));
    return outcomes.filter((outcome) => outcome.status === "rejected").length;
  }

  close(): void {
    for (const session of this.legacy.values()) session.close("broker shutting down");
    for (const timer of this.idleTimers.values()) this.deps.clock.clearTimeout(timer);
    this.idleTimers.clear();
    this.deps.fanout.interest.close();
  }

  /**
   * A session's actor failed (a bug): releases what it held. Found through `legacy`, so a session
   * costs no cleanup closure of its own while it lives.
   */
  private legacyFailed(session: LegacySession): void {
    const { id, principal } = session;
    for (const target of Object.values(session.actor.getSnapshot().context.subscriptions)) {
      this.deps.fanout.interest.remove(target, session);
    }
    session.failPending(new BrokerError("INTERNAL", "The session failed inside the broker; initialize a new one."));
    session.failAsked("the client's session failed inside the broker");
    this.forgetLegacy(session);
    void this.releaseAll(principal, id).catch((error: unknown) => this.deps.logger.warn({ session: id, err: (error as Error).message }, "release after a failed session failed"));
  }

  private forgetLegacy(session: LegacySession): void {
    // Its questions stay (a session that moved is still asked during its calls here; see `ClientRequests`).
    if (!this.legacy.delete(session.id)) return;
    this.deps.fanout.forget(session);
    this.disarmIdle(session.id);
    this.releaseSession(session.principal);
  }

  /**
   * Starts a session's idle timer (no stream is attached), to run out `ms`
   * after `since`. When it does, a request that came meanwhile (`lastActive`) arms it again, to
   * run out `ms` after that request, as does one still in flight (`busy`, from now); otherwise the
   * actor hears `session.idle`.
   */
  private armIdle(session: LegacySession, ms: number, since = this.deps.clock.now()): void {
    this.disarmIdle(session.id);
    const timer = this.deps.clock.setTimeout(() => {
      this.idleTimers.delete(session.id);
      const now = this.deps.clock.now();
      const active = session.busy ? now : Math.max(session.lastActive, since);
      if (active + ms > now) this.armIdle(session, ms, active);
      else session.actor.send({ type: "session.idle" });
    }, since + ms - this.deps.clock.now());
    timer.unref?.();
    this.idleTimers.set(session.id, timer);
  }

  private disarmIdle(sessionId: string): void {
    const timer = this.idleTimers.get(sessionId);
    if (timer === undefined) return;
    this.deps.clock.clearTimeout(timer);
    this.idleTimers.delete(sessionId);
  }

  /** Counts one more session or listen stream for `principal`, within `maxSessionsPerPrincipal`. */
  private holdSession(principal: string): void {
    const held = this.sessionsHeld.get(principal) ?? 0;
    const max = this.deps.maxSessionsPerPrincipal;
    if (held >= max) {
      throw new BrokerError("SESSION_LIMIT", `Too many open sessions and listen streams for this principal (at most ${max}); close one first.`, { max });
    }
    this.sessionsHeld.set(principal, held + 1);
  }

  private releaseSession(principal: string): void {
    const held = (this.sessionsHeld.get(principal) ?? 1) - 1;
    if (held <= 0) this.sessionsHeld.delete(principal);
    else this.sessionsHeld.set(principal, held);
  }

  /** Accepts a listed resource, a template match or a sub-resource of a listed resource. */
  private validate(uri: string): SubscriptionTarget {
    return this.deps.subscriptionTarget(uri);
  }

  /**
   * The epoch at which this member holds a legacy session, the fence of its refs: the registry
   * refuses a change should another member have adopted the session meanwhile (undefined for a
   * listen stream: it cannot move). Refs are built with it as a field of their literal: a spread
   * that adds a key is a slow path of V8 (~4 µs a subscribe under the profiler).
   */
  private epochOf(principal: string, sessionId: string): number | undefined {
    const session = this.legacy.get(sessionId);
    return session !== undefined && session.principal === principal ? session.epoch : undefined;
  }

  private async release(ref: SubscriptionRef): Promise<void> {
    const outcome = await this.deps.registry.remove(ref);
    if (outcome.moved === true) this.stale(ref);
    if (outcome.last) this.deps.upstream.release(ref.backendId, ref.uri);
  }

  /**
   * The registry refused a change fenced with the epoch this member holds the session at: another
   * member holds it by now, and the message telling this one was lost or is still on its way. The
   * stale copy is handed off (its pending requests answered "moved", its stream closed with a
   * retry), so the client's next request or stream adopts the session instead of meeting the
   * stale copy again.
   */
  private stale(ref: SubscriptionRef): void {
    const session = this.legacy.get(ref.sessionId);
    if (session === undefined || session.principal !== ref.principal || session.epoch !== ref.epoch) return;
    this.deps.logger.info({ session: ref.sessionId, epoch: ref.epoch }, "session held by another member by now; handing off the stale copy");
    session.handOff("another member holds the session");
  }

  /**
   * Releases what an ended session or stream held. When the registry cannot be reached it is kept
   * and tried again (`retryReleases`): otherwise its subscriptions would count against the limits,
   * and be watched upstream, for as long as this instance lives.
   */
  private releaseAll(principal: string, sessionId: string): Promise<void> {
    const run = (async () => {
      try {
        // In one step of the registry (one Redis script), however many it held. Its holdings are
        // read first even for a listen that honored what it asked: a refused URI can still be held
        // (its rollback's release failed, or a reservation whose answer was lost did land).
        const refs = await this.deps.registry.ofSession(principal, sessionId);
        const outcomes = await this.deps.registry.removeMany(refs);
        outcomes.forEach((outcome, i) => {
          const ref = refs[i] as SubscriptionRef;
          if (outcome.last) this.deps.upstream.release(ref.backendId, ref.uri);
        });
        this.unreleased.delete(`${principal}\u0000${sessionId}`);
      } catch (error) {
        this.unreleased.set(`${principal}\u0000${sessionId}`, { principal, sessionId });
        this.deps.logger.warn({ session: sessionId, err: (error as Error).message }, "releasing an ended session's subscriptions failed; will retry");
      }
    })();
    this.track(run);
    return run;
  }

  /** `drain` waits for `work` (a release, or a subscribe that releases what it reserves once it stops). */
  private track(work: Promise<void>): void {
    this.releasing.add(work);
    const done = () => void this.releasing.delete(work);
    work.then(done, done);
  }

  /** Tries again the releases that failed (see `releaseAll`). */
  retryReleases(): void {
    for (const { principal, sessionId } of [...this.unreleased.values()]) void this.releaseAll(principal, sessionId);
  }

  /**
   * Resolves once the releases of ended sessions and streams have reached the registry, or after
   * `timeoutMs` (graceful shutdown: what is not released by then is reaped by the cluster later).
   */
  async drain(timeoutMs: number): Promise<void> {
    // Closed actors start their releases from their own transitions.
    await new Promise<void>((resolve) => setImmediate(resolve));
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)));
    while (this.releasing.size > 0) {
      const settled = await Promise.race([Promise.allSettled([...this.releasing]).then(() => true), timeout.then(() => false)]);
      if (!settled) break;
    }
    clearTimeout(timer);
  }
}

/** What a revocation's warning says happened. */
function revocationText(message: SubscriptionsRevoked): string {
  return `${message.resources.length} subscription(s) removed: the ${message.limit} subscription limit was lowered to ${message.max}`;
}

/** A revocation kept for a session's next holder (see `SessionStore.remind`); undefined for anything else. */
function revocationNotice(notice: string): SubscriptionsRevoked | undefined {
  try {
    const decoded = decodeBusMessage(JSON.parse(notice));
    return decoded.ok && decoded.message.kind === "subscriptions.revoked" ? decoded.message : undefined;
  } catch {
    return undefined;
  }
}
