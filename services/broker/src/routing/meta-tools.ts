import MiniSearch from "minisearch";
import { z } from "zod";
import type { Catalog, CatalogItem } from "../catalog/catalog.js";
import { checkUriLimits } from "./validate-params.js";

type Result = Record<string, unknown>;

/** How updates of a resource reach its subscribers: pushed by its backend, polled by the broker, or not at all right now. */
export type UpdatesMode = "push" | "poll" | "none";

/** What the meta tools need of the rest of the broker. */
export interface MetaToolsDeps {
  catalog: Catalog;
  /** Subscribers of (backend, uri) in the whole cluster (the registry's count). */
  subscribers(backendId: string, uri: string): Promise<number>;
  /** How updates of the backend's resources arrive now (see `UpdatesMode`). */
  updates(backendId: string): UpdatesMode;
}

const card = z.object({
  uri: z.string().describe("The resource's URI as this broker names it (pass it to resources/read or resources/subscribe)."),
  name: z.string(),
  mimeType: z.string().optional(),
  size: z.number().optional(),
  serverId: z.string().describe("The backend that serves it."),
});
type Card = z.infer<typeof card>;

const described = card.extend({
  title: z.string().optional(),
  description: z.string().optional(),
  match: z.enum(["listed", "template", "sub-resource"]).describe("How the URI is known: a listed resource, a match of a listed template, or below a listed resource."),
  uriTemplate: z.string().optional().describe("The template the URI matches (match: template)."),
  subscribers: z.number().int().describe("Subscriptions to it across the whole broker cluster."),
  updates: z.enum(["push", "poll", "none"]).describe("push: its backend sends updates; poll: the broker polls it for changes; none: nothing watches it now (its backend is not connected)."),
});

const template = z.object({ uriTemplate: z.string(), name: z.string(), description: z.string().optional(), serverId: z.string() });

const MAX_LIMIT = 100;
/**
 * A search query's length at most. Fuzzy matching fills a table that grows with the square of a
 * word's length: one word of 40 000 characters held the event loop 3 s and took 1.6 GB, one of
 * 100 000 more memory than there was (at 1 000, about 1 MB).
 */
const MAX_QUERY = 1_000;

/**
 * The distinct words of a query searched for, at most: each is looked up in the whole index, so a
 * query of 500 one-letter words (within MAX_QUERY) held the event loop 12 s over 15 000 resources.
 */
const MAX_WORDS = 16;
/** Words shorter than this match exactly: a prefix of one letter expands to most of the index. */
const PREFIX_FROM = 2;
/** Words shorter than this match exactly or by prefix, not fuzzily. */
const FUZZY_FROM = 4;
/** How MiniSearch splits text into words (its default tokenizer). */
const WORD_SEPARATORS = /[\n\r\p{Z}\p{P}]+/u;

/** The broker's own tools: argument and result schemas, and what each does. */
const TOOLS = {
  catalog_resources: {
    description: "Lists the resources every backend behind this broker offers, optionally of one backend (serverId) or one MIME type.",
    input: z.object({ serverId: z.string().optional().describe("Only this backend's resources."), mimeType: z.string().optional().describe("Only resources of this MIME type.") }),
    output: z.object({ resources: z.array(card) }),
  },
  describe_resource: {
    description: "Describes one resource: its name, title, description, MIME type and size, its backend, how many subscribe to it across the cluster, and whether its updates are pushed, polled or not watched.",
    input: z.object({ uri: z.string().min(1).describe("The resource's URI, as catalog_resources or resources/list give it.") }),
    output: described,
  },
  search_resources: {
    description: "Full-text search over the resources' names, titles, descriptions and URIs (prefix and fuzzy matching), best match first.",
    input: z.object({
      query: z.string().min(1).max(MAX_QUERY).describe(`Words to look for (at most ${MAX_QUERY} characters; the first ${MAX_WORDS} distinct words count).`),
      mimeType: z.string().optional().describe("Only resources of this MIME type."),
      limit: z.number().int().min(1).max(MAX_LIMIT).optional().describe(`How many results at most (default 10, at most ${MAX_LIMIT}).`),
    }),
    output: z.object({ resources: z.array(card) }),
  },
  catalog_resource_templates: {
    description: "Lists the resource templates (RFC 6570) every backend behind this broker offers, optionally of one backend (serverId).",
    input: z.object({ serverId: z.string().optional().describe("Only this backend's templates.") }),
    output: z.object({ templates: z.array(template) }),
  },
} as const;

export type MetaToolName = keyof typeof TOOLS;

/** The tools' definitions as `tools/list` gives them. */
export const META_TOOL_DEFINITIONS: readonly Result[] = Object.entries(TOOLS).map(([name, tool]) => ({
  name,
  description: tool.description,
  inputSchema: jsonSchema(tool.input),
  outputSchema: jsonSchema(tool.output),
  annotations: { readOnlyHint: true, openWorldHint: false },
}));

/**
 * The broker's own tools (`metaTools`), for agents on hosts that expose tools but not resources:
 * they find and inspect the aggregated resources, which any caller of `resources/list` sees as
 * well. Results carry `structuredContent` and the same JSON as text; bad arguments and unknown
 * URIs are tool errors (`isError`), never protocol errors.
 */
export class MetaTools {
  private index: { version: number; search: MiniSearch } | undefined;

  constructor(private readonly deps: MetaToolsDeps) {}

  async call(name: string, args: unknown): Promise<Result> {
    switch (name) {
      case "catalog_resources":
        return this.run(TOOLS.catalog_resources.input, args, ({ serverId, mimeType }) => ({
          resources: this.resources().filter((item) => matches(item, serverId, mimeType)).map(cardOf),
        }));
      case "describe_resource":
        return this.run(TOOLS.describe_resource.input, args, ({ uri }) => this.describe(uri));
      case "search_resources":
        return this.run(TOOLS.search_resources.input, args, ({ query, mimeType, limit }) => ({ resources: this.search(query, mimeType, limit ?? 10) }));
      case "catalog_resource_templates":
        return this.run(TOOLS.catalog_resource_templates.input, args, ({ serverId }) => ({
          templates: this.deps.catalog
            .list("resourceTemplates")
            .filter((item) => serverId === undefined || item.backendId === serverId)
            .map((item) => ({ uriTemplate: item.exposedKey, name: text(item.exposed.name) ?? item.exposedKey, ...optional("description", text(item.exposed.description)), serverId: item.backendId })),
        }));
      default:
        return toolError(`Unknown tool '${name}'.`);
    }
  }

  private async run<S extends z.ZodType>(schema: S, args: unknown, answer: (input: z.infer<S>) => Result | Promise<Result>): Promise<Result> {
    const parsed = schema.safeParse(args ?? {});
    if (!parsed.success) return toolError(`Invalid arguments: ${parsed.error.issues.map((issue) => `${issue.path.join(".") || "arguments"}: ${issue.message}`).join("; ")}`);
    try {
      const structured = await answer(parsed.data);
      return { content: [{ type: "text", text: JSON.stringify(structured) }], structuredContent: structured };
    } catch (error) {
      if (error instanceof ToolFailure) return toolError(error.message);
      throw error;
    }
  }

  private resources(): readonly CatalogItem[] {
    return this.deps.catalog.list("resources");
  }

  private async describe(uri: string): Promise<Result> {
    const { catalog } = this.deps;
    // The limits every method that takes a URI holds it to (looking one up past them costs too much).
    try {
      checkUriLimits("arguments.uri", uri);
    } catch (error) {
      throw new ToolFailure((error as Error).message);
    }
    const resolved = catalog.resolveResource(uri);
    // A prefixed URI of a backend that is down: nothing it offers is known now (as a read of it says).
    if (resolved?.match === "prefix" && this.deps.updates(resolved.backendId) === "none") {
      throw new ToolFailure(`Backend '${resolved.backendId}' is not connected: what it offers is not known now; retry later.`);
    }
    if (resolved === undefined || resolved.match === "prefix") {
      throw new ToolFailure(`Unknown resource '${uri}': it is no listed resource, no match of a listed template and not below a listed resource. catalog_resources and search_resources show what there is.`);
    }
    const listed = resolved.match === "listed" ? catalog.get("resources", uri) : undefined;
    const matched =
      resolved.match === "template" ? catalog.list("resourceTemplates").find((item) => item.backendId === resolved.backendId && item.template?.matches(resolved.uri) === true) : undefined;
    const source = listed ?? matched;
    const subscribers = await this.deps.subscribers(resolved.backendId, resolved.uri).catch((error: unknown) => {
      throw new ToolFailure(`The cluster-wide subscriber count of '${uri}' could not be read (${(error as Error).message}); retry later.`);
    });
    return {
      uri,
      name: text(source?.exposed.name) ?? uri,
      ...optional("title", text(source?.exposed.title)),
      ...optional("description", text(source?.exposed.description)),
      ...optional("mimeType", text(source?.exposed.mimeType)),
      ...optional("size", listed === undefined ? undefined : size(listed.exposed.size)),
      serverId: resolved.backendId,
      match: resolved.match,
      ...optional("uriTemplate", matched?.exposedKey),
      subscribers,
      updates: this.deps.updates(resolved.backendId),
    };
  }

  /** The index follows the resources list: rebuilt on the first search after the list changed. */
  private search(query: string, mimeType: string | undefined, limit: number): Card[] {
    const version = this.deps.catalog.version("resources");
    if (this.index?.version !== version) {
      const search = new MiniSearch({ idField: "uri", fields: ["name", "title", "description", "uri"] });
      search.addAll(this.resources().map((item) => ({ uri: item.exposedKey, name: text(item.exposed.name) ?? "", title: text(item.exposed.title) ?? "", description: text(item.exposed.description) ?? "" })));
      this.index = { version, search };
    }
    const words = [...new Set(query.toLowerCase().split(WORD_SEPARATORS).filter((word) => word !== ""))].slice(0, MAX_WORDS);
    const found: Card[] = [];
    if (words.length === 0) return found;
    const options = { prefix: (term: string) => term.length >= PREFIX_FROM, fuzzy: (term: string) => (term.length >= FUZZY_FROM ? 0.2 : false), boost: { name: 3, title: 2, uri: 1.5 }, combineWith: "OR" as const };
    for (const hit of this.index.search.search(words.join(" "), options)) {
      const item = this.deps.catalog.get("resources", String(hit.id));
      if (item === undefined || !matches(item, undefined, mimeType)) continue;
      found.push(cardOf(item));
      if (found.length === limit) break;
    }
    return found;
  }
}

/** A call that cannot be answered, told to the caller as a tool error. */
class ToolFailure extends Error {}

function toolError(message: string): Result {
  return { content: [{ type: "text", text: message }], isError: true };
}

function matches(item: CatalogItem, serverId: string | undefined, mimeType: string | undefined): boolean {
  return (serverId === undefined || item.backendId === serverId) && (mimeType === undefined || item.exposed.mimeType === mimeType);
}

function cardOf(item: CatalogItem): Card {
  return {
    uri: item.exposedKey,
    name: text(item.exposed.name) ?? item.exposedKey,
    ...optional("mimeType", text(item.exposed.mimeType)),
    ...optional("size", size(item.exposed.size)),
    serverId: item.backendId,
  };
}

/** A backend's field as a string, if it is one (definitions come from backends: nothing is trusted to be typed). */
function text(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}

function size(value: unknown): number | undefined {
  return typeof value === "number" && Number.isFinite(value) ? value : undefined;
}

function optional<K extends string, V>(key: K, value: V | undefined): { [P in K]?: V } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: V };
}

function jsonSchema(schema: z.ZodType): Result {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema) as Result;
  return rest;
}
