import type { AddOutcome } from "@mcp-broker/shared";
import { describe, expect, it } from "vitest";
import { createActor, fromPromise } from "xstate";
import { LegacySession, type NotificationWriter } from "../../src/session/legacy-session.js";
import { legacySessionMachine } from "../../src/session/legacy-session-machine.js";
import { PreparedNotification } from "../../src/fanout/prepared-notification.js";
import { subscriptionFlow } from "../../src/session/subscription-flow.js";

/** A session whose subscribes always succeed, and streams that record what they are given. */
function session(historyLimit?: number): LegacySession {
  const flow = subscriptionFlow.provide({
    actors: {
      validate: fromPromise(async ({ input }: { input: { uri: string } }) => ({ backendId: "b", uri: input.uri })),
      reserve: fromPromise(async (): Promise<AddOutcome> => ({ status: "added", first: true })),
      ensureUpstream: fromPromise(async (): Promise<void> => {}),
      release: fromPromise(async (): Promise<void> => {}),
    },
  });
  const machine = legacySessionMachine.provide({
    actors: {
      subscribe: flow,
      unsubscribe: fromPromise(async (): Promise<void> => {}),
      releaseAll: fromPromise(async (): Promise<void> => {}),
    },
  });
  const actor = createActor(machine, { input: { id: "s", principal: "p", idleTimeoutMs: 60_000 } });
  const session = new LegacySession("s", "p", actor, historyLimit);
  actor.on("reply", ({ replyTo, error }) => session.settle(replyTo, error));
  actor.start();
  return session;
}

/** Like SseStream, it reports closed as soon as it is closed. */
function stream(): NotificationWriter & { events: { id: number; text: string }[] } {
  const events: { id: number; text: string }[] = [];
  let closed = false;
  return {
    events,
    get closed() {
      return closed;
    },
    write: (n) => events.push({ id: n.eventId, text: n.legacyFrame().toString("utf8") }),
    onClose: () => undefined,
    close: () => {
      closed = true;
    },
  };
}

describe("legacy session: event ids and resumption", () => {
  it("writes each event once, with an id line, and ids that increase", () => {
    const s = session();
    const first = stream();
    s.attachStream(first, undefined);
    s.deliver(PreparedNotification.listChanged("tools"));
    s.deliver(PreparedNotification.listChanged("prompts"));
    const [a, b] = first.events;
    expect(a?.text).toMatch(new RegExp(`^id: ${a?.id}\\nevent: message\\ndata: .*tools/list_changed.*\\n\\n$`));
    expect((b?.id ?? 0) > (a?.id ?? 0)).toBe(true);
  });

  it("replays exactly what followed Last-Event-ID", () => {
    const s = session();
    const notes = [PreparedNotification.listChanged("tools"), PreparedNotification.listChanged("prompts"), PreparedNotification.listChanged("resources")];
    for (const n of notes) s.deliver(n);
    const resumed = stream();
    s.attachStream(resumed, String(notes[0]?.eventId));
    expect(resumed.events.map((e) => e.id)).toEqual([notes[1]?.eventId, notes[2]?.eventId]);
  });

  it("re-notifies every subscription when the history no longer covers the gap, or the id is foreign", async () => {
    const s = session();
    await s.subscribe("x://a");
    await s.subscribe("x://b");
    const first = PreparedNotification.listChanged("tools");
    s.deliver(first);
    for (let i = 0; i < 600; i++) s.deliver(PreparedNotification.listChanged("tools"));
    const late = stream();
    s.attachStream(late, String(first.eventId));
    const described = (events: { text: string }[]) =>
      events.map((e) => {
        const { method, params } = JSON.parse(e.text.split("data: ")[1] ?? "null") as { method: string; params: { uri?: string } };
        return params.uri ?? method;
      });
    const everything = ["x://a", "x://b", "notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed"];
    expect(described(late.events)).toEqual(everything);
    const foreign = stream();
    s.attachStream(foreign, "not-an-id");
    expect(described(foreign.events)).toEqual(everything);
  });

  it("reads Last-Event-ID only as the decimal id the broker wrote: any other form is unknown and re-notifies", async () => {
    const s = session();
    await s.subscribe("x://a");
    const notes = [PreparedNotification.listChanged("tools"), PreparedNotification.listChanged("prompts")];
    for (const n of notes) s.deliver(n);
    const from = notes[0]?.eventId ?? 0;
    const replayed = (lastEventId: string) => {
      const resumed = stream();
      s.attachStream(resumed, lastEventId);
      return resumed.events.map((e) => e.id);
    };
    expect(replayed(String(from))).toEqual([notes[1]?.eventId]);
    // Number() reads each of these as `from` (or -0, which replayed the whole history).
    for (const id of [`0x${from.toString(16)}`, "-0", `+${from}`, `0${from}`, `${from}.0`, `${from}e0`, ` ${from}`, `${from}\n`, "9".repeat(17)]) {
      const events = replayed(id);
      expect(events, JSON.stringify(id)).toHaveLength(4); // x://a updated, and the three list_changed
      expect(events.includes(notes[0]?.eventId ?? -1), JSON.stringify(id)).toBe(false);
    }
  });

  it("keeps exactly server.resumeHistory events: a gap that size is replayed, one longer is re-notified", async () => {
    const s = session(4);
    await s.subscribe("x://a");
    const from = PreparedNotification.listChanged("tools");
    s.deliver(from);
    const kept = Array.from({ length: 4 }, () => PreparedNotification.listChanged("prompts"));
    for (const n of kept) s.deliver(n);
    const exact = stream();
    s.attachStream(exact, String(from.eventId));
    expect(exact.events.map((e) => e.id)).toEqual(kept.map((n) => n.eventId));
    s.deliver(PreparedNotification.listChanged("resources"));
    const tooLate = stream();
    s.attachStream(tooLate, String(from.eventId));
    expect(tooLate.events).toHaveLength(4); // one updated (x://a) and the three list_changed
    expect(tooLate.events[0]?.text).toContain("x://a");
  });

  it("replays resource updates, kept as their URIs, with the very frames first sent, after the ring wrapped", () => {
    const s = session(3);
    const first = stream();
    s.attachStream(first, undefined);
    const notes = [
      PreparedNotification.resourceUpdated("x://a/1"),
      PreparedNotification.resourceUpdated("x://a/2"),
      PreparedNotification.listChanged("tools"),
      PreparedNotification.resourceUpdated("x://b"),
      PreparedNotification.resourceUpdated("x://a/3"),
    ];
    for (const n of notes) s.deliver(n);
    const resumed = stream();
    s.attachStream(resumed, String(notes[1]?.eventId));
    expect(resumed.events).toEqual(first.events.slice(2));
    const none = stream();
    s.attachStream(none, String(notes[4]?.eventId));
    expect(none.events).toEqual([]);
  });

  it("keeps no events with server.resumeHistory 0: only the latest id resumes without a re-notification", async () => {
    const s = session(0);
    await s.subscribe("x://a");
    const notes = [PreparedNotification.resourceUpdated("x://a/1"), PreparedNotification.resourceUpdated("x://a/2")];
    for (const n of notes) s.deliver(n);
    const current = stream();
    s.attachStream(current, String(notes[1]?.eventId));
    expect(current.events).toEqual([]);
    const behind = stream();
    s.attachStream(behind, String(notes[0]?.eventId));
    expect(behind.events).toHaveLength(4);
    expect(behind.events[0]?.text).toContain('"uri":"x://a"');
  });

  it("treats an empty Last-Event-ID as none, and tells a client that replaced an open stream without one everything once", async () => {
    const s = session();
    await s.subscribe("x://a");
    const first = stream();
    s.attachStream(first, undefined);
    s.deliver(PreparedNotification.listChanged("tools"));
    const blank = stream();
    s.attachStream(blank, "  "); // replaces `first`, which was still open
    expect(blank.events.map((e) => e.id)).toHaveLength(4);
    const closedFirst = stream();
    s.attachStream(closedFirst, undefined);
    closedFirst.close();
    const afterClose = stream();
    s.attachStream(afterClose, ""); // the stream it replaces was closed: only what it missed (nothing)
    expect(afterClose.events).toEqual([]);
  });
});
