import { CHANNEL, type Bus, type Clock, type ListName, type ResourceUpdatedMessage, type TimerHandle } from "@mcp-broker/shared";
import type { Logger } from "@mcp-broker/member";
import { EventClock } from "./event-ids.js";
import { InterestTable, type NotificationSink, type SubscriptionTarget } from "./interest-table.js";
import { PreparedNotification } from "./prepared-notification.js";

/**
 * How long the re-announcements a bus gap calls for wait for anything about the same resource to
 * arrive first (the watcher re-publishes what it watches when its own connection comes back, as
 * after a Redis restart): one notification per subscriber, not two.
 */
export const GAP_SETTLE_MS = 1_000;

/** How the fan-out names a backend resource to clients, and which backends it knows. */
export interface ExposedNames {
  exposeUri(backendId: string, uri: string): string;
  hasBackend(backendId: string): boolean;
}

/**
 * The last step of a backend update: from a bus message (another member's, or this member's own a
 * tick after publishing) to the streams of the sessions interested in its channel. Each
 * notification is prepared once (`PreparedNotification`) and written to every interested sink;
 * the interest table says who is interested. List changes and the re-announcements a bus gap calls
 * for take the same way out.
 */
export class Fanout {
  readonly interest: InterestTable;
  /** The ids of what goes out (see `EventId`). */
  readonly events = new EventClock();
  /** Sinks that hear list changes: every legacy session, and listen streams that asked for them. */
  private readonly listeners = new Set<NotificationSink>();
  /** Notifications written to sessions and listen streams since start (for metrics). */
  private readonly delivered = { resourceUpdated: 0, listChanged: 0 };
  /** The last update that was published under several keys (see `deliverOnce`). */
  private multiKeyUpdate: { position: number; notification: PreparedNotification; delivered: Set<NotificationSink> } | undefined;
  /** After a bus gap: channel → its target and the sinks still owed a re-announcement (see `gap`). */
  private owed = new Map<string, { target: SubscriptionTarget; sinks: Set<NotificationSink> }>();
  private owedTimer: TimerHandle | undefined;

  constructor(
    private readonly deps: {
      bus: Bus;
      clock: Clock;
      logger: Logger;
      names: ExposedNames;
      /** How long a bus channel stays subscribed after its last local subscriber left. */
      releaseGraceMs: number;
      /** Hears, once per backend update, how long it took from arrival to this fan-out (ms). */
      onBusLatency?: (ms: number) => void;
    },
  ) {
    this.interest = new InterestTable({
      bus: deps.bus,
      clock: deps.clock,
      graceMs: deps.releaseGraceMs,
      onError: (error) => deps.logger.warn({ err: (error as Error).message }, "bus subscription failed"),
    });
  }

  /** `sink` hears list changes from now on (`wants` says which lists). */
  listen(sink: NotificationSink): void {
    this.listeners.add(sink);
  }

  forget(sink: NotificationSink): void {
    this.listeners.delete(sink);
  }

  /**
   * A resource update for the sinks interested in `channel`. `message` is decoded and valid (the
   * Bus contract); the hot path does not validate it again.
   */
  receive(channel: string, message: ResourceUpdatedMessage): void {
    if (!this.deps.names.hasBackend(message.backendId)) {
      // Another instance configured with a backend this one does not know: not ours to deliver.
      this.deps.logger.warn({ channel, backend: message.backendId }, "bus message for an unknown backend dropped");
      return;
    }
    if (this.owed.size > 0) this.owed.delete(channel);
    const sinks = this.interest.of(channel);
    if (sinks === undefined || sinks.size === 0) return;
    if (message.keys > 1) {
      this.deliverOnce(message, sinks);
      return;
    }
    this.deps.onBusLatency?.(this.deps.clock.now() - message.at);
    const notification = PreparedNotification.resourceUpdated(this.deps.names.exposeUri(message.backendId, message.uri), this.events.cluster(message.position), message.params);
    for (const sink of sinks) sink.deliver(notification);
    this.delivered.resourceUpdated += sinks.size;
  }

  /**
   * An update this member could not publish (Redis away) reaches its own sessions all the same,
   * once per sink, as an event of this broker's.
   */
  receiveUnpublished(backendId: string, keys: readonly string[], uri: string, params?: Record<string, unknown>): void {
    const notification = PreparedNotification.resourceUpdated(this.deps.names.exposeUri(backendId, uri), this.events.next(), params);
    const delivered = new Set<NotificationSink>();
    for (const key of keys) {
      if (this.owed.size > 0) this.owed.delete(CHANNEL.resource(backendId, key));
      for (const sink of this.interest.of(CHANNEL.resource(backendId, key)) ?? []) {
        if (delivered.has(sink)) continue;
        delivered.add(sink);
        sink.deliver(notification);
      }
    }
    this.delivered.resourceUpdated += delivered.size;
  }

  /**
   * An update published under several keys (a sub-resource whose ancestors are subscribed too)
   * arrives once per key, all at one position: a sink subscribed to more than one of them gets it
   * once. Its messages arrive together, so remembering the last such update is enough.
   */
  private deliverOnce(message: ResourceUpdatedMessage, sinks: ReadonlySet<NotificationSink>): void {
    if (this.multiKeyUpdate?.position !== message.position) {
      // Once per backend update, however many of its keys arrive here.
      this.deps.onBusLatency?.(this.deps.clock.now() - message.at);
      const notification = PreparedNotification.resourceUpdated(this.deps.names.exposeUri(message.backendId, message.uri), this.events.cluster(message.position), message.params);
      this.multiKeyUpdate = { position: message.position, notification, delivered: new Set() };
    }
    const { notification, delivered } = this.multiKeyUpdate;
    for (const sink of sinks) {
      if (delivered.has(sink)) continue;
      delivered.add(sink);
      sink.deliver(notification);
      this.delivered.resourceUpdated++;
    }
  }

  /**
   * The bus may have lost messages (it reconnected): every subscribed resource counts as updated
   * once, for every local subscriber. An extra `updated` is harmless, a missed one is not. The
   * re-announcements wait `GAP_SETTLE_MS`: a resource about which anything arrives meanwhile (an
   * update, the watcher's own re-announcement) is covered by that and not announced again.
   */
  gap(): void {
    for (const { target, sinks } of this.interest.all()) {
      const channel = CHANNEL.resource(target.backendId, target.uri);
      const owed = this.owed.get(channel);
      if (owed === undefined) this.owed.set(channel, { target, sinks: new Set(sinks) });
      else for (const sink of sinks) owed.sinks.add(sink);
    }
    if (this.owedTimer !== undefined) return;
    this.owedTimer = this.deps.clock.setTimeout(() => this.payOwed(), GAP_SETTLE_MS);
    this.owedTimer.unref?.();
  }

  private payOwed(): void {
    this.owedTimer = undefined;
    const owed = this.owed;
    this.owed = new Map();
    let targets = 0;
    for (const [channel, { target, sinks }] of owed) {
      const current = this.interest.of(channel);
      if (current === undefined) continue;
      const notification = PreparedNotification.resourceUpdated(this.deps.names.exposeUri(target.backendId, target.uri), this.events.next());
      for (const sink of sinks) {
        if (!current.has(sink)) continue;
        sink.deliver(notification);
        this.delivered.resourceUpdated++;
      }
      targets++;
    }
    this.deps.logger.warn({ resources: targets }, "the bus reconnected: subscribed resources re-announced as updated");
  }

  /**
   * The catalog announced a change to `list`: every sink that asked for it hears it. `position`: the
   * change's cluster position, when it came from the bus in order or was placed in it (else it is an
   * event of this broker's).
   */
  listChanged(list: ListName, position?: number): void {
    const notification = PreparedNotification.listChanged(list, position === undefined ? this.events.next() : this.events.cluster(position));
    for (const sink of this.listeners) {
      if (sink.wants !== undefined && !sink.wants(list)) continue;
      sink.deliver(notification);
      this.delivered.listChanged++;
    }
  }

  /** Notifications written since start, by kind. */
  deliveries(): { resourceUpdated: number; listChanged: number } {
    return { ...this.delivered };
  }

  close(): void {
    if (this.owedTimer !== undefined) this.deps.clock.clearTimeout(this.owedTimer);
    this.owed.clear();
    this.interest.close();
    this.listeners.clear();
  }
}
