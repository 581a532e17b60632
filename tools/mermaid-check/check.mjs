// Renders Mermaid diagrams with real Mermaid (the npm package) in headless
// Chromium and fails on any parse or render error. Diagrams come from
// `.mmd` files and from the ```mermaid blocks of Markdown files:
//
//   node check.mjs ../../docs/*.mmd ../../README.md
//
// CHROMIUM names the browser (default /usr/bin/chromium).

import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { chromium } from "playwright-core";

const require = createRequire(import.meta.url);
const mermaidJs = require.resolve("mermaid/dist/mermaid.min.js");

/** The diagrams of one file: the whole file for `.mmd`, else its blocks. */
function diagrams(path) {
  const text = readFileSync(path, "utf8");
  if (path.endsWith(".mmd")) return [{ where: path, source: text }];
  const found = [];
  const fence = /```mermaid\n([\s\S]*?)```/g;
  for (let match; (match = fence.exec(text)); ) {
    const line = text.slice(0, match.index).split("\n").length;
    found.push({ where: `${path}:${line}`, source: match[1] });
  }
  return found;
}

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: node check.mjs FILE...");
  process.exit(2);
}
const all = files.flatMap(diagrams);
if (all.length === 0) {
  console.error("no Mermaid diagram found in", files.join(" "));
  process.exit(1);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
let failed = 0;
try {
  const page = await browser.newPage();
  await page.setContent("<!doctype html><html><body></body></html>");
  await page.addScriptTag({ path: mermaidJs });
  await page.evaluate(() => window.mermaid.initialize({ startOnLoad: false }));
  for (const [i, diagram] of all.entries()) {
    const result = await page.evaluate(
      async ({ source, id }) => {
        try {
          await window.mermaid.parse(source);
          const { svg } = await window.mermaid.render(id, source);
          return { ok: svg.includes("<svg"), error: "no SVG" };
        } catch (error) {
          return { ok: false, error: String(error && error.message ? error.message : error) };
        }
      },
      { source: diagram.source, id: `diagram${i}` },
    );
    if (result.ok) {
      console.log(`ok    ${diagram.where}`);
    } else {
      failed += 1;
      console.log(`FAIL  ${diagram.where}: ${result.error}`);
    }
  }
} finally {
  await browser.close();
}
if (failed > 0) {
  console.error(`${failed} of ${all.length} Mermaid diagrams did not render`);
  process.exit(1);
}
console.log(`all ${all.length} Mermaid diagrams render`);
