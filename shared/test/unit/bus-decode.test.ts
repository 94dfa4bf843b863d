import { describe, expect, it } from "vitest";
import { busMessageSchema, decodeBusMessage, encodeBusMessage, encodeUpdateHead, resourceUpdatedMessage, type BusMessage } from "../../src/engine/bus.js";

const valid = { kind: "resource.updated", v: 1, origin: "o", backendId: "b", key: "k", uri: "u", at: 1.5, update: 0, keys: 1, position: 7 };

describe("decodeBusMessage", () => {
  it("decodes exactly what busMessageSchema accepts, with the same output", () => {
    const samples: unknown[] = [
      valid,
      { ...valid, extra: "dropped" },
      { ...valid, v: 2 },
      { ...valid, origin: 1 },
      { ...valid, backendId: undefined },
      { ...valid, key: null },
      { ...valid, uri: {} },
      { ...valid, at: Number.NaN },
      { ...valid, at: "1" },
      { ...valid, update: -1 },
      { ...valid, update: 1.5 },
      { ...valid, keys: 0 },
      { ...valid, position: -1 },
      { ...valid, position: undefined },
      { ...valid, params: { _meta: { seq: 4 }, title: "t" } },
      { ...valid, params: {} },
      { ...valid, params: [] },
      { ...valid, params: null },
      { ...valid, params: "p" },
      { kind: "watch.release", v: 1, origin: "o", backendId: "b", uri: "u" },
      { kind: "watch.result", v: 1, origin: "o", id: 3, error: { code: "INTERNAL", message: "m" } },
      { kind: "nope" },
      null,
      "resource.updated",
    ];
    for (const sample of samples) {
      const schema = busMessageSchema.safeParse(sample);
      const decoded = decodeBusMessage(sample);
      expect(decoded.ok, JSON.stringify(sample)).toBe(schema.success);
      if (decoded.ok && schema.success) expect(decoded.message).toEqual(schema.data);
    }
  });
});

describe("encodeBusMessage", () => {
  it("ends every resource update with its position, so the update log can append it to the head, and decodes back", () => {
    const scrambled = { position: 12, keys: 2, update: 7, at: 3, uri: "u/x", key: "u", backendId: "b", origin: 'in"st', v: 1, kind: "resource.updated" } as const;
    const encoded = encodeBusMessage(scrambled);
    expect(encoded).toBe(`${encodeUpdateHead(scrambled, "u", 2)}12}`);
    expect(decodeBusMessage(JSON.parse(encoded))).toEqual({ ok: true, message: scrambled });
    const withParams = { ...scrambled, params: { _meta: { seq: 4 } } };
    expect(decodeBusMessage(JSON.parse(encodeBusMessage(withParams)))).toEqual({ ok: true, message: withParams });
    const update = { kind: "resource.updated", v: 1, origin: 'in"st', backendId: "b", uri: "u/x", params: { _meta: { seq: 4 } }, at: 3, update: 7 } as const;
    expect(resourceUpdatedMessage(update, "u", 2, 12)).toEqual(withParams);
    const release: BusMessage = { kind: "watch.release", v: 1, origin: 'in"st', backendId: "b", uri: "u" };
    expect(JSON.parse(encodeBusMessage(release))).toEqual(release);
  });
});
