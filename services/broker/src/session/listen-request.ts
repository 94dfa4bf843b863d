import { META, type ListName } from "@mcp-broker/shared";
import type { ListenFlags } from "./listen-machine.js";
import { validateParams } from "../routing/validate-params.js";

/** A validated `subscriptions/listen` request, as both the HTTP edge and stdio read it. */
export interface ListenRequest {
  flags: ListenFlags;
  /** Requested resource URIs (broker form), deduplicated; undefined when none were asked for. */
  uris: string[] | undefined;
  /** `_meta["io.mcp-broker/cursor"]`: resume from there (see `ResumeCursors`); as given, checked later. */
  cursor: unknown;
}

/** @throws BrokerError (BAD_PARAMS) when the params do not follow the 2026-07-28 schema. */
export function parseListenRequest(params: Record<string, unknown> | undefined): ListenRequest {
  const valid = validateParams("subscriptions/listen", params ?? {});
  const filter = valid.notifications as { toolsListChanged?: boolean; promptsListChanged?: boolean; resourcesListChanged?: boolean; resourceSubscriptions?: string[] };
  return {
    flags: {
      toolsListChanged: filter.toolsListChanged === true,
      promptsListChanged: filter.promptsListChanged === true,
      resourcesListChanged: filter.resourcesListChanged === true,
    },
    uris: filter.resourceSubscriptions === undefined ? undefined : [...new Set(filter.resourceSubscriptions)],
    cursor: (params?._meta as Record<string, unknown> | undefined)?.[META.cursor],
  };
}

/** The filter the acknowledgement carries: the requested flags, and of the URIs only the honored ones. */
export function honoredFilter(request: ListenRequest, honored: readonly string[]): Record<string, unknown> {
  const filter: Record<string, unknown> = {};
  for (const [flag, on] of Object.entries(request.flags)) if (on) filter[flag] = true;
  if (request.uris !== undefined) filter.resourceSubscriptions = honored;
  return filter;
}

/** Which list changes a listen stream asked for. */
export function wantsListChanges(flags: ListenFlags): (list: ListName) => boolean {
  return (list) => flags[`${list}ListChanged`] === true;
}
