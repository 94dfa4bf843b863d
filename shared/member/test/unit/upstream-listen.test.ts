import { ProtocolError, type McpSubscription, type SubscriptionFilter } from "@modelcontextprotocol/client";
import { BrokerError, type Clock } from "@mcp-broker/shared";
import { pino } from "pino";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { UpstreamListen, type ListenGap } from "../../src/upstream/upstream-listen.js";

const clock: Clock = { now: () => Date.now(), setTimeout: (f, ms) => setTimeout(f, ms), clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout) };
const policy = { initialDelayMs: 100, maxDelayMs: 1_000, multiplier: 2 };

type How = "local" | "graceful" | "remote";

/** One `subscriptions/listen` the fake backend received; the test answers it. */
interface ListenCall {
  readonly filter: SubscriptionFilter;
  /** Acknowledges with `honored` (default: everything asked for); returns the open stream. */
  ack(honored?: string[]): FakeStream;
  refuse(error: Error): void;
}

interface FakeStream extends McpSubscription {
  /** The backend ends the stream. */
  end(how: Exclude<How, "local">): void;
  readonly closedByUs: boolean;
}

function fakeStream(honoredFilter: SubscriptionFilter): FakeStream {
  let settle: (how: How) => void = () => undefined;
  let closedByUs = false;
  const closed = new Promise<How>((resolve) => (settle = resolve));
  return {
    honoredFilter,
    closed,
    get closedByUs() {
      return closedByUs;
    },
    close: async () => {
      closedByUs = true;
      settle("local");
    },
    end: (how) => settle(how),
  };
}

function world(flags: SubscriptionFilter = {}) {
  const calls: ListenCall[] = [];
  const gaps: number[] = [];
  const reported: ListenGap[] = [];
  const listen = new UpstreamListen({
    backendId: "b",
    flags,
    clock,
    logger: pino({ level: "silent" }),
    policy,
    coalesceMs: 5,
    onGap: (gap) => {
      gaps.push(Date.now());
      reported.push(gap);
    },
    open: (filter) =>
      new Promise<McpSubscription>((resolve, reject) => {
        calls.push({
          filter,
          ack: (honored = filter.resourceSubscriptions ?? []) => {
            const stream = fakeStream({ ...filter, resourceSubscriptions: honored });
            resolve(stream);
            return stream;
          },
          refuse: reject,
        });
      }),
  });
  return { listen, calls, gaps, reported };
}

/** Records how a promise settled, without awaiting it. */
function track(promise: Promise<void>): { state: "pending" | "resolved" | "rejected"; error?: unknown } {
  const outcome: { state: "pending" | "resolved" | "rejected"; error?: unknown } = { state: "pending" };
  promise.then(
    () => (outcome.state = "resolved"),
    (error: unknown) => {
      outcome.state = "rejected";
      outcome.error = error;
    },
  );
  return outcome;
}

describe("upstream listen (one subscriptions/listen stream per modern backend)", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });

  afterEach(() => {
    vi.useRealTimers();
  });

  it("turns 100 added URIs into one listen request and resolves each add only once the acknowledgement honors it", async () => {
    const { listen, calls } = world();
    const uris = Array.from({ length: 100 }, (_, i) => `test://items/${i}`);
    const adds = uris.map((uri) => track(listen.add(uri)));
    await vi.advanceTimersByTimeAsync(5);
    expect(calls).toHaveLength(1);
    expect(calls[0]?.filter.resourceSubscriptions).toEqual(uris);
    expect(adds.every((a) => a.state === "pending")).toBe(true);

    calls[0]?.ack();
    await vi.advanceTimersByTimeAsync(0);
    expect(adds.every((a) => a.state === "resolved")).toBe(true);

    // Removing them all is one more request, not a hundred.
    for (const uri of uris) listen.remove(uri);
    await vi.advanceTimersByTimeAsync(50);
    expect(calls).toHaveLength(1); // no filter left at all: the stream is closed, nothing is reopened
    await listen.dispose();
  });

  it("does not reopen for URIs the backend honors unasked, and still narrows the stream when a URI it asked for is released", async () => {
    const { listen, calls } = world();
    const a = track(listen.add("test://a"));
    const b = track(listen.add("test://b"));
    await vi.advanceTimersByTimeAsync(5);
    calls[0]?.ack(["test://a", "test://b", "test://unasked"]);
    await vi.advanceTimersByTimeAsync(0);
    expect([a.state, b.state]).toEqual(["resolved", "resolved"]);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(calls).toHaveLength(1); // the extra URI asks for nothing (it reopened forever, with backoff)
    listen.remove("test://b");
    await vi.advanceTimersByTimeAsync(5);
    expect(calls).toHaveLength(2);
    expect(calls[1]?.filter.resourceSubscriptions).toEqual(["test://a"]);
    calls[1]?.ack(["test://a", "test://unasked"]);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(calls).toHaveLength(2);
    await listen.dispose();
  });

  it("keeps one listen request in flight and sends exactly one more afterwards with everything that changed meanwhile", async () => {
    const { listen, calls } = world({ toolsListChanged: true });
    const a = track(listen.add("u://a"));
    await vi.advanceTimersByTimeAsync(5);
    expect(calls).toHaveLength(1);

    const later = ["u://b", "u://c", "u://d"].map((uri) => track(listen.add(uri)));
    await vi.advanceTimersByTimeAsync(100);
    expect(calls).toHaveLength(1); // the first is still unanswered

    const first = calls[0]?.ack();
    await vi.advanceTimersByTimeAsync(5);
    expect(a.state).toBe("resolved");
    expect(later.every((l) => l.state === "pending")).toBe(true);
    expect(calls).toHaveLength(2);
    expect(calls[1]?.filter).toEqual({ toolsListChanged: true, resourceSubscriptions: ["u://a", "u://b", "u://c", "u://d"] });

    calls[1]?.ack();
    await vi.advanceTimersByTimeAsync(0);
    expect(later.every((l) => l.state === "resolved")).toBe(true);
    // The old stream is closed only once the new one covers it.
    expect(first?.closedByUs).toBe(true);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls).toHaveLength(2);
    await listen.dispose();
  });

  it("rejects a URI the backend leaves out of its acknowledgement, and every new one when it refuses the listen", async () => {
    const { listen, calls } = world();
    const a = track(listen.add("u://a"));
    const b = track(listen.add("u://b"));
    await vi.advanceTimersByTimeAsync(5);
    calls[0]?.ack(["u://a"]);
    await vi.advanceTimersByTimeAsync(0);
    expect(a.state).toBe("resolved");
    expect(b.state).toBe("rejected");
    expect(b.error).toBeInstanceOf(BrokerError);
    expect((b.error as BrokerError).code).toBe("BACKEND_UNAVAILABLE");

    // The refused URI is forgotten: the wanted filter is what is honored, nothing is reopened.
    await vi.advanceTimersByTimeAsync(5_000);
    expect(calls).toHaveLength(1);

    const c = track(listen.add("u://c"));
    await vi.advanceTimersByTimeAsync(5);
    calls[1]?.refuse(new ProtocolError(-32000, "too many subscriptions"));
    await vi.advanceTimersByTimeAsync(0);
    expect(c.state).toBe("rejected");
    expect((c.error as BrokerError).code).toBe("BACKEND_UNAVAILABLE");
    // `a` is still honored by the first stream: an add resolves at once, and nothing is reopened.
    await expect(listen.add("u://a")).resolves.toBeUndefined();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(calls).toHaveLength(2);
    await listen.dispose();
  });

  it("drops only the URI a refusal names (data.uri) and asks again for the others at once", async () => {
    const { listen, calls } = world();
    const good = track(listen.add("u://good"));
    const gone = track(listen.add("u://gone"));
    await vi.advanceTimersByTimeAsync(5);
    calls[0]?.refuse(new ProtocolError(-32602, "Resource not found", { uri: "u://gone" }));
    await vi.advanceTimersByTimeAsync(5);
    expect(gone.state).toBe("rejected");
    expect(calls).toHaveLength(2);
    expect(calls[1]?.filter.resourceSubscriptions).toEqual(["u://good"]);
    calls[1]?.ack();
    await vi.advanceTimersByTimeAsync(0);
    expect(good.state).toBe("resolved");
    await listen.dispose();
  });

  it("reopens a stream the backend ended gracefully, with backoff, reports the gap, and says how long it was down", async () => {
    const { listen, calls, gaps } = world({ toolsListChanged: true });
    listen.start();
    const a = track(listen.add("u://a"));
    await vi.advanceTimersByTimeAsync(5);
    const first = calls[0]?.ack();
    await vi.advanceTimersByTimeAsync(0);
    expect(a.state).toBe("resolved");
    expect(listen.downFor(Date.now())).toBe(0);

    first?.end("graceful"); // e.g. the backend restarts
    await vi.advanceTimersByTimeAsync(40);
    expect(listen.downFor(Date.now())).toBeGreaterThanOrEqual(40);
    expect(calls).toHaveLength(1); // backoff: initialDelayMs 100 with jitter, so at least 50
    await vi.advanceTimersByTimeAsync(60);
    expect(calls).toHaveLength(2);
    expect(calls[1]?.filter).toEqual({ toolsListChanged: true, resourceSubscriptions: ["u://a"] });
    calls[1]?.refuse(new ProtocolError(-32000, "still starting"));
    await vi.advanceTimersByTimeAsync(200);
    expect(calls).toHaveLength(3);
    expect(gaps).toEqual([]);
    calls[2]?.ack();
    await vi.advanceTimersByTimeAsync(0);
    expect(gaps).toHaveLength(1);
    expect(listen.downFor(Date.now())).toBe(0);
    await listen.dispose();
  });

  it("owes a lost URI its catch-up until a stream honors it again, even when the first reopen leaves it out", async () => {
    const { listen, calls, reported } = world({ toolsListChanged: true });
    listen.start();
    const adds = ["u://a", "u://b", "u://c"].map((uri) => track(listen.add(uri)));
    await vi.advanceTimersByTimeAsync(5);
    const first = calls[0]?.ack();
    await vi.advanceTimersByTimeAsync(0);
    expect(adds.every((a) => a.state === "resolved")).toBe(true);
    expect(reported).toEqual([]); // a first open is no gap

    first?.end("remote");
    await vi.advanceTimersByTimeAsync(100);
    expect(calls).toHaveLength(2);
    calls[1]?.ack(["u://a", "u://c"]); // the backend leaves u://b out this time
    await vi.advanceTimersByTimeAsync(0);
    expect(reported).toEqual([{ lists: true, uris: ["u://a", "u://c"] }]);

    listen.remove("u://c"); // unwanted now: owed nothing more
    await vi.advanceTimersByTimeAsync(5);
    expect(calls).toHaveLength(3);
    calls[2]?.ack(["u://a"]); // u://b left out again
    await vi.advanceTimersByTimeAsync(0);
    expect(reported).toHaveLength(1);

    // Retried with backoff (u://b is still wanted): honored at last, and owed its catch-up.
    await vi.advanceTimersByTimeAsync(1_000);
    expect(calls).toHaveLength(4);
    expect(calls[3]?.filter.resourceSubscriptions).toEqual(["u://a", "u://b"]);
    calls[3]?.ack();
    await vi.advanceTimersByTimeAsync(0);
    expect(reported).toEqual([
      { lists: true, uris: ["u://a", "u://c"] },
      { lists: false, uris: ["u://b"] },
    ]);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(calls).toHaveLength(4);
    expect(reported).toHaveLength(2);
    await listen.dispose();
  });

  it("retries at once when the health check asks, instead of waiting out the backoff", async () => {
    const { listen, calls } = world({ toolsListChanged: true });
    listen.start();
    await vi.advanceTimersByTimeAsync(5);
    calls[0]?.refuse(new ProtocolError(-32000, "not now"));
    await vi.advanceTimersByTimeAsync(10);
    expect(calls).toHaveLength(1);
    listen.retryNow();
    await vi.advanceTimersByTimeAsync(5);
    expect(calls).toHaveLength(2);
    await listen.dispose();
  });

  it("rejects pending adds when the connection ends", async () => {
    const { listen } = world();
    const a = track(listen.add("u://a"));
    await listen.dispose();
    await vi.advanceTimersByTimeAsync(0);
    expect(a.state).toBe("rejected");
    await expect(listen.add("u://b")).rejects.toMatchObject({ code: "BACKEND_UNAVAILABLE" });
  });
});
