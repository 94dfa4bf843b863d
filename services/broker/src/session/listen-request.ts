import { wireCode, META, NOTIFICATION, type ListName } from "@mcp-broker/shared";
import type { ListenFlags } from "./listen-machine.js";
import type { ListenOutcome } from "./session-host.js";
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

/** Refused URIs the acknowledgement names, at most (a listen of 10 000 URIs over a limit does not get a 10 000-entry acknowledgement). */
export const REFUSED_SHOWN = 100;

/**
 * The `notifications/subscriptions/acknowledged` of a listen stream `id`: the honored filter, and
 * in `_meta` the stream's id, the cursor to resume from should the stream break before its first
 * notification, how it resumed (when it was given a cursor), and each URI left out of the filter
 * with the error that refused it (`io.mcp-broker/refused`, the first `REFUSED_SHOWN`).
 */
export function acknowledgement(id: string | number, request: ListenRequest, outcome: Extract<ListenOutcome, { type: "listen.acknowledged" }>): Record<string, unknown> {
  const _meta: Record<string, unknown> = { [META.subscriptionId]: id, [META.cursor]: outcome.cursor };
  if (outcome.resumed !== undefined) _meta[META.resumed] = outcome.resumed;
  if (outcome.refused.length > 0) {
    _meta[META.refused] = outcome.refused.slice(0, REFUSED_SHOWN).map(({ uri, error }) => ({
      uri,
      error: { code: wireCode(error, "modern"), message: error.message, ...(error.data !== undefined && { data: error.data }) },
    }));
  }
  return { jsonrpc: "2.0", method: NOTIFICATION.subscriptionsAcknowledged, params: { notifications: honoredFilter(request, outcome.honored), _meta } };
}

/** Which list changes a listen stream asked for. */
export function wantsListChanges(flags: ListenFlags): (list: ListName) => boolean {
  return (list) => flags[`${list}ListChanged`] === true;
}
