// Ollama's API through the official `ollama` npm client, against the scripted model (exact
// replies) behind the real server, tokenizer and Qwen3 chat template, with --api-key: chat and
// generate streamed and not, thinking, tool calls with object arguments, options, the model
// endpoints, Ollama-style errors, NDJSON by default, and a client that aborts mid-stream.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Ollama } from "ollama";
import { URL_SCRIPTED, KEY, post } from "./common.mjs";

const ollama = new Ollama({ host: URL_SCRIPTED, headers: { Authorization: `Bearer ${KEY}` } });
const auth = { Authorization: `Bearer ${KEY}` };
const model = "scripted";
const user = (text) => [{ role: "user", content: text }];
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } }, required: ["city"] } } }];
const COUNT = "one, two, three, four, five, six, seven, eight, nine, ten.";

// Joins a chat stream's parts; returns the text, thinking, tool calls and the final part.
async function collect(stream) {
  const out = { content: "", thinking: "", toolCalls: [], parts: 0, last: null };
  for await (const part of stream) {
    out.parts++;
    const m = part.message ?? {};
    out.content += m.content ?? part.response ?? "";
    out.thinking += m.thinking ?? part.thinking ?? "";
    out.toolCalls.push(...(m.tool_calls ?? []));
    out.last = part;
  }
  return out;
}

function assertFinal(r, name = model) {
  assert.equal(r.done, true);
  assert.equal(r.model, name);  // the name as asked
  assert.ok(!Number.isNaN(Date.parse(r.created_at)), r.created_at);
  assert.ok(r.prompt_eval_count > 5, JSON.stringify(r));
  assert.ok(r.eval_count > 0);
  for (const k of ["total_duration", "load_duration", "prompt_eval_duration", "eval_duration"])
    assert.ok(Number.isInteger(r[k]) && r[k] >= 0, `${k}: ${r[k]}`);
  assert.ok(r.total_duration >= r.eval_duration);
}

test("Ollama: the API key is required on /api/* too", async () => {
  await assert.rejects(new Ollama({ host: URL_SCRIPTED }).list(), (e) => e.status_code === 401);
  const r = await post(URL_SCRIPTED, "/api/chat", { model, messages: user("hi") });
  assert.equal(r.status, 401);
  assert.equal(typeof r.json.error, "string");
});

test("Ollama: chat, streamed and not", async () => {
  const r = await ollama.chat({ model, messages: user("Count to ten.") });
  assert.equal(r.message.role, "assistant");
  assert.equal(r.message.content, COUNT);
  assert.equal(r.done_reason, "stop");
  assertFinal(r);
  const s = await collect(await ollama.chat({ model: "scripted:latest", messages: user("Count to ten."), stream: true }));
  assert.equal(s.content, COUNT);
  assert.ok(s.parts > 3);
  assert.equal(s.last.message.content, "");
  assert.equal(s.last.done_reason, "stop");
  assertFinal(s.last, "scripted:latest");
});

test("Ollama: options (stop, num_predict) and thinking", async () => {
  const stopped = await ollama.chat({ model, messages: user("Count to ten."), options: { stop: ["four"], temperature: 0, seed: -1 } });
  assert.equal(stopped.message.content, "one, two, three, ");
  const short = await ollama.chat({ model, messages: user("Count to ten."), options: { num_predict: 3 } });
  assert.equal(short.done_reason, "length");
  assert.equal(short.eval_count, 3);
  for (const stream of [false, true]) {
    const req = { model, messages: user("Think about two plus two."), think: true, stream };
    const r = stream ? await collect(await ollama.chat(req)) : (await ollama.chat(req)).message;
    assert.equal(r.thinking, "Two plus two is four, a small sum.");
    assert.equal(r.content, "The answer is 4.");
  }
});

test("Ollama: tool calls with object arguments, and the tool's answer back", async () => {
  const r = await ollama.chat({ model, messages: user("What is the weather in Paris?"), tools });
  assert.equal(r.message.content, "");
  assert.equal(r.message.tool_calls.length, 1);
  assert.equal(r.message.tool_calls[0].function.name, "get_weather");
  assert.deepEqual(r.message.tool_calls[0].function.arguments, { city: "Paris", unit: "celsius" });
  const s = await collect(await ollama.chat({ model, messages: user("Weather in Paris and Rome, please."), tools, stream: true }));
  assert.equal(s.content, "");
  assert.deepEqual(s.toolCalls.map((c) => c.function.arguments.city), ["Paris", "Rome"]);
  const follow = await ollama.chat({ model, tools, options: { num_predict: 4 }, messages: [
    ...user("What is the weather in Paris?"), r.message,
    { role: "tool", content: "18 C, sunny", tool_name: "get_weather" }] });
  assert.equal(follow.done, true);
  assert.ok(follow.prompt_eval_count > r.prompt_eval_count);
});

test("Ollama: generate, streamed and not, with context and raw", async () => {
  const r = await ollama.generate({ model, prompt: "Count to ten." });
  assert.equal(r.response, COUNT);
  assert.equal(r.done_reason, "stop");
  assertFinal(r);
  assert.ok(Array.isArray(r.context) && r.context.length > r.prompt_eval_count);
  const s = await collect(await ollama.generate({ model, prompt: "Count to ten.", stream: true }));
  assert.equal(s.content, COUNT);
  assertFinal(s.last);
  const t = await ollama.generate({ model, prompt: "Think about two plus two." });
  assert.equal(t.thinking, "Two plus two is four, a small sum.");
  assert.equal(t.response, "The answer is 4.");
  const next = await ollama.generate({ model, prompt: "Count to ten.", context: r.context, options: { num_predict: 2 } });
  assert.equal(next.prompt_eval_count, r.context.length + r.prompt_eval_count);
  const raw = await ollama.generate({ model, prompt: "Once upon a time", raw: true, options: { num_predict: 5 } });
  assert.equal(raw.eval_count, 5);
  assert.equal(raw.context, undefined);
  const load = await ollama.generate({ model, prompt: "" });
  assert.equal(load.done_reason, "load");
});

test("Ollama: tags, show, ps, version", async () => {
  const { models } = await ollama.list();
  assert.equal(models.length, 1);
  assert.equal(models[0].name, "scripted:latest");
  assert.match(models[0].digest, /^[0-9a-f]{64}$/);
  assert.equal(models[0].details.family, "qwen3");
  assert.equal(models[0].details.format, "safetensors");
  assert.ok(!Number.isNaN(Date.parse(models[0].modified_at)));
  const show = await ollama.show({ model });
  assert.ok(show.capabilities.includes("completion") && show.capabilities.includes("tools"));
  assert.ok(show.capabilities.includes("thinking"));
  assert.match(show.template, /im_start/);
  assert.equal(show.model_info["general.architecture"], "qwen3");
  const ps = await ollama.ps();
  assert.equal(ps.models[0].name, "scripted:latest");
  assert.equal(show.model_info["qwen3.context_length"], ps.models[0].context_length);
  assert.ok(Date.parse(ps.models[0].expires_at) > Date.now() + 100 * 365 * 86400e3);
  assert.match((await ollama.version()).version, /^\d+\.\d+\.\d+$/);
});

test("Ollama: errors as Ollama gives them", async () => {
  await assert.rejects(ollama.chat({ model: "llama3.2", messages: user("hi") }),
                       (e) => e.status_code === 404 && e.error === "model 'llama3.2' not found");
  await assert.rejects(ollama.show({ model: "nope" }), (e) => e.status_code === 404 && /not found/.test(e.error));
  await assert.rejects(ollama.chat({ model, messages: [{ role: "user", content: "What is this?", images: ["iVBORw0KGgo="] }] }),
                       (e) => e.status_code === 400 && /images are not supported/.test(e.error));
  await assert.rejects(ollama.chat({ model, messages: user("hi"), format: "json" }),
                       (e) => e.status_code === 400 && /^format/.test(e.error));
  await assert.rejects(ollama.generate({ model, prompt: "def f(", suffix: "return x" }), (e) => e.status_code === 400);
  await assert.rejects(ollama.chat({ model, messages: user("hi"), options: { temperature: "hot" } }),
                       (e) => e.status_code === 400 && /^options\.temperature/.test(e.error));
  // The scripted stand-in has no hidden states to embed (the real models' embeddings: embeddings.test.mjs).
  await assert.rejects(ollama.embed({ model, input: "hello" }), (e) => e.status_code === 400 && /cannot embed/.test(e.error));
  const unknown = await post(URL_SCRIPTED, "/api/nothing", {}, auth);
  assert.equal(unknown.status, 404);
  assert.equal(typeof unknown.json.error, "string");
  const load = await ollama.chat({ model, messages: [] });
  assert.equal(load.done_reason, "load");
});

test("Ollama: NDJSON when stream is left out, one object a line", async () => {
  const res = await fetch(URL_SCRIPTED + "/api/chat", { method: "POST", headers: { "Content-Type": "application/json", ...auth },
    body: JSON.stringify({ model, messages: user("Count to ten.") }) });
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type"), /^application\/x-ndjson/);
  const lines = (await res.text()).split("\n");
  assert.equal(lines.pop(), "");  // every line ends with a newline
  const parts = lines.map((l) => JSON.parse(l));
  assert.equal(parts.map((p) => p.message.content).join(""), COUNT);
  assert.deepEqual(parts.map((p) => p.done), [...Array(parts.length - 1).fill(false), true]);
});

test("Ollama: a client that aborts mid-stream leaves the server serving", async () => {
  const stream = await ollama.chat({ model, messages: user("Tell me a long story."), stream: true, options: { num_predict: 3000 } });
  let parts = 0;
  await assert.rejects((async () => { for await (const _ of stream) if (++parts === 2) stream.abort(); })(),
                       (e) => e.name === "AbortError");
  assert.ok(parts >= 2 && parts < 3000, `${parts} parts`);  // lines already received still come
  const r = await ollama.chat({ model, messages: user("Count to ten.") });
  assert.equal(r.message.content, COUNT);
});
