import { CATALOG_KINDS, type BackendConfig, type BusMessage, type CatalogKind, type CatalogStore, type ListBody, type ListName, type StoredList } from "@mcp-broker/shared";
import { heldNames, type HeldTool, type Logger } from "@mcp-broker/member";
import { BROKER_TOOLS_ID, Catalog, isEmptyDiff, type CatalogDiff } from "./catalog.js";

export function listNameOf(kind: CatalogKind): ListName {
  return kind === "resourceTemplates" ? "resources" : kind;
}

type CatalogChanged = Extract<BusMessage, { kind: "catalog.changed" }>;

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
 */
export class CatalogService {
  readonly catalog: Catalog;
  /** Connected backends (by this member's connection) and the stored version applied per kind, with its position. */
  private readonly applied = new Map<string, Map<CatalogKind, { version: number; position: number }>>();
  /** The tools each backend holds back (from its stored tools list). */
  private readonly held = new Map<string, readonly HeldTool[]>();
  private readonly queues = new Map<string, Promise<void>>();
  private applies = 0;
  private listeners: ((list: ListName, diffs: Map<CatalogKind, CatalogDiff>, position: number | undefined) => void)[] = [];

  constructor(
    backends: readonly BackendConfig[],
    private readonly deps: {
      logger: Logger;
      store: CatalogStore;
      /** The broker's own tools (`metaTools`), listed before every backend's. */
      ownTools?: readonly Record<string, unknown>[];
    },
  ) {
    const own = deps.ownTools ?? [];
    this.catalog = new Catalog([...(own.length > 0 ? [{ id: BROKER_TOOLS_ID, prefix: false }] : []), ...backends.map((b) => ({ id: b.id, prefix: b.prefix }))]);
    if (own.length > 0) this.catalog.replace("tools", BROKER_TOOLS_ID, own);
  }

  /**
   * `listener` hears each client-visible list whose aggregate really changed, once per change, with
   * the cluster position of the change when it came in order from the bus (undefined for a change
   * made here: a backend connected or dropped on this member, a read after a gap).
   */
  onListChanged(listener: (list: ListName, diffs: Map<CatalogKind, CatalogDiff>, position: number | undefined) => void): void {
    this.listeners.push(listener);
  }

  /** The newest cluster position of any applied version of `list` (0: none), for resumption. */
  appliedPosition(list: ListName): number {
    let newest = 0;
    for (const kinds of this.applied.values()) {
      for (const [kind, { position }] of kinds) if (listNameOf(kind) === list && position > newest) newest = position;
    }
    return newest;
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

  /** This member's connection to the backend came up: apply what the cluster catalog holds for it. */
  backendConnected(backendId: string): Promise<void> {
    if (!this.applied.has(backendId)) this.applied.set(backendId, new Map());
    return this.refresh(backendId, CATALOG_KINDS);
  }

  /** This member's connection dropped: the backend's items leave this member's lists. */
  backendDisconnected(backendId: string): void {
    this.applied.delete(backendId);
    this.held.delete(backendId);
    void this.enqueue(backendId, async () => this.announce(this.catalog.clearBackend(backendId)));
  }

  /** A reload stored new versions (a `catalog.changed` bus message): applied now, those newer than what was applied. */
  changed(message: CatalogChanged): void {
    const applied = this.applied.get(message.backendId);
    if (applied === undefined) return;
    const diffs = new Map<CatalogKind, CatalogDiff>();
    for (const { kind, body, version } of message.lists) {
      if ((applied.get(kind)?.version ?? 0) >= version) continue;
      diffs.set(kind, this.apply(message.backendId, kind, { ...body, version, position: message.position }));
    }
    this.announce(diffs, message.position);
  }

  /**
   * Redis lost the cluster catalog: versions start over there, so the next ones stored are newer
   * than anything applied here. The items stay until then.
   */
  forgetVersions(): void {
    for (const kinds of this.applied.values()) {
      for (const [kind, applied] of kinds) kinds.set(kind, { version: 0, position: applied.position });
    }
  }

  /** Announcements may have been lost (the bus reconnected): every connected backend's lists are read again. */
  resync(): Promise<void> {
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

  /** Reads `kinds` of the backend from the store and applies what is newer, after whatever is queued for the backend. */
  private refresh(backendId: string, kinds: readonly CatalogKind[]): Promise<void> {
    return this.enqueue(backendId, async () => {
      const diffs = new Map<CatalogKind, CatalogDiff>();
      for (const kind of kinds) {
        const applied = this.applied.get(backendId);
        if (applied === undefined) return; // disconnected meanwhile
        let stored: StoredList | undefined;
        try {
          stored = await this.deps.store.get(backendId, kind);
        } catch (error) {
          this.deps.logger.warn({ backend: backendId, kind, err: (error as Error).message }, "cannot read the cluster catalog");
          continue;
        }
        if (stored === undefined || stored.invalid !== undefined || this.applied.get(backendId) !== applied) continue;
        if ((applied.get(kind)?.version ?? 0) >= stored.version) continue;
        diffs.set(kind, this.apply(backendId, kind, stored));
      }
      this.announce(diffs);
    });
  }

  private apply(backendId: string, kind: CatalogKind, stored: ListBody & { version: number; position: number }): CatalogDiff {
    this.applies++;
    this.applied.get(backendId)?.set(kind, { version: stored.version, position: stored.position });
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

  private announce(diffs: Map<CatalogKind, CatalogDiff>, position?: number): void {
    const byList = new Map<ListName, Map<CatalogKind, CatalogDiff>>();
    for (const [kind, diff] of diffs) {
      if (isEmptyDiff(diff)) continue;
      const list = listNameOf(kind);
      const entry = byList.get(list) ?? new Map<CatalogKind, CatalogDiff>();
      entry.set(kind, diff);
      byList.set(list, entry);
    }
    for (const [list, listDiffs] of byList) {
      this.deps.logger.debug({ list }, "list changed");
      for (const listener of this.listeners) listener(list, listDiffs, position);
    }
  }
}
