// hearth serve on the committed Qwen3.5 hybrid model (models/default: Gated DeltaNet + attention
// layers), once with the prompt cache and once without (--cache-ram 0): a multi-turn chat does
// not re-prefill its history, and its output equals the uncached server's at temperature 0.
import { test } from "node:test";
import assert from "node:assert/strict";
import { URL_HYBRID, URL_HYBRID_NOCACHE, openai } from "./common.mjs";

const cached = openai(URL_HYBRID);
const fresh = openai(URL_HYBRID_NOCACHE);
const chat = (client, messages) =>
  client.chat.completions.create({ model: "m", messages, max_tokens: 16, temperature: 0 });

test("hybrid model: a second turn reuses the first turn's prompt and reply", async () => {
  const turn1 = [{ role: "system", content: "You are a helpful assistant." },
                 { role: "user", content: "Tell me about the sea and the ships that sail on it." }];
  const a = await chat(cached, turn1);
  const reply = a.choices[0].message.content;
  assert.equal((await chat(fresh, turn1)).choices[0].message.content, reply);
  const next = { role: "user", content: "And the mountains?" };

  // The reply sent back as it came: the state after turn 1 is reused whole (all but the last
  // sampled token, which was never run through the model).
  const turn2 = [...turn1, { role: "assistant", content: reply }, next];
  const b = await chat(cached, turn2);
  const b0 = await chat(fresh, turn2);
  assert.equal(b0.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(b.usage.prompt_tokens, b0.usage.prompt_tokens);
  assert.ok(b.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens + a.usage.completion_tokens - 1,
            JSON.stringify({ turn1: a.usage, turn2: b.usage }));
  assert.equal(b.choices[0].message.content, b0.choices[0].message.content);

  // Turn 3 on top of turn 2: the history of both turns is reused.
  const turn3 = [...turn2, { role: "assistant", content: b.choices[0].message.content }, { role: "user", content: "Thanks." }];
  const d = await chat(cached, turn3);
  const d0 = await chat(fresh, turn3);
  assert.ok(d.usage.prompt_tokens_details.cached_tokens >= b.usage.prompt_tokens, JSON.stringify(d.usage));
  assert.equal(d.choices[0].message.content, d0.choices[0].message.content);

  // An edited first reply (as clients that trim or rewrite history send it): the recurrent
  // state cannot be cut back token by token, so it resumes from the snapshot kept at turn 1's
  // prompt end.
  const edited = [...turn1, { role: "assistant", content: "The sea is wide." }, next];
  const c = await chat(cached, edited);
  const c0 = await chat(fresh, edited);
  assert.equal(c.usage.prompt_tokens_details.cached_tokens, a.usage.prompt_tokens, JSON.stringify(c.usage));
  assert.equal(c.choices[0].message.content, c0.choices[0].message.content);
});
