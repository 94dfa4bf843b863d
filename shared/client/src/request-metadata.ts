/** Request metadata, sent as a request's `_meta`: string values by key, as InspectorClient takes it. */
export type RequestMetadata = Readonly<Record<string, string>>;

/**
 * InspectorClient's merge: the maps in order, a later key winning (the client's default metadata,
 * then a call's general metadata, then its tool-specific metadata); undefined when nothing is left,
 * so that no empty `_meta` is sent.
 */
export function mergeMetadata(...maps: readonly (RequestMetadata | undefined)[]): RequestMetadata | undefined {
  const merged: Record<string, string> = {};
  for (const map of maps) Object.assign(merged, map);
  return Object.keys(merged).length > 0 ? merged : undefined;
}

/** `params` with `metadata` as their `_meta`, or as they are when there is none. */
export function withMetadata<P extends object>(params: P, metadata: RequestMetadata | undefined): P & { _meta?: Record<string, string> } {
  return metadata === undefined ? params : { ...params, _meta: { ...metadata } };
}
