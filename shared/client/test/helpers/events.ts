import type { BrokerClient, BrokerClientEventMap } from "../../src/index.js";

type EventName = keyof BrokerClientEventMap;

/** Resolves with the detail of the next `type` event that satisfies `accept`; rejects after `timeoutMs`. */
export function nextEvent<K extends EventName>(
  client: BrokerClient,
  type: K,
  accept: (detail: BrokerClientEventMap[K]) => boolean = () => true,
  timeoutMs = 10_000,
): Promise<BrokerClientEventMap[K]> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      stop();
      reject(new Error(`no ${type} event within ${timeoutMs} ms`));
    }, timeoutMs);
    const stop = client.on(type, (detail) => {
      if (!accept(detail)) return;
      clearTimeout(timer);
      stop();
      resolve(detail);
    });
  });
}

/** Records every `type` event from now on. */
export function record<K extends EventName>(client: BrokerClient, type: K): BrokerClientEventMap[K][] {
  const seen: BrokerClientEventMap[K][] = [];
  client.on(type, (detail) => seen.push(detail));
  return seen;
}

/** Resolves once no subscription of `client` is pending (at once if none is). */
export async function noPendingSubscriptions(client: BrokerClient, timeoutMs = 20_000): Promise<void> {
  if (client.getPendingResourceSubscriptions().length === 0) return;
  await nextEvent(client, "resourceSubscriptionsChange", (d) => d.pending.length === 0, timeoutMs);
}

/** The text of the first text content of a read, prompt or tool result. */
export function firstText(result: { contents?: unknown[]; content?: unknown[] } | null | undefined): string | undefined {
  const items = (result?.contents ?? result?.content ?? []) as { text?: unknown }[];
  const text = items.find((item) => typeof item.text === "string")?.text;
  return typeof text === "string" ? text : undefined;
}

/**
 * Resolves once `predicate` holds, polled every 10 ms; rejects after `timeoutMs`. Only for
 * integration tests, where the state waited for lives in another component (the broker, a child
 * process) that raises no event; unit tests await events, `TestBackend` signals or the clock.
 */
export async function eventually(predicate: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise<void>((resolve) => setTimeout(resolve, 10));
  }
}
