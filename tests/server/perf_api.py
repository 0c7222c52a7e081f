#!/usr/bin/env python3
"""Server overhead benchmark (docs/PERFORMANCE.md, "Server"): start-to-ready, decode tokens/s
through the streaming API, and time-to-first-token minus the engine's own prefill time.
Standard library only, so it runs on the bare GPU machine.
usage: perf_api.py HEARTH_BINARY MODEL_DIR [THREADS] [RUNS]"""
import json, subprocess, sys, time, urllib.request, statistics, re

def stream(url, body):
    # /v1/completions: no chat parsing that could hold the first token's text back.
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = last = None
    usage = timings = None
    with urllib.request.urlopen(req) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            c = json.loads(line[6:])
            if c.get("usage"):
                usage, timings = c["usage"], c.get("timings")
            ch = c.get("choices") or [{}]
            if ch[0].get("text"):
                now = time.perf_counter()
                first = first or now
                last = now
    return t0, first, last, usage, timings

def main():
    binary, model = sys.argv[1], sys.argv[2]
    threads = sys.argv[3] if len(sys.argv) > 3 else "0"
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    t0 = time.perf_counter()
    args = [binary, "serve", "-m", model, "--port", "0"] + (["-t", threads] if threads != "0" else [])
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    ready = time.perf_counter() - t0
    url = re.search(r"ready at (\S+)", line).group(1)
    load_ms = float(re.search(r"load (\d+) ms", line).group(1))
    print(f"start-to-ready {ready*1e3:.0f} ms, of which model load {load_ms:.0f} ms -> overhead {ready*1e3 - load_ms:.0f} ms")
    body = {"prompt": "Write a long story.", "max_tokens": 128,
            "ignore_eos": True, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    stream(url, dict(body, max_tokens=8))  # warm-up
    rates, overheads = [], []
    for i in range(runs):
        body["prompt"] = f"Write a long story, number {i}."  # a fresh prompt each run
        t0, first, last, usage, timings = stream(url, body)
        n = usage["completion_tokens"]
        rate = (n - 1) / (last - first)
        ttft = (first - t0) * 1e3
        over = ttft - timings["prefill_ms"]
        rates.append(rate)
        overheads.append(over)
        print(f"run {i}: {n} tokens, decode {rate:.2f} tok/s (engine {(n-1)*1e3/timings['decode_ms']:.2f}), "
              f"ttft {ttft:.1f} ms (engine submit-to-token {timings['ttft_ms']:.1f}), engine prefill {timings['prefill_ms']:.1f} ms, queue {timings['queue_ms']:.2f} ms, "
              f"overhead {over:.2f} ms")
    print(f"decode through the API: {statistics.mean(rates):.2f} ± {statistics.pstdev(rates):.2f} tok/s; "
          f"TTFT - prefill: {statistics.mean(overheads):.2f} ms (max {max(overheads):.2f})")
    p.terminate()
    p.wait(timeout=30)

main()
