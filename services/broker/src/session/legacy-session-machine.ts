import { BrokerError } from "@mcp-broker/shared";
import { emit, enqueueActions, fromPromise, setup } from "xstate";
import { movedError, type FlowOutput, type SubscriptionTarget } from "./subscription-flow.js";

export type ReplyTo = number;

export type Op = { kind: "subscribe" | "unsubscribe"; uri: string; replyTo: ReplyTo };

export interface LegacySessionInput {
  id: string;
  principal: string;
  /** A session adopted from another member starts with what it holds in the registry. */
  subscriptions?: Record<string, SubscriptionTarget>;
}

export interface LegacySessionContext extends Omit<LegacySessionInput, "subscriptions"> {
  /**
   * Client URI → backend resource, for every subscription this session holds. The one object
   * deliberately mutated in place (only by this machine's own actions): copying it per subscribe
   * or unsubscribe made each O(n) in the session's subscriptions, which took 60 % of the broker's
   * CPU in the subscribe-cost bench at 250 per session. No one compares it across snapshots; a
   * persisted snapshot serialises the current set.
   */
  subscriptions: Record<string, SubscriptionTarget>;
  queue: Op[];
}

/** No prototype: a URI such as `toString` or `__proto__` is just a key. */
function emptySubscriptions(): Record<string, SubscriptionTarget> {
  return Object.create(null) as Record<string, SubscriptionTarget>;
}

export type LegacySessionEvent =
  | { type: "subscription.add"; uri: string; replyTo: ReplyTo }
  | { type: "subscription.remove"; uri: string; replyTo: ReplyTo }
  /** The host ran the `subscribe.run` effect of operation `replyTo`. */
  | { type: "subscribe.done"; replyTo: ReplyTo; output: FlowOutput }
  /** The host ran the `unsubscribe.run` effect of operation `replyTo`. */
  | { type: "unsubscribe.done"; replyTo: ReplyTo }
  /**
   * The host's idle timer ran out: no stream was attached and no request came for the session
   * within its timeout. The timer is the host's, armed while no stream is attached (see
   * `SessionHost.streamAttached`): as states of this machine, a stream's opening and closing cost a
   * macrostep each, a tenth of a broker's CPU in a storm of clients re-attaching.
   */
  | { type: "session.idle" }
  /** The cluster removed these subscriptions (a limit was lowered): they are no longer held. */
  | { type: "subscription.revoked"; uris: string[] }
  | { type: "session.close"; reason: string }
  /** Another member holds the session now, or this one lets go of it while stopping: it ends here, keeping what it holds in the registry. */
  | { type: "session.handOff"; reason: string };

/** Effects the host performs. */
export type LegacySessionEmitted =
  | { type: "reply"; replyTo: ReplyTo; error: BrokerError | undefined }
  /** Subscribe `uri` (runSubscriptionFlow), then send `subscribe.done` with its output, whatever it is. */
  | { type: "subscribe.run"; uri: string; replyTo: ReplyTo }
  /** Release `target` in the registry (and upstream when it was the last), then send `unsubscribe.done`. */
  | { type: "unsubscribe.run"; target: SubscriptionTarget; replyTo: ReplyTo }
  | { type: "interest.add"; uri: string; target: SubscriptionTarget }
  | { type: "interest.remove"; uri: string; target: SubscriptionTarget }
  | { type: "session.ended"; reason: string }
  /** The session left this member without ending (see `session.handOff`). */
  | { type: "session.handedOff"; reason: string };

export const closedError = () => new BrokerError("BAD_PARAMS", "The session is closing; initialize a new one.");

/**
 * Starts the operations at the head of the queue until one is in progress (a subscribe, or an
 * unsubscribe of what is held: their `*.run` effect is emitted) or none is left. Unsubscribing
 * what is not subscribed is answered {} at once (idempotent). The queue is changed in place, as
 * the subscription set is: an `assign` per operation (two events each) was a new context object
 * and a walk of the machine's state nodes, ~6 % of what a subscribe allocated (sampled allocation
 * profile of the subscribe bench).
 */
function startNext(context: LegacySessionContext, emitEffect: (effect: LegacySessionEmitted) => void): void {
  const { queue } = context;
  while (queue.length > 0) {
    const op = queue[0] as Op;
    if (op.kind === "subscribe") {
      // The subscribe runs in the host (runSubscriptionFlow), which answers with `subscribe.done`.
      emitEffect({ type: "subscribe.run", uri: op.uri, replyTo: op.replyTo });
      return;
    }
    const target = context.subscriptions[op.uri];
    if (target !== undefined) {
      // Local interest goes first, so no notification follows an answered unsubscribe.
      delete context.subscriptions[op.uri];
      emitEffect({ type: "interest.remove", uri: op.uri, target });
      // The host releases it in the registry and answers with `unsubscribe.done`.
      emitEffect({ type: "unsubscribe.run", target, replyTo: op.replyTo });
      return;
    }
    emitEffect({ type: "reply", replyTo: op.replyTo, error: undefined });
    queue.shift();
  }
}

/**
 * One legacy (2025-era) client session. Owns its subscription set and lifecycle: active → closing
 * (releases everything, on DELETE or when the host's idle timer runs out) → closed, or handed off
 * to another member. Its subscribes and unsubscribes queue up and run one at a time, in
 * order: the head of `queue` is the one in progress. Pure: I/O and timers are the host's,
 * through the emitted effects (a subscribe or unsubscribe is a `*.run` effect answered by a
 * `*.done` event: a child actor per operation cost more than everything else a subscribe does)
 * and the provided `releaseAll`.
 *
 * The operations are transitions without a target, on `active` (each event one microstep): as
 * states of a parallel region with eventless transitions between them (the earlier shape), the
 * actor took about a third of the broker's CPU per subscribe in the subscribe-cost bench.
 */
export const legacySessionMachine = setup({
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion -- xstate typegen idiom
  types: {} as { input: LegacySessionInput; context: LegacySessionContext; events: LegacySessionEvent; emitted: LegacySessionEmitted },
  actors: {
    releaseAll: fromPromise<void, { principal: string; sessionId: string }>(async () => {
      throw new Error("releaseAll not provided");
    }),
  },
  guards: {
    /** A `*.done` for the operation in progress (not one answered already, e.g. on close). */
    answersHead: ({ context, event }) => "replyTo" in event && context.queue[0]?.replyTo === event.replyTo,
  },
  actions: {
    /** Queues a subscribe or unsubscribe, and starts it when nothing else is in progress. */
    enqueue: enqueueActions(({ context, event, enqueue }) => {
      if (event.type !== "subscription.add" && event.type !== "subscription.remove") return;
      const op: Op = { kind: event.type === "subscription.add" ? "subscribe" : "unsubscribe", uri: event.uri, replyTo: event.replyTo };
      context.queue.push(op);
      if (context.queue.length === 1) startNext(context, (effect) => enqueue.emit(effect));
    }),
    /** The operation in progress is done: applies a subscribe's outcome, answers it, starts the next. */
    finishHead: enqueueActions(({ context, event, enqueue }) => {
      const op = context.queue.shift();
      if (op === undefined) return;
      const output = event.type === "subscribe.done" ? event.output : undefined;
      if (output !== undefined && output.ok && context.subscriptions[op.uri] === undefined) {
        context.subscriptions[op.uri] = output.target;
        enqueue.emit({ type: "interest.add", uri: op.uri, target: output.target });
      }
      enqueue.emit({ type: "reply", replyTo: op.replyTo, error: output !== undefined && !output.ok ? output.error : undefined });
      startNext(context, (effect) => enqueue.emit(effect));
    }),
    rejectClosed: emit(({ event }) => ({
      type: "reply" as const,
      replyTo: "replyTo" in event ? event.replyTo : -1,
      error: closedError(),
    })),
  },
}).createMachine({
  id: "legacy-session",
  context: ({ input }) => {
    const { subscriptions, ...rest } = input;
    return { ...rest, subscriptions: Object.assign(emptySubscriptions(), subscriptions), queue: [] };
  },
  initial: "active",
  states: {
    active: {
      on: {
        "subscription.add": { actions: "enqueue" },
        "subscription.remove": { actions: "enqueue" },
        "subscribe.done": { guard: "answersHead", actions: "finishHead" },
        "unsubscribe.done": { guard: "answersHead", actions: "finishHead" },
        "subscription.revoked": {
          actions: enqueueActions(({ context, event, enqueue }) => {
            for (const uri of event.uris) {
              const target = context.subscriptions[uri];
              if (target === undefined) continue;
              delete context.subscriptions[uri];
              enqueue.emit({ type: "interest.remove", uri, target });
            }
          }),
        },
        "session.close": { target: "closing" },
        "session.idle": { target: "closing" },
        "session.handOff": { target: "handedOff" },
      },
    },
    closing: {
      entry: enqueueActions(({ context, enqueue }) => {
        for (const op of context.queue) enqueue.emit({ type: "reply", replyTo: op.replyTo, error: closedError() });
        for (const [uri, target] of Object.entries(context.subscriptions)) enqueue.emit({ type: "interest.remove", uri, target });
        enqueue.assign({ queue: [], subscriptions: emptySubscriptions() });
      }),
      on: {
        "subscription.add": { actions: "rejectClosed" },
        "subscription.remove": { actions: "rejectClosed" },
      },
      invoke: {
        src: "releaseAll",
        input: ({ context }) => ({ principal: context.principal, sessionId: context.id }),
        onDone: { target: "closed" },
        onError: { target: "closed" },
      },
    },
    closed: {
      type: "final",
      entry: emit({ type: "session.ended", reason: "closed" }),
    },
    handedOff: {
      type: "final",
      entry: enqueueActions(({ context, event, enqueue }) => {
        for (const op of context.queue) enqueue.emit({ type: "reply", replyTo: op.replyTo, error: movedError() });
        for (const [uri, target] of Object.entries(context.subscriptions)) enqueue.emit({ type: "interest.remove", uri, target });
        enqueue.assign({ queue: [], subscriptions: emptySubscriptions() });
        enqueue.emit({ type: "session.handedOff", reason: event.type === "session.handOff" ? event.reason : "handed off" });
      }),
    },
  },
});
