import { CHANNEL, MemoryBus, MemoryPositions, MemoryUpdateLog, systemClock } from "@mcp-broker/shared";
import { describe, expect, it, vi } from "vitest";
import { SessionResume } from "../../src/session/session-resume.js";
import { EventClock } from "../../src/fanout/event-ids.js";
import { BusBarrier } from "../../src/fanout/bus-barrier.js";

const target = (uri: string): Parameters<SessionResume["since"]>[0][number] => ({ backendId: "b", uri });

function setup() {
  const positions = new MemoryPositions();
  const updates = new MemoryUpdateLog(new MemoryBus(), positions);
  const resume = new SessionResume({ updates, listPosition: () => 0, caughtUp: async () => 0 });
  const publish = (uri: string) => updates.publish({ backendId: "b", uri } as Parameters<MemoryUpdateLog["publish"]>[0], [uri]);
  return { updates, resume, publish };
}

describe("what the cluster can tell a resuming client (SessionResume)", () => {
  it("tells exactly which watched URIs were updated after the position, for a watch that began before it", async () => {
    const { updates, resume, publish } = setup();
    await updates.watched("b", "x://a");
    await updates.watched("b", "x://b");
    const seen = await publish("x://a");
    await publish("x://b");
    expect(await resume.since([target("x://a"), target("x://b")], seen)).toEqual({ updated: [{ target: target("x://b"), position: seen + 1 }], unknown: [], lists: [] });
  });

  it("cannot tell about a URI whose watch began at the position the client saw, or later: the gap before it was not watched", async () => {
    const { updates, resume, publish } = setup();
    await updates.watched("b", "x://a");
    const seen = await publish("x://a");
    // The last subscriber left (the watch ended), the resource changed unseen, a new watch began.
    await updates.unwatched("b", "x://a");
    await updates.watched("b", "x://a");
    expect(await resume.since([target("x://a")], seen)).toEqual({ updated: [], unknown: [target("x://a")], lists: [] });
    expect(await resume.since([target("x://never")], seen)).toMatchObject({ unknown: [target("x://never")] });
  });

  it("rejects a position the cluster never handed out", async () => {
    const { resume, publish } = setup();
    const last = await publish("x://a");
    await expect(resume.since([], last + 1)).rejects.toThrow(/never handed out/);
  });

  it("rejects a position that may have been handed out twice (Redis lost the counter, and it was raised past it), and tells after it", async () => {
    const { updates, publish } = setup();
    await updates.watched("b", "x://a");
    const before = await publish("x://a");
    let lost = 0;
    const resume = new SessionResume({ updates: Object.assign(Object.create(updates) as MemoryUpdateLog, { lostUpTo: async () => lost }), listPosition: () => 0, caughtUp: async () => 0 });
    lost = before + 5;
    await updates.raiseTo(lost);
    await expect(resume.since([target("x://a")], before)).rejects.toThrow(/lost/);
    await expect(resume.since([target("x://a")], lost)).rejects.toThrow(/lost/);
    const after = await publish("x://a");
    expect(after).toBe(lost + 1);
    expect(await resume.since([target("x://a")], lost + 1)).toEqual({ updated: [], unknown: [], lists: [] });
  });
});

describe("a broker's event ids (EventClock)", () => {
  it("keeps ids increasing when positions start over below what went out (Redis lost its counter), and places made-up events after a position caught up with, never before what went out", () => {
    const clock = new EventClock();
    expect(clock.cluster(10)).toEqual({ position: 10, local: 0 });
    expect(clock.cluster(10)).toEqual({ position: 10, local: 0 });
    const older = clock.cluster(3);
    expect(older.position).toBe(10);
    expect(older.local).toBeGreaterThan(0);
    expect(clock.newest()).toBe(10);
    clock.caughtUp(5);
    expect(clock.next()).toEqual({ position: 10, local: older.local + 1 });
    clock.caughtUp(20);
    expect(clock.newest()).toBe(20);
    expect(clock.next()).toEqual({ position: 20, local: older.local + 2 });
    expect(clock.cluster(21)).toEqual({ position: 21, local: 0 });
  });
});

describe("positions this member has caught up with (BusBarrier)", () => {
  function member(timeoutMs?: number) {
    const bus = new MemoryBus();
    const updates = new MemoryUpdateLog(bus, new MemoryPositions());
    const barrier = new BusBarrier({ updates, instanceId: "me", clock: systemClock, timeoutMs });
    const heard: number[] = [];
    bus.onMessage((_channel, message) => {
      if (message.kind === "bus.barrier") barrier.received(message);
      else if (message.kind === "resource.updated") heard.push(message.position);
    });
    return { bus, updates, barrier, heard };
  }
  const publish = (updates: MemoryUpdateLog) => updates.publish({ kind: "resource.updated", v: 1, origin: "o", backendId: "b", uri: "x://a", at: 0, update: 1 }, ["x://a"]);

  it("resolves with a position after everything published before, once all of that has been handled", async () => {
    const { bus, updates, barrier, heard } = member();
    await bus.subscribe(CHANNEL.replies("me"));
    await bus.subscribe(CHANNEL.resource("b", "x://a"));
    const published = [publish(updates), publish(updates), publish(updates)];
    const position = await barrier.caughtUp();
    expect(heard).toEqual(await Promise.all(published));
    expect(position).toBeGreaterThan(Math.max(...heard));
  });

  it("makes one reservation and one barrier for the callers of one tick", async () => {
    const { bus, updates, barrier } = member();
    await bus.subscribe(CHANNEL.replies("me"));
    const marks: unknown[] = [];
    const reserve = updates.reserve.bind(updates);
    updates.reserve = (mark) => (marks.push(mark?.message.kind), reserve(mark));
    const together = await Promise.all([barrier.caughtUp(), barrier.caughtUp(), barrier.caughtUp()]);
    const later = await barrier.caughtUp();
    expect(marks).toEqual(["bus.barrier", "bus.barrier"]);
    expect(new Set(together).size).toBe(1);
    expect(later).toBeGreaterThan(together[0] ?? Infinity);
  });

  it("runs a placed change when its barrier arrives: after everything published before its position, before everything published after", async () => {
    const { bus, updates, barrier, heard } = member();
    await bus.subscribe(CHANNEL.replies("me"));
    await bus.subscribe(CHANNEL.resource("b", "x://a"));
    const before = publish(updates);
    let after: Promise<number> | undefined;
    const reserve = updates.reserve.bind(updates);
    // An update published right after the reservation, before the barrier is back.
    updates.reserve = (mark) => {
      const reserved = reserve(mark);
      after = publish(updates);
      return reserved;
    };
    let ranAt: { position: number; heard: number[] } | undefined;
    const placed = await barrier.place((position) => (ranAt = { position, heard: [...heard] }));
    expect(ranAt).toEqual({ position: placed, heard: [await before] });
    expect(await after).toBeGreaterThan(placed);
    await vi.waitFor(() => expect(heard).toHaveLength(2));
  });

  it("rejects when the barrier does not come back in time (the bus is away), and ignores another member's", async () => {
    const { barrier } = member(50);
    // Its reply channel is not subscribed: the barrier never arrives.
    await expect(barrier.caughtUp()).rejects.toThrow(/did not come back/);
    barrier.received({ origin: "someone-else", id: 1, position: 1 });
  });
});
