import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
import { ERROR_CATALOG } from "../../src/errors.js";

/** The README's error table is the user-facing catalog: it must match the code exactly. */
it("documents every error code exactly as the catalog defines it", () => {
  const readme = readFileSync(fileURLToPath(new URL("../../../README.md", import.meta.url)), "utf8");
  const table = readme.split("<!-- errors:start -->")[1]?.split("<!-- errors:end -->")[0] ?? "";
  const rows = table
    .split("\n")
    .filter((line) => line.startsWith("| -"))
    .map((line) => line.split(/(?<!\\)\|/).map((cell) => cell.trim()).slice(1, 4));
  const expected = Object.entries(ERROR_CATALOG).map(([name, entry]) => {
    const modern = "modernJsonRpc" in entry ? ` (modern: ${entry.modernJsonRpc})` : "";
    return [`${entry.jsonRpc}${modern}`, name, entry.summary.replaceAll("|", "\\|")];
  });
  expect(rows).toEqual(expected);
});
