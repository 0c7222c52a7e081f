// The server as a hostile or careless client meets it: JSON nested 20,000 deep wherever a field
// reaches the chat template, broken HTTP framing, pipelining, idle and slow connections, CORS,
// the key from a file, out-of-range token ids, and /metrics counting streamed requests. After
// each attack the server must still answer.
import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { URL_MODEL, post } from "./common.mjs";

const URL_HARD = process.env.HEARTH_HARDENED_URL;  // --cors-origin, --idle-timeout 2, key file
const HARD_KEY = process.env.HEARTH_HARDENED_KEY;
const AUTH = { Authorization: "Bearer " + HARD_KEY };

// Sends raw bytes, returns everything the server sent until it closed (or `ms` passed).
function raw(base, bytes, ms = 3000) {
  const { hostname, port } = new URL(base);
  return new Promise((resolve) => {
    const sock = net.connect(Number(port), hostname);
    let out = "";
    const timer = setTimeout(() => { sock.destroy(); resolve({ out, closed: false }); }, ms);
    sock.on("data", (d) => { out += d.toString("latin1"); });
    sock.on("close", () => { clearTimeout(timer); resolve({ out, closed: true }); });
    sock.on("error", () => {});
    sock.write(bytes);
  });
}

async function healthy(base) {
  const res = await fetch(base + "/health");
  assert.equal(res.status, 200);
}

const deep = (n) => "[".repeat(n) + "]".repeat(n);
const user = [{ role: "user", content: "hi" }];

test("JSON nested 20,000 deep is a 400 naming the limit, wherever it sits", async () => {
  const d = deep(20000);
  const bodies = [
    ["/v1/chat/completions", `{"messages":${JSON.stringify(user)},"chat_template_kwargs":{"x":${d}}}`],
    ["/v1/chat/completions", `{"messages":${JSON.stringify(user)},"tools":[{"type":"function",` +
                             `"function":{"name":"f","parameters":{"type":"object","x":${d}}}}]}`],
    ["/v1/chat/completions", JSON.stringify({ messages: [...user, { role: "assistant", content: "",
      tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: d } }] }] })],
    ["/v1/messages", `{"max_tokens":8,"messages":[{"role":"user","content":"hi"},{"role":"assistant",` +
                     `"content":[{"type":"tool_use","id":"t","name":"f","input":{"x":${d}}}]}]}`],
    ["/tokenize", `{"messages":${JSON.stringify(user)},"chat_template_kwargs":{"x":${d}}}`],
    ["/v1/messages/count_tokens", `{"messages":[{"role":"user","content":[{"type":"text","text":"a",` +
                                  `"x":${d}}]}]}`],
  ];
  for (const [path, body] of bodies) {
    const r = await post(URL_HARD, path, body, AUTH);
    assert.equal(r.status, 400, path + ": " + r.text.slice(0, 200));
    assert.match(r.json.error.message, /deeper than 128 levels/, path);
  }
  await healthy(URL_HARD);
});

test("broken framing gets 400 and a close; pipelined requests are answered in order", async () => {
  for (const cl of ["-5", "99999999999999999999", "12abc"]) {
    const r = await raw(URL_HARD, `POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: ${cl}\r\n\r\n`);
    assert.match(r.out, /^HTTP\/1\.1 400 /, "Content-Length " + cl);
    assert.match(r.out, /Connection: close/);
    assert.equal(r.closed, true);
  }
  let r = await raw(URL_HARD, "NOT HTTP AT ALL\r\n\r\n");
  assert.match(r.out, /^HTTP\/1\.1 400 /);
  r = await raw(URL_HARD, `POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n`);
  assert.match(r.out, /^HTTP\/1\.1 413 /);
  r = await raw(URL_HARD, "GET /health HTTP/1.1\r\nHost: x\r\n" + "X-Pad: " + "a".repeat(70000) + "\r\n\r\n");
  assert.match(r.out, /^HTTP\/1\.1 431 /);

  r = await raw(URL_HARD, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" +
                          "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n" +
                          "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + HARD_KEY +
                          "\r\nConnection: close\r\n\r\n");
  const statuses = [...r.out.matchAll(/HTTP\/1\.1 (\d+) /g)].map((m) => m[1]);
  assert.deepEqual(statuses, ["200", "404", "200"]);
  assert.equal(r.closed, true);
  await healthy(URL_HARD);
});

test("an idle keep-alive connection is closed after --idle-timeout", async () => {
  const started = Date.now();
  const r = await raw(URL_HARD, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", 10000);
  const secs = (Date.now() - started) / 1000;
  assert.match(r.out, /^HTTP\/1\.1 200 /);
  assert.equal(r.closed, true);
  assert.ok(secs >= 1.5 && secs < 6, `closed after ${secs} s, expected about 2`);
});

test("CORS: the configured origin is allowed, others are not, preflights need no key", async () => {
  let res = await fetch(URL_HARD + "/v1/chat/completions", { method: "OPTIONS", headers: {
    Origin: "http://app.example", "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type" } });
  assert.equal(res.status, 204);
  assert.equal(res.headers.get("access-control-allow-origin"), "http://app.example");
  assert.match(res.headers.get("access-control-allow-methods"), /POST/);
  assert.equal(res.headers.get("access-control-allow-headers"), "authorization, content-type");
  res = await fetch(URL_HARD + "/v1/models", { headers: { Origin: "http://app.example", ...AUTH } });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("access-control-allow-origin"), "http://app.example");
  res = await fetch(URL_HARD + "/v1/models", { headers: { Origin: "http://evil.example", ...AUTH } });
  assert.equal(res.headers.get("access-control-allow-origin"), null);
  res = await fetch(URL_MODEL + "/v1/models", { headers: { Origin: "http://app.example" } });
  assert.equal(res.headers.get("access-control-allow-origin"), null);  // off by default
});

test("the key from --api-key-file is required", async () => {
  assert.equal((await post(URL_HARD, "/tokenize", { content: "a" })).status, 401);
  assert.equal((await post(URL_HARD, "/tokenize", { content: "a" }, { Authorization: "Bearer no" })).status, 401);
  assert.equal((await post(URL_HARD, "/tokenize", { content: "a" }, AUTH)).status, 200);
  assert.equal((await post(URL_HARD, "/tokenize", { content: "a" }, { "x-api-key": HARD_KEY })).status, 200);
});

test("out-of-range token ids are a 400 naming the vocabulary size", async () => {
  const r = await post(URL_HARD, "/detokenize", { tokens: [1, 999999999] }, AUTH);
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /999999999 is out of range/);
});

test("a prompt over --max-prompt-tokens is refused before it runs", async () => {
  const r = await post(URL_HARD, "/v1/chat/completions",
                       { messages: [{ role: "user", content: "word ".repeat(400) }], max_tokens: 4 }, AUTH);
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /at most 256 \(--max-prompt-tokens\)/);
});

test("streamed requests are counted with their status in /metrics", async () => {
  const res = await fetch(URL_HARD + "/v1/chat/completions", { method: "POST",
    headers: { "Content-Type": "application/json", ...AUTH },
    body: JSON.stringify({ messages: user, max_tokens: 4, stream: true }) });
  assert.equal(res.status, 200);
  await res.text();
  const metrics = await (await fetch(URL_HARD + "/metrics")).text();
  assert.match(metrics, /hearth_requests_total\{endpoint="\/v1\/chat\/completions",status="200"\} [1-9]/);
  assert.doesNotMatch(metrics, /status="-1"/);
});
