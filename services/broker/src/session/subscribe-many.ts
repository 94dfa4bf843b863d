import { BrokerError } from "@mcp-broker/shared";
import { limitError, runSubscriptionFlow, type FlowOutput, type FlowSteps, type SubscriptionTarget } from "./subscription-flow.js";

export interface SubscribeManyInput {
  principal: string;
  sessionId: string;
  /** Broker-form URIs, deduplicated, in request order. */
  uris: readonly string[];
}

export interface SubscribeManyOutput {
  /** In request order. */
  honored: { uri: string; target: SubscriptionTarget }[];
  refused: { uri: string; error: BrokerError }[];
}

export interface SubscribeManyOptions {
  /** Subscription flows running at once. */
  concurrency: number;
  /** URIs past this many are refused with the session limit without trying (a new session holds nothing). */
  maxPerSession: number;
  /** Stops starting new flows (those running finish). */
  signal?: AbortSignal;
}

/** Flows between yields to the event loop, so one huge request cannot starve everyone else. */
const YIELD_EVERY = 64;

/**
 * Runs one subscription flow (runSubscriptionFlow) per URI, `concurrency` at a time, for a new session (a listen
 * stream). Never rejects: each URI ends up honored or refused with its error.
 */
export async function subscribeMany(
  steps: FlowSteps,
  input: SubscribeManyInput,
  options: SubscribeManyOptions,
): Promise<SubscribeManyOutput> {
  const outcomes: (FlowOutput | undefined)[] = new Array<FlowOutput | undefined>(input.uris.length);
  const tried = Math.min(input.uris.length, options.maxPerSession);
  let next = 0;
  let started = 0;
  const worker = async (): Promise<void> => {
    while (next < tried && options.signal?.aborted !== true) {
      const index = next++;
      const uri = input.uris[index] as string;
      outcomes[index] = await runSubscriptionFlow(steps, { principal: input.principal, sessionId: input.sessionId, uri }, () => options.signal?.aborted === true);
      if (++started % YIELD_EVERY === 0) await new Promise<void>((resolve) => setImmediate(resolve));
    }
  };
  await Promise.all(Array.from({ length: Math.min(options.concurrency, tried) }, worker));
  const output: SubscribeManyOutput = { honored: [], refused: [] };
  input.uris.forEach((uri, index) => {
    const outcome = outcomes[index];
    if (outcome?.ok === true) output.honored.push({ uri, target: outcome.target });
    else if (outcome !== undefined) output.refused.push({ uri, error: outcome.error });
    else if (index >= tried) output.refused.push({ uri, error: limitError("session", options.maxPerSession, uri) });
    else output.refused.push({ uri, error: new BrokerError("BAD_PARAMS", "The listen stream closed before this subscription was made.", { uri }) });
  });
  return output;
}
