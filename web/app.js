// hearth chat page logic: keeps the conversation, streams replies from /v1/chat/completions
// (SSE read from fetch's body), shows reasoning_content in a collapsible block, renders content
// as Markdown, and stops a reply with an AbortController (the server cancels when the
// connection closes). A long conversation is trimmed before it is sent: the oldest turns are
// left out (the system prompt stays) until the prompt, counted by the server's /tokenize with
// the same template, plus the reply's budget fit the context; the reply says so.
"use strict";
const $ = (id) => document.getElementById(id);
const SETTINGS = ["system", "temperature", "top_p", "top_k", "max_tokens", "thinking", "api_key"];
// Replies are capped at this many tokens unless the settings say otherwise (half the context on
// small models): the server's own default, the whole remaining context, leaves no room for the
// next turn.
const DEFAULT_MAX_TOKENS = 4096;
let history = [];
let controller = null;
let contextLength = 0;  // from /v1/models; 0 until known

function loadSettings() {
  const saved = JSON.parse(localStorage.getItem("hearth-settings") || "{}");
  for (const k of SETTINGS) {
    if (!(k in saved)) continue;
    if ($(k).type === "checkbox") $(k).checked = saved[k]; else $(k).value = saved[k];
  }
}
function saveSettings() {
  const s = {};
  for (const k of SETTINGS) s[k] = $(k).type === "checkbox" ? $(k).checked : $(k).value;
  localStorage.setItem("hearth-settings", JSON.stringify(s));
}
function headers() {
  const h = { "Content-Type": "application/json" };
  if ($("api_key").value) h["Authorization"] = "Bearer " + $("api_key").value;
  return h;
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  const label = document.createElement("div");
  label.className = "role";
  label.textContent = role;
  div.appendChild(label);
  if (role === "user") {
    div.appendChild(document.createTextNode(text));
  } else {
    const details = document.createElement("details");
    details.hidden = true;
    details.innerHTML = "<summary>Thinking</summary><div class=\"reasoning\"></div>";
    const content = document.createElement("div");
    content.className = "content";
    const stats = document.createElement("div");
    stats.className = "stats";
    div.append(details, content, stats);
  }
  $("messages").appendChild(div);
  $("messages").scrollTop = $("messages").scrollHeight;
  return div;
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  $("input").disabled = busy;
}

function maxTokens() {
  if ($("max_tokens").value !== "") return parseInt($("max_tokens").value, 10);
  return contextLength ? Math.max(1, Math.min(DEFAULT_MAX_TOKENS, Math.floor(contextLength / 2)))
                       : DEFAULT_MAX_TOKENS;
}

function requestBody(turns) {
  const msgs = [];
  if ($("system").value.trim()) msgs.push({ role: "system", content: $("system").value });
  const body = { messages: msgs.concat(turns), stream: true, stream_options: { include_usage: true },
                 chat_template_kwargs: { enable_thinking: $("thinking").checked },
                 max_tokens: maxTokens() };
  for (const k of ["temperature", "top_p"]) if ($(k).value !== "") body[k] = parseFloat($(k).value);
  if ($("top_k").value !== "") body.top_k = parseInt($("top_k").value, 10);
  return body;
}

// The prompt's length in tokens as the server will render it (null if it cannot say).
async function promptTokens(body) {
  const res = await fetch("/tokenize", { method: "POST", headers: headers(),
    body: JSON.stringify({ messages: body.messages, chat_template_kwargs: body.chat_template_kwargs }) });
  if (!res.ok) return null;
  const out = await res.json();
  return typeof out.count === "number" ? out.count : null;
}

// The request for this turn, with the oldest turns left out until it fits the context. Returns
// { body, dropped } (dropped: how many earlier messages were left out).
async function fittedRequest() {
  let turns = history.slice();
  let body = requestBody(turns);
  if (!contextLength) return { body, dropped: 0 };
  for (;;) {
    const n = await promptTokens(body);
    if (n === null || n + body.max_tokens <= contextLength) break;
    // Drop the oldest turn: its user message and everything up to the next user message.
    let next = turns.findIndex((m, i) => i > 0 && m.role === "user");
    if (next < 0) {  // only the newest message is left: shorten the reply instead
      if (n < contextLength) { body.max_tokens = contextLength - n; break; }
      throw new Error("this message alone (" + n + " tokens) is longer than the model's " +
                      contextLength + "-token context");
    }
    turns = turns.slice(next);
    body = requestBody(turns);
  }
  return { body, dropped: history.length - turns.length };
}

// Reads an SSE stream and calls onData with each parsed "data:" payload.
async function readSSE(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        onData(JSON.parse(data));
      }
    }
  }
}

async function send(text) {
  history.push({ role: "user", content: text });
  addMessage("user", text);
  const div = addMessage("assistant", "");
  const details = div.querySelector("details"), reasoningEl = div.querySelector(".reasoning");
  const contentEl = div.querySelector(".content"), statsEl = div.querySelector(".stats");
  let content = "", reasoning = "", toolCalls = [], usage = null, finish = null, firstAt = 0;
  let dropped = 0;
  const started = performance.now();
  controller = new AbortController();
  setBusy(true);
  $("status").textContent = "waiting…";
  try {
    const fitted = await fittedRequest();
    dropped = fitted.dropped;
    const res = await fetch("/v1/chat/completions", { method: "POST", headers: headers(),
                                                       body: JSON.stringify(fitted.body), signal: controller.signal });
    if (!res.ok) {
      const err = await res.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || res.status + " " + res.statusText);
    }
    $("status").textContent = "generating…";
    await readSSE(res, (chunk) => {
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) usage = chunk.usage;
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) return;
      const d = choice.delta || {};
      if (!firstAt && (d.content || d.reasoning_content)) firstAt = performance.now();
      if (d.reasoning_content) {
        reasoning += d.reasoning_content;
        details.hidden = false;
        if (!content) details.open = true;
        reasoningEl.textContent = reasoning;
      }
      if (d.content) {
        content += d.content;
        details.open = false;
        contentEl.innerHTML = renderMarkdown(content);
      }
      if (d.tool_calls) toolCalls = toolCalls.concat(d.tool_calls);
      if (choice.finish_reason) finish = choice.finish_reason;
      $("messages").scrollTop = $("messages").scrollHeight;
    });
  } catch (e) {
    if (e.name === "AbortError") finish = "stopped";
    else { div.classList.add("error"); contentEl.textContent = "Error: " + e.message; }
  } finally {
    controller = null;
    setBusy(false);
    $("status").textContent = "";
  }
  if (toolCalls.length) contentEl.innerHTML += renderMarkdown("```json\n" + JSON.stringify(toolCalls, null, 2) + "\n```");
  const secs = (performance.now() - started) / 1000;
  const parts = [];
  if (finish) parts.push(finish);
  if (usage) {
    parts.push(usage.prompt_tokens + " prompt tokens (" + (usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : 0) + " cached)");
    parts.push(usage.completion_tokens + " generated");
    if (firstAt && usage.completion_tokens > 1)
      parts.push((usage.completion_tokens / ((performance.now() - firstAt) / 1000)).toFixed(1) + " tok/s");
  }
  parts.push(secs.toFixed(2) + " s");
  if (dropped) parts.push(dropped + " earlier message" + (dropped > 1 ? "s" : "") + " left out to fit the context");
  statsEl.textContent = parts.join(" · ");
  if (content || reasoning) history.push({ role: "assistant", content, reasoning_content: reasoning || undefined });
}

$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  send(text).finally(() => $("input").focus());
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); }
});
$("stop").addEventListener("click", () => controller && controller.abort());
$("new-chat").addEventListener("click", () => { if (controller) controller.abort(); history = []; $("messages").innerHTML = ""; });
$("toggle-settings").addEventListener("click", () => {
  const s = $("settings");
  s.hidden = !s.hidden;
  $("toggle-settings").setAttribute("aria-expanded", String(!s.hidden));
});
for (const k of SETTINGS) $(k).addEventListener("change", saveSettings);
loadSettings();
fetch("/v1/models", { headers: headers() }).then((r) => r.json()).then((m) => {
  if (!m.data || !m.data[0]) return;
  contextLength = m.data[0].max_model_len || 0;
  $("model").textContent = m.data[0].id + (contextLength ? " · ctx " + contextLength : "");
  $("max_tokens").placeholder = "auto (" + maxTokens() + ")";
}).catch(() => {});
