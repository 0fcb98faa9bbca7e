#!/usr/bin/env python3
"""Soak and load test for `bertflow serve` (standard library only).

N client threads send a mix of requests for a fixed time, each waiting for its
answer before sending the next (closed loop):

  /v1/embeddings  1 to 64 inputs (uniform)           weight 50%
  /similarity     1 to 8 pairs                        weight 25%
  /search         one query, top_k 10                 weight 25% (if the server has a corpus)

Every --every seconds it prints requests/s, 429s, errors and the server's resident
memory (VmRSS of --pid, if given). At the end it prints, per route, requests, req/s,
p50/p99 latency, 429s, 5xx and other errors, then the RSS series and whether it stayed
within 10% after warm-up; --json FILE writes all of it. A response that never came
(connection error, timeout) counts as lost. Exit status 1 if anything was lost or
answered 5xx (429 is back-pressure, not a failure).

  python3 scripts/soak.py --url http://127.0.0.1:8080 --duration 600 --clients 64 --pid PID
"""
import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse

WORDS = (
    "a man woman child dog cat plays playing guitar piano music runs across field "
    "kitchen cooks pasta slices onions market falls sharply rain floods streets boy "
    "kicks football orchestra performs symphony chef chops vegetables sleeps sofa "
    "bicycle rides river mountain city train station reads book writes letter"
).split()


def sentence(rng):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 18))).capitalize() + "."


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.latencies = {}  # route -> [seconds] of 200 answers
        self.counts = {}  # route -> {"ok","429","5xx","other","lost"}
        self.interval = 0

    def add(self, route, outcome, seconds):
        with self.lock:
            c = self.counts.setdefault(route, {"ok": 0, "429": 0, "5xx": 0, "other": 0, "lost": 0})
            c[outcome] += 1
            self.interval += 1
            if outcome == "ok":
                self.latencies.setdefault(route, []).append(seconds)

    def take_interval(self):
        with self.lock:
            n, self.interval = self.interval, 0
            return n


def rss_mib(pid):
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def client(args, stats, deadline, seed, has_corpus):
    rng = random.Random(seed)
    url = urllib.parse.urlparse(args.url)
    headers = {"Content-Type": "application/json"}
    if args.key:
        headers["Authorization"] = "Bearer " + args.key
    conn = None
    routes = ["/v1/embeddings", "/v1/embeddings", "/similarity"] + (["/search"] if has_corpus else [])
    while time.monotonic() < deadline:
        route = rng.choice(routes)
        if route == "/v1/embeddings":
            body = {"input": [sentence(rng) for _ in range(rng.randint(1, 64))]}
        elif route == "/similarity":
            body = {"pairs": [[sentence(rng), sentence(rng)] for _ in range(rng.randint(1, 8))]}
        else:
            body = {"query": sentence(rng), "top_k": 10}
        data = json.dumps(body).encode()
        start = time.monotonic()
        try:
            if conn is None:
                conn = http.client.HTTPConnection(url.hostname, url.port, timeout=args.timeout)
            conn.request("POST", route, body=data, headers=headers)
            response = conn.getresponse()
            response.read()
            status = response.status
        except (OSError, http.client.HTTPException):
            stats.add(route, "lost", 0.0)
            if conn is not None:
                conn.close()
            conn = None
            continue
        elapsed = time.monotonic() - start
        if status == 200:
            stats.add(route, "ok", elapsed)
        elif status == 429:
            stats.add(route, "429", elapsed)
            time.sleep(0.05 + rng.random() * 0.1)
        elif status >= 500:
            stats.add(route, "5xx", elapsed)
        else:
            stats.add(route, "other", elapsed)
    if conn is not None:
        conn.close()


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round((len(values) - 1) * p)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--duration", type=float, default=600.0, help="seconds (default 600)")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--every", type=float, default=10.0, help="report interval in seconds")
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds excluded from the RSS flatness check")
    ap.add_argument("--pid", type=int, default=0, help="server process id, for its RSS")
    ap.add_argument("--key", default=None, help="API key (or BERTFLOW_API_KEY)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a request counts as lost")
    ap.add_argument("--json", default=None, help="write the results to this file")
    args = ap.parse_args()
    if args.key is None:
        import os

        args.key = os.environ.get("BERTFLOW_API_KEY")

    url = urllib.parse.urlparse(args.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request("GET", "/info", headers={"Authorization": "Bearer " + args.key} if args.key else {})
    info = json.loads(conn.getresponse().read())
    conn.close()
    has_corpus = info.get("corpus_size") is not None
    print(f"soak: {args.clients} clients for {args.duration:.0f} s against {args.url} "
          f"(model {info.get('model')}, corpus {info.get('corpus_size')}, search {info.get('search_method')})",
          flush=True)

    stats = Stats()
    start = time.monotonic()
    deadline = start + args.duration
    threads = [threading.Thread(target=client, args=(args, stats, deadline, i, has_corpus), daemon=True)
               for i in range(args.clients)]
    for t in threads:
        t.start()
    rss = []
    last = start
    while any(t.is_alive() for t in threads):
        time.sleep(min(args.every, max(0.05, deadline - time.monotonic() + 0.05)))
        now = time.monotonic()
        if now - last >= args.every or not any(t.is_alive() for t in threads):
            n = stats.take_interval()
            r = rss_mib(args.pid)
            rss.append({"t": round(now - start, 1), "rss_mib": r, "req_per_s": round(n / (now - last), 1)})
            with stats.lock:
                c429 = sum(c["429"] for c in stats.counts.values())
                bad = sum(c["5xx"] + c["lost"] + c["other"] for c in stats.counts.values())
            print(f"  t={now - start:6.0f} s  {n / (now - last):7.1f} req/s  429s {c429}  errors {bad}  "
                  f"RSS {'-' if r is None else f'{r:.0f} MiB'}", flush=True)
            last = now
    for t in threads:
        t.join()
    total_s = time.monotonic() - start

    routes = {}
    print(f"\n{'route':<16}{'requests':>9}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'429':>6}{'5xx':>5}{'other':>6}{'lost':>5}")
    for route in sorted(stats.counts):
        c = stats.counts[route]
        lat = stats.latencies.get(route, [])
        n = sum(c.values())
        p50, p99 = percentile(lat, 0.5), percentile(lat, 0.99)
        routes[route] = dict(c, requests=n, req_per_s=n / total_s,
                             p50_ms=None if p50 is None else p50 * 1e3,
                             p99_ms=None if p99 is None else p99 * 1e3)
        fmt = lambda v: "-" if v is None else f"{v * 1e3:.1f}"
        print(f"{route:<16}{n:>9}{n / total_s:>8.1f}{fmt(p50):>9}{fmt(p99):>9}{c['429']:>6}{c['5xx']:>5}{c['other']:>6}{c['lost']:>5}")
    total = sum(r["requests"] for r in routes.values())
    failures = sum(r["5xx"] + r["lost"] for r in routes.values())
    print(f"{'all':<16}{total:>9}{total / total_s:>8.1f}")
    after = [s["rss_mib"] for s in rss if s["rss_mib"] is not None and s["t"] >= args.warmup]
    flat = None
    if len(after) >= 2:
        lo, hi = min(after), max(after)
        flat = hi <= lo * 1.10
        print(f"RSS after {args.warmup:.0f} s warm-up: {lo:.0f} to {hi:.0f} MiB "
              f"({'flat within 10%' if flat else 'NOT flat within 10%'})")
    result = {"clients": args.clients, "duration_s": total_s, "routes": routes, "rss": rss,
              "requests": total, "failures": failures, "rss_flat_within_10pct": flat}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    print("PASS: no lost response, no 5xx" if failures == 0 else f"FAIL: {failures} lost or 5xx")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
