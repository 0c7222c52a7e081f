#!/usr/bin/env python3
"""Server overhead benchmark (docs/PERFORMANCE.md, "Server"): start-to-ready, decode tokens/s
through the streaming API, and time-to-first-token minus the engine's own prefill time.
Two clients read the same streamed /v1/completions responses: urllib (json.loads per chunk, as a
typical Python client does) and a lean raw-socket reader (no per-chunk JSON). On a machine with
few cores the client shares the CPU with the engine's threads, so its own CPU time per token
(printed) is part of what the urllib figure shows; the lean figure shows the server's path.
Standard library only, so it runs on the bare GPU machine.
usage: perf_api.py HEARTH_BINARY MODEL_DIR [THREADS] [RUNS]"""
import json, socket, subprocess, sys, time, urllib.parse, urllib.request, statistics, re

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

def stream_lean(url, body):
    # The same request over a raw socket; a chunk has text unless it is '"text":""'. Only the
    # usage chunk is parsed as JSON.
    u = urllib.parse.urlsplit(url)
    payload = json.dumps(body).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode()
    t0 = time.perf_counter()
    sock = socket.create_connection((u.hostname, u.port))
    sock.sendall(head + payload)
    first = last = None
    tail = b""
    usage_event = None
    while True:
        data = sock.recv(1 << 16)
        if not data:
            break
        now = time.perf_counter()
        events = (tail + data).split(b"\n\n")
        tail = events.pop()
        for e in events:
            i = e.find(b"data: {")
            if i < 0:
                continue
            if b'"usage":{' in e:
                usage_event = e[i + 6:]
            elif b'"text":""' not in e:
                first = first or now
                last = now
    sock.close()
    c = json.loads(usage_event)
    return t0, first, last, c["usage"], c["timings"]

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
    c0 = time.process_time()
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
    cpu_urllib = (time.process_time() - c0) / (runs * body["max_tokens"])
    print(f"decode through the API: {statistics.mean(rates):.2f} ± {statistics.pstdev(rates):.2f} tok/s; "
          f"TTFT - prefill: {statistics.mean(overheads):.2f} ms (max {max(overheads):.2f}); "
          f"client CPU {cpu_urllib * 1e6:.1f} us/token")
    rates, overheads = [], []
    c0 = time.process_time()
    for i in range(runs):
        body["prompt"] = f"Write a long story, lean number {i}."
        t0, first, last, usage, timings = stream_lean(url, body)
        n = usage["completion_tokens"]
        rates.append((n - 1) / (last - first))
        overheads.append((first - t0) * 1e3 - timings["prefill_ms"])
    cpu_lean = (time.process_time() - c0) / (runs * body["max_tokens"])
    print(f"lean client: decode {statistics.mean(rates):.2f} ± {statistics.pstdev(rates):.2f} tok/s; "
          f"TTFT - prefill: {statistics.mean(overheads):.2f} ms (max {max(overheads):.2f}); "
          f"client CPU {cpu_lean * 1e6:.1f} us/token")
    p.terminate()
    p.wait(timeout=30)

main()
