#!/usr/bin/env python3
"""How long partitions go unconsumed when a fourth member joins a group of three
sharing 12 partitions, for the classic protocol with the eager assignor (range), the
classic protocol with cooperative-sticky, and the consumer group protocol (KIP-848,
`group.protocol=consumer`). Needs confluent-kafka (infra/kafka-compat.sh installs it in
target/compat-clients/venv) and a broker at --bootstrap:

    target/compat-clients/venv/bin/python bench/rebalance.py --bootstrap 127.0.0.1:9092

A producer writes one record to every partition each 20 ms. The three members start a
second apart (so their heartbeats are not in step), and each records when it received
each record. From one second before the fourth member starts until the
end of the run, a partition's pause is the longest gap between two records received
from it; the figures are the longest pause of any partition, the mean over the 12, and
how many partitions paused longer than one second; then how many partitions the
three members gave up (revocations) and how many records were read twice (re-read
from the last committed offset after a revocation). Client settings are the defaults
(heartbeat.interval.ms 3000 for classic; the broker's 5000 ms for KIP-848) but for a
10 s session timeout. One JSON line per protocol."""

import argparse
import json
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 12
PROTOCOLS = {
    "classic-eager": {"partition.assignment.strategy": "range", "session.timeout.ms": 10000},
    "classic-cooperative-sticky": {"partition.assignment.strategy": "cooperative-sticky",
                                   "session.timeout.ms": 10000},
    "consumer (KIP-848)": {"group.protocol": "consumer"},
}


def run(bootstrap, name, conf, settle_s, after_s):
    topic = f"rebalance-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until it answers
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    stop = threading.Event()
    received = {p: [] for p in range(PARTITIONS)}
    seen, counts = set(), {"revoked": 0, "duplicates": 0}
    lock = threading.Lock()

    def produce():
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        while not stop.is_set():
            for part in range(PARTITIONS):
                p.produce(topic, value=b"x", partition=part)
            p.poll(0)
            time.sleep(0.02)
        p.flush(30)

    def member(leave):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": topic,
                      "auto.offset.reset": "latest", **conf})
        def revoked(_c, partitions):
            with lock:
                counts["revoked"] += len(partitions) if counting.is_set() else 0

        c.subscribe([topic], on_revoke=revoked)
        while not leave.is_set():
            m = c.poll(0.1)
            if m is not None and not m.error():
                with lock:
                    received[m.partition()].append(time.monotonic())
                    key = (m.partition(), m.offset())
                    counts["duplicates"] += key in seen and counting.is_set()
                    seen.add(key)
        c.close()

    leave, counting = threading.Event(), threading.Event()
    threads = [threading.Thread(target=produce)]
    threads += [threading.Thread(target=member, args=(leave,)) for _ in range(3)]
    # Members start a second apart, so their heartbeats are not in step (as in a
    # real deployment): an eager rebalance then waits for the last to learn of it.
    for t in threads:
        t.start()
        time.sleep(1.0)
    # Three members settle (every partition received lately).
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = time.monotonic()
        with lock:
            if all(r and now - r[-1] < 0.5 for r in received.values()):
                break
    time.sleep(settle_s)
    joined = time.monotonic()
    counting.set()
    fourth = threading.Thread(target=member, args=(leave,))
    fourth.start()
    threads.append(fourth)
    time.sleep(after_s)
    counting.clear()
    stop.set()
    leave.set()
    for t in threads:
        t.join()
    pauses = []
    for times in received.values():
        window = [t for t in times if t >= joined - 1.0]
        gaps = [b - a for a, b in zip(window, window[1:])]
        pauses.append(max(gaps, default=after_s))
    return {
        "protocol": name,
        "partitions": PARTITIONS,
        "longest_pause_s": round(max(pauses), 2),
        "mean_pause_s": round(sum(pauses) / len(pauses), 2),
        "partitions_paused_over_1s": sum(p > 1.0 for p in pauses),
        "partitions_revoked_at_join": counts["revoked"],
        "records_read_twice": counts["duplicates"],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--settle", type=float, default=5.0, help="seconds before the join")
    ap.add_argument("--after", type=float, default=25.0, help="seconds after the join")
    ap.add_argument("--only", choices=list(PROTOCOLS), help="one protocol")
    args = ap.parse_args()
    for name, conf in PROTOCOLS.items():
        if args.only and name != args.only:
            continue
        print(json.dumps(run(args.bootstrap, name, conf, args.settle, args.after)), flush=True)


if __name__ == "__main__":
    main()
