/**
 * How names cross between backends and the broker's clients.
 *
 * - Tools and prompts: `<backend>__<name>`, split at the first `__`.
 * - Resources and resource templates: `<backend>+<original>`, split at the first `+`. The
 *   prefixed form of a URI is again a URI (the backend id becomes part of the scheme), and the
 *   prefix of a template is a literal, so the prefixed template is still RFC 6570.
 *
 * Backend ids (`BACKEND_ID_PATTERN`) contain neither `_` nor `+`, so the first separator is always
 * the boundary, whatever the original holds (`a+svn+ssh://x` → `a`, `svn+ssh://x`). Prefixing is
 * plain concatenation and splitting plain slicing: round trips are exact, byte for byte, and the
 * original is never re-encoded or normalised.
 */
import { BACKEND_ID_PATTERN } from "../config/schema.js";
import { BrokerError } from "../errors.js";

export const NAME_SEPARATOR = "__";
export const URI_SEPARATOR = "+";

export interface PrefixedName {
  backendId: string;
  name: string;
}

export interface PrefixedUri {
  backendId: string;
  uri: string;
}

export interface PrefixedUriTemplate {
  backendId: string;
  uriTemplate: string;
}

/** `<backend>__<name>`. @throws BrokerError (INTERNAL) for an invalid backend id. */
export function prefixName(backendId: string, name: string): string {
  return checkedId(backendId) + NAME_SEPARATOR + name;
}

/** The backend and original name of `<backend>__<name>`, or null when it has no valid prefix. */
export function splitPrefixedName(exposed: string): PrefixedName | null {
  const split = splitAt(exposed, NAME_SEPARATOR);
  return split && { backendId: split.backendId, name: split.rest };
}

/** `<backend>+<uri>`. @throws BrokerError (INTERNAL) for an invalid backend id. */
export function prefixUri(backendId: string, uri: string): string {
  return checkedId(backendId) + URI_SEPARATOR + uri;
}

/** The backend and original URI of `<backend>+<uri>`, or null when it has no valid prefix. */
export function splitPrefixedUri(exposed: string): PrefixedUri | null {
  const split = splitAt(exposed, URI_SEPARATOR);
  return split && { backendId: split.backendId, uri: split.rest };
}

/** `<backend>+<template>`. @throws BrokerError (INTERNAL) for an invalid backend id. */
export function prefixUriTemplate(backendId: string, uriTemplate: string): string {
  return prefixUri(backendId, uriTemplate);
}

/** The backend and original template of `<backend>+<template>`, or null when it has no valid prefix. */
export function splitPrefixedUriTemplate(exposed: string): PrefixedUriTemplate | null {
  const split = splitAt(exposed, URI_SEPARATOR);
  return split && { backendId: split.backendId, uriTemplate: split.rest };
}

function checkedId(backendId: string): string {
  if (!BACKEND_ID_PATTERN.test(backendId)) {
    throw new BrokerError("INTERNAL", `invalid backend id "${backendId}"`, { backend: backendId });
  }
  return backendId;
}

function splitAt(exposed: string, separator: string): { backendId: string; rest: string } | null {
  const at = exposed.indexOf(separator);
  if (at < 0) return null;
  const backendId = exposed.slice(0, at);
  return BACKEND_ID_PATTERN.test(backendId) ? { backendId, rest: exposed.slice(at + separator.length) } : null;
}

// ---------------------------------------------------------------------------------------------
// Rewriting URIs inside MCP results

export type UriMapping = (uri: string) => string;

/**
 * Keys whose values belong to a tool or the protocol's extension points, not to MCP's resource
 * shapes: copied verbatim, never rewritten, even if they hold look-alikes.
 */
const OPAQUE_KEYS: ReadonlySet<string> = new Set(["_meta", "structuredContent", "inputSchema", "outputSchema", "requestedSchema"]);

/** What the elements of a list that is a result's own field carry. */
const ELEMENT_CARRIES: ReadonlyMap<string, Carried> = new Map([
  ["resources", "uri"], // resources/list
  ["contents", "uri"], // resources/read
  ["resourceTemplates", "uriTemplate"], // resources/templates/list
]);

type Carried = "uri" | "uriTemplate" | undefined;

interface Mappings {
  readonly uri: UriMapping;
  readonly uriTemplate: UriMapping;
}

/**
 * A deep copy of the JSON value `value` in which every URI that MCP results carry is replaced by
 * `map(uri)`, and every resource template by `mapTemplate(template)`:
 *
 * - `uri` of the elements of the result's own `resources` (resources/list) and `contents`
 *   (resources/read) lists;
 * - `uriTemplate` of the elements of its own `resourceTemplates` (resources/templates/list);
 * - `uri` of resource links (`{type: "resource_link", uri}`) and `resource.uri` of embedded
 *   resources (`{type: "resource", resource: {uri}}`), wherever the content blocks are.
 *
 * No other string changes. `_meta`, `structuredContent` and JSON schemas are copied as they are.
 */
export function rewriteUris(value: unknown, map: UriMapping, mapTemplate: UriMapping = map): unknown {
  return rewrite(value, { uri: map, uriTemplate: mapTemplate }, undefined, true);
}

function rewrite(value: unknown, mappings: Mappings | undefined, carried: Carried, isResult = false): unknown {
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) {
    const out: unknown[] = new Array<unknown>(value.length);
    for (let i = 0; i < value.length; i++) out[i] = rewrite(value[i], mappings, carried);
    return out;
  }
  const source = value as Record<string, unknown>;
  if (mappings !== undefined && source.type === "resource_link") carried = "uri";
  const embedsResource = mappings !== undefined && source.type === "resource";
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(source)) {
    const child = source[key];
    let copy: unknown;
    if (mappings !== undefined && key === carried && typeof child === "string") {
      copy = mappings[carried](child);
    } else if (mappings === undefined || OPAQUE_KEYS.has(key)) {
      copy = rewrite(child, undefined, undefined);
    } else if (Array.isArray(child)) {
      copy = rewrite(child, mappings, isResult ? ELEMENT_CARRIES.get(key) : undefined);
    } else {
      copy = rewrite(child, mappings, embedsResource && key === "resource" ? "uri" : undefined);
    }
    setOwn(out, key, copy);
  }
  return out;
}

/** Assignment, except that a `__proto__` key (legal in JSON) stays an own data property. */
function setOwn(target: Record<string, unknown>, key: string, value: unknown): void {
  if (key === "__proto__") {
    Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
  } else {
    target[key] = value;
  }
}
