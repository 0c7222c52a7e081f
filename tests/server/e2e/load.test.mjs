// Connections that do nothing must not slow anyone down: with 1,000 idle keep-alive connections
// and 100 clients sending their request head one line every 2 s, 16 concurrent streaming clients
// still get their first token within 2x of what they get from an otherwise idle server, and
// /health answers at once.
import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { URL_MODEL } from "./common.mjs";

const N_IDLE = 1000, N_SLOW = 100, N_STREAMS = 16;

// One streamed chat request; resolves to its time to first content token, in ms.
async function ttft(i) {
  const started = performance.now();
  const res = await fetch(URL_MODEL + "/v1/chat/completions", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: "Client " + i + " says hello." }],
                           max_tokens: 16, ignore_eos: true, stream: true, temperature: 0 }) });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let first = 0, buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    if (!first && /"content":"[^"]/.test(buf)) first = performance.now();
  }
  assert.match(buf, /data: \[DONE\]/);
  assert.ok(first, "no content arrived");
  return first - started;
}

async function round() {
  const times = await Promise.all(Array.from({ length: N_STREAMS }, (_, i) => ttft(i)));
  return times.reduce((a, b) => a + b, 0) / times.length;
}

function connect() {
  const { hostname, port } = new URL(URL_MODEL);
  return new Promise((resolve, reject) => {
    const sock = net.connect(Number(port), hostname, () => resolve(sock));
    sock.on("error", reject);
  });
}

// An idle keep-alive connection: one request answered, then silence.
async function idleConnection() {
  const sock = await connect();
  await new Promise((resolve, reject) => {
    sock.once("data", (d) => (/^HTTP\/1\.1 200 /.test(d.toString()) ? resolve() : reject(new Error(d.toString()))));
    sock.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  });
  return sock;
}

test("1,000 idle and 100 slow connections leave streaming clients' TTFT within 2x", async () => {
  await round();  // warm-up: threads, caches, the prompt cache's first entries
  const idle = await round();

  const sockets = [];
  const timers = [];
  try {
    for (let i = 0; i < N_IDLE; i += 100)
      sockets.push(...await Promise.all(Array.from({ length: 100 }, idleConnection)));
    for (let i = 0; i < N_SLOW; ++i) {
      const sock = await connect();
      sock.on("error", () => {});
      sockets.push(sock);
      sock.write("POST /v1/chat/completions HTTP/1.1\r\n");
      let n = 0;
      timers.push(setInterval(() => sock.write(`X-Slow-${n++}: drip\r\n`), 2000));
    }
    const started = performance.now();
    const health = await fetch(URL_MODEL + "/health");
    const healthMs = performance.now() - started;
    assert.equal(health.status, 200);
    assert.ok(healthMs < 500, `/health took ${healthMs.toFixed(0)} ms under load`);

    const loaded = await round();
    console.log(`mean TTFT of ${N_STREAMS} streams: idle server ${idle.toFixed(1)} ms, with ` +
                `${N_IDLE} idle + ${N_SLOW} slow connections ${loaded.toFixed(1)} ms; /health ${healthMs.toFixed(1)} ms`);
    assert.ok(loaded <= 2 * idle, `TTFT ${loaded.toFixed(1)} ms under load vs ${idle.toFixed(1)} ms idle`);
    // The idle connections are still usable afterwards.
    const s = sockets[0];
    const reply = new Promise((resolve) => s.once("data", (d) => resolve(d.toString())));
    s.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert.match(await reply, /^HTTP\/1\.1 200 /);
  } finally {
    timers.forEach(clearInterval);
    sockets.forEach((s) => s.destroy());
  }
});
