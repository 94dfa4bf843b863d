import { BrokerError, type AddOutcome, type SubscriptionRef } from "@mcp-broker/shared";
import { asBrokerError, ensureOrRollBack, limitError, settledAtOnce, type FlowOutput, type FlowSteps, type SubscriptionTarget } from "./subscription-flow.js";

export interface SubscribeManyInput {
  principal: string;
  sessionId: string;
  /** Broker-form URIs, deduplicated, in request order. */
  uris: readonly string[];
}

/** A URI a listen honored, with the backend resource it names. */
export interface HonoredUri {
  uri: string;
  target: SubscriptionTarget;
}

export interface SubscribeManyOutput {
  /** In request order. */
  honored: HonoredUri[];
  refused: { uri: string; error: BrokerError }[];
}

export interface SubscribeManyOptions {
  /** Upstream subscriptions ensured at once. */
  concurrency: number;
  /** URIs past this many are refused with the session limit without trying (a new session holds nothing). */
  maxPerSession: number;
  /**
   * Once `aborted`, stops starting anything new (what runs finishes; what was reserved and not
   * completed is the caller's to release). An AbortSignal, or a plain flag.
   */
  signal?: { readonly aborted: boolean };
}

/** URIs validated, and subscriptions completed, between yields to the event loop, so one huge request cannot starve everyone else. */
const YIELD_EVERY = 512;

/**
 * Subscribes a new session (a listen stream) to each URI: every URI validated, then all of them
 * reserved in one step of the registry (one Redis script however many URIs, in request order, so
 * the limits refuse the last ones), then the upstream subscriptions ensured, `concurrency` at a
 * time, as `runSubscriptionFlow` does for one. Never rejects: each URI ends up honored or refused
 * with its error.
 */
export async function subscribeMany(steps: FlowSteps, input: SubscribeManyInput, options: SubscribeManyOptions): Promise<SubscribeManyOutput> {
  const outcomes: (FlowOutput | undefined)[] = new Array<FlowOutput | undefined>(input.uris.length);
  const tried = Math.min(input.uris.length, options.maxPerSession);
  const stopped = (): boolean => options.signal?.aborted === true;
  const valid: { index: number; target: SubscriptionTarget; ref: SubscriptionRef }[] = [];
  const epoch = steps.epoch(input.principal, input.sessionId);
  for (let index = 0; index < tried && !stopped(); index++) {
    try {
      const target = steps.validate(input.uris[index] as string);
      valid.push({ index, target, ref: { principal: input.principal, sessionId: input.sessionId, backendId: target.backendId, uri: target.uri, epoch } });
    } catch (error) {
      outcomes[index] = { ok: false, error: asBrokerError(error) };
    }
    if (index % YIELD_EVERY === YIELD_EVERY - 1) await new Promise<void>((resolve) => setImmediate(resolve));
  }
  let reserved: AddOutcome[] = [];
  if (!stopped() && valid.length > 0) {
    try {
      reserved = await steps.reserveMany(valid.map(({ ref }) => ref));
    } catch (error) {
      for (const { index } of valid) outcomes[index] = { ok: false, error: asBrokerError(error) };
    }
  }
  let next = 0;
  let done = 0;
  const worker = async (): Promise<void> => {
    while (next < reserved.length && !stopped()) {
      const k = next++;
      const { index, target, ref } = valid[k] as (typeof valid)[number];
      const uri = input.uris[index] as string;
      outcomes[index] = settledAtOnce(steps, target, uri, reserved[k] as AddOutcome, stopped) ?? (await ensureOrRollBack(steps, ref, target, uri, stopped));
      if (++done % YIELD_EVERY === 0) await new Promise<void>((resolve) => setImmediate(resolve));
    }
  };
  await Promise.all(Array.from({ length: Math.min(options.concurrency, reserved.length) }, worker));
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
