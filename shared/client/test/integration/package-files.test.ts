import { execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";

const run = promisify(execFile);
const repo = fileURLToPath(new URL("../../../../", import.meta.url));
/** Every package the README's "Installing the packages" steps pack, by name, with their folders. */
const PACKAGES: Record<string, string> = {
  "@mcp-broker/shared": "shared",
  "@mcp-broker/member": "shared/member",
  "@mcp-broker/client": "shared/client",
  "@mcp-broker/broker": "services/broker",
  "@mcp-broker/worker": "services/worker",
};

interface Manifest {
  main?: string;
  types?: string;
  exports?: unknown;
  bin?: Record<string, string>;
  dependencies?: Record<string, string>;
}

interface Packed {
  name: string;
  filename: string;
  files: { path: string }[];
}

const manifest = async (name: string): Promise<Manifest> => JSON.parse(await readFile(join(repo, PACKAGES[name] ?? "", "package.json"), "utf8")) as Manifest;

/** Every file a manifest names as an entry point (main, types, exports, bin), as a path in the package. */
function entryFiles({ main, types, exports, bin }: Manifest): string[] {
  const targets = (value: unknown): string[] => (typeof value === "string" ? [value] : typeof value === "object" && value !== null ? Object.values(value).flatMap(targets) : []);
  return [...new Set([main, types, ...targets(exports), ...Object.values(bin ?? {})].flatMap((path) => (path === undefined ? [] : [path.replace(/^\.\//, "")])))];
}

/** `npm pack` of every package from the repository root, as npm reports it. */
async function pack(args: readonly string[]): Promise<Packed[]> {
  const workspaces = Object.keys(PACKAGES).flatMap((name) => ["-w", name]);
  const { stdout } = await run("npm", ["pack", "--json", ...args, ...workspaces], { cwd: repo });
  return JSON.parse(stdout) as Packed[];
}

/** What the tarballs hold. Needs the packages built (`npm run build`), like the other integration tests. */
describe("published package files", () => {
  const temp: string[] = [];
  afterAll(async () => {
    for (const dir of temp) await rm(dir, { recursive: true, force: true });
  });

  it("ship every entry file and the build, never sources, tests or build state", async () => {
    const packed = await pack(["--dry-run"]);
    expect(packed.map((p) => p.name).sort()).toEqual(Object.keys(PACKAGES).sort());
    for (const { name, files } of packed) {
      const paths = files.map((file) => file.path);
      expect(paths, name).toEqual(expect.arrayContaining(entryFiles(await manifest(name))));
      const unexpected = paths.filter((path) => !(["package.json", "README.md"].includes(path) || path.startsWith("bin/") || (path.startsWith("dist/") && !path.endsWith(".tsbuildinfo"))));
      expect(unexpected, name).toEqual([]);
    }
  });

  it("work from the tarballs alone, with only their registry dependencies beside them", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mcp-broker-pack-"));
    temp.push(dir);
    const modules = join(dir, "node_modules");
    // As `npm install <tarballs>` lays them out; the registry dependencies come from this repository.
    for (const { name, filename } of await pack(["--pack-destination", dir])) {
      const target = join(modules, name);
      await mkdir(target, { recursive: true });
      await run("tar", ["-xzf", join(dir, filename), "-C", target, "--strip-components=1"]);
    }
    const external = new Set((await Promise.all(Object.keys(PACKAGES).map(manifest))).flatMap((m) => Object.keys(m.dependencies ?? {})).filter((name) => PACKAGES[name] === undefined));
    for (const name of external) {
      const source = join(repo, "node_modules", name);
      expect(existsSync(source), source).toBe(true);
      await mkdir(dirname(join(modules, name)), { recursive: true });
      await symlink(source, join(modules, name), "dir");
    }

    const script = `
      const client = await import("@mcp-broker/client");
      const shared = await import("@mcp-broker/shared");
      await import("@mcp-broker/shared/node");
      console.log(typeof client.BrokerClient, new shared.UriTemplate("x/{id}").expand({ id: "1" }));`;
    const imported = await run(process.execPath, ["--input-type=module", "-e", script], { cwd: dir });
    expect(imported.stdout.trim()).toBe("function x/1");
    const help = await run(process.execPath, [join(modules, "@mcp-broker/client/bin/mcp-broker-client.js"), "--help"], { cwd: dir });
    expect(help.stdout).toContain("mcp-broker-client ls <url>");
    const worker = await run(process.execPath, [join(modules, "@mcp-broker/worker/bin/mcp-broker-worker.js"), "--help"], { cwd: dir });
    expect(worker.stdout).toContain("Usage: mcp-broker-worker --config <file>");

    // The broker from its tarball, with the demo backend it ships, answers on /mcp.
    const config = join(dir, "broker.json");
    await writeFile(config, JSON.stringify({ backends: [{ id: "demo", command: process.execPath, args: [join(modules, "@mcp-broker/broker/dist/demo/demo-backend.js")] }] }));
    const broker = spawn(process.execPath, [join(modules, "@mcp-broker/broker/bin/mcp-broker.js"), "--config", config, "--port", "0"], { cwd: dir, stdio: ["ignore", "ignore", "pipe"] });
    try {
      let stderr = "";
      const url = await new Promise<string>((done, fail) => {
        broker.stderr.on("data", (chunk: Buffer) => {
          stderr += chunk.toString("utf8");
          const ready = /mcp-broker ready: (\S+)/.exec(stderr);
          if (ready?.[1] !== undefined) done(ready[1]);
        });
        broker.once("exit", (code) => fail(new Error(`the packed broker exited with ${code}: ${stderr}`)));
      });
      const answer = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "pack-test", version: "1" } } }),
      });
      expect(answer.status).toBe(200);
      expect(await answer.text()).toContain('"serverInfo"');
    } finally {
      broker.kill("SIGKILL");
    }
  });
});
