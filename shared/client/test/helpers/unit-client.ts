import type { ProtocolEra } from "@modelcontextprotocol/client";
import { BrokerClient, type BrokerClientOptions } from "../../src/index.js";
import { nextEvent } from "./events.js";
import { ManualClock } from "./manual-clock.js";
import { TestBackend } from "./test-backend.js";

export interface UnitSetup {
  backend: TestBackend;
  clock: ManualClock;
  client: BrokerClient;
}

/**
 * A client with a manual clock (debounce 100 ms, reconnect from 100 ms, jitter fixed at the
 * middle, no heartbeat) in front of a fresh `TestBackend` seeded with tools, prompts, resources
 * and a template. Not connected yet.
 */
export function unitSetup(era: ProtocolEra, options: Partial<BrokerClientOptions> = {}): UnitSetup {
  const backend = new TestBackend();
  backend.tools.set("echo", { name: "echo", run: (args) => ({ content: [{ type: "text", text: `echo ${JSON.stringify(args)}` }] }) });
  backend.tools.set("fail", { name: "fail", run: () => ({ content: [{ type: "text", text: "it broke" }], isError: true }) });
  backend.prompts.set("greet", { description: "Greets" });
  backend.prompts.set("summarize", {});
  backend.texts.set("test://one", "one v1");
  backend.texts.set("test://two", "two v1");
  backend.templates = ["test://items/{id}"];
  backend.templateText = (uri) => (uri.startsWith("test://items/") ? `item ${uri.slice("test://items/".length)}` : undefined);
  const clock = new ManualClock();
  const client = new BrokerClient({
    transport: backend.transportFor(era),
    era,
    clock,
    random: () => 0.5,
    listChangedDebounceMs: 100,
    reconnect: { initialDelayMs: 100, maxDelayMs: 1_000, multiplier: 2, heartbeatIntervalMs: 0 },
    ...options,
  });
  return { backend, clock, client };
}

/** The first reopening of a broken listen stream waits 250/2 + 125 × 0.5 ms with the unit setup's jitter. */
export const FIRST_REOPEN_MS = 188;

/** Breaks the modern listen stream (as a proxy timeout would) and lets its first reopening run. */
export async function breakListenStream({ backend, clock }: Omit<UnitSetup, "client">): Promise<void> {
  backend.cutListenStreams();
  await clock.timerSet(FIRST_REOPEN_MS);
  await clock.advance(FIRST_REOPEN_MS);
}

/** Announces a change of the tool list and resolves once the client reloaded it (debounced 100 ms). */
export async function toolListChangeHeard({ backend, clock, client }: UnitSetup): Promise<void> {
  const reloaded = nextEvent(client, "toolsChange");
  backend.listChanged("tools");
  await clock.timerSet(100);
  await clock.advance(100);
  await reloaded;
}
