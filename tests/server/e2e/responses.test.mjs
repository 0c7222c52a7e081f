// /v1/responses through the official openai SDK (responses.create, streamed and not, and
// responses.stream): text and output_text, reasoning items, function calls and their outputs,
// previous_response_id continued from the prompt cache, instructions, incomplete responses,
// truncation "auto", retrieve and delete, input_items (pages, cursors, a follow-up's own items),
// and the errors (400 naming the field, 404 for an unknown previous response). Exact outputs
// come from the scripted model.
import { test } from "node:test";
import assert from "node:assert/strict";
import { URL_MODEL, URL_SCRIPTED, KEY, openai, post } from "./common.mjs";

const oa = openai(URL_SCRIPTED, KEY);
const random = openai(URL_MODEL);
const AUTH = { Authorization: "Bearer " + KEY };
const tools = [
  { type: "function", name: "get_weather", description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" }, unit: { type: "string" } }, required: ["city"] } },
  { type: "function", name: "get_time", parameters: { type: "object", properties: { city: { type: "string" } } } },
];

// Collects a raw event stream: the types in order, the text and reasoning deltas, the last event.
async function collect(stream) {
  const out = { types: [], text: "", reasoning: "", args: "", events: [] };
  for await (const e of stream) {
    out.events.push(e);
    out.types.push(e.type);
    if (e.type === "response.output_text.delta") out.text += e.delta;
    if (e.type === "response.reasoning_text.delta") out.reasoning += e.delta;
    if (e.type === "response.function_call_arguments.delta") out.args += e.delta;
  }
  out.events.forEach((e, i) => assert.equal(e.sequence_number, i));
  out.last = out.events.at(-1);
  return out;
}

test("responses: text, output_text and usage, streamed and not", async () => {
  const r = await oa.responses.create({ model: "m", input: "Count to ten." });
  assert.match(r.id, /^resp_/);
  assert.equal(r.object, "response");
  assert.equal(r.status, "completed");
  assert.equal(r.output_text, "one, two, three, four, five, six, seven, eight, nine, ten.");
  assert.equal(r.output.length, 1);
  assert.equal(r.output[0].type, "message");
  assert.equal(r.output[0].role, "assistant");
  assert.deepEqual(r.output[0].content[0].annotations, []);
  assert.ok(r.usage.input_tokens > 5 && r.usage.output_tokens > 5, JSON.stringify(r.usage));
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(r.usage.output_tokens_details.reasoning_tokens, 0);
  assert.equal(r.store, true);
  assert.equal(r.tool_choice, "auto");

  const s = await collect(await oa.responses.create({ model: "m", input: "Count to ten.", stream: true }));
  assert.deepEqual(s.types.slice(0, 4), ["response.created", "response.in_progress",
                                         "response.output_item.added", "response.content_part.added"]);
  assert.deepEqual(s.types.slice(-4), ["response.output_text.done", "response.content_part.done",
                                       "response.output_item.done", "response.completed"]);
  assert.equal(s.events[0].response.status, "in_progress");
  assert.equal(s.text, r.output_text);
  assert.equal(s.last.response.output[0].content[0].text, r.output_text);
  assert.equal(s.last.response.usage.output_tokens, r.usage.output_tokens);

  // The SDK's stream helper accumulates the same response from the events.
  const deltas = [];
  const helper = oa.responses.stream({ model: "m", input: "Count to ten." });
  helper.on("response.output_text.delta", (e) => deltas.push(e.delta));
  const final = await helper.finalResponse();
  assert.equal(final.output_text, r.output_text);
  assert.equal(deltas.join(""), r.output_text);
});

test("responses: reasoning items", async () => {
  const r = await oa.responses.create({ model: "m", input: "Think about two plus two." });
  assert.deepEqual(r.output.map((o) => o.type), ["reasoning", "message"]);
  assert.match(r.output[0].id, /^rs_/);
  assert.deepEqual(r.output[0].summary, []);
  assert.deepEqual(r.output[0].content, [{ type: "reasoning_text", text: "Two plus two is four, a small sum." }]);
  assert.equal(r.output_text, "The answer is 4.");
  const rt = r.usage.output_tokens_details.reasoning_tokens;
  assert.ok(rt > 5 && rt < r.usage.output_tokens, JSON.stringify(r.usage));

  const s = await collect(await oa.responses.create({ model: "m", input: "Think about two plus two.", stream: true }));
  assert.equal(s.reasoning, "Two plus two is four, a small sum.");
  assert.equal(s.text, "The answer is 4.");
  assert.ok(s.types.includes("response.reasoning_text.done"));
  const final = await oa.responses.stream({ model: "m", input: "Think about two plus two." }).finalResponse();
  assert.equal(final.output[0].content[0].text, "Two plus two is four, a small sum.");
  assert.equal(final.output_text, "The answer is 4.");
});

test("responses: function calls, their outputs, tool_choice and parallel_tool_calls", async () => {
  const r = await oa.responses.create({ model: "m", input: "What is the weather in Paris?", tools });
  assert.equal(r.status, "completed");
  assert.equal(r.output.length, 1);
  const call = r.output[0];
  assert.equal(call.type, "function_call");
  assert.match(call.id, /^fc_/);
  assert.match(call.call_id, /^call_/);
  assert.equal(call.name, "get_weather");
  assert.deepEqual(JSON.parse(call.arguments), { city: "Paris", unit: "celsius" });
  assert.equal(r.output_text, "");
  assert.equal(r.tools[0].name, "get_weather");

  // The tool's result continues the stored response.
  const next = await oa.responses.create({ model: "m", tools, previous_response_id: r.id, max_output_tokens: 4,
    input: [{ type: "function_call_output", call_id: call.call_id, output: "18 C, sunny" }] });
  assert.equal(next.previous_response_id, r.id);
  assert.ok(next.usage.input_tokens_details.cached_tokens >= r.usage.input_tokens, JSON.stringify(next.usage));

  // The same conversation sent whole, without the store.
  const whole = await oa.responses.create({ model: "m", tools, store: false, max_output_tokens: 4, input: [
    { role: "user", content: "What is the weather in Paris?" },
    { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments },
    { type: "function_call_output", call_id: call.call_id, output: "18 C, sunny" }] });
  assert.equal(whole.usage.input_tokens, next.usage.input_tokens);

  const s = await collect(await oa.responses.create({ model: "m", input: "What is the weather in Paris?", tools, stream: true }));
  assert.deepEqual(JSON.parse(s.args), { city: "Paris", unit: "celsius" });
  assert.ok(s.types.includes("response.function_call_arguments.done"));
  assert.equal(s.last.response.output[0].type, "function_call");
  const final = await oa.responses.stream({ model: "m", input: "What is the weather in Paris?", tools }).finalResponse();
  assert.deepEqual(JSON.parse(final.output[0].arguments), { city: "Paris", unit: "celsius" });

  const two = await oa.responses.create({ model: "m", input: "Weather in Paris and Rome, please.", tools });
  assert.deepEqual(two.output.map((o) => JSON.parse(o.arguments).city), ["Paris", "Rome"]);
  const one = await oa.responses.create({ model: "m", input: "Weather in Paris and Rome, please.", tools, parallel_tool_calls: false });
  assert.equal(one.output.length, 1);
  const named = await oa.responses.create({ model: "m", input: "What time is it in Tokyo?", tools,
    tool_choice: { type: "function", name: "get_time" } });
  assert.equal(named.output[0].name, "get_time");
  assert.deepEqual(JSON.parse(named.output[0].arguments), { city: "Tokyo" });
});

test("responses: previous_response_id is served from the prompt cache; instructions are not carried over", async () => {
  const a = await oa.responses.create({ model: "m", instructions: "Be exact.", input: "Count to ten." });
  assert.equal(a.instructions, "Be exact.");
  const b = await oa.responses.create({ model: "m", instructions: "Be exact.", previous_response_id: a.id, input: "Count to ten." });
  assert.equal(b.output_text, a.output_text);
  // The follow-up's prompt is the first prompt, its reply and the new turn: all but the last
  // token of the first exchange comes from the cache.
  assert.ok(b.usage.input_tokens_details.cached_tokens >= a.usage.input_tokens + a.usage.output_tokens - 1,
            JSON.stringify({ a: a.usage, b: b.usage }));
  const c = await oa.responses.create({ model: "m", previous_response_id: b.id, input: "Count to ten." });
  assert.equal(c.instructions, null);
  assert.equal(c.output_text, a.output_text);

  // The same on a real (random-weight) model: the first prompt is reused at least.
  const ra = await random.responses.create({ model: "m", instructions: "You are a careful assistant.",
    input: "Describe the river Seine in three sentences.", max_output_tokens: 8, temperature: 0 });
  assert.equal(ra.status, "incomplete");
  assert.deepEqual(ra.incomplete_details, { reason: "max_output_tokens" });
  assert.equal(ra.output[0].status, "incomplete");
  const rb = await random.responses.create({ model: "m", instructions: "You are a careful assistant.",
    previous_response_id: ra.id, input: "Shorter.", max_output_tokens: 8, temperature: 0 });
  assert.ok(rb.usage.input_tokens_details.cached_tokens >= ra.usage.input_tokens - 1, JSON.stringify(rb.usage));
});

test("responses: incomplete when max_output_tokens ends it, streamed", async () => {
  const s = await collect(await oa.responses.create({ model: "m", input: "Count to ten.", max_output_tokens: 3, stream: true }));
  assert.equal(s.last.type, "response.incomplete");
  assert.equal(s.last.response.status, "incomplete");
  assert.equal(s.last.response.incomplete_details.reason, "max_output_tokens");
  assert.equal(s.last.response.max_output_tokens, 3);
  assert.equal(s.last.response.usage.output_tokens, 3);
});

test("responses: retrieve and delete; store: false keeps nothing", async () => {
  const r = await oa.responses.create({ model: "m", input: "Count to ten.", metadata: { run: "1" } });
  const got = await oa.responses.retrieve(r.id);
  assert.equal(got.id, r.id);
  assert.equal(got.output_text, r.output_text);
  assert.deepEqual(got.metadata, { run: "1" });
  await oa.responses.delete(r.id);
  await assert.rejects(oa.responses.retrieve(r.id), (e) => e.status === 404);
  const del = await fetch(`${URL_SCRIPTED}/v1/responses/${r.id}`, { method: "DELETE", headers: AUTH });
  assert.equal(del.status, 404);

  const unstored = await oa.responses.create({ model: "m", input: "Count to ten.", store: false });
  assert.equal(unstored.store, false);
  await assert.rejects(oa.responses.retrieve(unstored.id), (e) => e.status === 404);
  await assert.rejects(oa.responses.create({ model: "m", input: "Hi", previous_response_id: unstored.id }),
                       (e) => e.status === 404 && e.code === "previous_response_not_found");
});

test("responses: input_items lists the request's own items with stable ids, a page at a time", async () => {
  const r = await oa.responses.create({ model: "m", tools, max_output_tokens: 4, input: [
    { role: "developer", content: "Use metric units." },
    { role: "user", content: "What is the weather in Paris?" },
    { type: "function_call", call_id: "call_a", name: "get_weather", arguments: "{\"city\": \"Paris\"}" },
    { type: "function_call_output", call_id: "call_a", output: "18 C, sunny" },
    { type: "message", id: "msg_mine", role: "user", content: [{ type: "input_text", text: "Count to ten." }] }] });
  // Newest first by default; each item has an id (the client's, else a new one) and a status.
  const page = await oa.responses.inputItems.list(r.id);
  assert.deepEqual(page.data.map((i) => i.type),
                   ["message", "function_call_output", "function_call", "message", "message"]);
  const ids = page.data.map((i) => i.id);
  assert.equal(ids[0], "msg_mine");
  assert.match(ids[1], /^fco_/);
  assert.equal(page.data[1].call_id, "call_a");
  assert.equal(page.data[1].output, "18 C, sunny");
  assert.match(ids[2], /^fc_/);
  assert.equal(page.data[2].name, "get_weather");
  assert.match(ids[3], /^msg_/);
  assert.deepEqual(page.data[4].content, [{ type: "input_text", text: "Use metric units." }]);
  assert.equal(page.data[4].role, "developer");
  assert.ok(page.data.every((i) => i.status === "completed"));
  assert.equal(new Set(ids).size, 5);
  assert.deepEqual([page.body.first_id, page.body.last_id, page.has_more], [ids[0], ids[4], false]);
  assert.deepEqual((await oa.responses.inputItems.list(r.id)).data.map((i) => i.id), ids);  // stable

  // Ascending, two a page: the SDK's iterator follows each page's last id with `after`.
  const first = await oa.responses.inputItems.list(r.id, { order: "asc", limit: 2 });
  assert.deepEqual(first.data.map((i) => i.id), [ids[4], ids[3]]);
  assert.equal(first.has_more, true);
  const asc = [];
  for await (const item of oa.responses.inputItems.list(r.id, { order: "asc", limit: 2 })) asc.push(item.id);
  assert.deepEqual(asc, [...ids].reverse());
  const after = await oa.responses.inputItems.list(r.id, { limit: 2, after: ids[1] });
  assert.deepEqual(after.data.map((i) => i.id), [ids[2], ids[3]]);
  assert.equal(after.has_more, true);
  const last = await oa.responses.inputItems.list(r.id, { limit: 2, after: ids[2] });
  assert.deepEqual([last.data.map((i) => i.id), last.has_more], [[ids[3], ids[4]], false]);
  // before: the page just before that item, in the order asked for.
  const before = await oa.responses.inputItems.list(r.id, { order: "asc", limit: 2, before: ids[0] });
  assert.deepEqual([before.data.map((i) => i.id), before.has_more], [[ids[2], ids[1]], true]);
  const between = await oa.responses.inputItems.list(r.id, { after: ids[0], before: ids[3] });
  assert.deepEqual(between.data.map((i) => i.id), [ids[1], ids[2]]);
  // OpenAI's include values are accepted (nothing here has what they add).
  const incl = await oa.responses.inputItems.list(r.id, { include: ["message.input_image.image_url", "reasoning.encrypted_content"] });
  assert.deepEqual(incl.data.map((i) => i.id), ids);

  // A follow-up lists its own input only, not the conversation it continues.
  const next = await oa.responses.create({ model: "m", previous_response_id: r.id, input: "Count to ten.", max_output_tokens: 4 });
  const own = await oa.responses.inputItems.list(next.id);
  assert.equal(own.data.length, 1);
  assert.match(own.data[0].id, /^msg_/);
  assert.deepEqual([own.data[0].role, own.data[0].content], ["user", [{ type: "input_text", text: "Count to ten." }]]);

  // HEAD is the GET without a body.
  const url = `${URL_SCRIPTED}/v1/responses/${r.id}/input_items?order=asc`;
  const get = await fetch(url, { headers: AUTH });
  const head = await fetch(url, { method: "HEAD", headers: AUTH });
  assert.equal(head.status, 200);
  assert.equal(await head.text(), "");
  assert.equal(head.headers.get("content-length"), String((await get.text()).length));

  // 404 for an unknown, deleted or unstored response, in OpenAI's shape.
  const notFound = (e) => e.status === 404 && e.type === "invalid_request_error" && e.param === "response_id";
  await assert.rejects(oa.responses.inputItems.list("resp_nope"), notFound);
  const unstored = await oa.responses.create({ model: "m", input: "Count to ten.", store: false, max_output_tokens: 2 });
  await assert.rejects(oa.responses.inputItems.list(unstored.id), notFound);
  await oa.responses.delete(next.id);
  await assert.rejects(oa.responses.inputItems.list(next.id), notFound);

  // 400s name the parameter.
  for (const [query, param] of [["limit=0", "limit"], ["limit=101", "limit"], ["limit=ten", "limit"],
                                ["order=up", "order"], ["include%5B%5D=usage", "include"],
                                ["after=msg_nope", "after"], ["before=msg_nope", "before"], ["limit=2&limit=3", "limit"]]) {
    const res = await fetch(`${URL_SCRIPTED}/v1/responses/${r.id}/input_items?${query}`, { headers: AUTH });
    const body = await res.json();
    assert.equal(res.status, 400, query);
    assert.equal(body.error.type, "invalid_request_error", query);
    assert.equal(body.error.param, param, query);
  }
  await assert.rejects(oa.responses.inputItems.list(r.id, { limit: 500 }), (e) => e.status === 400 && e.param === "limit");
  // Two items with one id are refused when the response is created.
  const dup = await post(URL_SCRIPTED, "/v1/responses", { input: [
    { role: "user", content: "a", id: "msg_1" }, { role: "user", content: "b", id: "msg_1" }] }, AUTH);
  assert.equal(dup.status, 400);
  assert.equal(dup.json.error.param, "input[1].id");
});

test("responses: errors name the field; an unknown previous response is a 404", async () => {
  const bad = async (body, param) => {
    const r = await post(URL_SCRIPTED, "/v1/responses", body, AUTH);
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.type, "invalid_request_error");
    assert.equal(r.json.error.param, param, r.text);
    return r.json.error.message;
  };
  const image = await bad({ model: "m", input: [{ role: "user", content: [
    { type: "input_image", image_url: "https://example.com/cat.png" }] }] }, "input[0].content[0].type");
  assert.match(image, /text only/);
  assert.match(await bad({ input: "x", tools: [{ type: "web_search" }] }, "tools[0].type"), /function tools/);
  assert.match(await bad({ input: "x", text: { format: { type: "json_schema", name: "a", schema: {} } } }, "text.format"),
               /not supported/);
  await bad({ model: "m" }, "input");
  await bad({ input: [{ type: "function_call_output", output: "x" }] }, "input[0].call_id");
  await assert.rejects(oa.responses.create({ model: "m", input: "Hi", previous_response_id: "resp_nope" }), (e) => {
    assert.equal(e.status, 404);
    assert.equal(e.code, "previous_response_not_found");
    assert.equal(e.param, "previous_response_id");
    assert.equal(e.type, "invalid_request_error");
    assert.match(e.message, /resp_nope/);
    return true;
  });
  // The server still answers.
  assert.equal((await oa.responses.create({ model: "m", input: "Count to ten.", store: false })).status, "completed");
});

test("responses: truncation auto drops the oldest turns to fit", async () => {
  const URL_HARD = process.env.HEARTH_HARDENED_URL;  // --max-prompt-tokens 256
  const hard = openai(URL_HARD, process.env.HEARTH_HARDENED_KEY);
  const long = "word ".repeat(300);
  const input = [{ role: "user", content: long }, { role: "assistant", content: "Noted." },
                 { role: "user", content: "Say hi." }];
  await assert.rejects(hard.responses.create({ model: "m", input, max_output_tokens: 2 }),
                       (e) => e.status === 400 && e.code === "prompt_too_long" && e.param === "input");
  const r = await hard.responses.create({ model: "m", input, max_output_tokens: 2, truncation: "auto" });
  assert.equal(r.truncation, "auto");
  assert.ok(r.usage.input_tokens < 40, JSON.stringify(r.usage));
  // Its input items are listed whole, the dropped turn too: they are what the request sent.
  const items = await hard.responses.inputItems.list(r.id, { order: "asc" });
  assert.deepEqual(items.data.map((i) => i.content[0].text), [long, "Noted.", "Say hi."]);
});
