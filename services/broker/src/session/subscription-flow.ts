import type { AddOutcome, SubscriptionRef } from "@mcp-broker/shared";
import { BrokerError } from "@mcp-broker/shared";
import { assign, fromPromise, setup } from "xstate";

import type { SubscriptionTarget } from "../fanout/interest-table.js";

export type { SubscriptionTarget };

export interface FlowInput {
  principal: string;
  sessionId: string;
  /** The URI as the client sent it (broker form). */
  uri: string;
}

export type FlowOutput = { ok: true; target: SubscriptionTarget; added: boolean } | { ok: false; error: BrokerError };

export interface FlowContext extends FlowInput {
  target: SubscriptionTarget | undefined;
  added: boolean;
  error: BrokerError | undefined;
}

function asBrokerError(error: unknown): BrokerError {
  return error instanceof BrokerError ? error : new BrokerError("INTERNAL", error instanceof Error ? error.message : String(error), undefined, { cause: error });
}

/** The error for a subscription over a limit (documented: -32010 with data.limit and data.max). */
export function limitError(limit: "session" | "principal" | "global", max: number, uri: string): BrokerError {
  return new BrokerError(
    "SUBSCRIPTION_LIMIT",
    `Subscription limit reached: at most ${max} per ${limit === "global" ? "broker" : limit}. Unsubscribe from something first.`,
    { limit, max, uri },
  );
}

/** The answer to a request for a session that another broker instance took over meanwhile (`-32000`, `data.moved`): the client sends it again, and it reaches the session's holder. */
export function movedError(): BrokerError {
  return new BrokerError("BACKEND_UNAVAILABLE", "The session moved to another broker instance while this was on its way; retry it.", { moved: true });
}

function refOf(context: FlowContext): SubscriptionRef {
  const target = context.target as SubscriptionTarget;
  return { principal: context.principal, sessionId: context.sessionId, backendId: target.backendId, uri: target.uri };
}

/**
 * One subscribe, as an orchestration: validate the URI → reserve against the limits → ensure the
 * upstream subscription → done. A failure after the reservation releases it again, so a failed
 * subscribe leaves no trace. The I/O steps are promise actors the host provides
 * (`subscriptionFlow.provide({ actors })`); the machine itself is pure.
 */
export const subscriptionFlow = setup({
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion -- xstate typegen idiom
  types: {} as { input: FlowInput; context: FlowContext; output: FlowOutput },
  actors: {
    validate: fromPromise<SubscriptionTarget, { uri: string }>(async () => {
      throw new Error("validate not provided");
    }),
    reserve: fromPromise<AddOutcome, SubscriptionRef>(async () => {
      throw new Error("reserve not provided");
    }),
    ensureUpstream: fromPromise<void, SubscriptionTarget>(async () => {
      throw new Error("ensureUpstream not provided");
    }),
    release: fromPromise<void, SubscriptionRef>(async () => {
      throw new Error("release not provided");
    }),
  },
}).createMachine({
  id: "subscription-flow",
  context: ({ input }) => ({ ...input, target: undefined, added: false, error: undefined }),
  initial: "validating",
  states: {
    validating: {
      invoke: {
        src: "validate",
        input: ({ context }) => ({ uri: context.uri }),
        onDone: { target: "reserving", actions: assign({ target: ({ event }) => event.output }) },
        onError: { target: "failed", actions: assign({ error: ({ event }) => asBrokerError(event.error) }) },
      },
    },
    reserving: {
      invoke: {
        src: "reserve",
        input: ({ context }) => refOf(context),
        onDone: [
          {
            guard: ({ event }) => event.output.status === "limit",
            target: "failed",
            actions: assign({
              error: ({ event, context }) => {
                const outcome = event.output as Extract<AddOutcome, { status: "limit" }>;
                return limitError(outcome.limit, outcome.max, context.uri);
              },
            }),
          },
          // Another member took the session over meanwhile: its holder is to be asked.
          { guard: ({ event }) => event.output.status === "moved", target: "failed", actions: assign({ error: () => movedError() }) },
          // Already held by this session: idempotent, nothing more to do.
          { guard: ({ event }) => event.output.status === "exists", target: "done" },
          { target: "ensuring", actions: assign({ added: true }) },
        ],
        onError: { target: "failed", actions: assign({ error: ({ event }) => asBrokerError(event.error) }) },
      },
    },
    ensuring: {
      invoke: {
        src: "ensureUpstream",
        input: ({ context }) => context.target as SubscriptionTarget,
        onDone: { target: "done" },
        onError: { target: "rollingBack", actions: assign({ error: ({ event }) => asBrokerError(event.error) }) },
      },
    },
    rollingBack: {
      invoke: {
        src: "release",
        input: ({ context }) => refOf(context),
        onDone: { target: "failed" },
        onError: { target: "failed" },
      },
    },
    done: { type: "final" },
    failed: { type: "final" },
  },
  output: ({ context }): FlowOutput =>
    context.error !== undefined || context.target === undefined
      ? { ok: false, error: context.error ?? new BrokerError("INTERNAL", "subscription flow ended without a target") }
      : { ok: true, target: context.target, added: context.added },
});
