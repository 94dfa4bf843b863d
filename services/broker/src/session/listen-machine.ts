import type { BrokerError } from "@mcp-broker/shared";
import { assign, emit, enqueueActions, fromPromise, setup } from "xstate";
import { subscriptionFlow, type SubscriptionTarget } from "./subscription-flow.js";

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
  pending: string[];
  honored: Record<string, SubscriptionTarget>;
  rejection: BrokerError | undefined;
}

export type ListenEvent = { type: "stream.closed" };

export type ListenEmitted =
  | { type: "listen.rejected"; error: BrokerError }
  | { type: "listen.acknowledged"; honored: string[]; flags: ListenFlags }
  | { type: "interest.add"; uri: string; target: SubscriptionTarget }
  | { type: "interest.remove"; uri: string; target: SubscriptionTarget }
  | { type: "listen.subscription.refused"; uri: string; error: BrokerError }
  | { type: "listen.ended" };

/**
 * One modern `subscriptions/listen` stream, for the life of that stream: validate every URI (an
 * unknown one rejects the whole request) → subscribe each (one over a limit is left out of the
 * honored filter) → acknowledge with the honored filter, before any notification → stream →
 * release everything when the stream closes.
 */
export const listenMachine = setup({
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion -- xstate typegen idiom
  types: {} as { input: ListenInput; context: ListenContext; events: ListenEvent; emitted: ListenEmitted },
  actors: {
    validateAll: fromPromise<void, { uris: string[] }>(async () => {
      throw new Error("validateAll not provided");
    }),
    subscribe: subscriptionFlow,
    releaseAll: fromPromise<void, { principal: string; sessionId: string }>(async () => {
      throw new Error("releaseAll not provided");
    }),
  },
  guards: {
    morePending: ({ context }) => context.pending.length > 0,
  },
}).createMachine({
  id: "listen",
  context: ({ input }) => ({ ...input, pending: [...input.uris], honored: {}, rejection: undefined }),
  initial: "validating",
  states: {
    validating: {
      on: { "stream.closed": { target: "closing" } },
      invoke: {
        src: "validateAll",
        input: ({ context }) => ({ uris: context.uris }),
        onDone: { target: "subscribing" },
        onError: { target: "rejected", actions: assign({ rejection: ({ event }) => event.error as BrokerError }) },
      },
    },
    subscribing: {
      on: { "stream.closed": { target: "closing" } },
      initial: "next",
      states: {
        next: {
          always: [{ guard: "morePending", target: "one" }, { target: "#listen.streaming" }],
        },
        one: {
          invoke: {
            src: "subscribe",
            input: ({ context }) => ({ principal: context.principal, sessionId: context.id, uri: context.pending[0] ?? "" }),
            onDone: {
              target: "next",
              actions: enqueueActions(({ context, event, enqueue }) => {
                const [uri, ...rest] = context.pending;
                const output = event.output;
                if (uri !== undefined) {
                  if (output.ok) {
                    enqueue.assign({ honored: { ...context.honored, [uri]: output.target } });
                    enqueue.emit({ type: "interest.add", uri, target: output.target });
                  } else {
                    enqueue.emit({ type: "listen.subscription.refused", uri, error: output.error });
                  }
                }
                enqueue.assign({ pending: rest });
              }),
            },
            onError: { target: "next", actions: assign({ pending: ({ context }) => context.pending.slice(1) }) },
          },
        },
      },
    },
    streaming: {
      on: { "stream.closed": { target: "closing" } },
      entry: emit(({ context }) => ({ type: "listen.acknowledged" as const, honored: Object.keys(context.honored), flags: context.flags })),
    },
    rejected: {
      entry: emit(({ context }) => ({ type: "listen.rejected" as const, error: context.rejection as BrokerError })),
      type: "final",
    },
    closing: {
      entry: enqueueActions(({ context, enqueue }) => {
        for (const [uri, target] of Object.entries(context.honored)) enqueue.emit({ type: "interest.remove", uri, target });
        enqueue.assign({ honored: {}, pending: [] });
      }),
      invoke: {
        src: "releaseAll",
        input: ({ context }) => ({ principal: context.principal, sessionId: context.id }),
        onDone: { target: "closed" },
        onError: { target: "closed" },
      },
    },
    closed: { type: "final", entry: emit({ type: "listen.ended" }) },
  },
});
