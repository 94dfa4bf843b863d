import { describe, expect, it } from "vitest";
import { SseParser } from "../../src/load/sse-parser.js";

describe("the load generators' SSE parser", () => {
  it("hands over each event's data line, and its id line when asked, across chunk boundaries; a priming event (empty data) gives its id", () => {
    const data: string[] = [];
    const ids: string[] = [];
    const parser = new SseParser(
      (d) => data.push(d),
      (id) => ids.push(id),
    );
    parser.push("retry: 900\n\nid: 7\ndata: \n\nid: 8\nevent: message\ndata: {\"a\":1}\n\n: keep-alive\n\nid: 9.1\nev");
    parser.push("ent: message\ndata: {\"b\":2}\n\n");
    expect(data).toEqual(["", '{"a":1}', '{"b":2}']);
    expect(ids).toEqual(["7", "8", "9.1"]);
  });

  it("reads no ids unless asked", () => {
    const data: string[] = [];
    const parser = new SseParser((d) => data.push(d));
    parser.push("id: 3\ndata: x\n\n");
    expect(data).toEqual(["x"]);
  });
});
