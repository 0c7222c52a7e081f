// The scripted model (exact, known replies) behind the real server, tokenizer and Qwen3 chat
// template, with --api-key: tool calls, reasoning, stop strings, Anthropic Messages (tool_use,
// tool_result, thinking, stop_sequence, streaming event grammar) and authentication.
import { test } from "node:test";
import assert from "node:assert/strict";
import { URL_SCRIPTED, KEY, openai, anthropic, post, collectChat } from "./common.mjs";

const oa = openai(URL_SCRIPTED, KEY);
const an = anthropic(URL_SCRIPTED, KEY);
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } }, required: ["city"] } } }];
const user = (text) => [{ role: "user", content: text }];

test("API key: 401 without it, OpenAI and Anthropic style", async () => {
  const r = await post(URL_SCRIPTED, "/v1/chat/completions", { messages: user("hi") });
  assert.equal(r.status, 401);
  assert.equal(r.json.error.type, "authentication_error");
  await assert.rejects(openai(URL_SCRIPTED, "wrong").chat.completions.create({ model: "m", messages: user("hi") }),
                       (e) => e.status === 401);
  await assert.rejects(anthropic(URL_SCRIPTED, "wrong").messages.create({ model: "m", max_tokens: 5, messages: user("hi") }),
                       (e) => e.status === 401 && e.error?.error?.type === "authentication_error");
  const ok = await post(URL_SCRIPTED, "/v1/messages", { max_tokens: 3, messages: user("hi") }, { "x-api-key": KEY });
  assert.equal(ok.status, 200);
});

test("tool call: non-streaming", async () => {
  const r = await oa.chat.completions.create({ model: "m", messages: user("What is the weather in Paris?"), tools });
  const c = r.choices[0];
  assert.equal(c.finish_reason, "tool_calls");
  assert.equal(c.message.content, null);
  assert.equal(c.message.tool_calls.length, 1);
  assert.equal(c.message.tool_calls[0].type, "function");
  assert.match(c.message.tool_calls[0].id, /^call_/);
  assert.equal(c.message.tool_calls[0].function.name, "get_weather");
  assert.deepEqual(JSON.parse(c.message.tool_calls[0].function.arguments), { city: "Paris", unit: "celsius" });
});

test("tool call: streaming never leaks tags", async () => {
  const s = await collectChat(await oa.chat.completions.create({ model: "m", messages: user("What is the weather in Paris?"), tools, stream: true }));
  assert.equal(s.finish, "tool_calls");
  assert.equal(s.content, "");
  assert.equal(s.toolCalls.length, 1);
  assert.deepEqual(JSON.parse(s.toolCalls[0].function.arguments), { city: "Paris", unit: "celsius" });
  // The SDK's stream helper accumulates the same message.
  const runner = oa.chat.completions.stream({ model: "m", messages: user("What is the weather in Paris?"), tools });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.tool_calls[0].function.name, "get_weather");
});

test("parallel tool calls, and parallel_tool_calls: false", async () => {
  const r = await oa.chat.completions.create({ model: "m", messages: user("Weather in Paris and Rome, please."), tools });
  assert.deepEqual(r.choices[0].message.tool_calls.map((t) => JSON.parse(t.function.arguments).city), ["Paris", "Rome"]);
  const one = await oa.chat.completions.create({ model: "m", messages: user("Weather in Paris and Rome, please."), tools, parallel_tool_calls: false });
  assert.equal(one.choices[0].message.tool_calls.length, 1);
  const none = await oa.chat.completions.create({ model: "m", messages: user("What is the weather in Paris?"), tools, tool_choice: "none" });
  assert.equal(none.choices[0].finish_reason, "stop");
  assert.match(none.choices[0].message.content, /get_weather/);
});

test("reasoning_content, streamed and not", async () => {
  const r = await oa.chat.completions.create({ model: "m", messages: user("Think about two plus two.") });
  assert.equal(r.choices[0].message.reasoning_content, "Two plus two is four, a small sum.");
  assert.equal(r.choices[0].message.content, "The answer is 4.");
  const s = await collectChat(await oa.chat.completions.create({ model: "m", messages: user("Think about two plus two."), stream: true }));
  assert.equal(s.reasoning, "Two plus two is four, a small sum.");
  assert.equal(s.content, "The answer is 4.");
});

test("stop strings on exact text", async () => {
  const r = await oa.chat.completions.create({ model: "m", messages: user("Count to ten."), stop: ["four"] });
  assert.equal(r.choices[0].message.content, "one, two, three, ");
  assert.equal(r.choices[0].finish_reason, "stop");
  const s = await collectChat(await oa.chat.completions.create({ model: "m", messages: user("Count to ten."), stop: "r, f", stream: true }));
  assert.equal(s.content, "one, two, three, fou");
});

test("Anthropic: text, thinking, stop_sequence, usage", async () => {
  const m = await an.messages.create({ model: "m", max_tokens: 100, messages: user("Think about two plus two.") });
  assert.equal(m.type, "message");
  assert.equal(m.stop_reason, "end_turn");
  assert.deepEqual(m.content.map((b) => b.type), ["thinking", "text"]);
  assert.equal(m.content[0].thinking, "Two plus two is four, a small sum.");
  assert.equal(m.content[1].text, "The answer is 4.");
  assert.ok(m.usage.input_tokens > 0 && m.usage.output_tokens > 0);
  const s = await an.messages.create({ model: "m", max_tokens: 100, system: "Be brief.", messages: user("Count to ten."), stop_sequences: ["four"] });
  assert.equal(s.stop_reason, "stop_sequence");
  assert.equal(s.stop_sequence, "four");
  assert.equal(s.content[0].text, "one, two, three, ");
  const l = await an.messages.create({ model: "m", max_tokens: 3, messages: user("Count to ten.") });
  assert.equal(l.stop_reason, "max_tokens");
});

test("Anthropic: tool_use and tool_result, streamed and not", async () => {
  const atools = [{ name: "get_weather", description: "Weather", input_schema: tools[0].function.parameters }];
  const m = await an.messages.create({ model: "m", max_tokens: 200, tools: atools, messages: user("What is the weather in Paris?") });
  assert.equal(m.stop_reason, "tool_use");
  const use = m.content.find((b) => b.type === "tool_use");
  assert.equal(use.name, "get_weather");
  assert.deepEqual(use.input, { city: "Paris", unit: "celsius" });
  const stream = an.messages.stream({ model: "m", max_tokens: 200, tools: atools, messages: user("What is the weather in Paris?") });
  const events = [];
  stream.on("streamEvent", (e) => events.push(e.type));
  const final = await stream.finalMessage();
  assert.equal(final.stop_reason, "tool_use");
  assert.deepEqual(final.content.find((b) => b.type === "tool_use").input, { city: "Paris", unit: "celsius" });
  assert.equal(events[0], "message_start");
  assert.ok(events.includes("content_block_start") && events.includes("content_block_stop"));
  assert.deepEqual(events.slice(-2), ["message_delta", "message_stop"]);
  const follow = await an.messages.create({ model: "m", max_tokens: 8, tools: atools, messages: [
    ...user("What is the weather in Paris?"),
    { role: "assistant", content: [{ type: "tool_use", id: use.id, name: "get_weather", input: use.input }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "18 C, sunny" }] }] });
  assert.equal(follow.type, "message");
  const streamed = await an.messages.stream({ model: "m", max_tokens: 100, messages: user("Think about two plus two.") }).finalMessage();
  assert.equal(streamed.content[0].thinking, "Two plus two is four, a small sum.");
  assert.equal(streamed.content[1].text, "The answer is 4.");
});

test("Anthropic error shapes", async () => {
  const h = { "x-api-key": KEY };
  for (const [body, needle] of [[{ messages: user("x") }, /max_tokens/], [{ max_tokens: 5, messages: [] }, /at least one/],
                                [{ max_tokens: 5, messages: [{ role: "system", content: "x" }] }, /unknown role/],
                                ["{bad", /not valid JSON/]]) {
    const r = await post(URL_SCRIPTED, "/v1/messages", body, h);
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.type, "error");
    assert.equal(r.json.error.type, "invalid_request_error");
    assert.match(r.json.error.message, needle);
  }
  await assert.rejects(an.messages.create({ model: "m", max_tokens: 5, messages: [] }), (e) => e.status === 400);
});

test("tool_choice required and named force a call the model would not make by itself", async () => {
  const both = [...tools, { type: "function", function: { name: "get_time", description: "Time in a city",
    parameters: { type: "object", properties: { city: { type: "string" } } } } }];
  const ask = user("What time is it in Tokyo?");
  const auto = await oa.chat.completions.create({ model: "m", messages: ask, tools: both });
  assert.equal(auto.choices[0].message.content, "I cannot tell the time.");
  assert.equal(auto.choices[0].finish_reason, "stop");
  for (const tool_choice of ["required", { type: "function", function: { name: "get_time" } }]) {
    const r = await oa.chat.completions.create({ model: "m", messages: ask, tools: both, tool_choice });
    const c = r.choices[0];
    assert.equal(c.finish_reason, "tool_calls", JSON.stringify(c));
    assert.equal(c.message.content, null);
    assert.equal(c.message.tool_calls.length, 1);
    assert.equal(c.message.tool_calls[0].function.name, "get_time");
    assert.deepEqual(JSON.parse(c.message.tool_calls[0].function.arguments), { city: "Tokyo" });
    if (tool_choice === "required") assert.ok(r.usage.prompt_tokens > auto.usage.prompt_tokens);  // the forced opening
    const s = await collectChat(await oa.chat.completions.create({ model: "m", messages: ask, tools: both, tool_choice, stream: true }));
    assert.equal(s.content, "");
    assert.equal(s.finish, "tool_calls");
    assert.equal(s.toolCalls.length, 1);
    assert.equal(s.toolCalls[0].function.name, "get_time");
    assert.deepEqual(JSON.parse(s.toolCalls[0].function.arguments), { city: "Tokyo" });
  }
  // Anthropic's "any" and "tool" choices are the same two.
  const atools = both.map((t) => ({ name: t.function.name, description: t.function.description, input_schema: t.function.parameters }));
  for (const tool_choice of [{ type: "any" }, { type: "tool", name: "get_time" }]) {
    const m = await an.messages.create({ model: "m", max_tokens: 100, tools: atools, tool_choice, messages: ask });
    assert.equal(m.stop_reason, "tool_use");
    assert.deepEqual(m.content.map((b) => b.type), ["tool_use"]);
    assert.equal(m.content[0].name, "get_time");
    assert.deepEqual(m.content[0].input, { city: "Tokyo" });
  }
});
