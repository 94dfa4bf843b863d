import { describe, expect, it } from "vitest";
import { listenStreamPart, PreparedNotification } from "../../src/fanout/prepared-notification.js";

const SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId";
const CURSOR = "io.mcp-broker/cursor";

/** The JSON-RPC message of one SSE event. */
function data(frame: Buffer | Buffer[]): unknown {
  const text = Buffer.concat(Array.isArray(frame) ? frame : [frame]).toString("utf8");
  const line = text.split("\n").find((l) => l.startsWith("data: "));
  return JSON.parse(line?.slice(6) ?? "null");
}

describe("PreparedNotification.resourceUpdated", () => {
  const id = { position: 42, local: 0 };
  const passedOn = { _meta: { "example.com/seq": 7, nested: { a: [1, 2] } }, title: "Notes" };

  it("keeps what the backend said besides the URI, on every way out; only the URI is the broker's", () => {
    const note = PreparedNotification.resourceUpdated("leg+test://a", id, { ...passedOn, uri: "test://a" });
    const params = { uri: "leg+test://a", ...passedOn };
    expect(data(note.legacyFrame())).toEqual({ jsonrpc: "2.0", method: "notifications/resources/updated", params });
    expect(JSON.parse(note.jsonLine())).toEqual({ jsonrpc: "2.0", method: "notifications/resources/updated", params });
    const listenMeta = { ...passedOn._meta, [SUBSCRIPTION_ID]: "sub-1", [CURSOR]: "c:42" };
    expect(data(note.modernBody(listenStreamPart("sub-1", "c:")))).toEqual({ jsonrpc: "2.0", method: "notifications/resources/updated", params: { ...params, _meta: listenMeta } });
    expect(JSON.parse(note.jsonLine({ subscriptionId: "sub-1", cursorPrefix: "c:" }))).toMatchObject({ params: { ...params, _meta: listenMeta } });
  });

  it("encodes once per era: every modern stream gets the same bytes around its own subscription id", () => {
    const note = PreparedNotification.resourceUpdated("leg+test://a", id, passedOn);
    const one = note.modernBody(listenStreamPart(1, "x:"));
    const two = note.modernBody(listenStreamPart("two", "y:"));
    expect(two[0]).toBe(one[0]);
    expect(two[2]).toBe(one[2]);
    expect(note.legacyFrame()).toBe(note.legacyFrame());
    expect(data(two)).toMatchObject({ params: { _meta: { "example.com/seq": 7, [SUBSCRIPTION_ID]: "two", [CURSOR]: "y:42" } } });
  });

  it("puts the stream's own subscription id and cursor in place of any the params hold, even text that looks like its placeholders", () => {
    const tricky = { _meta: { [SUBSCRIPTION_ID]: "upstream", [CURSOR]: "upstream:9", odd: "\u0000SUBSCRIPTION_ID\u0000 \u0000CURSOR\u0000" }, after: "\u0000CURSOR\u0000" };
    const note = PreparedNotification.resourceUpdated("u", id, tricky);
    const expected = { uri: "u", after: tricky.after, _meta: { odd: tricky._meta.odd, [SUBSCRIPTION_ID]: 5, [CURSOR]: "p:42" } };
    expect(data(note.modernBody(listenStreamPart(5, "p:")))).toEqual({ jsonrpc: "2.0", method: "notifications/resources/updated", params: expected });
    expect(JSON.parse(note.jsonLine({ subscriptionId: 5, cursorPrefix: "p:" })).params).toEqual(expected);
  });

  it("passes on a `__proto__` key as the backend's JSON had it, in the params and in `_meta`", () => {
    const passed = JSON.parse('{"__proto__": {"polluted": true}, "_meta": {"__proto__": {"x": 1}, "k": 2}}') as Record<string, unknown>;
    const note = PreparedNotification.resourceUpdated("u", id, passed);
    const text = Buffer.concat(note.modernBody(listenStreamPart(5, "p:"))).toString("utf8");
    expect(text).toContain('"__proto__":{"polluted":true}');
    expect(text).toContain('"_meta":{"__proto__":{"x":1},"k":2,');
    expect(JSON.parse(note.jsonLine({ subscriptionId: 5, cursorPrefix: "p:" })).params._meta.k).toBe(2);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it("is kept by a session's history as its URI alone only when it says nothing more", () => {
    expect(PreparedNotification.resourceUpdated("u", id).bareUpdatedUri).toBe("u");
    expect(PreparedNotification.resourceUpdated("u", id, passedOn).bareUpdatedUri).toBeUndefined();
    expect(PreparedNotification.listChanged("tools", id).bareUpdatedUri).toBeUndefined();
  });
});
