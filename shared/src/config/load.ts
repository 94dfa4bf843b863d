import { readFile, stat } from "node:fs/promises";
import path from "node:path";
import { parse as parseYaml } from "yaml";
import { ConfigError } from "../errors.js";
import { parseConfig, type ConfigEnv, type ConfigOverrides } from "./parse.js";
import type { BrokerConfig } from "./schema.js";

/** Reads a JSON (`.json`) or YAML (anything else) config file and validates it. */
export async function loadConfigFile(file: string, env: ConfigEnv = {}, overrides: ConfigOverrides = {}): Promise<BrokerConfig> {
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (error) {
    throw new ConfigError(file, [`cannot read the file: ${(error as Error).message}`]);
  }
  let value: unknown;
  try {
    value = path.extname(file).toLowerCase() === ".json" ? JSON.parse(text) : parseYaml(text);
  } catch (error) {
    throw new ConfigError(file, [`not valid ${path.extname(file) === ".json" ? "JSON" : "YAML"}: ${(error as Error).message}`]);
  }
  const config = parseConfig(value, file, env, overrides);
  // Stdio backends run in the config file's folder unless told otherwise, so relative paths in
  // `args` mean the same thing wherever the broker is started from.
  const base = path.dirname(path.resolve(file));
  const issues: string[] = [];
  for (const [i, backend] of config.backends.entries()) {
    if (!("command" in backend)) continue;
    const given = backend.cwd;
    backend.cwd = path.resolve(base, given ?? ".");
    // A folder that is not there made every start fail as "spawn <command> ENOENT", blaming the command.
    if (given !== undefined && !(await stat(backend.cwd).then((found) => found.isDirectory(), () => false))) issues.push(`backends.${i}.cwd: no such folder: ${backend.cwd}`);
  }
  if (issues.length > 0) throw new ConfigError(file, issues);
  return config;
}
