#!/usr/bin/env python3
"""A stand-in, on confluent-kafka, for the Java transactional producer that librdkafka's
test 0098 drives (its tests/java/TransactionProducerCli): Apache Kafka's Java client is
not installable here, so compat/kafka-path/bin/kafka-run-class.sh runs this instead.

Usage: txn_producer_cli.py BOOTSTRAP COMMAND...
Commands (comma-separated fields, as the test writes them):
  sleep,MS                     pause
  exit,CODE                    exit at once (open transactions stay open)
  topic,NAME / testid,ID       set the topic and the test id
  producerN,PARTITION,ID_START,COUNT,TXN_TYPE,FLUSH
      with producer N (created at first use; transactional unless TXN_TYPE is None,
      with transactional id test-transactional-id-ID-producerN) send COUNT records
      keyed by the byte ID_START+i to PARTITION (-1: by key), value 10 20 30 40;
      TXN_TYPE: None, BeginAbort, BeginCommit, BeginOpen, ContinueAbort,
      ContinueCommit, ContinueOpen; FLUSH: DoFlush or DontFlush.
At the end every producer is flushed (open transactions stay open).
"""

import os
import re
import sys

from confluent_kafka import Producer

PAYLOAD = bytes([0x10, 0x20, 0x30, 0x40])


def producer(bootstrap, testid, name, transactional):
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
            # The Java client's partitioner for keyed records.
            "partitioner": "murmur2_random",
            "client.id": ("transactional-producer-" if transactional else "producer-") + name}
    if transactional:
        conf["transactional.id"] = f"test-transactional-id-{testid}-{name}"
    p = Producer(conf)
    if transactional:
        p.init_transactions(60)
    return p


def main(args):
    bootstrap, commands = args[0], args[1:]
    producers, topic, testid = {}, None, None
    for command in commands:
        cmd = re.split(r"\s*,\s*", command)
        print(f"txn_producer_cli: command: '{command}'", flush=True)
        if cmd[0] == "sleep":
            import time
            time.sleep(int(cmd[1], 0) / 1000)
        elif cmd[0] == "exit":
            sys.stdout.flush()
            os._exit(int(cmd[1], 0))
        elif cmd[0] == "topic":
            topic = cmd[1]
        elif cmd[0] == "testid":
            testid = cmd[1]
        elif cmd[0].startswith("producer"):
            partition, start, count = (int(v, 0) for v in cmd[1:4])
            txn, flush = cmd[4], cmd[5]
            p = producers.get(cmd[0])
            if p is None:
                p = producers[cmd[0]] = producer(bootstrap, testid, cmd[0], txn != "None")
            if txn.startswith("Begin"):
                p.begin_transaction()
            for i in range(count):
                key = bytes([(i + start) & 0xFF])
                if partition == -1:
                    p.produce(topic, key=key, value=PAYLOAD)
                else:
                    p.produce(topic, key=key, value=PAYLOAD, partition=partition)
                p.poll(0)
            if flush == "DoFlush":
                p.flush(60)
            if txn.endswith("Abort"):
                p.abort_transaction(60)
            elif txn.endswith("Commit"):
                p.commit_transaction(60)
        else:
            raise SystemExit(f"unknown command: {command}")
    for p in producers.values():
        p.flush(60)


if __name__ == "__main__":
    main(sys.argv[1:])
