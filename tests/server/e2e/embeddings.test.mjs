// /v1/embeddings on hearth serve (random-weight qwen3, real Qwen3 tokenizer) through the official
// openai SDK, which asks for base64 and decodes it, and raw HTTP for floats and error paths.
import { test } from "node:test";
import assert from "node:assert/strict";
import { URL_MODEL, openai, post } from "./common.mjs";

const client = openai();
const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));

test("the SDK's embeddings (base64 on the wire) equal the float form", async () => {
  const sdk = await client.embeddings.create({ model: "m", input: ["The river Seine.", "A lighthouse"] });
  assert.equal(sdk.object, "list");
  assert.equal(sdk.data.length, 2);
  assert.deepEqual(sdk.data.map((d) => d.index), [0, 1]);
  assert.ok(sdk.usage.prompt_tokens >= 4);
  assert.equal(sdk.usage.total_tokens, sdk.usage.prompt_tokens);
  const raw = await post(URL_MODEL, "/v1/embeddings", { input: ["The river Seine.", "A lighthouse"] });
  assert.equal(raw.status, 200);
  const floats = raw.json.data.map((d) => d.embedding);
  for (let i = 0; i < 2; ++i) {
    assert.equal(sdk.data[i].embedding.length, floats[i].length);
    sdk.data[i].embedding.forEach((x, j) => assert.ok(Math.abs(x - floats[i][j]) < 1e-6));
    assert.ok(Math.abs(norm(floats[i]) - 1) < 1e-5, "normalised");
  }
  // The same text gives the same vector, whatever else is in the request.
  const alone = await client.embeddings.create({ model: "m", input: "A lighthouse" });
  assert.deepEqual(alone.data[0].embedding, sdk.data[1].embedding);
});

test("dimensions truncate and renormalise; token ids are accepted", async () => {
  const r = await client.embeddings.create({ model: "m", input: [[1, 2, 3, 4]], dimensions: 8 });
  assert.equal(r.data[0].embedding.length, 8);
  assert.ok(Math.abs(norm(r.data[0].embedding) - 1) < 1e-5);
});

test("bad inputs are 400s naming the problem", async () => {
  const cases = [
    [{}, "input is required"],
    [{ input: "" }, "empty string"],
    [{ input: [] }, "input must be"],
    [{ input: [[1, -2]] }, "token ids"],
    [{ input: "x", encoding_format: "int8" }, "encoding_format"],
    [{ input: "x", dimensions: 0 }, "dimensions"],
    [{ input: "hello ".repeat(3000) }, "context"],
  ];
  for (const [body, words] of cases) {
    const r = await post(URL_MODEL, "/v1/embeddings", body);
    assert.equal(r.status, 400, JSON.stringify(body).slice(0, 80));
    const e = r.json;
    assert.ok(e.error.message.includes(words), `${e.error.message} lacks "${words}"`);
  }
  const ok = await client.embeddings.create({ model: "m", input: "still serving" });
  assert.equal(ok.data.length, 1);
});

test("Ollama's /api/embed and /api/embeddings give the same vectors", async () => {
  const { Ollama } = await import("ollama");
  const ollama = new Ollama({ host: URL_MODEL });
  const model = (await client.models.list()).data[0].id;
  const r = await ollama.embed({ model, input: ["The river Seine.", "A lighthouse"] });
  assert.equal(r.embeddings.length, 2);
  assert.ok(r.prompt_eval_count >= 4);
  const openaiSide = await post(URL_MODEL, "/v1/embeddings", { input: "A lighthouse" });
  r.embeddings[1].forEach((x, j) => assert.ok(Math.abs(x - openaiSide.json.data[0].embedding[j]) < 1e-6));
  const legacy = await ollama.embeddings({ model, prompt: "A lighthouse" });
  assert.deepEqual(legacy.embedding, r.embeddings[1]);
  const long = await ollama.embed({ model, input: "hello ".repeat(3000) });  // truncated to the context
  assert.equal(long.embeddings.length, 1);
  await assert.rejects(ollama.embed({ model, input: "hello ".repeat(3000), truncate: false }),
                       (e) => e.status_code === 400 && /truncate/.test(e.error));
  await assert.rejects(ollama.embed({ model: "nope", input: "x" }), (e) => e.status_code === 404);
});
