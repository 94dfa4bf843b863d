import { ProtocolError } from "@modelcontextprotocol/client";
import type { BrokerError, ListName } from "@mcp-broker/shared";
import type { Actor } from "xstate";
import type { LogLevel } from "../routing/request-context.js";
import type { LegacySessionPort } from "../routing/dispatcher.js";
import { formatEventId, isAfter, parseEventId, resumeOrder, type EventClock, type EventId } from "../fanout/event-ids.js";
import type { NotificationSink, SubscriptionTarget } from "../fanout/interest-table.js";
import { closedError, type legacySessionMachine } from "./legacy-session-machine.js";
import { movedError } from "./subscription-flow.js";
import { PreparedNotification } from "../fanout/prepared-notification.js";
import type { InteractionMethod, InteractionSupport } from "@mcp-broker/member";
import { NO_SUPPORT, type ClientRequests } from "./client-requests.js";

const LIST_NAMES = ["tools", "prompts", "resources"] as const;
/** How many standalone-stream events a session keeps for `Last-Event-ID` resumption by default. */
export const DEFAULT_HISTORY = 64;

/** Where a session's unsolicited notifications go: its standalone SSE stream, or stdout in stdio mode. */
export interface NotificationWriter {
  readonly closed: boolean;
  /** Writes the notification with its own event id (`notification.eventId`). */
  write(notification: PreparedNotification): void;
  onClose(listener: () => void): void;
  /** Ends the stream; with `retryMs`, tells the client to reconnect after that long (SSE `retry`). */
  close(retryMs?: number): void;
  /** Writes a priming event: this event id and empty data (SSE streams only; see `attachStream`). */
  prime?(eventId: string): void;
}

/** How often at most a session's record gets its last-seen time written (ms). */
const LAST_SEEN_RESOLUTION_MS = 1_000;

/** The first protocol revision whose clients take an SSE event with empty data (SEP-1699 priming events). */
const PRIMING_SINCE = "2025-11-25";

/** How soon a client whose session left this member reconnects (the session waits for it elsewhere). */
/** The SSE `retry` (ms) of a stream ended because its session left this member: the client reconnects soon, to the session's holder. */
export const HAND_OFF_RETRY_MS = 250;

/** What the cluster can tell of what happened after a position (see `SessionEnv.since`). */
export interface SinceReport {
  /** Subscribed targets updated after it, with the position of their last update. */
  updated: { target: SubscriptionTarget; position: number }[];
  /** Subscribed targets nobody can tell about (their watch began after it): announced anyway. */
  unknown: SubscriptionTarget[];
  /** Lists changed after it, with the position of their last change. */
  lists: { list: ListName; position: number }[];
}

/** What every legacy session of one broker shares (one object, not a closure per session). */
export interface SessionEnv {
  /** The broker's event clock: ids for the events its sessions make up themselves. */
  readonly events: EventClock;
  /** Events each session keeps for `Last-Event-ID` resumption (`server.resumeHistory`). */
  readonly historyLimit: number;
  /** The broker's questions to its sessions' clients, awaiting their answers. */
  readonly questions: ClientRequests;
  /** What the cluster knows happened to `targets` and the lists after `position`; rejects when it cannot tell. */
  since(targets: readonly SubscriptionTarget[], position: number): Promise<SinceReport>;
  /**
   * Moves `events` up to a position reserved in the cluster's order once every event handed out
   * before it has reached this broker (what arrives meanwhile is delivered, so a resumption holds
   * it); never rejects: when the cluster cannot say, the clock stays.
   */
  catchUp(): Promise<void>;
  /** The client form of a subscribed target's URI. */
  exposeUri(target: SubscriptionTarget): string;
  /** The host clock's time (ms). */
  now(): number;
  /** A request came for the session (its record's last-seen time). */
  touched(session: LegacySession): void;
  /** The client set its log level (kept in its record). */
  logLevelSet(session: LegacySession, level: LogLevel): void;
  /** A stream was attached to the session (`true`), or its stream closed and none is attached (`false`): the idle timer runs only while none is. */
  streamAttached(session: LegacySession, attached: boolean): void;
}

export class LegacySession implements NotificationSink, LegacySessionPort {
  logLevel: LogLevel | undefined;
  /** Which of a backend's requests (sampling, elicitation, roots) the client can answer, from its declared capabilities. */
  supports: InteractionSupport = NO_SUPPORT;
  /** Requests in flight, by JSON-RPC id, for `notifications/cancelled`. */
  private inflight: Map<string | number, AbortController> | undefined;
  private stream: NotificationWriter | undefined;
  /** The newest event id written to a stream; later ones were produced while none was attached. */
  private written: EventId;
  /**
   * The newest `historyLimit` events, as a ring: event n (counting from 0) sits at slot
   * `n % historyLimit`. A resource update of the cluster is kept as its URI (its id: the position
   * beside it, local 0), and encoded again if replayed: kept history outlives young-generation GCs,
   * and whole notifications (with their encoded frames, ~250 B each) made V8 promote that much per
   * delivery, so a broker at 5k updates/s ran a full GC every ~7 s (pauses up to 17 ms). Other
   * events (list changes, the broker's own, rare) are kept whole. Created with the first event:
   * most sessions are idle.
   */
  private history: { readonly positions: number[]; readonly events: (string | PreparedNotification)[] } | undefined;
  /** Events remembered so far. */
  private remembered = 0;
  /**
   * The history holds every event of this session after this id: the newest one trimmed from it,
   * or (none trimmed yet) where this session began here (created, or adopted from another instance).
   * A trimmed update is kept as its position alone (see `coveredId`).
   */
  private covered: EventId | number;
  /** Live events held while a resumption is being read (they follow what it announces). */
  private held: PreparedNotification[] | undefined;
  /** Warnings for the client (the data of each), sent once a stream is attached and resumed (see `tellOnAttach`). */
  private untold: Record<string, unknown>[] | undefined;
  private nextReply = 0;
  /** Operations waiting for the actor's answer (created on first use: most sessions are idle). */
  private replies: Map<number, { resolve: () => void; reject: (error: BrokerError) => void }> | undefined;

  constructor(
    readonly id: string,
    readonly principal: string,
    readonly actor: Actor<typeof legacySessionMachine>,
    private readonly env: SessionEnv,
    /** Which holding of the session this is (see `SessionRecord.epoch`): a newer one elsewhere supersedes it. */
    readonly epoch = 1,
    /** The protocol revision `initialize` negotiated. */
    readonly protocolVersion = "2025-11-25",
  ) {
    const start = env.events.next();
    this.covered = start;
    this.written = start;
  }

  /** The actor answered operation `replyTo` (its host routes the actor's `reply` effects here). */
  settle(replyTo: number, error: BrokerError | undefined): void {
    const waiter = this.replies?.get(replyTo);
    this.replies?.delete(replyTo);
    if (this.replies?.size === 0) this.replies = undefined; // idle sessions hold no empty maps
    if (error === undefined) waiter?.resolve();
    else waiter?.reject(error);
  }

  get closed(): boolean {
    // The state value compared as it is: `snapshot.matches` allocated ~1.3 KB a call (sampled
    // allocation profile of the subscribe bench), and this is read twice per subscribe.
    const snapshot = this.actor.getSnapshot();
    return snapshot.status !== "active" || snapshot.value !== "active";
  }

  /** The actor failed: whoever waits for an answer gets `error`. */
  failPending(error: BrokerError): void {
    const waiting = this.replies;
    this.replies = undefined;
    for (const waiter of waiting?.values() ?? []) waiter.reject(error);
  }

  /**
   * Asks the client `method` during one of its calls, on that call's stream (`send` writes there),
   * and resolves with its answer (see `ClientRequests`). A session that moved to another member
   * can still be asked during a call whose stream is here: its answer finds its way back.
   */
  askClient(send: Parameters<ClientRequests["ask"]>[1], method: InteractionMethod, params: Record<string, unknown>, signal: AbortSignal): Promise<Record<string, unknown>> {
    const snapshot = this.actor.getSnapshot();
    if (snapshot.status === "error" || snapshot.value === "closing" || snapshot.value === "closed") return Promise.reject(new ProtocolError(-32603, `${method} was not answered: the client's session ended.`));
    return this.env.questions.ask(this, send, method, params, signal);
  }

  /** A JSON-RPC response the client sent: true when it answered something this member asked of it. */
  clientAnswered(message: Record<string, unknown>): boolean {
    return this.env.questions.answer(message, this);
  }

  /** Whether the broker waits for the client's answer to anything. */
  hasOpenQuestions(): boolean {
    return this.env.questions.hasOpen(this);
  }

  /** The session ended: what the broker asked of the client fails. */
  failAsked(reason: string): void {
    this.env.questions.failSession(this, reason);
  }

  /** Tracks a request in flight until `done`, so `notifications/cancelled` can abort it. */
  trackRequest(requestId: string | number, abort: AbortController): () => void {
    const inflight = (this.inflight ??= new Map());
    inflight.set(requestId, abort);
    return () => {
      inflight.delete(requestId);
      if (inflight.size === 0 && this.inflight === inflight) this.inflight = undefined;
      // Its idle time counts from the answer: a call may outlast `sessionIdleMs`.
      this.lastActive = this.env.now();
    };
  }

  /** A request of it is in flight (see `trackRequest`): the idle timer does not end it meanwhile. */
  get busy(): boolean {
    return this.inflight !== undefined;
  }

  /** The client sent `notifications/cancelled` for a request. */
  cancelRequest(requestId: string | number): void {
    this.inflight?.get(requestId)?.abort();
  }

  /** Subscribed client URIs. */
  subscriptions(): string[] {
    return Object.keys(this.actor.getSnapshot().context.subscriptions);
  }

  subscribe(uri: string): Promise<void> {
    return this.ask((replyTo) => this.actor.send({ type: "subscription.add", uri, replyTo }));
  }

  unsubscribe(uri: string): Promise<void> {
    return this.ask((replyTo) => this.actor.send({ type: "subscription.remove", uri, replyTo }));
  }

  setLogLevel(level: LogLevel): void {
    this.logLevel = level;
    this.env.logLevelSet(this, level);
  }

  /** When a request last came for it here (the host clock's ms; 0: none since it came to this member). */
  lastActive = 0;

  /** Whether its standalone stream is open here. */
  get streaming(): boolean {
    return this.stream !== undefined && !this.stream.closed;
  }

  /**
   * Any request on the session: it counts as active from now on. The idle timer (which runs only
   * while no stream is attached) is not restarted here: when it runs out, the host arms it again
   * for what is left since the last request (an event to the actor per request, to restart it,
   * was a macrostep: a quarter of the actor's work per subscribe). The record's last-seen time is
   * renewed too.
   */
  touch(): void {
    const now = this.env.now();
    this.lastActive = now;
    // The record's last-seen time (what the console shows) to the second: a write per request
    // was a Redis command per request.
    if (now - this.lastRecorded < LAST_SEEN_RESOLUTION_MS) return;
    this.lastRecorded = now;
    this.env.touched(this);
  }

  /** When its record's last-seen time was last written (the host clock's ms). */
  private lastRecorded = -Infinity;

  /** Resolves once the session's actor has stopped (ended, handed off or failed), its effects performed. */
  ended(): Promise<void> {
    if (this.actor.getSnapshot().status !== "active") return Promise.resolve();
    return new Promise((resolve) => {
      this.actor.subscribe({ complete: () => resolve(), error: () => resolve() });
    });
  }

  close(reason: string): void {
    this.stream?.close();
    this.actor.send({ type: "session.close", reason });
  }

  /**
   * The session leaves this member without ending (another member holds it now, or this one
   * stops): its stream ends, so its client reconnects; what it holds stays held in the registry.
   */
  handOff(reason: string): void {
    this.stream?.close(HAND_OFF_RETRY_MS);
    this.actor.send({ type: "session.handOff", reason });
  }

  deliver(notification: PreparedNotification): void {
    this.remember(notification);
    if (this.held !== undefined) {
      this.held.push(notification);
      return;
    }
    if (this.stream === undefined) return;
    this.stream.write(notification);
    this.written = notification.id;
  }

  /**
   * Attaches the standalone GET stream; a newer GET replaces an older one (a client reconnecting
   * while its old connection is half-open must not be locked out), so each event still goes on
   * exactly one stream. With `lastEventId`, sends what the client missed (see the class comment);
   * an id not in the broker's form counts as unknown: everything once. Without it, sends what was
   * produced while no stream was attached, or, when it replaces a stream that looked open,
   * everything once (what went onto the old one may be lost). Resolves once the stream is live.
   */
  attachStream(stream: NotificationWriter, lastEventId: string | undefined): Promise<void> {
    const attached = this.attach(stream, lastEventId);
    if (this.untold === undefined) return attached;
    return attached.then(() => {
      const untold = this.untold;
      if (untold === undefined || this.stream !== stream) return;
      this.untold = undefined;
      // After what the stream resumed with, at ids after it: a client that broke off before them resumes before them.
      for (const data of untold) this.deliver(PreparedNotification.brokerMessage("warning", data, this.env.events.next()));
    });
  }

  /**
   * A warning for the client that no stream can carry yet (something happened to the session while
   * no broker instance held it): sent once a stream is attached, after what it resumes with.
   */
  tellOnAttach(data: Record<string, unknown>): void {
    (this.untold ??= []).push(data);
  }

  private attach(stream: NotificationWriter, lastEventId: string | undefined): Promise<void> {
    if (this.closed) {
      // It left this member meanwhile (another adopted it): the client reconnects, to its holder.
      stream.close(HAND_OFF_RETRY_MS);
      return Promise.resolve();
    }
    const previous = this.stream;
    // Read before closing it: a closed stream reports closed at once.
    const replacesOpen = previous !== undefined && !previous.closed;
    this.stream = stream;
    previous?.close();
    this.env.streamAttached(this, true);
    stream.onClose(() => {
      if (this.stream !== stream) return;
      this.stream = undefined;
      this.env.streamAttached(this, false);
    });
    const given = lastEventId === undefined || lastEventId.trim() === "" ? undefined : lastEventId.trim();
    const parsed = given === undefined ? undefined : parseEventId(given);
    // The stream starts with an event id (SEP-1699): a client that loses it before any event
    // arrives can still resume with Last-Event-ID, instead of the broker taking what it wrote onto
    // the dead connection as received. The id is where this stream starts from: what the client
    // said it had seen, else what went onto its earlier stream.
    if (stream.prime !== undefined && this.protocolVersion >= PRIMING_SINCE) stream.prime(formatEventId(parsed ?? this.written));
    if (given === undefined && replacesOpen) {
      this.renotify(stream);
      return Promise.resolve();
    }
    const last = given === undefined ? this.written : parsed;
    if (last === undefined) {
      this.renotify(stream);
      return Promise.resolve();
    }
    if (!isAfter(this.coveredId(), last) && !isAfter(last, this.latest())) {
      this.replay(stream, last);
      return Promise.resolve();
    }
    return this.resumeFromCluster(stream, last);
  }

  /** Writes the history's events after `last` (the history covers it). */
  private replay(stream: NotificationWriter, last: EventId): void {
    const history = this.history;
    if (history !== undefined) {
      for (let n = Math.max(0, this.remembered - this.env.historyLimit); n < this.remembered; n++) {
        const slot = n % this.env.historyLimit;
        const event = history.events[slot];
        if (event === undefined) continue;
        const notification = typeof event === "string" ? PreparedNotification.resourceUpdated(event, { position: history.positions[slot] ?? 0, local: 0 }) : event;
        if (isAfter(notification.id, last)) stream.write(notification);
      }
    }
    this.written = this.latest();
  }

  /**
   * The history does not cover `last` (this session came from another instance, or the gap is
   * longer than the history): the cluster says what was updated since. Live events wait meanwhile,
   * then go out merged with what it says in position order; what nobody can tell follows, once.
   */
  private async resumeFromCluster(stream: NotificationWriter, last: EventId): Promise<void> {
    this.held = [];
    const targets = Object.values(this.actor.getSnapshot().context.subscriptions);
    let report: SinceReport | undefined;
    try {
      report = await this.env.since(targets, last.position);
    } catch {
      report = undefined;
    }
    // Nothing goes out before everything handed out so far has reached this broker (held with the
    // rest): the stamps came from Redis, which this broker's bus may lag, and a list change still on
    // its way would otherwise follow the updates told, with a lower id (a client that broke off
    // between resumed past it). What nobody can tell is then announced at an id after all of it:
    // resumed from that id, the client is told what came later, and not those announcements again
    // (the watches they are about began before it).
    await this.env.catchUp();
    const held = this.held;
    this.held = undefined;
    if (this.stream !== stream) {
      // Replaced meanwhile (the newer stream resumes for itself) or closed: the held events stay remembered.
      return;
    }
    if (report === undefined) {
      for (const notification of held) stream.write(notification);
      this.renotify(stream);
      return;
    }
    const told = [
      ...report.updated.map(({ target, position }) => PreparedNotification.resourceUpdated(this.env.exposeUri(target), { position, local: 0 })),
      ...report.lists.map(({ list, position }) => PreparedNotification.listChanged(list, { position, local: 0 })),
    ];
    const late = new Set(report.unknown.map((target) => PreparedNotification.resourceUpdated(this.env.exposeUri(target), this.env.events.next())));
    for (const notification of resumeOrder(told, held, [...late])) {
      // What nobody could tell is made up here: remembered, as live events are on delivery.
      if (late.has(notification)) this.remember(notification);
      stream.write(notification);
      this.written = notification.id;
    }
  }

  /**
   * The client may have missed anything: every subscription counts as updated once and every list
   * as changed (an extra notification is harmless, a missed one is not).
   */
  private renotify(stream: NotificationWriter): void {
    const notifications = [
      ...this.subscriptions().map((uri) => PreparedNotification.resourceUpdated(uri, this.env.events.next())),
      ...LIST_NAMES.map((list) => PreparedNotification.listChanged(list, this.env.events.next())),
    ];
    for (const notification of notifications) {
      this.remember(notification);
      stream.write(notification);
    }
    this.written = this.latest();
  }

  /** The newest event id this session has had. */
  private latest(): EventId {
    const history = this.history;
    // The history exists from the first event on (none is kept with a limit of 0).
    if (history === undefined || this.remembered === 0) return this.coveredId();
    const slot = (this.remembered - 1) % this.env.historyLimit;
    const event = history.events[slot];
    return typeof event === "string" ? { position: history.positions[slot] ?? 0, local: 0 } : (event?.id ?? this.coveredId());
  }

  /**
   * This member's history of the session holds everything after cluster position `position` (an
   * adopted session: its interest was subscribed on the bus before `position` was read). Until
   * then it covered only what this member's clock had passed on, which lags the cluster on a member
   * that delivers little: a Last-Event-ID from the previous holder between the two was taken as
   * covered, replayed from a history without those updates, and they were lost. Undefined: not known.
   */
  coversFrom(position: number | undefined): void {
    if (position === undefined) {
      // Not known (Redis did not answer): the history covers nothing, every resumption asks the cluster.
      this.covered = Number.MAX_SAFE_INTEGER;
      return;
    }
    const from: EventId = { position, local: 0 };
    if (isAfter(from, this.coveredId())) this.covered = position;
    if (isAfter(from, this.written)) this.written = from;
  }

  /** Keeps the newest `historyLimit` events: once the ring is full, the oldest event's slot takes the new one. */
  /** `covered` as an event id (a position alone is a cluster event's: local 0). */
  private coveredId(): EventId {
    return typeof this.covered === "number" ? { position: this.covered, local: 0 } : this.covered;
  }

  private remember(notification: PreparedNotification): void {
    const limit = this.env.historyLimit;
    if (limit === 0) {
      this.covered = notification.id;
      return;
    }
    const history = (this.history ??= { positions: [], events: [] });
    const slot = this.remembered++ % limit;
    if (this.remembered > limit) {
      const old = history.events[slot];
      // A trimmed update is kept as its position (no object per delivery on the hot path). Coverage
      // only moves on: an update that arrived after an adoption with an older position (it was in
      // flight) does not extend it back (see `coversFrom`).
      const trimmed = typeof old === "string" ? (history.positions[slot] ?? 0) : (old?.id ?? this.covered);
      if (isAfter(typeof trimmed === "number" ? { position: trimmed, local: 0 } : trimmed, this.coveredId())) this.covered = trimmed;
    }
    const uri = notification.id.local === 0 ? notification.bareUpdatedUri : undefined;
    history.positions[slot] = notification.id.position;
    history.events[slot] = uri ?? notification;
  }

  private ask(send: (replyTo: number) => void): Promise<void> {
    // A stopped actor drops events: the request would never be answered. It left this member (a
    // request that found it just before another member took it over) or it ended.
    const snapshot = this.actor.getSnapshot();
    if (snapshot.status !== "active") return Promise.reject(snapshot.value === "handedOff" ? movedError() : closedError());
    const replyTo = ++this.nextReply;
    const replies = (this.replies ??= new Map());
    const promise = new Promise<void>((resolve, reject) => replies.set(replyTo, { resolve, reject }));
    send(replyTo);
    return promise;
  }
}
