// Memory of finished requests is returned: after bursts of four concurrent 10 MB prompts (each
// tokenized in full, then refused as longer than the context), the server's resident memory is
// back within 10% of its idle level. Idle means after warm-up requests on as many threads.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import { post } from "./common.mjs";

const URL_MEM = process.env.HEARTH_MEMORY_URL;
const PID = process.env.HEARTH_MEMORY_PID;

const rssMb = () =>
  Number(fs.readFileSync(`/proc/${PID}/status`, "utf8").match(/VmRSS:\s+(\d+)/)[1]) / 1024;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const chat = (content) =>
  post(URL_MEM, "/v1/chat/completions", { messages: [{ role: "user", content }], max_tokens: 4 });
const fourSmall = () => Promise.all([0, 1, 2, 3].map(() => chat("hello there, how are you")));

// Words of 2 to 8 random letters and digits: a prompt of mostly distinct words, the worst case
// for the tokenizer's per-thread word cache.
function bigPrompt(bytes) {
  const words = [];
  let n = 0;
  for (let i = 0; n < bytes; i++) {
    const w = Math.random().toString(36).slice(2, 4 + (i % 7));
    words.push(w);
    n += w.length + 1;
  }
  return words.join(" ").slice(0, bytes);
}

test("resident memory returns within 10% of idle after bursts of 10 MB prompts", async () => {
  for (let i = 0; i < 3; i++) await fourSmall();
  await sleep(1000);
  const idle = rssMb();
  const big = bigPrompt(10_000_000);
  for (let burst = 0; burst < 2; burst++) {
    const results = await Promise.all([0, 1, 2, 3].map(() => chat(big)));
    for (const r of results) assert.equal(r.status, 400, r.text.slice(0, 200));
    await sleep(1500);
    for (let i = 0; i < 2; i++) await fourSmall();
    await sleep(1000);
    const after = rssMb();
    console.log(`resident: idle ${idle.toFixed(1)} MB, after burst ${burst + 1} ${after.toFixed(1)} MB`);
    assert.ok(after <= idle * 1.1, `${after.toFixed(1)} MB after burst ${burst + 1}, idle ${idle.toFixed(1)} MB`);
  }
});
