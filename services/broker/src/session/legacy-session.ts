import type { BrokerError } from "@mcp-broker/shared";
import type { Actor } from "xstate";
import type { LogLevel } from "../routing/request-context.js";
import type { LegacySessionPort } from "../routing/dispatcher.js";
import type { NotificationSink } from "../fanout/interest-table.js";
import type { legacySessionMachine } from "./legacy-session-machine.js";
import { PreparedNotification } from "../fanout/prepared-notification.js";

const LIST_NAMES = ["tools", "prompts", "resources"] as const;
/** How many standalone-stream events a session keeps for `Last-Event-ID` resumption by default. */
export const DEFAULT_HISTORY = 64;
/** An event id as the broker writes it (`String(n)`): decimal digits, no sign, no leading zero. */
const EVENT_ID = /^(?:0|[1-9]\d{0,15})$/;

/** Where a session's unsolicited notifications go: its standalone SSE stream, or stdout in stdio mode. */
export interface NotificationWriter {
  readonly closed: boolean;
  /** Writes the notification with its own event id (`notification.eventId`). */
  write(notification: PreparedNotification): void;
  onClose(listener: () => void): void;
  close(): void;
}

/**
 * The I/O side of one legacy session: its standalone SSE stream, the event history for
 * resumption, and the promise plumbing between requests and the session actor, which owns the
 * state. Each notification goes on the standalone stream only (exactly one stream), with its
 * event id, which increases within the session (ids are process-wide, so not consecutively).
 */
export class LegacySession implements NotificationSink, LegacySessionPort {
  logLevel: LogLevel | undefined;
  /** Requests in flight, by JSON-RPC id, for `notifications/cancelled`. */
  private inflight: Map<string | number, AbortController> | undefined;
  private stream: NotificationWriter | undefined;
  /** The newest event id written to a stream; later ones were produced while none was attached. */
  private written = 0;
  /**
   * The newest `historyLimit` events, as a ring: event n (counting from 0) has its id at
   * `ids[n % historyLimit]` and the event beside it. A resource update is kept as its URI, and
   * encoded again if replayed: kept history outlives young-generation GCs, and whole notifications
   * (with their encoded frames, ~250 B each) made V8 promote that much per delivery, so a broker
   * at 5k updates/s ran a full GC every ~7 s (pauses up to 17 ms). Other events (list changes,
   * rare) are kept whole. Created with the first event: most sessions are idle.
   */
  private history: { readonly ids: number[]; readonly events: (string | PreparedNotification)[] } | undefined;
  /** Events remembered so far. */
  private remembered = 0;
  /** The newest event id no longer in the history: a client that saw less than this missed some. */
  private trimmed = 0;
  private nextReply = 0;
  /** Operations waiting for the actor's answer (created on first use: most sessions are idle). */
  private replies: Map<number, { resolve: () => void; reject: (error: BrokerError) => void }> | undefined;

  /**
   * @param historyLimit how many standalone-stream events the session keeps for `Last-Event-ID`
   *   resumption (`server.resumeHistory`); older gaps get the conservative re-notification.
   */
  constructor(
    readonly id: string,
    readonly principal: string,
    readonly actor: Actor<typeof legacySessionMachine>,
    private readonly historyLimit = DEFAULT_HISTORY,
  ) {}

  /** The actor answered operation `replyTo` (its host routes the actor's `reply` effects here). */
  settle(replyTo: number, error: BrokerError | undefined): void {
    const waiter = this.replies?.get(replyTo);
    this.replies?.delete(replyTo);
    if (this.replies?.size === 0) this.replies = undefined; // idle sessions hold no empty maps
    if (error === undefined) waiter?.resolve();
    else waiter?.reject(error);
  }

  get closed(): boolean {
    return this.actor.getSnapshot().status !== "active" || this.actor.getSnapshot().matches("closing");
  }

  /** The actor failed: whoever waits for an answer gets `error`. */
  failPending(error: BrokerError): void {
    const waiting = this.replies;
    this.replies = undefined;
    for (const waiter of waiting?.values() ?? []) waiter.reject(error);
  }

  /** Tracks a request in flight until `done`, so `notifications/cancelled` can abort it. */
  trackRequest(requestId: string | number, abort: AbortController): () => void {
    const inflight = (this.inflight ??= new Map());
    inflight.set(requestId, abort);
    return () => {
      inflight.delete(requestId);
      if (inflight.size === 0 && this.inflight === inflight) this.inflight = undefined;
    };
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
  }

  /** Any request on the session: restarts the idle timer. */
  touch(): void {
    this.actor.send({ type: "session.touch" });
  }

  close(reason: string): void {
    this.stream?.close();
    this.actor.send({ type: "session.close", reason });
  }

  deliver(notification: PreparedNotification): void {
    this.remember(notification);
    if (this.stream === undefined) return;
    this.stream.write(notification);
    this.written = notification.eventId;
  }

  /**
   * Attaches the standalone GET stream; a newer GET replaces an older one (a client reconnecting
   * while its old connection is half-open must not be locked out), so each event still goes on
   * exactly one stream. With `lastEventId`, replays what the client missed, and when the history
   * no longer covers the gap re-notifies every subscription (an extra `updated` is harmless, a
   * missed one is not). Without it, sends what was produced while no stream was attached, or,
   * when it replaces a stream that looked open, everything once (see `renotify`).
   */
  attachStream(stream: NotificationWriter, lastEventId: string | undefined): void {
    const previous = this.stream;
    // Read before closing it: a closed stream reports closed at once.
    const replacesOpen = previous !== undefined && !previous.closed;
    this.stream = stream;
    previous?.close();
    this.actor.send({ type: "stream.opened" });
    stream.onClose(() => {
      if (this.stream !== stream) return;
      this.stream = undefined;
      this.actor.send({ type: "stream.closed" });
    });
    const resumeFrom = lastEventId === undefined || lastEventId.trim() === "" ? undefined : lastEventId;
    if (resumeFrom !== undefined) this.replay(stream, resumeFrom);
    // Replacing a stream that looked open, without saying what it received: what went onto the
    // old one may be lost, so the client is told about everything once.
    else if (replacesOpen) this.renotify(stream);
    else this.replay(stream, String(this.written));
  }

  private replay(stream: NotificationWriter, lastEventId: string): void {
    // Only an id written as the broker writes them counts: Number() read `0x10` as 16 and `-0` as
    // 0 (the whole history). Anything else is unknown, and gets the conservative re-notification.
    const last = EVENT_ID.test(lastEventId) ? Number(lastEventId) : Number.NaN;
    const latest = this.latest();
    if (!Number.isSafeInteger(last) || last < this.trimmed || last > latest) {
      this.renotify(stream);
      return;
    }
    const history = this.history;
    if (history !== undefined) {
      for (let n = Math.max(0, this.remembered - this.historyLimit); n < this.remembered; n++) {
        const slot = n % this.historyLimit;
        const id = history.ids[slot] ?? 0;
        const event = history.events[slot];
        if (id > last && event !== undefined) stream.write(typeof event === "string" ? PreparedNotification.resourceUpdated(event, id) : event);
      }
    }
    this.written = latest;
  }

  /**
   * The client may have missed anything: every subscription counts as updated once and every list
   * as changed (an extra notification is harmless, a missed one is not).
   */
  private renotify(stream: NotificationWriter): void {
    const notifications = [
      ...this.subscriptions().map((uri) => PreparedNotification.resourceUpdated(uri)),
      ...LIST_NAMES.map((list) => PreparedNotification.listChanged(list)),
    ];
    for (const notification of notifications) {
      this.remember(notification);
      stream.write(notification);
    }
    this.written = this.latest();
  }

  /** The newest event id this session has had. */
  private latest(): number {
    // The history exists from the first event on (none is kept with a limit of 0).
    return this.history?.ids[(this.remembered - 1) % this.historyLimit] ?? this.trimmed;
  }

  /** Keeps the newest `historyLimit` events: once the ring is full, the oldest event's slot takes the new one. */
  private remember(notification: PreparedNotification): void {
    if (this.historyLimit === 0) {
      this.trimmed = notification.eventId;
      return;
    }
    const history = (this.history ??= { ids: [], events: [] });
    const slot = this.remembered++ % this.historyLimit;
    if (this.remembered > this.historyLimit) this.trimmed = history.ids[slot] ?? this.trimmed;
    history.ids[slot] = notification.eventId;
    history.events[slot] = notification.updatedUri() ?? notification;
  }

  private ask(send: (replyTo: number) => void): Promise<void> {
    const replyTo = ++this.nextReply;
    const replies = (this.replies ??= new Map());
    const promise = new Promise<void>((resolve, reject) => replies.set(replyTo, { resolve, reject }));
    send(replyTo);
    return promise;
  }
}
