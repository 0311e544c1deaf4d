// Bundle the playground's front end into the Python package (src/lumen_ex/playground/static), where
// `lumen-ex serve` serves it and a wheel build ships it. The output is built, never committed
// (.gitignore); install.sh runs this with `npm ci` (the lockfile pins every package).
import { build } from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "src", "lumen_ex", "playground", "static");
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [join(here, "src", "main.js")],
  bundle: true,
  minify: true,
  format: "esm",
  target: ["es2020"],
  legalComments: "linked",   // the licences of the bundled packages, beside the bundle
  outfile: join(out, "app.js"),
  logLevel: "warning",
});
copyFileSync(join(here, "src", "style.css"), join(out, "app.css"));
console.log(`built ${out}`);
