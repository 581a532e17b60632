// Takes a screenshot of part of a page in headless Chromium: the README's
// pictures are taken with it.
//
//   node screenshot.mjs PAGE SELECTORS OUT.png [WIDTH]
//
// PAGE is an HTML file or a URL; SELECTORS, separated by `|`, name the
// elements to take: the picture holds all of them, with a margin of the
// page around. CHROMIUM names the browser (default
// /usr/bin/chromium); CREDENTIALS (`user:password`) answers a page behind
// HTTP Basic authentication.

import { pathToFileURL } from "node:url";
import { resolve } from "node:path";
import { chromium } from "playwright-core";

const [page_, selectors, out, width] = process.argv.slice(2);
if (!out) {
  console.error("usage: node screenshot.mjs PAGE SELECTORS OUT.png [WIDTH]");
  process.exit(2);
}
const url = /^[a-z]+:\/\//.test(page_) ? page_ : pathToFileURL(resolve(page_)).href;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
try {
  const credentials = process.env.CREDENTIALS;
  const [username, password] = credentials ? credentials.split(/:(.*)/s) : [];
  const page = await browser.newPage({
    viewport: { width: Number(width || 1000), height: 900 },
    deviceScaleFactor: 2,
    ...(credentials ? { httpCredentials: { username, password } } : {}),
  });
  await page.goto(url);
  // Page coordinates: the page is not scrolled.
  const boxes = [];
  for (const selector of selectors.split("|")) {
    const box = await page.locator(selector).first().boundingBox();
    if (!box) throw new Error(`${selector} is not drawn`);
    boxes.push(box);
  }
  const margin = 16;
  const left = Math.max(0, Math.min(...boxes.map((b) => b.x)) - margin);
  const top = Math.max(0, Math.min(...boxes.map((b) => b.y)) - margin);
  const right = Math.max(...boxes.map((b) => b.x + b.width)) + margin;
  const bottom = Math.max(...boxes.map((b) => b.y + b.height)) + margin;
  await page.screenshot({
    path: out,
    fullPage: true,
    clip: { x: left, y: top, width: right - left, height: bottom - top },
  });
  console.log(`${out}: ${selectors} of ${url}`);
} finally {
  await browser.close();
}
