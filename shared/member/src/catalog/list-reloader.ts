import { ProtocolError, ProtocolErrorCode, specTypeSchemas, type ServerCapabilities } from "@modelcontextprotocol/client";
import { ElsewhereJobError, type BackendConfig, type CatalogKind, type ListChange, type CatalogStore, type ListBody } from "@mcp-broker/shared";
import type { Logger } from "../logger.js";
import { canonicalHash } from "./canonical-hash.js";
import { gateTools } from "./tool-gate.js";

/** A backend's client-visible lists: `resources` covers its resources and its templates. */
export type ListKind = "tools" | "prompts" | "resources";
export const LIST_KINDS: readonly ListKind[] = ["tools", "prompts", "resources"];

export const KINDS_OF_LIST: Record<ListKind, readonly CatalogKind[]> = {
  tools: ["tools"],
  prompts: ["prompts"],
  resources: ["resources", "resourceTemplates"],
};

/** Each kind's list request, and the spec's schema of one of its items (checked one by one, see `fetch`). */
const LIST_METHODS: Record<CatalogKind, { method: string; field: string; key: string; capability: "tools" | "prompts" | "resources"; item: ItemSchema }> = {
  tools: { method: "tools/list", field: "tools", key: "name", capability: "tools", item: specTypeSchemas.Tool },
  prompts: { method: "prompts/list", field: "prompts", key: "name", capability: "prompts", item: specTypeSchemas.Prompt },
  resources: { method: "resources/list", field: "resources", key: "uri", capability: "resources", item: specTypeSchemas.Resource },
  resourceTemplates: { method: "resources/templates/list", field: "resourceTemplates", key: "uriTemplate", capability: "resources", item: specTypeSchemas.ResourceTemplate },
};

type ItemSchema = (typeof specTypeSchemas)["Tool" | "Prompt" | "Resource" | "ResourceTemplate"];

const MAX_PAGES = 1_000;

/** What the reloader uses of a backend connection (`BackendConnection` is one). */
export interface ListedBackend {
  readonly id: string;
  readonly state: string;
  readonly capabilities: ServerCapabilities | undefined;
  request(method: string, params: Record<string, unknown> | undefined): Promise<Record<string, unknown>>;
}

/** A backend's answer to a list request that cannot be a list: the stored version stays. */
export class MalformedListError extends Error {
  override readonly name = "MalformedListError";
}

/** A raw diff of one stored list, by key, for the log. */
interface ListDiff {
  added: string[];
  removed: string[];
  changed: string[];
}

/**
 * The reload job: lists one client-visible list of a backend over this member's connection, diffs
 * it against the cluster catalog by canonical hash, stores what changed (over the version it
 * compared against), which announces it on the bus, where every member applies it. A list that cannot
 * be fetched, or comes back malformed, throws: the job is retried, and the stored version stays.
 */
export class ListReloader {
  constructor(
    private readonly deps: {
      backends: readonly BackendConfig[];
      store: CatalogStore;
      logger: Logger;
      instanceId: string;
      /** This member's connection to the backend. */
      backend: (id: string) => ListedBackend | undefined;
    },
  ) {}

  async reload(backendId: string, list: ListKind): Promise<void> {
    const config = this.deps.backends.find((b) => b.id === backendId);
    const backend = this.deps.backend(backendId);
    if (config === undefined || backend === undefined) throw new Error(`backend '${backendId}' is not configured on this member`);
    // Another member (the watcher, at least) may be connected: the job goes back for one of them.
    if (backend.state !== "connected") throw new ElsewhereJobError(`backend '${backendId}' is not connected to this member`);
    const fetched = new Map<CatalogKind, Record<string, unknown>[]>();
    for (const kind of KINDS_OF_LIST[list]) fetched.set(kind, await this.fetch(backend, kind));
    // The whole list was fetched: what changed of it is stored together, and announced once.
    const changes: (ListChange & { diff: ListDiff })[] = [];
    for (const [kind, items] of fetched) {
      const change = await this.compare(config, kind, items);
      if (change !== undefined) changes.push(change);
    }
    if (changes.length === 0) return;
    const stored = await this.deps.store.put(backendId, changes, this.deps.instanceId);
    if (stored === undefined) throw new Error(`backend '${backendId}': its ${list} list was stored by another member meanwhile; reloading again`);
    changes.forEach(({ kind, diff }, i) => {
      // What the backend changed is logged (held items included: list changes are untrusted).
      this.deps.logger.info({ backend: backendId, kind, version: stored[i]?.version, added: diff.added.length, removed: diff.removed.length, changed: diff.changed.length, diff }, "catalog changed");
    });
  }

  /** Lists one kind, following pagination. */
  private async fetch(backend: ListedBackend, kind: CatalogKind): Promise<Record<string, unknown>[]> {
    const { method, field, key, capability, item: schema } = LIST_METHODS[kind];
    if (backend.capabilities?.[capability] === undefined) return [];
    const items: Record<string, unknown>[] = [];
    /** Keys listed so far: a later item of the same key is left out (a repeated page, a backend listing a name twice). */
    const listed = new Set<string>();
    const seenCursors = new Set<string>();
    let cursor: string | undefined;
    for (let page = 0; page < MAX_PAGES; page++) {
      let result: Record<string, unknown>;
      try {
        result = await backend.request(method, cursor === undefined ? undefined : { cursor });
      } catch (error) {
        // A backend that declares the capability but not this list (resources without templates): it has none.
        if (page === 0 && error instanceof ProtocolError && error.code === Number(ProtocolErrorCode.MethodNotFound)) {
          this.deps.logger.warn({ backend: backend.id, kind, method }, "the backend does not serve this list (method not found): it has none");
          return [];
        }
        throw error;
      }
      const pageItems = result[field];
      if (!Array.isArray(pageItems)) throw new MalformedListError(`backend '${backend.id}' answered ${method} without a '${field}' array`);
      for (const item of pageItems as unknown[]) {
        if (typeof item !== "object" || item === null || Array.isArray(item) || typeof (item as Record<string, unknown>)[key] !== "string") {
          this.deps.logger.warn({ backend: backend.id, kind, item }, `list item without a string '${key}' left out`);
          continue;
        }
        const name = (item as Record<string, string>)[key] as string;
        if (listed.has(name)) {
          this.deps.logger.warn({ backend: backend.id, kind, [key]: name }, "list item listed again left out (the first one stays)");
          continue;
        }
        // One malformed item is left out, not the whole list (the list request takes any result, see BackendConnection).
        const issue = schema["~standard"].validate(item).issues?.[0];
        if (issue === undefined) {
          listed.add(name);
          items.push(item as Record<string, unknown>);
        } else {
          const path = (issue.path ?? []).map((part) => String(typeof part === "object" ? part.key : part)).join(".");
          const problem = `${path || "(item)"}: ${issue.message}`;
          this.deps.logger.warn({ backend: backend.id, kind, [key]: (item as Record<string, unknown>)[key], problem }, "malformed list item left out");
        }
      }
      const next = result.nextCursor;
      if (typeof next !== "string" || next === "" || seenCursors.has(next)) break;
      seenCursors.add(next);
      cursor = next;
    }
    if (backend.state !== "connected") throw new Error(`backend '${backend.id}' dropped while listing ${kind}`);
    return items;
  }

  /** The change to store for one kind, or undefined when nothing changed. */
  private async compare(config: BackendConfig, kind: CatalogKind, items: Record<string, unknown>[]): Promise<(ListChange & { diff: ListDiff }) | undefined> {
    const previous = await this.deps.store.get(config.id, kind);
    const usable = previous?.invalid === undefined ? previous : undefined;
    if (previous?.invalid !== undefined) this.deps.logger.warn({ backend: config.id, kind, reason: previous.invalid }, "stored list does not decode; replacing it");
    const gate = kind === "tools" ? gateTools(config, usable?.gate, items, this.deps.logger) : undefined;
    const body: ListBody = { items, ...(gate !== undefined && { gate }) };
    const diff = diffLists(LIST_METHODS[kind].key, usable?.items ?? [], items);
    if (usable !== undefined && isEmpty(diff) && canonicalHash(usable.gate ?? null) === canonicalHash(body.gate ?? null)) return undefined;
    return { kind, expected: previous?.version ?? 0, body, diff };
  }
}

/** The stored list a member applies: its items, and the tools it must hold back. */
export function heldNames(stored: Pick<ListBody, "gate">): ReadonlySet<string> {
  return new Set((stored.gate?.held ?? []).map((held) => held.name));
}

function diffLists(key: string, before: readonly Record<string, unknown>[], after: readonly Record<string, unknown>[]): ListDiff {
  const old = new Map(before.map((item) => [item[key] as string, canonicalHash(item)]));
  const diff: ListDiff = { added: [], removed: [], changed: [] };
  for (const item of after) {
    const name = item[key] as string;
    const hash = old.get(name);
    if (hash === undefined) diff.added.push(name);
    else if (hash !== canonicalHash(item)) diff.changed.push(name);
    old.delete(name);
  }
  diff.removed.push(...old.keys());
  return diff;
}

function isEmpty(diff: ListDiff): boolean {
  return diff.added.length === 0 && diff.removed.length === 0 && diff.changed.length === 0;
}
