#!/usr/bin/env node
// The command npm links: it loads the build, so a rebuild (which rewrites dist/) keeps the link and the run bit.
import { existsSync } from "node:fs";

const entry = new URL("../dist/cli.js", import.meta.url);
if (!existsSync(entry)) {
  console.error("mcp-broker: not built yet (no dist/cli.js); run `npm run build` in the repository");
  process.exit(1);
}
await import(entry.href);
