import { META } from "@mcp-broker/shared";
import type { UpdatedParams } from "./sse-update-filter.js";

/** The `_meta` keys that belong to one hop (the backend's listen stream to this broker), not to the update. */
const HOP_META = [META.subscriptionId, META.cursor];

/**
 * What the broker passes on of a backend's `resources/updated` params besides the URI it translates:
 * everything else the backend said, `_meta` included, less the `_meta` keys of its own hop (its
 * listen stream's subscription id and cursor, which mean nothing past this broker). Undefined when
 * nothing is left, as for most updates: the hot path allocates only for an update that says more.
 */
export function passedOnParams(params: UpdatedParams): Record<string, unknown> | undefined {
  let rest: Record<string, unknown> | undefined;
  for (const key in params) {
    if (key === "uri" || !Object.hasOwn(params, key)) continue;
    const value = key === "_meta" ? withoutHopMeta(params[key]) : params[key];
    if (value !== undefined) (rest ??= {})[key] = value;
  }
  return rest;
}

function withoutHopMeta(meta: unknown): unknown {
  if (typeof meta !== "object" || meta === null || Array.isArray(meta) || !HOP_META.some((key) => Object.hasOwn(meta, key))) return meta;
  const kept = Object.fromEntries(Object.entries(meta).filter(([key]) => !HOP_META.includes(key as (typeof HOP_META)[number])));
  return Object.keys(kept).length === 0 ? undefined : kept;
}
