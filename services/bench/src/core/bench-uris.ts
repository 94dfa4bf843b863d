/**
 * Every name the bench puts on the wire. Resource k of the bench backend is `bench://r/<k>`, which
 * clients see as `bench+bench://r/<k>`. An update is emitted for the sub-resource
 * `bench://r/<k>/<step>.<seq>.<emitMicros>`: the broker forwards only the URI, and an update of a
 * sub-resource reaches the subscribers of its ancestor, so the URI itself carries the correlation
 * (which measurement step, which update, when it was emitted).
 */
export const BACKEND_ID = "bench";
export const RESOURCE_TEMPLATE = "bench://r/{id}";

export function backendUri(key: number): string {
  return `bench://r/${key}`;
}

export function exposedUri(key: number): string {
  return `${BACKEND_ID}+${backendUri(key)}`;
}

export function updateUri(base: string, step: number, seq: number, emitMicros: number): string {
  return `${base}/${step}.${seq}.${emitMicros}`;
}

/** The Redis channel of resource k in the raw baseline. */
export function rawChannel(key: number): string {
  return `bench:r:${key}`;
}

/** The tool whose description carries the list version in the list-storm scenario. */
export const LIST_VERSION_TOOL = "listver";

export function listVersionMarker(version: number): string {
  return `listver=${version};`;
}

/**
 * What a paced emission covers: `count` updates at `rate`/s over keys uriOffset…uriOffset+uriCount-1,
 * round-robin, update i going to position (start + i) of the cycle (so consecutive slices of one
 * step continue the cycle instead of restarting it).
 */
export interface EmitPlan {
  step: number;
  rate: number;
  count: number;
  uriCount: number;
  uriOffset: number;
  start?: number;
  /** Keep when each update was emitted and to how many connections (read back with the backend's `emitLog`). */
  record?: boolean;
}

export function keyOf(plan: EmitPlan, i: number): number {
  return plan.uriOffset + (((plan.start ?? 0) + i) % plan.uriCount);
}
