import { readdir, readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { describe, expect, expectTypeOf, it } from "vitest";
import { EXIT_CODES, USAGE } from "../../src/cli.js";
import { CLIENT_ERROR_CATALOG, type BrokerClientEventMap, type ResourceContentChange, type ResourceUpdateReason } from "../../src/index.js";

const root = fileURLToPath(new URL("../../", import.meta.url));

describe("package contract", () => {
  it("documents exactly the error catalog in the README", async () => {
    const readme = await readFile(`${root}README.md`, "utf8");
    const section = readme.slice(readme.indexOf("## Errors"), readme.indexOf("## CLI"));
    const documented = Object.fromEntries([...section.matchAll(/^\| `([A-Z_]+)` \| (.+) \|$/gm)].map(([, code, meaning]) => [code, meaning]));
    expect(documented).toEqual(CLIENT_ERROR_CATALOG);
  });

  it("documents exactly the CLI's exit codes in the README", async () => {
    const readme = await readFile(`${root}README.md`, "utf8");
    const section = readme.slice(readme.indexOf("## CLI"), readme.indexOf("## Semantics"));
    const documented = [...section.matchAll(/^\| `(\d+)` \| /gm)].map(([, code]) => Number(code));
    expect(documented).toEqual(Object.values(EXIT_CODES));
  });

  it("shows the CLI's usage and options in the README as --help prints them", async () => {
    const readme = await readFile(`${root}README.md`, "utf8");
    const section = readme.slice(readme.indexOf("## CLI"), readme.indexOf("## Semantics"));
    const block = /```text\n([\s\S]*?)\n```/.exec(section)?.[1];
    expect(block).toBe(USAGE.slice(0, USAGE.indexOf("\n\n", USAGE.indexOf("Options:"))));
  });

  it("documents the untyped addEventListener fallback", async () => {
    const readme = await readFile(`${root}README.md`, "utf8");
    const api = readme.slice(readme.indexOf("### Methods"), readme.indexOf("## Events"));
    expect(api).toMatch(/\| `addEventListener` \/ `removeEventListener` \|.*untyped overload.*Use `on\(\)` to have the names checked/);
  });

  it("documents the update events as typed, and that each update fires exactly one kind of them", async () => {
    expectTypeOf<keyof BrokerClientEventMap["resourceUpdated"]>().toEqualTypeOf<"uri" | "reason">();
    expectTypeOf<ResourceContentChange["cause"]>().toEqualTypeOf<"read" | "update">();
    expectTypeOf<Extract<ResourceContentChange, { cause: "update" }>["reason"]>().toEqualTypeOf<ResourceUpdateReason>();
    const readme = await readFile(`${root}README.md`, "utf8");
    const events = readme.slice(readme.indexOf("## Events"), readme.indexOf("## Content cache"));
    const detail = (event: string): string | undefined => new RegExp(`^\\| \`${event}\` \\| (.+?) \\|`, "m").exec(events)?.[1];
    expect(detail("resourceUpdated")).toBe("`{ uri, reason }`");
    expect(detail("resourceContentChange")).toBe(
      '`{ source: "resource", uri, entry, content, timestamp, cause, reason?, error? }` or `{ source: "template", uri, uriTemplate, entry, content, timestamp, cause, reason?, error? }`',
    );
    expect(events).toContain("**How an update is reported.**");
    expect(events).toMatch(/fires either `resourceUpdated` once or `resourceContentChange` with `cause: "update"` — never\s+both, never neither/);
  });

  it("keeps Node-only modules out of the library (only the CLI may use them)", async () => {
    const files = (await readdir(`${root}src`, { recursive: true })).filter((name) => name.endsWith(".ts") && name !== "cli.ts");
    expect(files.length).toBeGreaterThan(15);
    for (const name of files) {
      const source = await readFile(`${root}src/${name}`, "utf8");
      const imports = [...source.matchAll(/from "([^"]+)"/g)].map(([, specifier]) => specifier);
      expect(imports.filter((specifier) => specifier?.startsWith("node:") || specifier?.endsWith("/stdio")), name).toEqual([]);
      expect(source, name).not.toMatch(/\bprocess\.|\bBuffer\b|\brequire\(/);
    }
  });

  it("bundles for browsers with no externals and no Node built-ins", async () => {
    const result = await build({ entryPoints: [`${root}src/index.ts`], bundle: true, platform: "browser", format: "esm", write: false, logLevel: "silent" });
    expect(result.errors).toEqual([]);
    const text = result.outputFiles[0]?.text ?? "";
    expect(text).toMatch(/export\s*\{[^}]*\bBrokerClient\b/);
    expect(text).not.toMatch(/["']node:/);
  });
});
