import type { ServerResponse } from "node:http";
import { CHANNEL, type Bus, type BusMessage, type CatalogKind, type Clock, type TimerHandle } from "@mcp-broker/shared";
import type { CatalogDiff } from "../catalog/catalog.js";
import { connectionHeader } from "./h2c.js";

/** How often an open feed tells the cluster it listens (and keeps its streams alive). */
const LISTEN_EVERY_MS = 5_000;
/** How long one announcement lasts: a console that went away stops costing the watchers after this. */
const LISTEN_TTL_MS = 15_000;
/** Open feeds per broker, at most. */
const MAX_STREAMS = 32;

/**
 * The operator console's live feed (`GET /console/api/feed`, Server-Sent Events), cluster-wide:
 * - `update`: backend updates, from whichever member watches the backend (they copy them to
 *   `CHANNEL.consoleFeed` while a console announces itself, see `ConsoleFeedTap`), by the broker's
 *   URI, at most a few hundred per member per quarter second (`dropped` counts the rest);
 * - `list_changed`: a list of the aggregated catalog changed, with its diff by the broker's names
 *   (every member applies every catalog change, so this broker's own catalog tells).
 * Nothing is subscribed, announced or copied while no feed is open.
 */
export class ConsoleFeed {
  private readonly streams = new Set<ServerResponse>();
  private timer: TimerHandle | undefined;

  constructor(
    private readonly deps: {
      bus: Bus;
      clock: Clock;
      instanceId: string;
      /** The broker's URI for a backend's resource. */
      exposeUri: (backendId: string, uri: string) => string;
    },
  ) {}

  /** Opens a feed on `res`; false when this broker has as many open as it takes. */
  open(res: ServerResponse): boolean {
    if (this.streams.size >= MAX_STREAMS) return false;
    // Gone before it opened: nothing to hear its close.
    if (res.destroyed) return true;
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-store", ...connectionHeader(res.req, "keep-alive"), "x-accel-buffering": "no" });
    res.write(event("hello", { instance: this.deps.instanceId }));
    this.streams.add(res);
    res.on("close", () => {
      this.streams.delete(res);
      if (this.streams.size === 0) this.stop();
    });
    if (this.streams.size === 1) this.start();
    return true;
  }

  /** Updates a watching member copied for the consoles. */
  receive(message: Extract<BusMessage, { kind: "console.updates" }>): void {
    if (this.streams.size === 0) return;
    const updates = message.updates.map(({ backendId, uri, at }) => ({ backend: backendId, uri: this.deps.exposeUri(backendId, uri), at }));
    this.send(event("update", { instance: message.origin, updates, dropped: message.dropped }));
  }

  /** A list of the aggregated catalog changed (see `CatalogService.onListChanged`). */
  listChanged(list: string, diffs: ReadonlyMap<CatalogKind, CatalogDiff>): void {
    if (this.streams.size === 0) return;
    this.send(event("list_changed", { list, at: this.deps.clock.now(), changes: Object.fromEntries(diffs) }));
  }

  close(): void {
    for (const res of this.streams) res.end();
    this.streams.clear();
    this.stop();
  }

  private send(frame: string): void {
    for (const res of this.streams) {
      // A console that does not read is cut off rather than buffered for.
      if (res.writableLength > 1024 * 1024) res.destroy();
      else res.write(frame);
    }
  }

  private start(): void {
    void this.deps.bus.subscribe(CHANNEL.consoleFeed).catch(() => undefined);
    const announce = (): void => {
      void this.deps.bus.publish(CHANNEL.console, { kind: "console.listen", v: 1, origin: this.deps.instanceId, ttlMs: LISTEN_TTL_MS }).catch(() => undefined);
      this.timer = this.deps.clock.setTimeout(() => {
        this.send(": keep-alive\n\n");
        announce();
      }, LISTEN_EVERY_MS);
    };
    announce();
  }

  private stop(): void {
    if (this.timer === undefined) return;
    this.deps.clock.clearTimeout(this.timer);
    this.timer = undefined;
    void this.deps.bus.unsubscribe(CHANNEL.consoleFeed).catch(() => undefined);
  }
}

function event(name: string, data: unknown): string {
  return `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
}
