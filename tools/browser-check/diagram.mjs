// Draws the library's SVG state diagrams in headless Chromium and checks
// what a reader sees: each drawing parses as XML, has a size, draws every
// text in it inside it and every name the machine has as written, and
// nothing in it runs (no dialog opens, the console logs no error).
//
//   node diagram.mjs --expect FILE
//       FILE is JSON, `[{ "where": …, "svg": …, "texts": [...] }]`: each
//       drawing, and the texts it must draw, a text listed twice drawn
//       twice. tests/derive/diagram.rs writes it from the machines.
//   node diagram.mjs --page PAGE TEXT...
//       PAGE is an HTML file (a rustdoc page) holding one diagram, in a
//       `div.stateguard-diagram`; it must draw every TEXT.
//
// CHROMIUM names the browser (default /usr/bin/chromium).

import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { resolve } from "node:path";
import { chromium } from "playwright-core";

const [mode, ...rest] = process.argv.slice(2);
let checks;
if (mode === "--expect" && rest.length === 1) {
  checks = JSON.parse(readFileSync(rest[0], "utf8")).map((c) => ({ ...c, page: null }));
} else if (mode === "--page" && rest.length >= 1) {
  checks = [{ where: rest[0], page: rest[0], svg: null, texts: rest.slice(1) }];
} else {
  console.error("usage: node diagram.mjs --expect FILE | node diagram.mjs --page PAGE TEXT...");
  process.exit(2);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
let failed = 0;
try {
  for (const check of checks) {
    const page = await browser.newPage();
    const trouble = [];
    page.on("dialog", async (dialog) => {
      trouble.push(`a dialog opened: ${dialog.message()}`);
      await dialog.dismiss();
    });
    page.on("console", (message) => {
      if (message.type() === "error") trouble.push(`console error: ${message.text()}`);
    });
    page.on("pageerror", (error) => trouble.push(`page error: ${error.message}`));
    if (check.page) {
      await page.goto(pathToFileURL(resolve(check.page)).href);
    } else {
      await page.setContent(`<!doctype html><html><body>${check.svg}</body></html>`);
    }
    const result = await page.evaluate((texts) => {
      const svgs = check_svgs();
      function check_svgs() {
        const inDiv = [...document.querySelectorAll("div.stateguard-diagram > svg")];
        return inDiv.length > 0 ? inDiv : [...document.querySelectorAll("body > svg")];
      }
      if (svgs.length !== 1) return { error: `${svgs.length} diagrams in the page, not 1` };
      const svg = svgs[0];
      // The drawing as written in the page parses as XML too.
      const source = svg.parentElement.matches("div.stateguard-diagram")
        ? svg.parentElement.innerHTML
        : svg.outerHTML;
      const parsed = new DOMParser().parseFromString(source, "image/svg+xml");
      const broken = parsed.getElementsByTagName("parsererror");
      if (broken.length > 0) return { error: `not XML: ${broken[0].textContent}` };
      const box = svg.getBoundingClientRect();
      if (box.width < 50 || box.height < 50) return { error: `drawn ${box.width}×${box.height}` };
      const drawn = [...svg.querySelectorAll("text")];
      const outside = drawn.filter((t) => {
        const r = t.getBoundingClientRect();
        return r.width === 0 || r.left < box.left - 1 || r.right > box.right + 1 ||
          r.top < box.top - 1 || r.bottom > box.bottom + 1;
      });
      if (outside.length > 0) {
        return { error: `texts not drawn inside: ${JSON.stringify(outside.map((t) => t.textContent))}` };
      }
      const labels = drawn.map((t) => t.textContent);
      const count = (list, t) => list.filter((x) => x === t).length;
      const missing = [...new Set(texts)].filter((t) => count(labels, t) < count(texts, t));
      if (missing.length > 0) {
        return { error: `not drawn as written: ${JSON.stringify(missing)}; the texts read ${JSON.stringify(labels)}` };
      }
      const foreign = [...svg.querySelectorAll("*")]
        .map((e) => e.localName)
        .filter((n) => !["title", "path", "polygon", "rect", "text", "circle"].includes(n));
      if (foreign.length > 0) return { error: `elements the drawing does not write: ${foreign}` };
      return { ok: true };
    }, check.texts);
    // Give a script that slipped in a moment to run.
    await page.waitForTimeout(50);
    const error = result.error || trouble.join("; ");
    if (error) {
      failed += 1;
      console.log(`FAIL  ${check.where}: ${error}`);
    } else {
      console.log(`ok    ${check.where}`);
    }
    await page.close();
  }
} finally {
  await browser.close();
}
if (failed > 0) {
  console.error(`${failed} of ${checks.length} diagrams are not drawn as they should be`);
  process.exit(1);
}
console.log(`all ${checks.length} diagrams are drawn as written`);
