import { describe, expect, it } from "vitest";
import { EventSplitter } from "../../src/upstream/backend-http.js";
import { updatedEventTap, type UpdatedParams } from "../../src/upstream/sse-update-filter.js";

const updated = (uri: string) => JSON.stringify({ jsonrpc: "2.0", method: "notifications/resources/updated", params: { uri } });
const listChanged = JSON.stringify({ jsonrpc: "2.0", method: "notifications/tools/list_changed" });

/** Runs `chunks` (strings, or bytes) through the splitter with the filter's tap: what passes, and the URIs taken out. */
async function run(chunks: (string | Uint8Array)[]): Promise<{ passed: string; uris: string[] }> {
  const uris: string[] = [];
  const splitter = new EventSplitter(updatedEventTap((params: UpdatedParams) => uris.push(params.uri)));
  const out: Buffer[] = [];
  for (const chunk of chunks) out.push(splitter.push(Buffer.from(chunk)) ?? Buffer.alloc(0));
  out.push(splitter.end() ?? Buffer.alloc(0));
  return { passed: Buffer.concat(out).toString("utf8"), uris };
}

describe("SSE resources/updated filter", () => {
  it("takes plain resources/updated events out and passes everything else through unchanged, in order", async () => {
    const other = `event: message\nid: 7\ndata: ${listChanged}\n\n`;
    const { passed, uris } = await run([`id: 1\ndata: ${updated("a://1")}\n\n${other}data: ${updated("a://2")}\n\n: keep-alive\n\n`]);
    expect(uris).toEqual(["a://1", "a://2"]);
    expect(passed).toBe(`${other}: keep-alive\n\n`);
  });

  it("joins events split across chunks, multi-byte characters included, and any line ending", async () => {
    const bytes = new TextEncoder().encode(`data: ${updated("a://ü€")}\r\n\r\n`);
    const { passed, uris } = await run([bytes.slice(0, 30), bytes.slice(30, 41), bytes.slice(41), `data: ${updated("a://cr")}\r\r`, "data: ", updated("a://split"), "\n", "\n"]);
    expect(uris).toEqual(["a://ü€", "a://cr", "a://split"]);
    expect(passed).toBe("");
  });

  it("leaves the SDK anything that is not exactly a resources/updated notification", async () => {
    const events = [
      `event: other\ndata: ${updated("x://event")}\n\n`,
      `retry: 10\ndata: ${updated("x://retry")}\n\n`,
      `data: ${JSON.stringify({ jsonrpc: "2.0", id: 1, method: "notifications/resources/updated", params: { uri: "x://id" } })}\n\n`,
      `data: ${JSON.stringify({ jsonrpc: "2.0", method: "notifications/resources/updated", params: { uri: 5 } })}\n\n`,
      `data: {"jsonrpc":"2.0","method":"notifications/resources/updated",\n\n`,
      `data: ${JSON.stringify({ jsonrpc: "2.0", result: { note: "notifications/resources/updated" }, id: 3 })}\n\n`,
    ];
    const { passed, uris } = await run(events);
    expect(uris).toEqual([]);
    expect(passed).toBe(events.join(""));
  });

  it("reads data split over several data lines, and passes an unterminated tail through at the end", async () => {
    const json = updated("a://multi");
    const { passed, uris } = await run([`data: ${json.slice(0, 20)}\ndata:${json.slice(20)}\n\n`, "data: partial"]);
    // Two data lines join with a newline, which JSON allows between tokens only: this one splits a string, so it is not taken.
    expect(uris).toEqual([]);
    expect(passed).toBe(`data: ${json.slice(0, 20)}\ndata:${json.slice(20)}\n\ndata: partial`);
    const spaced = JSON.stringify({ jsonrpc: "2.0", method: "notifications/resources/updated", params: { uri: "a://lines" } }, null, 1).split("\n");
    const second = await run([`${spaced.map((line) => `data: ${line}`).join("\n")}\n\n`]);
    expect(second.uris).toEqual(["a://lines"]);
  });
});

describe("SSE filter on large events", () => {
  it("finds an event end that arrives in pieces after a long event, and one split between chunks", async () => {
    const big = `data: ${JSON.stringify({ jsonrpc: "2.0", id: 1, result: { text: "x".repeat(200_000) } })}`;
    const chunks = big.match(/[\s\S]{1,16384}/g) ?? [];
    const { passed, uris } = await run([...chunks, "\r", "\n", "\r", "\n", `data: ${updated("a://after")}\n`, "\n"]);
    expect(uris).toEqual(["a://after"]);
    expect(passed).toBe(`${big}\r\n\r\n`);
  });
});
