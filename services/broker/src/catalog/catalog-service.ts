import { backoffDelay, type BackendConfig, type Clock, type JobQueue, type ListName, type TimerHandle } from "@mcp-broker/shared";
import type { Logger } from "../logger.js";
import type { BackendConnection, ListKind } from "../upstream/backend-connection.js";
import type { BackendPool } from "../upstream/backend-pool.js";
import { Catalog, isEmptyDiff, type CatalogDiff, type CatalogKind } from "./catalog.js";
import { ToolGate, type HeldTool } from "./tool-gate.js";

/**
 * A reload job: re-list one client-visible list of one backend (for `resources`, its resources
 * and its templates together, so one backend change gives clients one `list_changed`).
 */
export interface ReloadJob {
  backendId: string;
  list: ListKind;
}

export function listNameOf(kind: CatalogKind): ListName {
  return kind === "resourceTemplates" ? "resources" : kind;
}

const LIST_METHODS: Record<CatalogKind, { method: string; field: string; capability: "tools" | "prompts" | "resources" }> = {
  tools: { method: "tools/list", field: "tools", capability: "tools" },
  prompts: { method: "prompts/list", field: "prompts", capability: "prompts" },
  resources: { method: "resources/list", field: "resources", capability: "resources" },
  resourceTemplates: { method: "resources/templates/list", field: "resourceTemplates", capability: "resources" },
};

const KINDS_OF_LIST: Record<ListKind, readonly CatalogKind[]> = {
  tools: ["tools"],
  prompts: ["prompts"],
  resources: ["resources", "resourceTemplates"],
};

const MAX_PAGES = 1_000;

/** A list that failed to load and waits for its next attempt. */
interface RetryState {
  attempt: number;
  timer: TimerHandle | undefined;
}

/**
 * Keeps the catalog in step with the backends: a full load on connect, a clear on disconnect,
 * debounced reloads on `list_changed`, periodic re-lists for backends that do not announce
 * changes. `onListChanged` fires once per client-visible list whose aggregate really changed.
 *
 * A list that fails to load (at connect or on reload) is scheduled again as a reload job after the
 * backend's reconnect backoff, with growing delays, until one load of it succeeds or the backend
 * drops (its reconnect loads everything anyway). The queue itself never retries: rescheduling the
 * job keeps its contract (one waiting job per key, one more run when scheduled during a run).
 */
export class CatalogService {
  readonly catalog: Catalog;
  private readonly gate: ToolGate;
  private readonly relistTimers = new Map<string, TimerHandle>();
  private readonly generations = new Map<string, number>();
  /** Per reload key (`reloadKey`): lists whose last load failed. */
  private readonly retries = new Map<string, RetryState>();
  private pool: BackendPool | undefined;
  private loads = 0;
  private reloadsRun = 0;

  constructor(
    private readonly backends: readonly BackendConfig[],
    private readonly deps: {
      logger: Logger;
      clock: Clock;
      jobs: JobQueue<ReloadJob>;
      debounceMs: number;
      relistIntervalMs: number;
      onListChanged: (list: ListName, diffs: Map<CatalogKind, CatalogDiff>) => void;
    },
  ) {
    this.catalog = new Catalog(backends.map((b) => ({ id: b.id, prefix: b.prefix })));
    this.gate = new ToolGate(backends, deps.logger);
    deps.jobs.process((_key, job) => this.reload(job));
  }

  attach(pool: BackendPool): void {
    this.pool = pool;
  }

  close(): void {
    for (const timer of this.relistTimers.values()) this.deps.clock.clearTimeout(timer);
    this.relistTimers.clear();
    for (const key of [...this.retries.keys()]) this.forgetRetry(key);
  }

  /** Full loads in progress (backends that just connected). */
  loading(): number {
    return this.loads;
  }

  /** A backend (re)connected: load all its lists now, without debounce. */
  async backendConnected(backend: BackendConnection): Promise<void> {
    const generation = this.nextGeneration(backend.id);
    this.loads++;
    try {
      const diffs = new Map<CatalogKind, CatalogDiff>();
      for (const list of Object.keys(KINDS_OF_LIST) as ListKind[]) await this.loadList(backend, list, generation, diffs, "initial list failed");
      this.announce(backend.id, diffs);
      if (this.generations.get(backend.id) === generation) this.armRelist(backend);
    } finally {
      this.loads--;
    }
  }

  /** Tools held back by `toolChanges: "hold"` / `pinnedTools`, for `/readyz`. */
  heldTools(): HeldTool[] {
    return this.gate.all();
  }

  /** The held tool a client-facing name refers to, if any. */
  heldTool(exposedName: string): HeldTool | undefined {
    return this.gate.all().find((held) => this.catalog.exposeName(held.backendId, held.name) === exposedName);
  }

  backendDisconnected(backend: BackendConnection): void {
    this.gate.clear(backend.id);
    this.nextGeneration(backend.id);
    this.stopRelist(backend.id);
    this.announce(backend.id, this.catalog.clearBackend(backend.id));
  }

  /** Each connect and drop starts a new generation: a list fetched in an older one is not stored, a failed one not retried. */
  private nextGeneration(backendId: string): number {
    const generation = (this.generations.get(backendId) ?? 0) + 1;
    this.generations.set(backendId, generation);
    for (const list of Object.keys(KINDS_OF_LIST) as ListKind[]) this.forgetRetry(reloadKey(backendId, list));
    return generation;
  }

  private stopRelist(backendId: string): void {
    const timer = this.relistTimers.get(backendId);
    if (timer !== undefined) this.deps.clock.clearTimeout(timer);
    this.relistTimers.delete(backendId);
  }

  /** A backend said `list_changed`: schedule a debounced reload of that list. */
  listChanged(backend: BackendConnection, list: ListKind): void {
    this.scheduleReload(backend.id, list, this.deps.debounceMs);
  }

  private scheduleReload(backendId: string, list: ListKind, delayMs: number): void {
    this.deps.jobs.schedule(reloadKey(backendId, list), { backendId, list }, delayMs).catch((error: unknown) => {
      this.deps.logger.warn({ backend: backendId, list, err: (error as Error).message }, "cannot schedule a list reload");
    });
  }

  /** List reloads run since start (for metrics). */
  reloads(): number {
    return this.reloadsRun;
  }

  private async reload({ backendId, list }: ReloadJob): Promise<void> {
    const backend = this.pool?.get(backendId);
    if (backend === undefined || backend.state !== "connected") return;
    this.reloadsRun++;
    const diffs = new Map<CatalogKind, CatalogDiff>();
    await this.loadList(backend, list, this.generations.get(backendId) ?? 0, diffs, "list reload failed");
    this.announce(backendId, diffs);
  }

  /**
   * Loads every kind of one list into `diffs`; when one fails (the others are still stored), the
   * whole list is retried later.
   */
  private async loadList(backend: BackendConnection, list: ListKind, generation: number, diffs: Map<CatalogKind, CatalogDiff>, what: string): Promise<void> {
    let failure: unknown;
    for (const kind of KINDS_OF_LIST[list]) {
      try {
        diffs.set(kind, await this.load(backend, kind, generation));
      } catch (error) {
        failure ??= error;
      }
    }
    if (failure === undefined) this.forgetRetry(reloadKey(backend.id, list));
    else this.retryLater(backend, list, generation, failure, what);
  }

  /**
   * A load of `list` failed: reload it after the backend's next backoff delay, unless the backend
   * dropped or reconnected since (that starts over with a full load) or a retry is already waiting.
   */
  private retryLater(backend: BackendConnection, list: ListKind, generation: number, error: unknown, what: string): void {
    const current = backend.state === "connected" && this.generations.get(backend.id) === generation;
    const key = reloadKey(backend.id, list);
    const state = this.retries.get(key) ?? { attempt: 0, timer: undefined };
    const policy = this.backends.find((b) => b.id === backend.id)?.reconnect;
    if (!current || policy === undefined || state.timer !== undefined) {
      this.deps.logger.warn({ backend: backend.id, list, err: (error as Error).message }, what);
      return;
    }
    const delayMs = backoffDelay(policy, state.attempt++);
    this.deps.logger.warn({ backend: backend.id, list, err: (error as Error).message, attempt: state.attempt, retryInMs: delayMs }, `${what}; retrying`);
    state.timer = this.deps.clock.setTimeout(() => {
      state.timer = undefined;
      this.scheduleReload(backend.id, list, 0);
    }, delayMs);
    state.timer.unref?.();
    this.retries.set(key, state);
  }

  /** The list loaded (or its backend went away): the next failure starts the backoff over. */
  private forgetRetry(key: string): void {
    const state = this.retries.get(key);
    if (state?.timer !== undefined) this.deps.clock.clearTimeout(state.timer);
    this.retries.delete(key);
  }

  /** Lists one kind from a backend, following pagination, and stores it unless the backend reconnected meanwhile. */
  private async load(backend: BackendConnection, kind: CatalogKind, generation: number): Promise<CatalogDiff> {
    const { method, field, capability } = LIST_METHODS[kind];
    if (backend.capabilities?.[capability] === undefined) return this.catalog.replace(kind, backend.id, []);
    const items: Record<string, unknown>[] = [];
    const seenCursors = new Set<string>();
    let cursor: string | undefined;
    for (let page = 0; page < MAX_PAGES; page++) {
      const result = await backend.request(method, cursor === undefined ? undefined : { cursor });
      const pageItems = result[field];
      if (Array.isArray(pageItems)) items.push(...(pageItems as Record<string, unknown>[]));
      const next = result.nextCursor;
      if (typeof next !== "string" || next === "" || seenCursors.has(next)) break;
      seenCursors.add(next);
      cursor = next;
    }
    if (backend.state !== "connected" || this.generations.get(backend.id) !== generation) {
      throw new Error(`backend '${backend.id}' dropped or reconnected while listing ${kind}`);
    }
    const hiddenBefore = new Set(this.catalog.collisions());
    const held = kind === "tools" ? this.gate.admit(backend.id, items) : undefined;
    const { visible: diff, raw } = this.catalog.replaceDetailed(kind, backend.id, items, held);
    for (const collision of this.catalog.collisions()) {
      if (!hiddenBefore.has(collision)) {
        this.deps.logger.error({ backend: backend.id, kind, collision }, "name collision between unprefixed backends: set prefix: true on one of them");
      }
    }
    // What the backend changed is logged (hidden and held items included: list changes are
    // untrusted); what clients see changed is what gets announced.
    if (!isEmptyDiff(raw)) {
      this.deps.logger.info(
        { backend: backend.id, kind, added: raw.added.length, removed: raw.removed.length, changed: raw.changed.length, diff: raw, visible: diff },
        "catalog changed",
      );
    }
    return diff;
  }

  private announce(backendId: string, diffs: Map<CatalogKind, CatalogDiff>): void {
    const byList = new Map<ListName, Map<CatalogKind, CatalogDiff>>();
    for (const [kind, diff] of diffs) {
      if (isEmptyDiff(diff)) continue;
      const list = listNameOf(kind);
      const entry = byList.get(list) ?? new Map<CatalogKind, CatalogDiff>();
      entry.set(kind, diff);
      byList.set(list, entry);
    }
    for (const [list, listDiffs] of byList) {
      this.deps.logger.debug({ backend: backendId, list }, "list changed");
      this.deps.onListChanged(list, listDiffs);
    }
  }

  /** Backends that do not announce list changes are re-listed on a schedule. */
  private armRelist(backend: BackendConnection): void {
    const caps = backend.capabilities ?? {};
    const silent: ListKind[] = [];
    if (caps.tools !== undefined && !caps.tools.listChanged) silent.push("tools");
    if (caps.prompts !== undefined && !caps.prompts.listChanged) silent.push("prompts");
    if (caps.resources !== undefined && !caps.resources.listChanged) silent.push("resources");
    this.stopRelist(backend.id);
    if (silent.length === 0) return;
    const config = this.backends.find((b) => b.id === backend.id);
    const interval = config?.relistIntervalMs ?? this.deps.relistIntervalMs;
    const timer = this.deps.clock.setTimeout(() => {
      this.relistTimers.delete(backend.id);
      if (backend.state !== "connected") return;
      for (const list of silent) this.listChanged(backend, list);
      this.armRelist(backend);
    }, interval);
    timer.unref?.();
    this.relistTimers.set(backend.id, timer);
  }
}

function reloadKey(backendId: string, list: ListKind): string {
  return `reload:${backendId}:${list}`;
}
