"""Writes through a cluster during a failover (bench/cluster's failover row).

    python3 bench/failover_writes.py BASE_URL SECONDS

Four writers POST a new team each to BASE_URL/api/team for SECONDS, one after the other,
and each answer is kept with when its request was sent. Prints one JSON object: writes
acknowledged (201), refused (503, the primary gone), failed otherwise, the longest time
between two acknowledged writes (the failover as writers see it), and the share of the run
with writes going through.
"""

import json
import sys
import threading
import time
import urllib.error
import urllib.request


def main():
    base, seconds = sys.argv[1], float(sys.argv[2])
    start = time.monotonic()
    lock = threading.Lock()
    outcomes = []

    def writer(w):
        n = 0
        while time.monotonic() - start < seconds:
            body = json.dumps({"name": f"failover-{w}-{n}", "points": 0}).encode()
            request = urllib.request.Request(
                base + "/api/team", data=body, headers={"Content-Type": "application/json"}
            )
            sent = time.monotonic() - start
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    status = answer.status
            except urllib.error.HTTPError as e:
                status = e.code
            except OSError:
                status = 0
            with lock:
                outcomes.append((sent, status))
            n += 1
            if status != 201:
                time.sleep(0.05)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    acked = sorted(sent for sent, status in outcomes if status == 201)
    gaps = [b - a for a, b in zip(acked, acked[1:])]
    longest = max(gaps) if gaps else seconds
    print(
        json.dumps(
            {
                "acked": len(acked),
                "refused": sum(1 for _, status in outcomes if status == 503),
                "failed": sum(1 for _, status in outcomes if status not in (201, 503)),
                "longest_gap_s": round(longest, 2),
                "available": round(1 - longest / seconds, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
