import { MemoryBus, MemoryPositions, MemoryUpdateLog } from "@mcp-broker/shared";
import { describe, expect, it } from "vitest";
import { SessionResume } from "../../src/session/session-resume.js";
import { EventClock } from "../../src/fanout/event-ids.js";

const target = (uri: string): Parameters<SessionResume["since"]>[0][number] => ({ backendId: "b", uri });

function setup() {
  const positions = new MemoryPositions();
  const updates = new MemoryUpdateLog(new MemoryBus(), positions);
  const resume = new SessionResume({ updates, listPosition: () => 0 });
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
    const resume = new SessionResume({ updates: Object.assign(Object.create(updates) as MemoryUpdateLog, { lostUpTo: async () => lost }), listPosition: () => 0 });
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
  it("keeps ids increasing when positions start over below what went out (Redis lost its counter), and places made-up events at a reserved position or later", () => {
    const clock = new EventClock();
    expect(clock.cluster(10)).toEqual({ position: 10, local: 0 });
    expect(clock.cluster(10)).toEqual({ position: 10, local: 0 });
    const older = clock.cluster(3);
    expect(older.position).toBe(10);
    expect(older.local).toBeGreaterThan(0);
    expect(clock.newest()).toBe(10);
    expect(clock.after(5)).toEqual({ position: 10, local: older.local + 1 });
    expect(clock.after(20)).toEqual({ position: 20, local: older.local + 2 });
    expect(clock.cluster(11)).toEqual({ position: 11, local: 0 });
  });
});
