import { describe, expect, it } from "vitest";
import { passedOnParams } from "../../src/upstream/update-params.js";

describe("passedOnParams", () => {
  it("is undefined for an update that says nothing but its URI (no allocation on the hot path)", () => {
    expect(passedOnParams({ uri: "a://x" })).toBeUndefined();
  });

  it("keeps everything else the backend said, `_meta` included", () => {
    expect(passedOnParams({ uri: "a://x", _meta: { seq: 3 }, title: "X", extra: [1] })).toEqual({ _meta: { seq: 3 }, title: "X", extra: [1] });
  });

  it("leaves out the `_meta` keys of the backend's own listen stream, and `_meta` when nothing else is in it", () => {
    const hop = { "io.modelcontextprotocol/subscriptionId": "up-1", "io.mcp-broker/cursor": "c:9" };
    expect(passedOnParams({ uri: "a://x", _meta: hop })).toBeUndefined();
    expect(passedOnParams({ uri: "a://x", _meta: { ...hop, seq: 3 } })).toEqual({ _meta: { seq: 3 } });
  });

  it("passes a `_meta` that is not an object on as it came (the broker does not repair what a backend says)", () => {
    expect(passedOnParams({ uri: "a://x", _meta: "odd" })).toEqual({ _meta: "odd" });
  });
});
