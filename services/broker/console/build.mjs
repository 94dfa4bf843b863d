// Builds the operator console's front end into dist/console/ (served at /console/ by the broker):
// index.html as it is, and one bundle each of script and styles under assets/.
import { copyFile, mkdir } from "node:fs/promises";
import { build } from "esbuild";

const out = new URL("../dist/console/", import.meta.url);
await mkdir(new URL("assets/", out), { recursive: true });
await build({
  entryPoints: { app: new URL("src/main.tsx", import.meta.url).pathname },
  outdir: new URL("assets/", out).pathname,
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  jsx: "automatic",
  jsxImportSource: "preact",
  legalComments: "none",
  logLevel: "warning",
});
await copyFile(new URL("index.html", import.meta.url), new URL("index.html", out));
