import type { CallToolResult, GetPromptResult, ReadResourceResult } from "@modelcontextprotocol/client";
import { UriTemplate, type UriTemplateVariables } from "@mcp-broker/shared";
import type { Prompt, Resource, ResourceTemplate, Tool } from "../lists/list-catalog.js";
import type { RequestMetadata } from "../request-metadata.js";
import { LatestEntryMap } from "./latest-entry-map.js";

/**
 * The last content read with `readResource(uri)`. The fields of InspectorClient's
 * `ResourceReadInvocation` (`result`, `timestamp`, `uri`, `metadata`), and `content`, this
 * client's name for `result` (the same object).
 */
export interface CachedResource {
  readonly uri: string;
  readonly result: ReadResourceResult;
  readonly content: ReadResourceResult;
  /** When the content arrived (built from the client's clock, as InspectorClient's entries carry a `Date`). */
  readonly timestamp: Date;
  /** The `_meta` the read sent (default and call metadata merged); absent when it sent none. */
  readonly metadata?: RequestMetadata;
}

/**
 * The last content read with `readResourceFromTemplate(uriTemplate, params)`: the fields of
 * InspectorClient's `ResourceTemplateReadInvocation`, and `uri` and `content`, this client's names
 * for `expandedUri` and `result`.
 */
export interface CachedTemplateResource {
  readonly uriTemplate: string;
  readonly params: UriTemplateVariables;
  /** The URI the template expanded to with `params`. */
  readonly uri: string;
  readonly expandedUri: string;
  readonly result: ReadResourceResult;
  readonly content: ReadResourceResult;
  readonly timestamp: Date;
  readonly metadata?: RequestMetadata;
}

/**
 * What `readResourceFromTemplate` resolves with: the read result's own fields (`contents`, …) with
 * the expanded `uri` and the `uriTemplate` beside them, as InspectorClient first returned it, and
 * the fields of InspectorClient's template read invocation (`expandedUri`, the read as `result`,
 * `params`, `timestamp`, `metadata`).
 */
export type TemplateReadResult = ReadResourceResult & {
  readonly uri: string;
  readonly uriTemplate: string;
  readonly expandedUri: string;
  readonly params: UriTemplateVariables;
  readonly result: ReadResourceResult;
  readonly timestamp: Date;
  readonly metadata?: RequestMetadata;
};

/** The last result of `getPrompt(name, params)`: the fields of InspectorClient's `PromptGetInvocation`. */
export interface CachedPrompt {
  readonly name: string;
  readonly params: Readonly<Record<string, string>>;
  readonly result: GetPromptResult;
  readonly timestamp: Date;
  readonly metadata?: RequestMetadata;
}

/**
 * The last outcome of `callTool(name, params)`: a result, or a failure with its error. Has the
 * fields of InspectorClient's `ToolCallInvocation` (`toolName`, the same as `name`), but `error` is
 * what was thrown, not its message, and a failure without a result has no `result`.
 */
export type CachedToolCall =
  | {
      readonly name: string;
      readonly toolName: string;
      readonly params: Readonly<Record<string, unknown>>;
      readonly timestamp: Date;
      readonly metadata?: RequestMetadata;
      readonly success: true;
      readonly result: CallToolResult;
    }
  | {
      readonly name: string;
      readonly toolName: string;
      readonly params: Readonly<Record<string, unknown>>;
      readonly timestamp: Date;
      readonly metadata?: RequestMetadata;
      readonly success: false;
      /** What the call threw, or a `TOOL_ERROR` BrokerClientError when the tool reported `isError`. */
      readonly error: unknown;
      /** The tool's own result, when it ran and reported `isError`. */
      readonly result?: CallToolResult;
    };

/**
 * What users of `BrokerClient.cache` see: the last content fetched per resource, template, prompt
 * and tool, for display. Reading never contacts the server; clearing only forgets. Entries are
 * frozen copies: they share nothing with the results the calls returned, and cannot be changed.
 */
export interface ContentCacheView {
  getResource(uri: string): CachedResource | null;
  getResourceTemplate(uriTemplate: string): CachedTemplateResource | null;
  getPrompt(name: string): CachedPrompt | null;
  getToolCallResult(name: string): CachedToolCall | null;
  clearResource(uri: string): void;
  /** Forgets the entry of `uri` and every template entry whose template expanded to `uri`. */
  clearResourceAndResourceTemplate(uri: string): void;
  clearResourceTemplate(uriTemplate: string): void;
  clearPrompt(name: string): void;
  clearToolCallResult(name: string): void;
  clearAll(): void;
}

/** A direct entry; `content` must be a frozen copy. */
export function resourceEntry(uri: string, content: ReadResourceResult, timestamp: Date, sent: RequestMetadata | undefined): CachedResource {
  return { uri, result: content, content, timestamp, ...recorded(sent) };
}

/** A template entry; `params` and `content` must be frozen copies. */
export function templateEntry(
  uriTemplate: string,
  params: UriTemplateVariables,
  uri: string,
  content: ReadResourceResult,
  timestamp: Date,
  sent: RequestMetadata | undefined,
): CachedTemplateResource {
  return { uriTemplate, params, uri, expandedUri: uri, result: content, content, timestamp, ...recorded(sent) };
}

/** The `metadata` field of a cache entry: what the request sent as `_meta`, absent when nothing. */
export function recorded(metadata: RequestMetadata | undefined): { metadata?: RequestMetadata } {
  return metadata === undefined ? {} : { metadata: frozenCopy(metadata) };
}

/** A deep copy of `value` that cannot be changed (SDK results are plain JSON data). */
export function frozenCopy<T>(value: T): T {
  return deepFreeze(structuredClone(value));
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

/**
 * The content cache: one entry per resource URI, per template, per prompt name and per tool name,
 * the newest fetch replacing the older (see `LatestEntryMap`). Resource and template entries are
 * separate even when a template expands to a listed URI.
 *
 * After a list reload, entries of items that are gone are dropped (`retain*`); a resource entry
 * stays while its URI is listed or matches a listed template.
 *
 * The maps are for the client; users get `view`, which can only read and clear.
 */
export class ContentCache implements ContentCacheView {
  readonly resources = new LatestEntryMap<CachedResource>();
  readonly templates = new LatestEntryMap<CachedTemplateResource>();
  readonly prompts = new LatestEntryMap<CachedPrompt>();
  readonly toolCalls = new LatestEntryMap<CachedToolCall>();

  /** The read-and-clear view handed to users: nothing else of the cache is reachable through it. */
  readonly view: ContentCacheView = Object.freeze({
    getResource: (uri: string) => this.getResource(uri),
    getResourceTemplate: (uriTemplate: string) => this.getResourceTemplate(uriTemplate),
    getPrompt: (name: string) => this.getPrompt(name),
    getToolCallResult: (name: string) => this.getToolCallResult(name),
    clearResource: (uri: string) => this.clearResource(uri),
    clearResourceAndResourceTemplate: (uri: string) => this.clearResourceAndResourceTemplate(uri),
    clearResourceTemplate: (uriTemplate: string) => this.clearResourceTemplate(uriTemplate),
    clearPrompt: (name: string) => this.clearPrompt(name),
    clearToolCallResult: (name: string) => this.clearToolCallResult(name),
    clearAll: () => this.clearAll(),
  });

  getResource(uri: string): CachedResource | null {
    return this.resources.get(uri);
  }

  getResourceTemplate(uriTemplate: string): CachedTemplateResource | null {
    return this.templates.get(uriTemplate);
  }

  getPrompt(name: string): CachedPrompt | null {
    return this.prompts.get(name);
  }

  getToolCallResult(name: string): CachedToolCall | null {
    return this.toolCalls.get(name);
  }

  clearResource(uri: string): void {
    this.resources.clear(uri);
  }

  clearResourceAndResourceTemplate(uri: string): void {
    this.clearResource(uri);
    for (const { uriTemplate } of this.templatesExpandingTo(uri)) this.clearResourceTemplate(uriTemplate);
  }

  clearResourceTemplate(uriTemplate: string): void {
    this.templates.clear(uriTemplate);
  }

  clearPrompt(name: string): void {
    this.prompts.clear(name);
  }

  clearToolCallResult(name: string): void {
    this.toolCalls.clear(name);
  }

  clearAllPrompts(): void {
    this.prompts.clearAll();
  }

  clearAll(): void {
    this.resources.clearAll();
    this.templates.clearAll();
    this.prompts.clearAll();
    this.toolCalls.clearAll();
  }

  /** The template entries whose expanded URI is `uri`. */
  templatesExpandingTo(uri: string): CachedTemplateResource[] {
    return [...this.templates.values()].filter((entry) => entry.uri === uri);
  }

  retainTools(tools: readonly Tool[]): void {
    const names = new Set(tools.map((tool) => tool.name));
    this.toolCalls.retain((name) => names.has(name));
  }

  retainPrompts(prompts: readonly Prompt[]): void {
    const names = new Set(prompts.map((prompt) => prompt.name));
    this.prompts.retain((name) => names.has(name));
  }

  retainResources(resources: readonly Resource[], templates: readonly ResourceTemplate[]): void {
    const listed = new Set(resources.map((resource) => resource.uri));
    const templateStrings = new Set(templates.map((template) => template.uriTemplate));
    const matchers = [...templateStrings].flatMap((template) => parseTemplate(template) ?? []);
    this.resources.retain((uri) => listed.has(uri) || matchers.some((matcher) => matcher.match(uri) !== null));
    this.templates.retain((template) => templateStrings.has(template));
  }
}

/** A server-listed template that does not parse matches nothing (it cannot have been expanded either). */
function parseTemplate(template: string): UriTemplate | undefined {
  try {
    return new UriTemplate(template);
  } catch {
    return undefined;
  }
}
