import type { Balancing } from "../fleet/haproxy-config.js";

/** What happens to the fleet during a variant. */
export type Chaos =
  /** One broker SIGKILLed (broker 1, 2, 3, 1, …) at `firstS` and every `everyS` after, while before `untilS`, each started again at once. */
  | { kind: "kill-brokers"; firstS: number; everyS: number; untilS: number }
  /** The harness's redis-server SIGKILLed at `atS` and started again, empty, on its port. */
  | { kind: "restart-redis"; atS: number };

export interface VariantPlan {
  id: string;
  title: string;
  balancing: Balancing;
  /** The machine's Redis, or a redis-server of the harness (which it may restart). */
  redis: "machine" | "own";
  /** How long the backend emits, s. */
  emitSeconds: number;
  chaos: Chaos;
}

/** The knobs of one chaos run: `--quick` is the reduced plan (under 3 minutes), the default the full one. */
export interface ChaosPlan {
  mode: "quick" | "full";
  brokers: number;
  legacyClients: number;
  modernClients: number;
  /** Resources each client subscribes to. */
  keysPerClient: number;
  /** Clients subscribed to each resource (the pool is clients × keysPerClient ÷ this). */
  subscribersPerKey: number;
  /** Updates per second the backend emits, round-robin over the pool. */
  rate: number;
  /** Load generator processes (clients are dealt out to them in turn). */
  generators: number;
  /** Handshakes in flight at once, per generator. */
  openConcurrency: number;
  /** Between the last client's setup and the first update (streams of round-robin sessions settle). */
  quietMs: number;
  /** After the last update, before counting: reconnects and resumptions finish. */
  settleMs: number;
  variants: VariantPlan[];
}

/**
 * The Redis variant balances sticky, as deploy/haproxy.cfg does, so that what it shows is the
 * restart's doing and not round-robin's (whose session moves on every request are the first
 * variant's subject).
 */
export function chaosPlan(quick: boolean): ChaosPlan {
  if (quick) {
    return {
      mode: "quick",
      brokers: 3,
      legacyClients: 240,
      modernClients: 48,
      keysPerClient: 3,
      subscribersPerKey: 2,
      rate: 2_000,
      generators: 2,
      openConcurrency: 50,
      quietMs: 2_000,
      settleMs: 6_000,
      variants: [
        { id: "round-robin", title: "Round-robin, a broker SIGKILLed every 20 s", balancing: "round-robin", redis: "machine", emitSeconds: 32, chaos: { kind: "kill-brokers", firstS: 8, everyS: 20, untilS: 30 } },
        { id: "sticky", title: "Sticky sessions, a broker SIGKILLed every 20 s", balancing: "sticky", redis: "machine", emitSeconds: 32, chaos: { kind: "kill-brokers", firstS: 8, everyS: 20, untilS: 30 } },
        { id: "redis-restart", title: "Redis restarted (empty) mid-run", balancing: "sticky", redis: "own", emitSeconds: 18, chaos: { kind: "restart-redis", atS: 6 } },
      ],
    };
  }
  return {
    mode: "full",
    brokers: 3,
    legacyClients: 1_000,
    modernClients: 200,
    keysPerClient: 3,
    subscribersPerKey: 2,
    rate: 2_000,
    generators: 2,
    openConcurrency: 50,
    quietMs: 3_000,
    settleMs: 15_000,
    variants: [
      { id: "round-robin", title: "Round-robin, a broker SIGKILLed every 20 s", balancing: "round-robin", redis: "machine", emitSeconds: 320, chaos: { kind: "kill-brokers", firstS: 20, everyS: 20, untilS: 301 } },
      { id: "sticky", title: "Sticky sessions, a broker SIGKILLed every 20 s", balancing: "sticky", redis: "machine", emitSeconds: 320, chaos: { kind: "kill-brokers", firstS: 20, everyS: 20, untilS: 301 } },
      { id: "redis-restart", title: "Redis restarted (empty) mid-run", balancing: "sticky", redis: "own", emitSeconds: 90, chaos: { kind: "restart-redis", atS: 30 } },
    ],
  };
}

/** The resources (keys k of bench+bench://r/<k>) client `c` subscribes to: each key gets `subscribersPerKey` clients, none twice. */
export function clientKeys(plan: ChaosPlan, client: number): number[] {
  const pool = keyPool(plan);
  return Array.from({ length: plan.keysPerClient }, (_, j) => (client * plan.keysPerClient + j) % pool);
}

export function keyPool(plan: ChaosPlan): number {
  return Math.ceil(((plan.legacyClients + plan.modernClients) * plan.keysPerClient) / plan.subscribersPerKey);
}
