#!/usr/bin/env node
// The command npm links: it loads the build, so a rebuild (which rewrites dist/) keeps the link and the run bit.
import { existsSync } from "node:fs";

const entry = new URL("../dist/cli.js", import.meta.url);
if (!existsSync(entry)) {
  console.error("mcp-broker-client: not built yet (no dist/cli.js); run `npm run build` in the repository");
  process.exit(1);
}
// dist/cli.js runs by itself only as the entry script; loaded from here, it is started.
const { main } = await import(entry.href);
await main();
