#!/usr/bin/env python3
"""Transactional produce throughput against idempotent produce, in one run against one
broker. Needs confluent-kafka (infra/kafka-compat.sh installs it in
target/compat-clients/venv) and a broker at --bootstrap:

    target/compat-clients/venv/bin/python bench/txn_produce.py --bootstrap 127.0.0.1:9092

Each case writes --records records of --size bytes to a fresh topic of --partitions
partitions (replication factor --replicas) from one producer with acks=all (linger
5 ms): idempotent, then transactional committing every 1000 records, then every 100.
A transaction's commit waits for its markers in every partition, so small transactions
pay that round trip often. The cases run in turn, twice (A B C A B C), and each is
reported with both runs. One JSON line per case."""

import argparse
import json
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def topic_of(bootstrap, partitions, replicas):
    topic = f"txbench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until it answers
    admin.create_topics([NewTopic(topic, partitions, replicas)])[topic].result(30)
    return topic


def run(bootstrap, topic, records, size, per_txn):
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
            "enable.idempotence": True, "queue.buffering.max.messages": 200000}
    if per_txn:
        conf["transactional.id"] = f"txbench-{uuid.uuid4().hex[:8]}"
    p = Producer(conf)
    if per_txn:
        p.init_transactions(30)
    value = b"x" * size
    failed = []

    def delivered(err, _msg):
        if err is not None:
            failed.append(err)

    start = time.monotonic()
    sent = 0
    while sent < records:
        n = min(per_txn or records, records - sent)
        if per_txn:
            p.begin_transaction()
        for i in range(n):
            while True:
                try:
                    p.produce(topic, value=value, key=str(sent + i).encode(),
                              on_delivery=delivered)
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
        if per_txn:
            p.commit_transaction(60)
        sent += n
    p.flush(60)
    elapsed = time.monotonic() - start
    if failed:
        raise SystemExit(f"{len(failed)} records failed: {failed[0]}")
    return elapsed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--replicas", type=int, default=1)
    args = ap.parse_args()
    cases = [("idempotent", None), ("transactional, 1000 records a transaction", 1000),
             ("transactional, 100 records a transaction", 100)]
    results = {name: [] for name, _ in cases}
    for _ in range(2):
        for name, per_txn in cases:
            topic = topic_of(args.bootstrap, args.partitions, args.replicas)
            elapsed = run(args.bootstrap, topic, args.records, args.size, per_txn)
            results[name].append(elapsed)
    for name, per_txn in cases:
        runs = results[name]
        print(json.dumps({
            "case": name, "records": args.records, "record_bytes": args.size,
            "partitions": args.partitions, "replicas": args.replicas,
            "records_per_txn": per_txn,
            "seconds": [round(s, 2) for s in runs],
            "mib_per_s": [round(args.records * args.size / s / 2**20, 1) for s in runs],
            "records_per_s": [round(args.records / s) for s in runs],
        }), flush=True)


if __name__ == "__main__":
    main()
