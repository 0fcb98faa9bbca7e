#!/usr/bin/env python3
"""Floods for `bertflow serve` (standard library only): one route at a time,
--clients clients in a closed loop for --duration seconds with the heavy
bodies of issue 49's probes, while a prober times GET /health every 0.1 s and
the server's resident memory (VmRSS of --pid) is sampled every 0.25 s.

Routes (--route):
  embed_texts  /embed, 256 texts of ~500 tokens         (embedding model)
  embed_ids    /embed, 32 x 512 token ids               (embedding model)
  v1_ids       /v1/embeddings, 32 x 512 token ids       (embedding model)
  embed_all    /embed_all, 8 texts of ~500 tokens       (embedding model)
  rerank       /rerank, 256 pairs                       (cross-encoder)
  root_rerank  POST / with a rerank body, 256 pairs     (cross-encoder)
  predict      /predict, 64 pairs of ~250 + ~250 tokens (cross-encoder)
  half_headers 600 connections that send half a request head and wait

Pass (exit 0) when: no request is lost or answered 5xx; every answer
(200, 413 or 429) comes within --answer-s (default 5 s) at the 99th
percentile; /health answers within --health-s (default 1 s) every time;
the peak RSS stays under --max-rss-mb. Prints one JSON line of results.
"""
import argparse
import http.client
import json
import socket
import sys
import threading
import time
import urllib.parse

WORDS = "the quick brown fox jumps over a lazy dog near river bank in spring".split()


def text(tokens):
    return " ".join(WORDS[i % len(WORDS)] for i in range(tokens))


def body_of(route):
    ids = [101] + [2000 + i % 1000 for i in range(510)] + [102]
    long = text(500)
    return {
        "embed_texts": ("/embed", {"inputs": [long] * 256, "truncate": True}),
        "embed_ids": ("/embed", {"inputs": [ids] * 32, "truncate": True}),
        "v1_ids": ("/v1/embeddings", {"input": [ids] * 32}),
        "embed_all": ("/embed_all", {"inputs": [long] * 8, "truncate": True}),
        "rerank": ("/rerank", {"query": "what is it", "texts": [text(60)] * 256, "truncate": True}),
        "root_rerank": ("/", {"query": "what is it", "texts": [text(60)] * 256, "truncate": True}),
        "predict": ("/predict", {"inputs": [[text(250), text(250)]] * 64, "truncate": True}),
    }[route]


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--route", required=True)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--pid", type=int, default=0)
    ap.add_argument("--answer-s", type=float, default=5.0)
    ap.add_argument("--health-s", type=float, default=1.0)
    ap.add_argument("--max-rss-mb", type=float, default=2048.0)
    args = ap.parse_args()
    url = urllib.parse.urlsplit(args.url)
    host, port = url.hostname, url.port
    deadline = time.monotonic() + args.duration
    lock = threading.Lock()
    answers = {"200": [], "413": [], "429": [], "5xx": [], "other": [], "lost": []}
    health = []
    rss = []
    lost_reasons = {}

    def record(kind, seconds):
        with lock:
            answers[kind].append(seconds)

    def client():
        if args.route == "half_headers":
            return
        path, body = body_of(args.route)
        payload = json.dumps(body).encode()
        while time.monotonic() < deadline:
            start = time.monotonic()
            try:
                c = http.client.HTTPConnection(host, port, timeout=30)
                c.request("POST", path, payload, {"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                c.close()
                took = time.monotonic() - start
                s = r.status
                record(str(s) if s in (200, 413, 429) else ("5xx" if s >= 500 else "other"), took)
            except OSError as e:
                record("lost", time.monotonic() - start)
                with lock:
                    why = f"{type(e).__name__} after {time.monotonic() - start:.1f} s"
                    lost_reasons[why] = lost_reasons.get(why, 0) + 1

    def half_headers():
        socks = []
        while time.monotonic() < deadline:
            while len(socks) < 600 and time.monotonic() < deadline:
                try:
                    s = socket.create_connection((host, port), timeout=1)
                    s.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
                    socks.append(s)
                except OSError:
                    time.sleep(0.01)
                    break
            # Drop the ones the server closed, to reopen them.
            alive = []
            for s in socks:
                s.setblocking(False)
                try:
                    closed = s.recv(1) == b""
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                s.setblocking(True)
                (s.close() if closed else alive.append(s))
            socks = alive
            time.sleep(0.05)
        for s in socks:
            s.close()

    def prober():
        while time.monotonic() < deadline:
            start = time.monotonic()
            try:
                c = http.client.HTTPConnection(host, port, timeout=10)
                c.request("GET", "/health")
                ok = c.getresponse().status == 200
                c.close()
            except OSError:
                ok = False
            health.append(time.monotonic() - start if ok else float("inf"))
            if args.pid:
                m = rss_mib(args.pid)
                if m is not None:
                    rss.append(m)
            time.sleep(0.1)

    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    threads.append(threading.Thread(target=prober))
    if args.route == "half_headers":
        threads.append(threading.Thread(target=half_headers))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    answered = answers["200"] + answers["413"] + answers["429"]
    result = {
        "route": args.route,
        "counts": {k: len(v) for k, v in answers.items()},
        "p50_429_ms": (percentile(answers["429"], 50) or 0) * 1000,
        "p99_answer_s": percentile(answered, 99),
        "max_health_s": max(health) if health else None,
        "peak_rss_mb": max(rss) if rss else None,
        "lost": lost_reasons,
    }
    failures = []
    if answers["lost"] or answers["5xx"] or answers["other"]:
        failures.append("requests lost or answered 5xx/other")
    if answered and result["p99_answer_s"] > args.answer_s:
        failures.append(f"p99 answer {result['p99_answer_s']:.2f} s > {args.answer_s} s")
    if not health or result["max_health_s"] > args.health_s:
        failures.append(f"/health took {result['max_health_s']} s > {args.health_s} s")
    if rss and result["peak_rss_mb"] > args.max_rss_mb:
        failures.append(f"peak RSS {result['peak_rss_mb']:.0f} MB > {args.max_rss_mb} MB")
    result["failures"] = failures
    print(json.dumps(result))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
