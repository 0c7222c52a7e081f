// hearth serve on a random-weight qwen3 (real Qwen3 tokenizer and chat template), through the
// official openai SDK and raw HTTP: streaming vs not, usage, prompt cache, stop strings,
// logprobs, completions, tokenize, error paths, 16 concurrent clients, disconnects.
import { test } from "node:test";
import assert from "node:assert/strict";
import { URL_MODEL, openai, post, collectChat } from "./common.mjs";

const client = openai();
const ask = (text, extra = {}) => ({
  model: "m", messages: [{ role: "user", content: text }], temperature: 0, max_tokens: 24, ...extra,
});

test("health and models", async () => {
  const h = await fetch(URL_MODEL + "/health");
  assert.equal(h.status, 200);
  const models = await client.models.list();
  assert.equal(models.data.length, 1);
  assert.ok(models.data[0].id);
});

test("streaming and non-streaming give the same text at temperature 0", async () => {
  const a = await client.chat.completions.create(ask("Tell me a story about a lighthouse."));
  assert.equal(a.object, "chat.completion");
  assert.equal(a.choices[0].finish_reason, "length");
  assert.equal(a.usage.completion_tokens, 24);
  assert.ok(a.usage.prompt_tokens > 5);
  assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + 24);
  const s = await collectChat(await client.chat.completions.create({
    ...ask("Tell me a story about a lighthouse."), stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.content, a.choices[0].message.content);
  assert.equal(s.finish, "length");
  assert.equal(s.usage.completion_tokens, 24);
  assert.equal(s.chunks[0].choices[0].delta.role, "assistant");
  assert.deepEqual(s.chunks.at(-1).choices, []);  // the usage chunk
});

test("cached_tokens on a repeated prefix", async () => {
  const msgs = [{ role: "system", content: "You are a careful assistant who answers in French." },
                { role: "user", content: "Describe the river Seine in three sentences." }];
  const a = await client.chat.completions.create({ model: "m", messages: msgs, max_tokens: 8, temperature: 0 });
  const b = await client.chat.completions.create({ model: "m", messages: msgs, max_tokens: 8, temperature: 0 });
  assert.equal(b.usage.prompt_tokens_details.cached_tokens, b.usage.prompt_tokens - 1);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  // A follow-up turn reuses the first turn.
  const c = await client.chat.completions.create({ model: "m", max_tokens: 8, temperature: 0,
    messages: [...msgs, { role: "assistant", content: a.choices[0].message.content }, { role: "user", content: "Shorter." }] });
  assert.ok(c.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens - 1,
            JSON.stringify(c.usage));
});

test("stop strings end the text before them, streamed or not", async () => {
  const full = (await client.chat.completions.create(ask("Name some colours.", { max_tokens: 40 }))).choices[0].message.content;
  const stop = [...full].slice(12, 15).join("");
  const expected = full.slice(0, full.indexOf(stop));
  const a = await client.chat.completions.create(ask("Name some colours.", { max_tokens: 40, stop: [stop, "zzzz-none"] }));
  assert.equal(a.choices[0].message.content, expected);
  assert.equal(a.choices[0].finish_reason, "stop");
  const s = await collectChat(await client.chat.completions.create({ ...ask("Name some colours.", { max_tokens: 40, stop }), stream: true }));
  assert.equal(s.content, expected);
  for (const c of s.chunks) assert.ok(!(c.choices[0]?.delta.content || "").includes(stop));
});

test("logprobs", async () => {
  const a = await client.chat.completions.create(ask("Hi", { max_tokens: 4, logprobs: true, top_logprobs: 3 }));
  const lp = a.choices[0].logprobs.content;
  assert.equal(lp.length, 4);
  for (const e of lp) {
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs[0].logprob, e.logprob);  // greedy
  }
});

test("completions, streamed and not", async () => {
  const a = await client.completions.create({ model: "m", prompt: "Once upon a time", max_tokens: 12, temperature: 0 });
  assert.equal(a.object, "text_completion");
  assert.equal(a.usage.completion_tokens, 12);
  let text = "";
  for await (const c of await client.completions.create({ model: "m", prompt: "Once upon a time", max_tokens: 12, temperature: 0, stream: true }))
    text += c.choices[0]?.text || "";
  assert.equal(text, a.choices[0].text);
});

test("tokenize and detokenize", async () => {
  const t = await post(URL_MODEL, "/tokenize", { content: "Hello, world!" });
  assert.equal(t.status, 200);
  assert.ok(t.json.tokens.length >= 3);
  const d = await post(URL_MODEL, "/detokenize", { tokens: t.json.tokens });
  assert.equal(d.json.prompt, "Hello, world!");
});

test("metrics", async () => {
  const m = await (await fetch(URL_MODEL + "/metrics")).text();
  for (const name of ["hearth_requests_total", "hearth_time_to_first_token_seconds_bucket",
                      "hearth_inter_token_latency_seconds_bucket", "hearth_prompt_cache_hits_total"])
    assert.ok(m.includes(name), name);
});

const expectError = async (body, status, needle, path = "/v1/chat/completions") => {
  const r = await post(URL_MODEL, path, body);
  assert.equal(r.status, status, r.text);
  assert.ok(r.json && r.json.error, r.text);
  for (const k of ["message", "type", "param", "code"]) assert.ok(k in r.json.error, k);
  if (needle) assert.match(r.json.error.message, needle);
  return r.json.error;
};

test("error paths answer 400 with an OpenAI error object", async () => {
  await expectError("{not json", 400, /not valid JSON/);
  await expectError("[1,2]", 400, /JSON object/);
  await expectError({ messages: "hi" }, 400, /messages must be an array/);
  await expectError({ messages: [] }, 400, /must not be empty/);
  await expectError({}, 400, /messages is required/);
  const e = await expectError({ messages: [{ role: "wizard", content: "x" }] }, 400, /unknown role/);
  assert.equal(e.param, "messages[0].role");
  await expectError({ messages: [{ role: "user" }] }, 400, /content is required/);
  await expectError({ messages: [{ role: "user", content: 5 }] }, 400, /content/);
  await expectError(ask("x", { n: 2 }), 400, /n must be 1/);
  await expectError(ask("x", { response_format: { type: "json_object" } }), 400, /not supported yet/);
  await expectError(ask("x", { temperature: "hot" }), 400, /temperature must be a number/);
  await expectError(ask("x", { max_tokens: -1 }), 400, /max_tokens/);
  await expectError(ask("x", { top_logprobs: 50, logprobs: true }), 400, /top_logprobs/);
  await expectError(ask("x", { stop: [1] }), 400, /stop/);
  await expectError(ask("x", { tools: [{ type: "function" }] }), 400, /function is required/);
  await expectError(ask("x", { tool_choice: "required" }), 400, /needs tools/);
  const ctx = await expectError(ask("x", { max_tokens: 100000 }), 400, /2048/);
  assert.match(ctx.message, /100000/);
  await expectError({ prompt: "" }, 400, /prompt/, "/v1/completions");
  await expectError({ tokens: "x" }, 400, /tokens/, "/detokenize");
  const nf = await fetch(URL_MODEL + "/v1/nothing");
  assert.equal(nf.status, 404);
  const big = await post(URL_MODEL, "/v1/chat/completions", { messages: [{ role: "user", content: "x".repeat(1_500_000) }] });
  assert.equal(big.status, 413);
  // The SDK maps them to its error classes.
  await assert.rejects(client.chat.completions.create({ model: "m", messages: [], max_tokens: 1 }),
                       (err) => err.status === 400 && /must not be empty/.test(err.message));
});

test("16 concurrent clients all finish with their own answers", async () => {
  const prompts = Array.from({ length: 16 }, (_, i) => `Client ${i} asks about topic number ${i * 7}.`);
  const solo = await client.chat.completions.create(ask(prompts[5], { max_tokens: 12 }));
  const results = await Promise.all(prompts.map(async (p, i) => {
    if (i % 2) return (await client.chat.completions.create(ask(p, { max_tokens: 12 }))).choices[0].message.content;
    return (await collectChat(await client.chat.completions.create({ ...ask(p, { max_tokens: 12 }), stream: true }))).content;
  }));
  assert.equal(results.length, 16);
  assert.equal(results[5], solo.choices[0].message.content);
  for (const r of results) assert.ok(r.length > 0);
});

test("a client that disconnects cancels its generation", async () => {
  for (const stream of [true, false]) {
    const ac = new AbortController();
    const started = fetch(URL_MODEL + "/v1/chat/completions", {
      method: "POST", signal: ac.signal, headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ ...ask("Go on forever.", { max_tokens: 1900 }), ignore_eos: true, stream }),
    }).then(async (r) => { if (stream) { const rd = r.body.getReader(); await rd.read(); ac.abort(); } }).catch(() => {});
    if (!stream) setTimeout(() => ac.abort(), 300);
    await started;
    await new Promise((r) => setTimeout(r, 400));
    const t0 = Date.now();
    await client.chat.completions.create(ask("Quick one.", { max_tokens: 2 }));
    assert.ok(Date.now() - t0 < 1500, `the next request waited ${Date.now() - t0} ms (stream=${stream})`);
  }
});
