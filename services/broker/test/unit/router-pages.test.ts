import { describe, expect, it } from "vitest";
import { Catalog } from "../../src/catalog/catalog.js";
import { Router } from "../../src/routing/router.js";
import type { BackendPool } from "@mcp-broker/member";

describe("aggregated list pages", () => {
  const names = (n: number) => Array.from({ length: n }, (_, i) => `t${String(i).padStart(2, "0")}`);
  const setup = (tools: string[]) => {
    const catalog = new Catalog([{ id: "b", prefix: true }]);
    const set = (list: string[]) => catalog.replace("tools", "b", list.map((name) => ({ name })));
    set(tools);
    const router = new Router(catalog, { all: () => [] } as unknown as BackendPool, { pageSize: 5 });
    const page = (cursor?: unknown) => {
      const result = router.list("tools", cursor === undefined ? {} : { cursor });
      return { names: (result.tools as { name: string }[]).map((t) => t.name.replace("b__", "")), next: result.nextCursor };
    };
    return { set, page };
  };

  it("walks every item once, with an opaque cursor per page", () => {
    const { page } = setup(names(12));
    const first = page();
    const second = page(first.next);
    const third = page(second.next);
    expect([...first.names, ...second.names, ...third.names]).toEqual(names(12));
    expect(third.next).toBeUndefined();
  });

  it("neither repeats nor skips items that stayed when the list changes between pages", () => {
    const { set, page } = setup(names(12));
    const first = page();
    set(names(12).filter((n) => n !== "t01")); // an item of the first page goes away
    const second = page(first.next);
    expect(second.names).toEqual(["t05", "t06", "t07", "t08", "t09"]);
    set(names(12).filter((n) => n !== "t01" && n !== "t09")); // the cursor's own item goes away
    expect(page(second.next).names).toEqual(["t10", "t11"]);
  });

  it("rejects a cursor it did not make with -32602", () => {
    const { page } = setup(names(3));
    expect(() => page("bogus")).toThrow(expect.objectContaining({ code: "BAD_PARAMS" }));
    expect(() => page(Buffer.from(JSON.stringify({ k: "prompts", a: "x", n: "y", o: 0 })).toString("base64url"))).toThrow(expect.objectContaining({ code: "BAD_PARAMS" }));
  });
});
