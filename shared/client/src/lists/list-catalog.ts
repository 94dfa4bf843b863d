import type { ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult } from "@modelcontextprotocol/client";
import { MemoryJobQueue, type Clock, type ListName } from "@mcp-broker/shared";
import { LIST_KINDS, type Connection } from "../connection/connection.js";
import { withMetadata, type RequestMetadata } from "../request-metadata.js";

export type Tool = ListToolsResult["tools"][number];
export type Prompt = ListPromptsResult["prompts"][number];
export type Resource = ListResourcesResult["resources"][number];
export type ResourceTemplate = ListResourceTemplatesResult["resourceTemplates"][number];

/** Why a load failed; absent when it succeeded. */
export type LoadFailure = { readonly error: unknown } | undefined;

/** The outcome of one (re)load of one kind of list. On failure the list is the previous one. */
export type ListReload =
  | { readonly kind: "tools"; readonly tools: readonly Tool[]; readonly failure: LoadFailure }
  | { readonly kind: "prompts"; readonly prompts: readonly Prompt[]; readonly failure: LoadFailure }
  | {
      readonly kind: "resources";
      readonly resources: readonly Resource[];
      readonly resourceTemplates: readonly ResourceTemplate[];
      readonly resourcesFailure: LoadFailure;
      readonly resourceTemplatesFailure: LoadFailure;
    };

export interface ListCatalogDeps {
  clock: Clock;
  /** Delay from the first `list_changed` of a burst to the reload. */
  debounceMs: number;
  /** Sent as the `_meta` of every list request (the client's default metadata), if any. */
  metadata: RequestMetadata | undefined;
  /** Hears every completed load, failed ones included. */
  reloaded(reload: ListReload): void;
}

/**
 * The server's tools, prompts, resources and resource templates, as last loaded. Loads all of
 * them on `loadAll` (connect, reconnect); reloads one kind on `changed`, debounced by the
 * project's job queue (`MemoryJobQueue`): the notifications of a burst give one reload
 * `debounceMs` after the first, and one that comes during a reload gives exactly one more. A
 * `resources` change reloads both resources and templates.
 *
 * `attach` makes a connection the one whose notifications count, before anything is loaded from
 * it, so that a change announced while its lists load is not lost.
 *
 * Ordering: when loads of one kind overlap, only the one started last is applied (older ones
 * are discarded, whenever they finish); a load whose connection is no longer the attached one
 * is dropped (the next connection loads everything).
 */
export class ListCatalog {
  tools: readonly Tool[] = [];
  prompts: readonly Prompt[] = [];
  resources: readonly Resource[] = [];
  resourceTemplates: readonly ResourceTemplate[] = [];

  private connection: Connection | undefined;
  /** Pending reloads, by list kind; replaced (dropping what is pending) by `loadAll` and `clear`. */
  private reloads: MemoryJobQueue<ListName>;
  private readonly newest: Record<ListName, number> = { tools: 0, prompts: 0, resources: 0 };

  constructor(private readonly deps: ListCatalogDeps) {
    this.reloads = this.createReloads();
  }

  /** From now on `changed` listens to `connection` and reloads use it; pending reloads are dropped. */
  attach(connection: Connection): void {
    this.connection = connection;
    this.dropPendingReloads();
  }

  /**
   * Loads every list from `connection` now, if it is the attached one: a connection cleared or
   * replaced meanwhile (a listener disconnected) must not take the catalog back.
   */
  async loadAll(connection: Connection): Promise<void> {
    if (connection !== this.connection) return;
    await Promise.all(LIST_KINDS.map((kind) => this.load(connection, kind)));
  }

  /** A `list_changed` of `kind` arrived on `connection`. */
  changed(connection: Connection, kind: ListName): void {
    if (connection !== this.connection) return;
    void this.reloads.schedule(kind, kind, this.deps.debounceMs);
  }

  /** Empties one list until its next load; pending and running loads go on. */
  forget(list: "tools" | "prompts" | "resources" | "resourceTemplates"): void {
    this[list] = [];
  }

  /** Forgets the lists and any pending reload. */
  clear(): void {
    this.connection = undefined;
    this.dropPendingReloads();
    this.tools = this.prompts = this.resources = this.resourceTemplates = [];
  }

  private createReloads(): MemoryJobQueue<ListName> {
    const reloads = new MemoryJobQueue<ListName>({ clock: this.deps.clock });
    reloads.process(async (_key, kind) => this.reloadCurrent(kind));
    return reloads;
  }

  /** A reload already running finishes (and is dropped by `load` if its connection is gone). */
  private dropPendingReloads(): void {
    void this.reloads.close();
    this.reloads = this.createReloads();
  }

  private async reloadCurrent(kind: ListName): Promise<void> {
    const connection = this.connection;
    if (connection?.alive) await this.load(connection, kind);
  }

  private async load(connection: Connection, kind: ListName): Promise<void> {
    const ticket = ++this.newest[kind];
    const applies = (): boolean => this.connection === connection && this.newest[kind] === ticket;
    const capabilities = connection.capabilities;
    const params = this.deps.metadata === undefined ? undefined : withMetadata({}, this.deps.metadata);
    switch (kind) {
      case "tools": {
        const outcome = await settle(capabilities.tools === undefined ? [] : connection.request((c, o) => c.listTools(params, { ...o, cacheMode: "refresh" })).then((r) => r.tools));
        if (!applies()) return;
        if (outcome.ok) this.tools = outcome.value;
        this.deps.reloaded({ kind, tools: this.tools, failure: failureOf(outcome) });
        return;
      }
      case "prompts": {
        const outcome = await settle(capabilities.prompts === undefined ? [] : connection.request((c, o) => c.listPrompts(params, { ...o, cacheMode: "refresh" })).then((r) => r.prompts));
        if (!applies()) return;
        if (outcome.ok) this.prompts = outcome.value;
        this.deps.reloaded({ kind, prompts: this.prompts, failure: failureOf(outcome) });
        return;
      }
      case "resources": {
        const offered = capabilities.resources !== undefined;
        const [resources, templates] = await Promise.all([
          settle(offered ? connection.request((c, o) => c.listResources(params, { ...o, cacheMode: "refresh" })).then((r) => r.resources) : []),
          settle(offered ? connection.request((c, o) => c.listResourceTemplates(params, { ...o, cacheMode: "refresh" })).then((r) => r.resourceTemplates) : []),
        ]);
        if (!applies()) return;
        if (resources.ok) this.resources = resources.value;
        if (templates.ok) this.resourceTemplates = templates.value;
        this.deps.reloaded({
          kind,
          resources: this.resources,
          resourceTemplates: this.resourceTemplates,
          resourcesFailure: failureOf(resources),
          resourceTemplatesFailure: failureOf(templates),
        });
        return;
      }
    }
  }
}

type Outcome<T> = { ok: true; value: T } | { ok: false; error: unknown };

function failureOf(outcome: Outcome<unknown>): LoadFailure {
  return outcome.ok ? undefined : { error: outcome.error };
}

async function settle<T>(value: T | Promise<T>): Promise<Outcome<T>> {
  try {
    return { ok: true, value: await value };
  } catch (error) {
    return { ok: false, error };
  }
}
