// Renders Mermaid diagrams with real Mermaid (the npm package) in headless
// Chromium and fails on any parse or render error. Diagrams come from
// `.mmd` files and from the ```mermaid blocks of Markdown files:
//
//   node mermaid.mjs ../../docs/*.mmd ../../README.md
//
// With `--expect FILE`, FILE is JSON, `[{ "where": …, "source": …,
// "texts": [...] }]`, and each diagram must also draw every one of its
// `texts` as the whole text of a label (a state's description, an edge label
// or a note; a text listed twice, in two labels) as the browser shows it, a
// no-break space counting as a space, and no label may show one of Mermaid's
// entity placeholders. tests/test_docs.rs writes such a file from the
// machines themselves.
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

let all;
if (process.argv[2] === "--expect") {
  all = JSON.parse(readFileSync(process.argv[3], "utf8"));
} else {
  const files = process.argv.slice(2);
  if (files.length === 0) {
    console.error("usage: node mermaid.mjs FILE... | node mermaid.mjs --expect FILE");
    process.exit(2);
  }
  all = files.flatMap(diagrams);
}
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
  await page.setContent("<!doctype html><html><body><div id=host></div></body></html>");
  await page.addScriptTag({ path: mermaidJs });
  await page.evaluate(() => window.mermaid.initialize({ startOnLoad: false }));
  for (const [i, diagram] of all.entries()) {
    const result = await page.evaluate(
      async ({ source, id, texts }) => {
        try {
          await window.mermaid.parse(source);
          const { svg } = await window.mermaid.render(id, source);
          if (!svg.includes("<svg")) return { ok: false, error: "no SVG" };
          if (!texts) return { ok: true };
          // Draw it as a page does, then read every label's text.
          const host = document.getElementById("host");
          host.innerHTML = svg;
          const labels = [...host.querySelectorAll("foreignObject, text")]
            .filter((e) => !e.parentElement.closest("text"))
            .map((e) => e.textContent.replace(/\u00a0/g, " "));
          host.innerHTML = "";
          const broken = labels.filter((l) => /\ufb02\u00b0|\u00b6\u00df/.test(l));
          if (broken.length > 0) {
            return { ok: false, error: `labels drawn with entity placeholders: ${JSON.stringify(broken)}` };
          }
          // A text listed n times must be drawn n times.
          const wanted = texts.map((t) => t.replace(/\u00a0/g, " "));
          const count = (list, t) => list.filter((x) => x === t).length;
          const missing = [...new Set(wanted)].filter((t) => count(labels, t) < count(wanted, t));
          if (missing.length > 0) {
            return {
              ok: false,
              error: `not drawn as written: ${JSON.stringify(missing)}; the labels read ${JSON.stringify(labels)}`,
            };
          }
          return { ok: true };
        } catch (error) {
          return { ok: false, error: String(error && error.message ? error.message : error) };
        }
      },
      { source: diagram.source, id: `diagram${i}`, texts: diagram.texts },
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
