// The chat page in headless Chromium (Debian's, driven by playwright-core): send a message, see
// streamed text, markdown code blocks rendered safely, reasoning in a collapsible block, stop.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { URL_MODEL, URL_SCRIPTED, KEY } from "./common.mjs";

let browser, profile;
before(async () => {
  profile = mkdtempSync(join(tmpdir(), "hearth-chromium-"));
  browser = await chromium.launchPersistentContext(profile, {
    headless: true,
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync"],
  });
});
after(async () => { await browser?.close(); rmSync(profile, { recursive: true, force: true }); });

async function openPage(url, settings = {}) {
  const page = await browser.newPage();
  await page.addInitScript((s) => localStorage.setItem("hearth-settings", JSON.stringify(s)), settings);
  await page.goto(url + "/");
  return page;
}

test("sends a message and shows the streamed, rendered answer", async () => {
  const page = await openPage(URL_SCRIPTED, { api_key: KEY });
  await page.fill("#input", "Write some code.");
  await page.press("#input", "Enter");
  await page.waitForSelector(".msg.assistant .stats:not(:empty)", { timeout: 30000 });
  const code = await page.textContent(".msg.assistant .content pre code");
  assert.equal(code, 'print("hi <b>")');  // escaped, not markup
  assert.equal(await page.locator(".msg.assistant .content b").count(), 0);
  assert.match(await page.textContent(".msg.assistant .content"), /Done\./);

  await page.fill("#input", "Think about two plus two.");
  await page.press("#input", "Enter");
  await page.waitForSelector(".msg.assistant >> nth=1 >> .stats:not(:empty)", { timeout: 30000 });
  const second = page.locator(".msg.assistant").nth(1);
  assert.equal(await second.locator("details .reasoning").textContent(), "Two plus two is four, a small sum.");
  assert.equal(await second.locator(".content").textContent(), "The answer is 4.");
  await page.close();
});

test("streams visibly and the stop button ends a reply", async () => {
  const page = await openPage(URL_MODEL, { max_tokens: "1500", temperature: "0" });
  // The random model writes its 1,500 tokens in about a second, which a busy 2-core machine can
  // miss between two polls (the test once timed out waiting for text with the stop button
  // shown). Throttled to 4 KB/s, the ~340 KB stream lasts over a minute: text shows early and
  // the reply is still running when the button is clicked.
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("Network.enable");
  await cdp.send("Network.emulateNetworkConditions",
                 { offline: false, latency: 0, downloadThroughput: 4000, uploadThroughput: -1 });
  await page.fill("#input", "Write a very long essay.");
  await page.press("#input", "Enter");
  // Text shows up while the reply is still running (the stop button is visible).
  await page.waitForFunction(() => {
    const c = document.querySelector(".msg.assistant .content");
    return c && c.textContent.length > 0 && !document.getElementById("stop").hidden;
  }, null, { timeout: 30000 });
  await page.click("#stop");
  await page.waitForSelector(".msg.assistant .stats:not(:empty)", { timeout: 10000 });
  assert.match(await page.textContent(".msg.assistant .stats"), /stopped/);
  assert.equal(await page.isHidden("#stop"), true);
  await page.close();
});

test("with default settings a long conversation keeps working: old turns are left out", async () => {
  // The model server has a 2,048-token context and the random model never stops by itself, so
  // every reply takes its whole default budget (1,024 tokens, half the context): the second
  // turn only fits with the first left out, and the page must say so instead of failing.
  const page = await openPage(URL_MODEL, { temperature: "0" });
  await page.waitForFunction(() => document.getElementById("model").textContent.includes("ctx"),
                             null, { timeout: 10000 });
  assert.equal(await page.getAttribute("#max_tokens", "placeholder"), "auto (1024)");
  for (let turn = 0; turn < 3; ++turn) {
    await page.fill("#input", "Tell me more, part " + (turn + 1) + ".");
    await page.press("#input", "Enter");
    await page.waitForSelector(`.msg.assistant >> nth=${turn} >> .stats:not(:empty)`, { timeout: 120000 });
    const msg = page.locator(".msg.assistant").nth(turn);
    assert.equal(await msg.evaluate((el) => el.classList.contains("error")), false,
                 await msg.textContent());
    const stats = await msg.locator(".stats").textContent();
    assert.match(stats, /1024 generated/);
    if (turn > 0) assert.match(stats, /earlier messages? left out to fit the context/);
  }
  await page.close();
});
