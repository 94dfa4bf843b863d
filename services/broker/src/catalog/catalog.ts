import {
  ancestorsOf,
  hasDotSegment,
  prefixName,
  prefixUri,
  prefixUriTemplate,
  rewriteUris,
  splitPrefixedUri,
  UriTemplate,
} from "@mcp-broker/shared";
import { canonicalHash } from "@mcp-broker/member";

/** The four aggregated lists. `resources/list_changed` covers both resource kinds. */
export type CatalogKind = "tools" | "prompts" | "resources" | "resourceTemplates";
export const CATALOG_KINDS: readonly CatalogKind[] = ["tools", "prompts", "resources", "resourceTemplates"];

export interface CatalogItem {
  /** `name` for tools and prompts, `uri` for resources, `uriTemplate` for templates. */
  readonly key: string;
  readonly exposedKey: string;
  readonly backendId: string;
  /** The definition as the backend sent it. */
  readonly original: Record<string, unknown>;
  /** The definition with the broker's names and URIs. */
  readonly exposed: Record<string, unknown>;
  readonly hash: string;
  /** Parsed template, for `resourceTemplates` only. */
  readonly template?: UriTemplate;
  /**
   * A tool held back (see ToolGate): neither listed nor callable, but it keeps its name, so an
   * unprefixed backend's twin of it does not take its place unnoticed.
   */
  readonly held?: true;
}

export interface CatalogDiff {
  added: string[];
  removed: string[];
  changed: string[];
}

export function isEmptyDiff(diff: CatalogDiff): boolean {
  return diff.added.length === 0 && diff.removed.length === 0 && diff.changed.length === 0;
}

export interface BackendNaming {
  id: string;
  prefix: boolean;
}

/** Where a client-facing resource URI goes, and how sure we are that it exists. */
export interface ResolvedResource {
  readonly backendId: string;
  readonly uri: string;
  /** `listed`: an exact listed resource; `template`: matches a listed template; `sub-resource`: below a listed one; `prefix`: only the backend prefix is known. */
  readonly match: "listed" | "template" | "sub-resource" | "prefix";
}

/**
 * The catalog's name for the broker's own tools (`metaTools`): listed first, unprefixed, so they
 * win over a backend's tool of the same name. No backend id can start with `_`.
 */
export const BROKER_TOOLS_ID = "_broker";

/** Longer resource templates are left out of the catalog (no real one comes close). */
export const MAX_TEMPLATE_LENGTH = 1_024;

const NO_KEYS: ReadonlySet<string> = new Set();

/** `resolveResource` answers kept (see `Catalog.resolved`), and the longest URI kept: at most ~4 MB of URIs. */
const MAX_RESOLVED = 16_384;
const MAX_RESOLVED_URI = 256;
/** A URI that resolved to nothing, as kept. */
const NOT_FOUND = "not found" as const;

const KEY_FIELD: Record<CatalogKind, string> = { tools: "name", prompts: "name", resources: "uri", resourceTemplates: "uriTemplate" };

/**
 * The aggregated, namespaced lists of every backend, with a version per kind that moves only when
 * the aggregated list really changed. Backends are ordered as configured; within a backend, items
 * keep the backend's order. On a name collision between unprefixed backends the earlier backend
 * wins and the collision is reported by `collisions()`.
 */
export class Catalog {
  private readonly items = new Map<CatalogKind, Map<string, CatalogItem[]>>();
  private readonly views = new Map<CatalogKind, { list: CatalogItem[]; byExposed: Map<string, CatalogItem> }>();
  private readonly versions = new Map<CatalogKind, number>();
  private readonly collisionsByKind = new Map<CatalogKind, string[]>();
  /** The lengths of each backend's listed resource URIs (its own form), for the sub-resource walk. */
  private resourceLengths = new Map<string, Set<number>>();
  /**
   * `resolveResource`'s answers, until the resources or templates change: a subscribe resolves
   * its URI, and a listen of 100 URIs resolved each by template matching spent a quarter of the
   * broker's CPU there. Bounded: emptied when full.
   */
  private readonly resolved = new Map<string, ResolvedResource | typeof NOT_FOUND>();

  constructor(private readonly backends: readonly BackendNaming[]) {
    for (const kind of CATALOG_KINDS) {
      this.items.set(kind, new Map());
      this.versions.set(kind, 0);
    }
    for (const kind of CATALOG_KINDS) this.rebuild(kind);
  }

  version(kind: CatalogKind): number {
    return this.versions.get(kind) ?? 0;
  }

  list(kind: CatalogKind): readonly CatalogItem[] {
    return this.view(kind).list;
  }

  get(kind: CatalogKind, exposedKey: string): CatalogItem | undefined {
    return this.view(kind).byExposed.get(exposedKey);
  }

  backendItems(kind: CatalogKind, backendId: string): readonly CatalogItem[] {
    return this.items.get(kind)?.get(backendId) ?? [];
  }

  /** Items hidden because an earlier unprefixed backend exposes the same name. */
  collisions(): readonly string[] {
    return [...this.collisionsByKind.values()].flat();
  }

  /**
   * Replaces one backend's list of one kind; returns what changed in the list clients see (a
   * change to an item hidden by a name collision changes nothing visible; a removal that uncovers
   * a hidden item is a change).
   */
  replace(kind: CatalogKind, backendId: string, definitions: readonly Record<string, unknown>[], held: ReadonlySet<string> = NO_KEYS): CatalogDiff {
    return this.replaceDetailed(kind, backendId, definitions, held).visible;
  }

  /** `replace`, also returning what changed in the backend's own items (`raw`), hidden ones included, for the log. */
  replaceDetailed(
    kind: CatalogKind,
    backendId: string,
    definitions: readonly Record<string, unknown>[],
    held: ReadonlySet<string> = NO_KEYS,
  ): { visible: CatalogDiff; raw: CatalogDiff } {
    const naming = this.naming(backendId);
    const previous = new Map((this.items.get(kind)?.get(backendId) ?? []).map((item) => [item.key, item]));
    const next: CatalogItem[] = [];
    const seen = new Set<string>();
    for (const definition of definitions) {
      const key = definition[KEY_FIELD[kind]];
      if (typeof key !== "string" || seen.has(key)) continue;
      seen.add(key);
      const item = buildItem(kind, naming, key, definition);
      if (item !== undefined) next.push(held.has(key) ? { ...item, hash: `${item.hash}:held`, held: true } : item);
    }
    const diff: CatalogDiff = { added: [], removed: [], changed: [] };
    for (const item of next) {
      const old = previous.get(item.key);
      if (old === undefined) diff.added.push(item.exposedKey);
      else if (old.hash !== item.hash) diff.changed.push(item.exposedKey);
      previous.delete(item.key);
    }
    for (const old of previous.values()) diff.removed.push(old.exposedKey);
    const perBackend = this.items.get(kind);
    if (perBackend === undefined || isEmptyDiff(diff)) return { visible: diff, raw: diff };
    const touched = [...diff.added, ...diff.removed, ...diff.changed];
    const visibleBefore = new Map(touched.map((key) => [key, this.get(kind, key)]));
    if (next.length === 0) perBackend.delete(backendId);
    else perBackend.set(backendId, next);
    this.rebuild(kind);
    const visible: CatalogDiff = { added: [], removed: [], changed: [] };
    for (const [key, before] of visibleBefore) {
      const after = this.get(kind, key);
      if (before === undefined && after !== undefined) visible.added.push(key);
      else if (before !== undefined && after === undefined) visible.removed.push(key);
      else if (before !== undefined && after !== undefined && (before.backendId !== after.backendId || before.hash !== after.hash)) visible.changed.push(key);
    }
    if (!isEmptyDiff(visible)) this.versions.set(kind, this.version(kind) + 1);
    return { visible, raw: diff };
  }

  /** Drops everything a backend contributed (it disconnected). */
  clearBackend(backendId: string): Map<CatalogKind, CatalogDiff> {
    const diffs = new Map<CatalogKind, CatalogDiff>();
    for (const kind of CATALOG_KINDS) diffs.set(kind, this.replace(kind, backendId, []));
    return diffs;
  }

  /**
   * Maps a client-facing URI to its backend: a listed resource, then a listed template match, then
   * a sub-resource of a listed resource, then (prefixed backends) the bare prefix.
   */
  resolveResource(exposedUri: string): ResolvedResource | undefined {
    const cached = this.resolved.get(exposedUri);
    if (cached !== undefined) return cached === NOT_FOUND ? undefined : cached;
    const resolved = this.resolveUncached(exposedUri);
    if (exposedUri.length <= MAX_RESOLVED_URI) {
      if (this.resolved.size >= MAX_RESOLVED) this.resolved.clear();
      this.resolved.set(exposedUri, resolved ?? NOT_FOUND);
    }
    return resolved;
  }

  private resolveUncached(exposedUri: string): ResolvedResource | undefined {
    const listed = this.get("resources", exposedUri);
    if (listed !== undefined) return { backendId: listed.backendId, uri: listed.key, match: "listed" };
    for (const candidate of this.candidates(exposedUri)) {
      for (const template of this.backendItems("resourceTemplates", candidate.backendId)) {
        // A template hidden by a collision (an earlier backend exposes the same one) routes nothing: the winner's does.
        if (template.template?.matches(candidate.uri) !== true || this.get("resourceTemplates", template.exposedKey)?.backendId !== candidate.backendId) continue;
        return { backendId: candidate.backendId, uri: candidate.uri, match: "template" };
      }
      // Only ancestors as long as one of the backend's listed resources are looked up: the walk
      // then hashes no string longer than those, however long (and slashed) the client's URI.
      // A URI that climbs out with a dot segment is below nothing it names.
      const lengths = this.resourceLengths.get(candidate.backendId);
      if (lengths === undefined || hasDotSegment(candidate.uri)) continue;
      for (const parent of ancestorsOf(candidate.uri, (length) => lengths.has(length))) {
        if (this.get("resources", this.exposeUri(candidate.backendId, parent))?.backendId === candidate.backendId) {
          return { backendId: candidate.backendId, uri: candidate.uri, match: "sub-resource" };
        }
      }
    }
    const prefixed = splitPrefixedUri(exposedUri);
    if (prefixed !== null && this.naming(prefixed.backendId, false)?.prefix === true) {
      return { backendId: prefixed.backendId, uri: prefixed.uri, match: "prefix" };
    }
    return undefined;
  }

  /** Whether `backendId` is one of this catalog's configured backends. */
  hasBackend(backendId: string): boolean {
    return this.naming(backendId, false) !== undefined;
  }

  /** The client-facing name of a backend's tool or prompt. */
  exposeName(backendId: string, name: string): string {
    return this.naming(backendId).prefix ? prefixName(backendId, name) : name;
  }

  /** The client-facing form of a backend URI. */
  exposeUri(backendId: string, uri: string): string {
    return this.naming(backendId).prefix ? prefixUri(backendId, uri) : uri;
  }

  /** Rewrites every URI inside a backend result to the client-facing form. */
  exposeResult<T>(backendId: string, result: T): T {
    if (!this.naming(backendId).prefix) return result;
    return rewriteUris(
      result,
      (uri) => prefixUri(backendId, uri),
      (template) => prefixUriTemplate(backendId, template),
    ) as T;
  }

  private candidates(exposedUri: string): { backendId: string; uri: string }[] {
    const out: { backendId: string; uri: string }[] = [];
    const prefixed = splitPrefixedUri(exposedUri);
    if (prefixed !== null && this.naming(prefixed.backendId, false)?.prefix === true) out.push(prefixed);
    for (const backend of this.backends) if (!backend.prefix) out.push({ backendId: backend.id, uri: exposedUri });
    return out;
  }

  private naming(backendId: string): BackendNaming;
  private naming(backendId: string, required: false): BackendNaming | undefined;
  private naming(backendId: string, required = true): BackendNaming | undefined {
    const naming = this.backends.find((b) => b.id === backendId);
    if (naming === undefined && required) throw new Error(`unknown backend '${backendId}'`);
    return naming;
  }

  private view(kind: CatalogKind): { list: CatalogItem[]; byExposed: Map<string, CatalogItem> } {
    const view = this.views.get(kind);
    if (view === undefined) throw new Error(`no view for ${kind}`);
    return view;
  }

  private rebuild(kind: CatalogKind): void {
    const list: CatalogItem[] = [];
    const byExposed = new Map<string, CatalogItem>();
    const heldNames = new Map<string, CatalogItem>();
    const collisions: string[] = [];
    const perBackend = this.items.get(kind);
    for (const backend of this.backends) {
      for (const item of perBackend?.get(backend.id) ?? []) {
        const winner = byExposed.get(item.exposedKey) ?? heldNames.get(item.exposedKey);
        if (winner !== undefined) {
          const by = winner.backendId === BROKER_TOOLS_ID ? "the broker's own tool of that name (metaTools)" : `backend '${winner.backendId}'${winner.held === true ? " (whose own is held)" : ""}`;
          collisions.push(`${kind} '${item.exposedKey}' of backend '${backend.id}' is hidden by ${by}`);
          continue;
        }
        if (item.held === true) {
          heldNames.set(item.exposedKey, item);
          continue;
        }
        byExposed.set(item.exposedKey, item);
        list.push(item);
      }
    }
    this.views.set(kind, { list, byExposed });
    if (kind === "resources" || kind === "resourceTemplates") this.resolved.clear();
    this.collisionsByKind.set(kind, collisions);
    if (kind === "resources") {
      this.resourceLengths = new Map();
      for (const item of list) {
        const lengths = this.resourceLengths.get(item.backendId) ?? new Set<number>();
        this.resourceLengths.set(item.backendId, lengths.add(item.key.length));
      }
    }
  }
}

function buildItem(kind: CatalogKind, naming: BackendNaming, key: string, definition: Record<string, unknown>): CatalogItem | undefined {
  const hash = canonicalHash(definition);
  switch (kind) {
    case "tools":
    case "prompts": {
      const exposedKey = naming.prefix ? prefixName(naming.id, key) : key;
      return { key, exposedKey, backendId: naming.id, original: definition, exposed: { ...definition, name: exposedKey }, hash };
    }
    case "resources": {
      const exposedKey = naming.prefix ? prefixUri(naming.id, key) : key;
      return { key, exposedKey, backendId: naming.id, original: definition, exposed: { ...definition, uri: exposedKey }, hash };
    }
    case "resourceTemplates": {
      // Matching costs URI length × template length; a backend's template may not make that huge.
      if (key.length > MAX_TEMPLATE_LENGTH) return undefined;
      let template: UriTemplate;
      try {
        template = new UriTemplate(key);
      } catch {
        return undefined;
      }
      const exposedKey = naming.prefix ? prefixUriTemplate(naming.id, key) : key;
      return { key, exposedKey, backendId: naming.id, original: definition, exposed: { ...definition, uriTemplate: exposedKey }, hash, template };
    }
  }
}
