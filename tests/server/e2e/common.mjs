// Shared by the end-to-end tests: server URLs from run-e2e.sh, SDK clients, raw HTTP helpers.
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";

export const URL_MODEL = process.env.HEARTH_URL;            // hearth serve on the random qwen3
export const URL_SCRIPTED = process.env.HEARTH_SCRIPTED_URL; // scripted model, with an API key
export const KEY = process.env.HEARTH_KEY;
export const URL_HYBRID = process.env.HEARTH_HYBRID_URL;                 // models/default (Qwen3.5)
export const URL_HYBRID_NOCACHE = process.env.HEARTH_HYBRID_NOCACHE_URL; // same, --cache-ram 0

export const openai = (base = URL_MODEL, apiKey = "unused") =>
  new OpenAI({ baseURL: base + "/v1", apiKey, maxRetries: 0, timeout: 120000 });
export const anthropic = (base = URL_MODEL, apiKey = "unused") =>
  new Anthropic({ baseURL: base, apiKey, maxRetries: 0, timeout: 120000 });

export async function post(base, path, body, headers = {}) {
  const res = await fetch(base + path, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, json, text };
}

// Collects an OpenAI chat stream: content, reasoning, tool calls, finish reason, usage.
export async function collectChat(stream) {
  const out = { content: "", reasoning: "", toolCalls: [], finish: null, usage: null, chunks: [] };
  for await (const chunk of stream) {
    out.chunks.push(chunk);
    if (chunk.usage) out.usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.content) out.content += c.delta.content;
    if (c.delta.reasoning_content) out.reasoning += c.delta.reasoning_content;
    for (const t of c.delta.tool_calls || []) out.toolCalls[t.index] = t;
    if (c.finish_reason) out.finish = c.finish_reason;
  }
  return out;
}
