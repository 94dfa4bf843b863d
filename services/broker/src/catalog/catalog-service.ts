import { CATALOG_KINDS, type BackendConfig, type BusMessage, type CatalogKind, type CatalogStore, type ListBody, type ListName, type StoredList } from "@mcp-broker/shared";
import { heldNames, type HeldTool, type Logger } from "@mcp-broker/member";
import { BROKER_TOOLS_ID, Catalog, isEmptyDiff, type CatalogDiff } from "./catalog.js";

export function listNameOf(kind: CatalogKind): ListName {
  return kind === "resourceTemplates" ? "resources" : kind;
}

type CatalogChanged = Extract<BusMessage, { kind: "catalog.changed" }>;

/** The lists clients see (their `list_changed` notifications). */
export const LIST_NAMES: readonly ListName[] = ["tools", "prompts", "resources"];

/** How soon a position for unplaced list changes is asked for again after it could not be had. */
const UNPLACED_RETRY_MS = 1_000;

/**
 * This member's view of the cluster catalog: the aggregated lists clients see. It never lists a
 * backend itself: it applies what the cluster catalog stores (reload jobs fetch and store it, see
 * `ListReloader`), for the backends this member's own connection reaches (a call goes over that
 * connection, so a backend it cannot reach has no items here, as before). `onListChanged` fires
 * once per client-visible list whose aggregate really changed.
 *
 * A `catalog.changed` carries the new version's body and is applied at once, as it arrives: the
 * bus brings it in position order with resource updates, so the `list_changed` it causes takes its
 * place in each session's stream by its position. Reads from the store (on connect, after a bus
 * gap) are ordered per backend. A version is applied only when newer than what was applied, so
 * announcements that arrive twice, or after a reconnect's read, change nothing twice.
 *
 * What changes the lists here without a `catalog.changed` (a backend connected or dropped on this
 * member, a read after a gap) is placed in the cluster's order too (`place`): it is applied at a
 * position reserved for it, when every event before that position has been handled here and none
 * after, and announced with that position, as if the cluster had sent it. So every visible change
 * has a position, on every stream in order, and `changedPosition` tells a resumption from any older
 * position that the list changed, and one from the change or later that it did not.
 */
export class CatalogService {
  readonly catalog: Catalog;
  /** Connected backends (by this member's connection) and the stored version applied per kind. */
  private readonly applied = new Map<string, Map<CatalogKind, number>>();
  /** The tools each backend holds back (from its stored tools list). */
  private readonly held = new Map<string, readonly HeldTool[]>();
  private readonly queues = new Map<string, Promise<void>>();
  private applies = 0;
  /** The cluster position of each list's newest visible change (never goes down). */
  private readonly changedAt = new Map<ListName, number>();
  /** Lists changed at a place in the cluster's order nobody knows (Redis or the bus was away), until a later placed position covers it. */
  private readonly unplaced = new Set<ListName>();
  /** A position is being reserved for the unplaced changes. */
  private placingUnplaced = false;
  /** This member serves (see `serving`): its lists are seen from here on. */
  private served = false;
  private readonly backendIds: readonly string[];
  private listeners: ((list: ListName, diffs: Map<CatalogKind, CatalogDiff>, position: number | undefined) => void)[] = [];

  constructor(
    backends: readonly BackendConfig[],
    private readonly deps: {
      logger: Logger;
      store: CatalogStore;
      /** The broker's own tools (`metaTools`), listed before every backend's. */
      ownTools?: readonly Record<string, unknown>[];
      /**
       * Runs a change at a position reserved in the cluster's order, once every event before it has
       * been handled here and none after it (see `BusBarrier.place`); rejects, without running it,
       * when Redis or the bus cannot say. Without it, such changes are applied at once, unplaced.
       */
      place?: (run: (position: number) => void) => Promise<number>;
    },
  ) {
    this.backendIds = backends.map((b) => b.id);
    const own = deps.ownTools ?? [];
    this.catalog = new Catalog([...(own.length > 0 ? [{ id: BROKER_TOOLS_ID, prefix: false }] : []), ...backends.map((b) => ({ id: b.id, prefix: b.prefix }))]);
    if (own.length > 0) this.catalog.replace("tools", BROKER_TOOLS_ID, own);
  }

  /**
   * `listener` hears each client-visible list whose aggregate really changed, once per change, with
   * the cluster position of the change: the bus's, or the one reserved for a change made here (a
   * backend connected or dropped on this member, a read after a gap); undefined when such a change
   * could not be placed (Redis or the bus away).
   */
  onListChanged(listener: (list: ListName, diffs: Map<CatalogKind, CatalogDiff>, position: number | undefined) => void): void {
    this.listeners.push(listener);
  }

  /**
   * The cluster position of the newest change clients saw to `list` (0: none since start), for
   * resumption: a client that last saw an older position missed a change. Undefined while a change
   * could not be placed in the cluster's order: nobody can tell who saw it.
   */
  changedPosition(list: ListName): number | undefined {
    return this.unplaced.has(list) ? undefined : (this.changedAt.get(list) ?? 0);
  }

  /** Whether every list of the backend has been applied since it connected (readiness). */
  ready(backendId: string): boolean {
    return this.applied.get(backendId)?.size === CATALOG_KINDS.length;
  }

  /** Whether the backend's list of `kind` has been applied since it connected. */
  listed(backendId: string, kind: CatalogKind): boolean {
    return this.applied.get(backendId)?.has(kind) === true;
  }

  /** Stored lists applied since start (for metrics). */
  reloads(): number {
    return this.applies;
  }

  /**
   * This member begins to serve (after its startup wait). Until now nobody saw its lists: what a
   * resumption is told of a list is the cluster's, its newest stored version applied (at the
   * position the cluster stored it with). From now on the changes this member makes are placed
   * (see `placed`). Serving without some backend listed (down at start), its lists differ from
   * what the cluster stored: they get a position now, so a resumption from before it is told they changed.
   */
  serving(): void {
    if (this.served) return;
    this.served = true;
    if (this.backendIds.every((id) => this.ready(id))) return;
    for (const list of LIST_NAMES) this.unplaced.add(list);
    this.placeUnplaced();
  }

  /** This member's connection to the backend came up: apply what the cluster catalog holds for it. */
  backendConnected(backendId: string): Promise<void> {
    if (!this.applied.has(backendId)) this.applied.set(backendId, new Map());
    return this.refresh(backendId, CATALOG_KINDS);
  }

  /** This member's connection dropped: the backend's items leave this member's lists, at a position of their own. */
  backendDisconnected(backendId: string): void {
    this.applied.delete(backendId);
    this.held.delete(backendId);
    void this.enqueue(backendId, () => this.placed(() => this.catalog.clearBackend(backendId)));
  }

  /** A reload stored new versions (a `catalog.changed` bus message): applied now, those newer than what was applied. */
  changed(message: CatalogChanged): void {
    const applied = this.applied.get(message.backendId);
    if (applied === undefined) return;
    const diffs = new Map<CatalogKind, CatalogDiff>();
    for (const { kind, body, version } of message.lists) {
      if ((applied.get(kind) ?? 0) >= version) continue;
      diffs.set(kind, this.apply(message.backendId, kind, { ...body, version }));
    }
    this.announce(diffs, message.position);
  }

  /**
   * Redis lost the cluster catalog: versions start over there, so the next ones stored are newer
   * than anything applied here. The items stay until then.
   */
  forgetVersions(): void {
    for (const kinds of this.applied.values()) {
      for (const kind of kinds.keys()) kinds.set(kind, 0);
    }
  }

  /**
   * Announcements may have been lost (the bus reconnected): every connected backend's lists are read
   * again, and a change that could not be placed meanwhile gets a position now.
   */
  resync(): Promise<void> {
    this.placeUnplaced();
    return Promise.all([...this.applied.keys()].map((backendId) => this.refresh(backendId, CATALOG_KINDS))).then(() => undefined);
  }

  /** Tools held back by `toolChanges: "hold"` / `pinnedTools`, for `/readyz`. */
  heldTools(): HeldTool[] {
    return [...this.held.values()].flat();
  }

  /** The held tool a client-facing name refers to, if any. */
  heldTool(exposedName: string): HeldTool | undefined {
    return this.heldTools().find((held) => this.catalog.exposeName(held.backendId, held.name) === exposedName);
  }

  /**
   * Reads `kinds` of the backend from the store and applies what is newer (at a position of its
   * own, see `placed`), after whatever is queued for the backend.
   */
  private refresh(backendId: string, kinds: readonly CatalogKind[]): Promise<void> {
    return this.enqueue(backendId, async () => {
      const applied = this.applied.get(backendId);
      if (applied === undefined) return; // disconnected meanwhile
      const newer: [CatalogKind, StoredList][] = [];
      for (const kind of kinds) {
        if (this.applied.get(backendId) !== applied) return; // disconnected meanwhile
        let stored: StoredList | undefined;
        try {
          stored = await this.deps.store.get(backendId, kind);
        } catch (error) {
          this.deps.logger.warn({ backend: backendId, kind, err: (error as Error).message }, "cannot read the cluster catalog");
          continue;
        }
        if (stored === undefined || stored.invalid !== undefined) continue;
        if ((applied.get(kind) ?? 0) >= stored.version) continue;
        newer.push([kind, stored]);
      }
      if (newer.length === 0) return;
      await this.placed(
        () => {
          const diffs = new Map<CatalogKind, CatalogDiff>();
          // A `catalog.changed` may have brought these versions (or newer) while the position was reserved.
          if (this.applied.get(backendId) !== applied) return diffs;
          for (const [kind, stored] of newer) {
            if ((applied.get(kind) ?? 0) < stored.version) diffs.set(kind, this.apply(backendId, kind, stored));
          }
          return diffs;
        },
        new Map(newer.map(([kind, stored]) => [kind, stored.position])),
      );
    });
  }

  /**
   * Makes `change` at a position reserved for it in the cluster's order and announces what it
   * changed with that position. When none can be reserved (Redis or the bus away), the change is
   * made and announced at once, and its lists are unplaced until a later position covers them.
   */
  private async placed(change: () => Map<CatalogKind, CatalogDiff>, storedAt?: ReadonlyMap<CatalogKind, number>): Promise<void> {
    if (!this.served) {
      // Nobody has seen this member's lists yet: a stored version stands at the position the cluster
      // stored it with (see `serving`), and nothing needs a place of its own.
      const diffs = change();
      for (const [kind, position] of storedAt ?? []) if (diffs.has(kind)) this.changedAtLeast(listNameOf(kind), position);
      this.announce(diffs, undefined, false);
      return;
    }
    const place = this.deps.place;
    if (place !== undefined) {
      let ran = false;
      try {
        await place((position) => {
          ran = true;
          this.announce(change(), position);
        });
        return;
      } catch (error) {
        if (ran) throw error;
        this.deps.logger.warn({ err: (error as Error).message }, "cannot place a list change in the cluster's order; resumptions from before it are not exact until it is");
      }
    }
    this.announce(change());
    this.placeUnplaced();
  }

  /**
   * Places a position after the unplaced changes, which stands for them: a client that last saw an
   * older one is told its lists changed (again, if it saw the change itself), one that saw it or
   * later is not. Asked for when a change could not be placed, after every bus gap, and again each
   * `UNPLACED_RETRY_MS` until it is had.
   */
  private placeUnplaced(): void {
    const place = this.deps.place;
    if (place === undefined || this.placingUnplaced || this.unplaced.size === 0) return;
    this.placingUnplaced = true;
    void place((position) => {
      // Every unplaced change went out on the streams here before this position did.
      for (const list of this.unplaced) this.changedAtLeast(list, position);
      this.unplaced.clear();
    })
      .then(
        () => {
          this.placingUnplaced = false;
        },
        (error: unknown) => {
          this.placingUnplaced = false;
          this.deps.logger.warn({ err: (error as Error).message }, "cannot place list changes in the cluster's order yet; trying again");
          // Until it is placed, every resumption here announces everything: tried again, not only at the next gap.
          setTimeout(() => this.placeUnplaced(), UNPLACED_RETRY_MS).unref();
        },
      );
  }

  /** `list` changed at `position` (what a resumption compares with never goes down). */
  private changedAtLeast(list: ListName, position: number): void {
    this.changedAt.set(list, Math.max(this.changedAt.get(list) ?? 0, position));
  }

  private apply(backendId: string, kind: CatalogKind, stored: ListBody & { version: number }): CatalogDiff {
    this.applies++;
    this.applied.get(backendId)?.set(kind, stored.version);
    if (kind === "tools") this.held.set(backendId, stored.gate?.held ?? []);
    const hiddenBefore = new Set(this.catalog.collisions());
    const diff = this.catalog.replace(kind, backendId, stored.items, kind === "tools" ? heldNames(stored) : undefined);
    for (const collision of this.catalog.collisions()) {
      if (!hiddenBefore.has(collision)) this.deps.logger.error({ backend: backendId, kind, collision }, "name collision: an unprefixed backend's item is hidden; set prefix: true on the backend");
    }
    return diff;
  }

  /** Runs `op` after everything queued for the backend; never rejects. */
  private enqueue(backendId: string, op: () => Promise<void>): Promise<void> {
    const run = (this.queues.get(backendId) ?? Promise.resolve()).then(op).catch((error: unknown) => {
      this.deps.logger.error({ backend: backendId, err: (error as Error).message }, "applying the cluster catalog failed");
    });
    this.queues.set(backendId, run);
    void run.then(() => {
      if (this.queues.get(backendId) === run) this.queues.delete(backendId);
    });
    return run;
  }

  /** `seen`: whether clients may have seen the lists before this change (see `serving`). */
  private announce(diffs: Map<CatalogKind, CatalogDiff>, position?: number, seen = true): void {
    const byList = new Map<ListName, Map<CatalogKind, CatalogDiff>>();
    for (const [kind, diff] of diffs) {
      if (isEmptyDiff(diff)) continue;
      const list = listNameOf(kind);
      const entry = byList.get(list) ?? new Map<CatalogKind, CatalogDiff>();
      entry.set(kind, diff);
      byList.set(list, entry);
    }
    for (const [list, listDiffs] of byList) {
      this.deps.logger.debug({ list, position }, "list changed");
      if (position === undefined) {
        if (seen) this.unplaced.add(list);
      } else {
        // Every change of the list before this one came before it on each stream: this position covers them.
        this.changedAtLeast(list, position);
        this.unplaced.delete(list);
      }
      for (const listener of this.listeners) listener(list, listDiffs, position);
    }
  }
}
