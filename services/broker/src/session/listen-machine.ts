import { BrokerError } from "@mcp-broker/shared";
import { assign, emit, enqueueActions, setup } from "xstate";
import type { HonoredUri, SubscribeManyInput, SubscribeManyOutput } from "./subscribe-many.js";
import { asBrokerError, type SubscriptionTarget } from "./subscription-flow.js";

export interface ListenFlags {
  toolsListChanged: boolean;
  promptsListChanged: boolean;
  resourcesListChanged: boolean;
}

export interface ListenInput {
  /** Unique stream id (per principal); also the registry session id of its subscriptions. */
  id: string;
  principal: string;
  flags: ListenFlags;
  /** Requested resource URIs (broker form), deduplicated. */
  uris: string[];
}

export interface ListenContext extends ListenInput {
  /** The honored URIs with their targets, in request order (the URIs are deduplicated: one entry each). */
  honored: readonly HonoredUri[];
  rejection: BrokerError | undefined;
}

export type ListenEvent =
  | { type: "stream.closed" }
  /** The host ran `subscribe.run`: what was honored and refused, or the error that rejects the request. */
  | { type: "subscribe.done"; output: SubscribeManyOutput }
  | { type: "subscribe.failed"; error: unknown }
  /** The host ran `release.run`. */
  | { type: "release.done" };

export type ListenEmitted =
  /** Effect: validate and subscribe every URI (subscribeMany), then send `subscribe.done` or `subscribe.failed`. */
  | { type: "subscribe.run"; input: SubscribeManyInput }
  /** Effect: release everything the stream holds in the registry, then send `release.done`. */
  | { type: "release.run"; principal: string; sessionId: string }
  | { type: "listen.rejected"; error: BrokerError }
  | { type: "listen.acknowledged"; honored: string[]; flags: ListenFlags }
  /** One event for all of a listen's targets (one per URI through the actor was a measurable part of a listen's cost). */
  | { type: "interest.add"; targets: SubscriptionTarget[] }
  | { type: "interest.remove"; targets: SubscriptionTarget[] }
  | { type: "listen.subscriptions.refused"; refused: { uri: string; error: BrokerError }[] }
  | { type: "listen.ended" };

/**
 * One modern `subscriptions/listen` stream, for the life of that stream: validate every URI (an
 * unknown one rejects the whole request) and subscribe them all (one refused, e.g. over a limit, is
 * left out of the honored filter) → acknowledge with the honored filter, before any notification
 * → stream → release everything when the stream closes. Every path ends through `release.run`, so
 * nothing a half-done subscribe reserved outlives the stream.
 *
 * The I/O is the host's, on the actor's `subscribe.run` and `release.run` effects, as a legacy
 * session's subscribes are: an invoked promise actor for each (the earlier shape) made three
 * actors per listen, a measurable part of a short listen's cost. A `subscribe.done` that arrives
 * after the stream closed is ignored here: the host stops a subscribe whose stream closed and
 * releases what it reserved.
 */
export const listenMachine = setup({
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion -- xstate typegen idiom
  types: {} as { input: ListenInput; context: ListenContext; events: ListenEvent; emitted: ListenEmitted },
}).createMachine({
  id: "listen",
  // The new keys first: a spread followed by keys it lacks is a slow path of V8 (~2 µs here).
  context: ({ input }) => ({ honored: [], rejection: undefined, ...input }),
  initial: "subscribing",
  states: {
    // Validates every URI first (an unknown one rejects the request: subscribe.failed), then subscribes.
    subscribing: {
      entry: emit(({ context }) => ({ type: "subscribe.run" as const, input: { principal: context.principal, sessionId: context.id, uris: context.uris } })),
      on: {
        "stream.closed": { target: "closing" },
        "subscribe.done": {
          target: "streaming",
          actions: enqueueActions(({ event, enqueue }) => {
            enqueue.assign({ honored: event.output.honored });
            if (event.output.honored.length > 0) enqueue.emit({ type: "interest.add", targets: targetsOf(event.output.honored) });
            if (event.output.refused.length > 0) enqueue.emit({ type: "listen.subscriptions.refused", refused: event.output.refused });
          }),
        },
        "subscribe.failed": { target: "rejected", actions: assign({ rejection: ({ event }) => asBrokerError(event.error) }) },
      },
    },
    streaming: {
      on: { "stream.closed": { target: "closing" } },
      entry: emit(({ context }) => ({ type: "listen.acknowledged" as const, honored: context.honored.map(({ uri }) => uri), flags: context.flags })),
    },
    rejected: {
      entry: emit(({ context }) => ({ type: "listen.rejected" as const, error: context.rejection ?? new BrokerError("INTERNAL", "listen rejected") })),
      always: { target: "closing" },
    },
    closing: {
      entry: enqueueActions(({ context, enqueue }) => {
        if (context.honored.length > 0) enqueue.emit({ type: "interest.remove", targets: targetsOf(context.honored) });
        enqueue.assign({ honored: [] });
        enqueue.emit({ type: "release.run", principal: context.principal, sessionId: context.id });
      }),
      on: { "release.done": { target: "closed" } },
    },
    closed: { type: "final", entry: emit({ type: "listen.ended" }) },
  },
});

export function targetsOf(honored: readonly HonoredUri[]): SubscriptionTarget[] {
  return honored.map(({ target }) => target);
}


