// Uses the operators' console in headless Chromium as an operator would,
// and reports what the pages showed, for the test to check against the
// database: the overview's counts, a state's rows, a hostile note shown as
// text, a press, and a press from a stale page. Every dialog, console
// error and page error is reported too: none may happen, but for the
// error status of a page, which is reported apart.
//
//   node console.mjs --expect FILE
//       FILE is JSON, `[{ "base": …, "machine": …, "state": …,
//       "hostile_row": …, "press_row": …, "stale_row": …,
//       "transition": … }]`: the console's URL (`http://…/ops`), the
//       machine to use, a state with rows, the row whose history holds
//       the hostile note, the row to press `transition` on, and the row
//       two pages press it on one after the other.
//
// It prints one JSON object: what it saw.
//
// CHROMIUM names the browser (default /usr/bin/chromium).

import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const [mode, file] = process.argv.slice(2);
if (mode !== "--expect" || !file) {
  console.error("usage: node console.mjs --expect FILE");
  process.exit(2);
}
const [run] = JSON.parse(readFileSync(file, "utf8"));
const machine = `${run.base}/${encodeURIComponent(run.machine)}`;
const row = (key) => `${machine}/rows/${encodeURIComponent(String(key))}`;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox"],
});
const trouble = [];
// A page answered with an error status: Chromium logs it as a console
// error; the test expects exactly one, the stale press's 409.
const statuses = [];
const seen = {};
try {
  const context = await browser.newContext({ javaScriptEnabled: true });
  const open = async (url) => {
    const page = await context.newPage();
    page.on("dialog", async (dialog) => {
      trouble.push(`a dialog opened on ${page.url()}: ${dialog.message()}`);
      await dialog.dismiss();
    });
    page.on("console", (message) => {
      if (message.type() !== "error") return;
      const status = /^Failed to load resource: the server responded with a status of (\d+)/
        .exec(message.text());
      if (status && message.location().url === page.url()) statuses.push(Number(status[1]));
      else trouble.push(`console error on ${page.url()}: ${message.text()}`);
    });
    page.on("pageerror", (error) => trouble.push(`page error on ${page.url()}: ${error.message}`));
    const response = await page.goto(url);
    return { page, status: response.status() };
  };

  // The overview: the diagram drawn, and each state's count.
  const overview = await open(`${run.base}`);
  seen.overview_status = overview.status;
  seen.counts = await overview.page.evaluate((name) => {
    const section = document.querySelector(`section.machine[data-machine="${name}"]`);
    if (!section) return null;
    const counts = {};
    for (const tr of section.querySelectorAll("tr[data-state]")) {
      counts[tr.dataset.state] = Number(tr.dataset.rows);
    }
    return counts;
  }, run.machine);
  seen.diagram = await overview.page.evaluate((name) => {
    const svg = document.querySelector(`section.machine[data-machine="${name}"] .diagram svg`);
    if (!svg) return null;
    const box = svg.getBoundingClientRect();
    return { width: box.width, height: box.height };
  }, run.machine);

  // A state's page, reached by its link: its rows, each a link to its page.
  await overview.page
    .locator(`section.machine[data-machine="${run.machine}"] tr[data-state="${run.state}"] a`)
    .click();
  await overview.page.waitForLoadState();
  seen.state_url = overview.page.url();
  seen.state_rows = await overview.page.evaluate(() =>
    [...document.querySelectorAll("tr[data-key]")].map((tr) => tr.dataset.key),
  );

  // And back, by the link every page has.
  const [home] = await Promise.all([
    overview.page.waitForNavigation(),
    overview.page.getByRole("link", { name: "Overview" }).click(),
  ]);
  seen.home_status = home.status();

  // The hostile note, as text.
  const hostile = await open(row(run.hostile_row));
  seen.hostile_status = hostile.status;
  seen.hostile = await hostile.page.evaluate(() => ({
    actors: [...document.querySelectorAll(".actor")].map((e) => e.textContent),
    reasons: [...document.querySelectorAll(".reason")].map((e) => e.textContent),
    scripts: document.querySelectorAll("script").length,
    images: document.querySelectorAll("img").length,
  }));

  // A press: the reason typed, the button clicked, the page after it.
  const press = await open(row(run.press_row));
  const form = press.page.locator(`li[data-transition="${run.transition}"] form`);
  await form.locator('input[name="reason"]').fill("pressed in Chromium");
  await Promise.all([press.page.waitForNavigation(), form.locator("button").click()]);
  const pressed = () =>
    press.page.evaluate(() => ({
      said: document.querySelector("[data-said]")?.dataset.said ?? null,
      state: document.querySelector("dd.state")?.dataset.state ?? null,
      actors: [...document.querySelectorAll(".actor")].map((e) => e.textContent),
      reasons: [...document.querySelectorAll(".reason")].map((e) => e.textContent),
      path: location.pathname + location.search,
    }));
  seen.pressed = await pressed();
  // The press redirected to the row's page: reloading it reads the row
  // again and presses nothing.
  const reloaded = await press.page.reload();
  seen.reloaded = { status: reloaded.status(), ...(await pressed()) };

  // Two pages of one row; the first presses, then the second, stale.
  const first = await open(row(run.stale_row));
  const second = await open(row(run.stale_row));
  for (const page of [first.page, second.page]) {
    const button = page.locator(`li[data-transition="${run.transition}"] form button`);
    await Promise.all([page.waitForNavigation(), button.click()]);
  }
  seen.stale = await second.page.evaluate(() => ({
    said: document.querySelector("[data-said]")?.dataset.said ?? null,
    text: document.querySelector("[data-said]")?.textContent ?? null,
  }));
  seen.first = await first.page.evaluate(
    () => document.querySelector("[data-said]")?.dataset.said ?? null,
  );
} catch (error) {
  trouble.push(`the run failed: ${error.stack || error}`);
} finally {
  await browser.close();
}
seen.trouble = trouble;
seen.statuses = statuses;
console.log(JSON.stringify(seen));
