import type { AddOutcome, SubscriptionRef } from "@mcp-broker/shared";
import { BrokerError } from "@mcp-broker/shared";
import { ProtocolError } from "@modelcontextprotocol/server";

import type { SubscriptionTarget } from "../fanout/interest-table.js";

export type { SubscriptionTarget };

export interface FlowInput {
  principal: string;
  sessionId: string;
  /** The URI as the client sent it (broker form). */
  uri: string;
}

export type FlowOutput = { ok: true; target: SubscriptionTarget; added: boolean } | { ok: false; error: BrokerError };

/** The error for a subscription over a limit (documented: -32010 with data.limit and data.max). */
export function limitError(limit: "session" | "principal" | "global", max: number, uri: string): BrokerError {
  return new BrokerError(
    "SUBSCRIPTION_LIMIT",
    `Subscription limit reached: at most ${max} ${limit === "global" ? "in total (every session of every broker)" : `per ${limit}`}. Unsubscribe from something first.`,
    { limit, max, uri },
  );
}

/** The answer to a request for a session that another broker instance took over meanwhile (`-32000`, `data.moved`): the client sends it again, and it reaches the session's holder. */
export function movedError(): BrokerError {
  return new BrokerError("BACKEND_UNAVAILABLE", "The session moved to another broker instance while this was on its way; retry it.", { moved: true });
}

/** The I/O steps of a subscribe, as the host provides them. */
export interface FlowSteps {
  /** The backend resource a client URI names; throws the error to answer (unknown URI, backend down). */
  validate(uri: string): SubscriptionTarget;
  /**
   * The epoch at which this member holds the legacy session (the refs' fence; undefined for a
   * listen stream): taken once, so a release after the session left this member is fenced as the
   * reservation was.
   */
  epoch(principal: string, sessionId: string): number | undefined;
  /** Reserves the subscription against the limits, atomically. */
  reserve(ref: SubscriptionRef): Promise<AddOutcome>;
  /** `reserve` for several refs of one session, in one atomic step, in order. */
  reserveMany(refs: readonly SubscriptionRef[]): Promise<AddOutcome[]>;
  /** Makes sure the backend resource is subscribed upstream for the cluster. */
  ensureUpstream(target: SubscriptionTarget): Promise<void>;
  /** Whether `ensureUpstream` has nothing to do for `target` right now (a synchronous look; absent: always ensure). */
  upstreamWatched?(target: SubscriptionTarget): boolean;
  /** Releases a reservation (the rollback of a failed subscribe). */
  release(ref: SubscriptionRef): Promise<void>;
}

/**
 * One subscribe, as an orchestration: validate the URI → reserve against the limits → ensure the
 * upstream subscription (unless the registry says another member's watcher has it watched
 * already: a bus round trip to the watcher saved) → done. A failure after the reservation releases it again, so a failed
 * subscribe leaves no trace. `stopped` says whether whoever asked has ended meanwhile (its session
 * closed, or left this member, or its listen stream closed): a reservation made after that is
 * released here, since that session's own release may have run before it landed (one refused as
 * `moved` is the new holder's, and stays). Never rejects: each outcome is an output.
 *
 * Plain async code, run by the session actor's host on the actor's `subscribe.run` effect: an
 * xstate child actor per subscribe and per step (the earlier shape) cost ~160 µs of CPU per
 * subscribe, 60 % of the broker's busy time in the subscribe-cost bench. The session actor still
 * owns the subscription set and runs one operation at a time (see legacy-session-machine.ts).
 */
export async function runSubscriptionFlow(steps: FlowSteps, input: FlowInput, stopped: () => boolean): Promise<FlowOutput> {
  let target: SubscriptionTarget;
  try {
    target = steps.validate(input.uri);
  } catch (error) {
    return { ok: false, error: asBrokerError(error) };
  }
  const ref: SubscriptionRef = { principal: input.principal, sessionId: input.sessionId, backendId: target.backendId, uri: target.uri, epoch: steps.epoch(input.principal, input.sessionId) };
  let outcome: AddOutcome;
  try {
    outcome = await steps.reserve(ref);
  } catch (error) {
    return { ok: false, error: asBrokerError(error) };
  }
  return settledAtOnce(steps, target, input.uri, outcome, stopped) ?? ensureOrRollBack(steps, ref, target, input.uri, stopped);
}

/**
 * The rest of a subscribe once its reservation is answered, when nothing is left to wait for: a
 * refusal, a subscription held already, or one whose upstream is watched already; else undefined
 * (`ensureOrRollBack` does the rest). A listen of many held URIs completes them here, without an
 * async function (its promise and frame) for each.
 */
export function settledAtOnce(steps: FlowSteps, target: SubscriptionTarget, uri: string, outcome: AddOutcome, stopped: () => boolean): FlowOutput | undefined {
  switch (outcome.status) {
    case "limit":
      return { ok: false, error: limitError(outcome.limit, outcome.max, uri) };
    // Another member took the session over meanwhile: its holder is to be asked.
    case "moved":
      return { ok: false, error: movedError() };
    // Already held by this session: idempotent, nothing more to do.
    case "exists":
      return { ok: true, target, added: false };
    case "added":
      break;
  }
  if (stopped()) return undefined;
  // Not the first, and its watcher has it watched upstream already (see AddOutcome.watched), or
  // this member watches it itself with nothing pending on it.
  if (outcome.watched === true || steps.upstreamWatched?.(target) === true) return { ok: true, target, added: true };
  return undefined;
}

/**
 * A new reservation whose upstream is to be ensured (released again when that fails), or released
 * because whoever asked has stopped meanwhile. Never rejects.
 */
export async function ensureOrRollBack(steps: FlowSteps, ref: SubscriptionRef, target: SubscriptionTarget, uri: string, stopped: () => boolean): Promise<FlowOutput> {
  if (stopped()) {
    await steps.release(ref).catch(() => undefined);
    return { ok: false, error: new BrokerError("BAD_PARAMS", "The session or stream ended while this subscription was being made.", { uri }) };
  }
  try {
    await steps.ensureUpstream(target);
  } catch (error) {
    await steps.release(ref).catch(() => undefined);
    return { ok: false, error: asBrokerError(error) };
  }
  return { ok: true, target, added: true };
}

/** A backend's own error (its upstream subscribe refused) as it is; anything else unexpected is the broker's (-32603). */
export function asBrokerError(error: unknown): BrokerError {
  if (error instanceof BrokerError) return error;
  if (error instanceof ProtocolError) return BrokerError.passedOn(error);
  return new BrokerError("INTERNAL", error instanceof Error ? error.message : String(error), undefined, { cause: error });
}
