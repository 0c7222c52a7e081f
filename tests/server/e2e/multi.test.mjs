// Several models in one server (hearth serve -m A -m B --max-loaded 1): both listed, each loaded
// when a request names it (the other unloaded first), unknown and missing names refused, through
// the OpenAI, Anthropic-free raw HTTP and Ollama clients.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Ollama } from "ollama";
import { openai, post } from "./common.mjs";

const URL_MULTI = process.env.HEARTH_MULTI_URL;
const client = openai(URL_MULTI);
const ask = (model, text) => ({ model, messages: [{ role: "user", content: text }], max_tokens: 6, temperature: 0 });

test("several models: listed, loaded on demand, one at a time", async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ["qwen3-random", "default"]);
  for (const m of models.data) assert.ok(m.max_model_len > 0, JSON.stringify(m));
  const one = await client.models.retrieve("default");
  assert.equal(one.id, "default");

  const ollama = new Ollama({ host: URL_MULTI });
  assert.deepEqual((await ollama.ps()).models, [], "nothing loads before a request");
  const a = await client.chat.completions.create(ask("qwen3-random", "Hello"));
  assert.equal(a.model, "qwen3-random");
  assert.deepEqual((await ollama.ps()).models.map((m) => m.name), ["qwen3-random:latest"]);
  const b = await client.chat.completions.create(ask("default", "Hello"));
  assert.equal(b.model, "default");
  assert.equal(b.usage.completion_tokens > 0, true);
  assert.deepEqual((await ollama.ps()).models.map((m) => m.name), ["default:latest"], "--max-loaded 1");
  // Back to the first: the same answer as before it was unloaded.
  const again = await client.chat.completions.create(ask("qwen3-random", "Hello"));
  assert.equal(again.choices[0].message.content, a.choices[0].message.content);
  const tags = await ollama.list();
  assert.deepEqual(tags.models.map((m) => m.name).sort(), ["default:latest", "qwen3-random:latest"]);
  const r = await ollama.chat({ model: "default", messages: [{ role: "user", content: "Hi" }], options: { num_predict: 4 } });
  assert.equal(r.done, true);
});

test("several models: a request must name one of them", async () => {
  const missing = await post(URL_MULTI, "/v1/chat/completions", { messages: [{ role: "user", content: "x" }] });
  assert.equal(missing.status, 400);
  assert.match(missing.json.error.message, /model is required.*qwen3-random, default/);
  const unknown = await post(URL_MULTI, "/v1/chat/completions", { model: "gpt-4o", messages: [{ role: "user", content: "x" }] });
  assert.equal(unknown.status, 404);
  assert.equal(unknown.json.error.code, "model_not_found");
  const retrieve = await fetch(URL_MULTI + "/v1/models/gpt-4o");
  assert.equal(retrieve.status, 404);
  const emb = await post(URL_MULTI, "/v1/embeddings", { model: "nope", input: "x" });
  assert.equal(emb.status, 404);
  const metrics = await (await fetch(URL_MULTI + "/metrics")).text();
  assert.match(metrics, /hearth_requests_total/);
});
