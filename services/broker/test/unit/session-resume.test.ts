import { MemoryBus, MemoryPositions, MemoryUpdateLog } from "@mcp-broker/shared";
import { describe, expect, it } from "vitest";
import { SessionResume } from "../../src/session/session-resume.js";

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
});
