import { execFile } from "node:child_process";
import { realpathSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const packageDir = fileURLToPath(new URL("../../", import.meta.url));
const repo = join(packageDir, "../../");

describe("the mcp-broker command", () => {
  it("is linked into node_modules/.bin by npm install and runs from there, however often dist/ is rebuilt", async () => {
    const bin = join(repo, "node_modules/.bin/mcp-broker");
    const { stdout } = await run(bin, ["--help"]);
    expect(stdout).toMatch(/^Usage/);
    // The link's target is the committed launcher, executable in git: a rebuild rewrites dist/ without the run bit.
    expect(realpathSync(bin)).toBe(join(packageDir, "bin/mcp-broker.js"));
    const { stdout: staged } = await run("git", ["ls-files", "--stage", "bin/mcp-broker.js"], { cwd: packageDir });
    expect(staged.split(" ")[0]).toBe("100755");
  });
});
