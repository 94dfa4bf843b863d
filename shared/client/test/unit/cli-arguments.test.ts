import { describe, expect, it } from "vitest";
import { runCli, USAGE } from "../../src/cli.js";

/** Runs a command line that must be rejected before anything is contacted (the URL is never reached). */
async function rejected(args: readonly string[]): Promise<{ code: number; err: string; out: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(args, { out: (line) => out.push(line), err: (line) => err.push(line) });
  return { code, err: err.join("\n"), out: out.join("\n") };
}

const URL = "http://127.0.0.1:9/mcp";

/** Argument checks of `runCli`: all of them fail before a connection is tried. */
describe("mcp-broker-client arguments", () => {
  it.each([
    [["ls", URL, "--read"], "--read is an option of watch, not of ls"],
    [["ls", URL, "--max-attempts", "3"], "--max-attempts is an option of watch, not of ls"],
    [["watch", URL, "demo://a", "--json"], "--json is an option of ls, not of watch"],
    [["watch", URL], "watch needs at least one resource URI"],
    [["ls"], "ls needs the server's URL"],
    [["ls", URL, "demo://a"], "ls takes one URL, no URIs"],
    [["list", URL], 'unknown command "list"'],
    [[], "no command given"],
    [["ls", URL, "--era", "future"], "--era must be one of auto, legacy, modern"],
    [["ls", URL, "--header", "no colon"], '--header must look like "Name: value"'],
    [["ls", URL, "--header", "Bad Name: v"], '--header must look like "Name: value"'],
    [["ls", URL, "--header", "x-key: a\rb"], '--header must look like "Name: value"'],
    [["ls", URL, "--timeout", "0"], "--timeout must be a whole number of milliseconds > 0 and ≤ 2147483647"],
    [["ls", URL, "--timeout", "5s"], "--timeout must be a whole number of milliseconds > 0 and ≤ 2147483647"],
    [["ls", URL, "--timeout", "2147483648"], "--timeout must be a whole number of milliseconds > 0 and ≤ 2147483647"],
    [["watch", URL, "demo://a", "--max-attempts", "0"], "--max-attempts must be a whole number > 0"],
    [["watch", URL, "demo://a", "--max-attempts=1.5"], "--max-attempts must be a whole number > 0"],
    [["ls", URL, "--verbose"], "Unknown option '--verbose'"],
  ])("%j is a usage error: %s", async (args, problem) => {
    const { code, err, out } = await rejected(args);
    expect(code).toBe(2);
    expect(err).toContain(`mcp-broker-client: ${problem}`);
    expect(err).toContain(USAGE);
    expect(out).toBe("");
  });

  it("prints the usage on --help, with the timeout and reconnect options", async () => {
    const { code, out } = await rejected(["--help"]);
    expect(code).toBe(0);
    expect(out).toBe(USAGE);
    expect(out).toContain("--timeout <ms>             timeout of connecting and of each request (default: 30000)");
    expect(out).toContain("--max-attempts <n>");
  });
});
