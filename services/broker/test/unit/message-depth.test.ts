import { describe, expect, it } from "vitest";
import { MAX_MESSAGE_DEPTH, nestsTooDeep, topLevelId } from "../../src/routing/message-depth.js";

const nested = (levels: number) => `${"[".repeat(levels)}${"]".repeat(levels)}`;

/** Both forms a raw message arrives in: HTTP bodies as bytes, stdio lines as strings. */
const forms = (text: string) => [text, Buffer.from(text, "utf8")];

describe("raw message depth", () => {
  it("allows MAX_MESSAGE_DEPTH levels of objects and arrays and refuses one more", () => {
    const at = (levels: number) => `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":${nested(levels - 2)}}}`;
    for (const text of forms(at(MAX_MESSAGE_DEPTH))) expect(nestsTooDeep(text)).toBe(false);
    for (const text of forms(at(MAX_MESSAGE_DEPTH + 1))) expect(nestsTooDeep(text)).toBe(true);
    expect(nestsTooDeep(Buffer.from(`{"a":[{"b":${"{\"c\":".repeat(200)}1${"}".repeat(200)}}]}`))).toBe(true);
  });

  it("does not count brackets inside strings, escaped quotes and backslashes included", () => {
    const brackets = "[{".repeat(300);
    // Strings built by JSON.stringify, so each is exactly what a client would send.
    for (const value of [brackets, `"${brackets}`, `\\"${brackets}`, `\\${brackets}\\`, `é€😀${brackets}`]) {
      for (const form of forms(JSON.stringify({ id: 1, s: value, t: [1] }))) expect(nestsTooDeep(form), value).toBe(false);
    }
    // An escaped backslash ends its escape: the quote after it closes the string, and what follows counts.
    const afterBackslash = `{"s":"\\\\","a":${nested(120)}}`;
    expect(JSON.parse(afterBackslash)).toMatchObject({ s: "\\" });
    for (const form of forms(afterBackslash)) expect(nestsTooDeep(form)).toBe(true);
  });

  it("reads the top-level id of a refused message without parsing it, wherever the member is", () => {
    const deep = nested(5_000);
    const cases: [string, string | number | null][] = [
      [`{"jsonrpc":"2.0","id":7,"method":"ping","params":{"a":${deep}}}`, 7],
      // The SDK client's order: the id after the params.
      [`{"method":"ping","params":{"a":${deep},"id":"inner"},"jsonrpc":"2.0","id":"req-\\"1\\""}`, 'req-"1"'],
      [`  {\n "params" : {"id":3,"a":${deep}} , "id" : -2.5e1 }`, -25],
      [`{"method":"id","params":{"a":${deep}},"x":"id"}`, null],
      [`{"params":{"a":${deep}},"id":null}`, null],
      [`{"params":{"a":${deep}},"id":{"n":1}}`, null],
      [`{"params":{"a":${deep}},"id":"${"x".repeat(300)}"}`, null],
      [`{"id":1,"params":{"a":${deep}},"id":2}`, 2],
      [`[{"id":1,"a":${deep}}]`, null],
      [`{"params":{"a":${deep}},"id":"unterminated`, null],
      [`{"params":"${deep}"`, null],
    ];
    for (const [text, id] of cases) for (const form of forms(text)) expect(topLevelId(form), text.slice(0, 40)).toBe(id);
  });
});
