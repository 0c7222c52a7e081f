#!/usr/bin/env python3
"""Serving benchmark for any running hearth server (or any OpenAI-compatible one), in the manner
of vLLM's benchmark_serving: at each concurrency level, that many clients send streamed
/v1/completions requests back to back, each a prompt of random token ids and a fixed number of
generated tokens (ignore_eos), until the level's requests are done; --prefix-len puts the same
random tokens before every prompt of a level (a shared system prompt). Prints per level: requests,
failures, wall time, output tokens/s, requests/s, time to first token p50/p99 and inter-token
latency p50/p99 (the gap between streamed chunks carrying text, per token when a chunk carries
several). The client sees a token when its text arrives; a token with no text of its own (an id
the tokenizer has no text for, as random checkpoints pick with a small tokenizer, or a piece of a
character) shows only with a later one. Where the server reports its own view in the usage chunk
(hearth's `timings.ttft_ms`, arrival to first token), that is printed too ("engine TTFT").

Standard library only, so it runs on a bare GPU machine. Example:
  hearth serve -m MODEL --port 8080 &
  bench/bench_serving.py --url http://127.0.0.1:8080 --concurrency 1,8,32 --input-len 1000 --output-len 1000
--json prints the figures as one JSON object per level instead of the table."""
import argparse, json, random, statistics, sys, threading, time, urllib.request


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def one_request(url, prompt, output_len, model, timeout):
    """Streams one completion; returns (ttft_s or None when no text came, [inter-token gaps],
    completion_tokens, the server's ttft_s or None) or raises."""
    body = {"model": model, "prompt": prompt, "max_tokens": output_len, "stream": True,
            "ignore_eos": True, "temperature": 0, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = last = None
    gaps, tokens, chunks, engine_ttft = [], None, 0, None
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            c = json.loads(line[6:])
            if c.get("error"):
                raise RuntimeError(c["error"].get("message", str(c["error"])))
            if c.get("usage"):
                tokens = c["usage"].get("completion_tokens")
            if isinstance(c.get("timings"), dict) and "ttft_ms" in c["timings"]:
                engine_ttft = c["timings"]["ttft_ms"] / 1e3
            ch = c.get("choices") or [{}]
            if ch[0].get("text"):
                now = time.perf_counter()
                if first is None:
                    first = now
                else:
                    gaps.append(now - last)
                last = now
                chunks += 1
    if first is None:
        if not tokens:
            raise RuntimeError("no text streamed and no completion tokens reported")
        return None, [], tokens, engine_ttft  # tokens without text: nothing to time here
    tokens = tokens if tokens is not None else chunks
    # A chunk may carry several tokens (text held back until it is valid UTF-8 or clear of a
    # stop string): spread the decode time over the tokens after the first.
    if tokens > 1 and chunks > 1 and tokens != chunks:
        per = (last - first) / (tokens - 1)
        gaps = [per] * (tokens - 1)
    return first - t0, gaps, tokens, engine_ttft


def run_level(args, concurrency, n_requests, rng):
    # With --prefix-len every prompt of the level starts with the same random tokens (a system
    # prompt shared by many clients), then its own --input-len tokens.
    prefix = [rng.randrange(args.min_id, args.max_id) for _ in range(args.prefix_len)]
    prompts = [prefix + [rng.randrange(args.min_id, args.max_id) for _ in range(args.input_len)]
               for _ in range(n_requests)]
    lock = threading.Lock()
    next_i = [0]
    ttfts, engine_ttfts, itls, out_tokens, errors = [], [], [], [0], []

    def client():
        while True:
            with lock:
                i = next_i[0]
                if i >= n_requests:
                    return
                next_i[0] += 1
            try:
                ttft, gaps, tokens, engine_ttft = one_request(args.url, prompts[i], args.output_len,
                                                              args.model, args.timeout)
                with lock:
                    if ttft is not None:
                        ttfts.append(ttft)
                    if engine_ttft is not None:
                        engine_ttfts.append(engine_ttft)
                    itls.extend(gaps)
                    out_tokens[0] += tokens
            except Exception as e:  # counted and reported; the level goes on
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"concurrency": concurrency, "requests": n_requests, "failed": len(errors),
            "first_error": errors[0] if errors else None, "wall_s": wall,
            "output_tokens": out_tokens[0], "output_tok_s": out_tokens[0] / wall,
            "req_s": (n_requests - len(errors)) / wall,
            "ttft_p50_ms": percentile(ttfts, 50) * 1e3, "ttft_p99_ms": percentile(ttfts, 99) * 1e3,
            "engine_ttft_p50_ms": percentile(engine_ttfts, 50) * 1e3,
            "engine_ttft_p99_ms": percentile(engine_ttfts, 99) * 1e3,
            "itl_p50_ms": percentile(itls, 50) * 1e3, "itl_p99_ms": percentile(itls, 99) * 1e3}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--model", default="", help="the request's model field")
    p.add_argument("--concurrency", default="1,8", help="comma-separated levels")
    p.add_argument("--requests", type=int, default=0,
                   help="requests per level (default: 2 x the level, at least 4)")
    p.add_argument("--input-len", type=int, default=256, help="prompt tokens")
    p.add_argument("--prefix-len", type=int, default=0,
                   help="tokens every prompt of a level starts with (before its --input-len own)")
    p.add_argument("--output-len", type=int, default=128, help="generated tokens")
    p.add_argument("--min-id", type=int, default=100, help="prompt token ids are drawn from")
    p.add_argument("--max-id", type=int, default=1000, help="[min-id, max-id)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=3600, help="seconds per request")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if (args.input_len < 1 or args.output_len < 1 or args.prefix_len < 0
            or args.min_id >= args.max_id):
        sys.exit("--input-len and --output-len must be >= 1, --prefix-len >= 0, "
                 "and --min-id < --max-id")
    levels = [int(c) for c in args.concurrency.split(",")]
    if any(c < 1 for c in levels):
        sys.exit("--concurrency levels must be >= 1")
    rng = random.Random(args.seed)
    if not args.json:
        shared = f" after {args.prefix_len} shared" if args.prefix_len else ""
        print(f"{args.url}: prompts of {args.input_len} random tokens{shared}, "
              f"{args.output_len} generated")
        print("| clients | requests | failed | wall s | output tok/s | req/s | TTFT p50 ms | "
              "TTFT p99 ms | engine TTFT p50 ms | engine TTFT p99 ms | ITL p50 ms | ITL p99 ms |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    failed = 0
    for c in levels:
        n = args.requests or max(4, 2 * c)
        r = run_level(args, c, n, rng)
        failed += r["failed"]
        if args.json:
            print(json.dumps(r))
        else:
            print(f"| {c} | {n} | {r['failed']} | {r['wall_s']:.2f} | {r['output_tok_s']:.1f} | "
                  f"{r['req_s']:.3f} | {r['ttft_p50_ms']:.1f} | {r['ttft_p99_ms']:.1f} | "
                  f"{r['engine_ttft_p50_ms']:.1f} | {r['engine_ttft_p99_ms']:.1f} | "
                  f"{r['itl_p50_ms']:.2f} | {r['itl_p99_ms']:.2f} |")
        if r["first_error"]:
            print(f"first error at {c} clients: {r['first_error']}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
