#!/usr/bin/env python3
"""Kafka client compatibility suite: kcat, confluent-kafka, kafka-python (Debian's
2.0.2 and PyPI's 3.x) and kafkajs against real shale-broker processes, one broker
and a three-broker cluster. Run by infra/kafka-compat.sh, which installs the clients.

Usage: run.py --kafka-python-old PYTHON --node-path DIR [--postgres URL]
"""

import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import confluent_tests as ck  # noqa: E402
import harness  # noqa: E402
import kcat_tests as kc  # noqa: E402
import security_tests as sec  # noqa: E402
import table_tests as tt  # noqa: E402
import txn_tests as tx  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def script(cmd, env=None):
    """A client test in another interpreter: it fails by its exit status."""
    def run():
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                             env={**os.environ, **(env or {})})
        if out.returncode != 0:
            raise AssertionError(out.stderr[-3000:] or out.stdout[-3000:])
        return out.stdout
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kafka-python-old", required=True, help="python with Debian's kafka-python 2.0.2")
    ap.add_argument("--node-path", required=True, help="node_modules holding kafkajs")
    ap.add_argument("--postgres", default=os.environ.get("SHALE_TEST_POSTGRES_URL"))
    args = ap.parse_args()
    r = harness.Results()
    kp_script = os.path.join(HERE, "kafka_python_tests.py")
    kjs_script = os.path.join(HERE, "kafkajs_tests.cjs")
    pythons = [("kafka-python 2.0.2", args.kafka_python_old), ("kafka-python 3", sys.executable)]

    work = harness.workdir()
    one = harness.single(work)
    try:
        b = one.bootstrap
        r.check("kcat", "-L lists brokers, leaders and ISR", kc.listing, one)
        r.check("kcat", "produce/consume none, gzip, snappy, lz4, zstd", kc.codecs, one)
        r.check("kcat", "keyed records on murmur2 partitions", kc.keyed, one)
        r.check("kcat", "one group with a `shale consume` member", kc.shared_group, one)
        r.check("kcat", "a compacted topic read from the beginning", kc.compacted, one)
        r.check("confluent-kafka", "produce/consume every codec", ck.codecs, one)
        r.check("confluent-kafka", "keyed records on murmur2 partitions", ck.keyed, one)
        r.check("confluent-kafka", "2-member group rebalances when one leaves", ck.group_rebalance, one)
        r.check("confluent-kafka", "KIP-848 group: a member joins and leaves, only 3 partitions move",
                ck.consumer_protocol, one)
        r.check("confluent-kafka", "KIP-848 group subscribed by pattern", ck.consumer_protocol_regex, one)
        r.check("confluent-kafka", "offsets for times", ck.offsets_for_times, one)
        r.check("confluent-kafka", "admin: create, configs, partitions, groups, delete", ck.admin_ops, one)
        r.check("confluent-kafka", "idempotent producer", ck.idempotent, one)
        r.check("confluent-kafka", "compacted topic: keys required, tombstones, latest values",
                ck.compacted, one)
        r.check("confluent-kafka", "DeleteRecords moves the low watermark", ck.delete_records, one)
        r.check("kafka-python 3", "DeleteRecords moves the low watermark",
                script([sys.executable, kp_script, b, "delete_records"]))
        r.check("confluent-kafka", "transactions: commits seen by read_committed, aborts only by "
                "read_uncommitted", tx.commit_and_abort, one)
        r.check("confluent-kafka", "transactions: a new instance aborts the open transaction and "
                "fences the old producer", tx.zombie_fenced, one)
        r.check("confluent-kafka", "transactions: one left open past transaction.timeout.ms is "
                "aborted by the coordinator", tx.timeout_aborts, one)
        r.check("confluent-kafka", "transactions on a compacted topic: cleanings remove aborted "
                "records, then markers left alone", tx.compacted_transactions, one)
        r.check("confluent-kafka", "transactions: an idle transactional id expires, an open one "
                "does not", tx.idle_id_expires, work)
        r.check("confluent-kafka", "mostly-remote topic read from offset 0", ck.remote_replay, one)
        r.check("confluent-kafka", "transactions: read_committed replay of a tiered topic whose "
                "markers are only in the object store (s3s-fs)", tx.tiered_read_committed, work)
        for name, python in pythons:
            for test, what in [("codecs", "produce/consume every codec"),
                               ("keyed", "keyed records on murmur2 partitions"),
                               ("group_rebalance", "2-member group rebalances when one leaves"),
                               ("offsets_for_times", "offsets for times"),
                               ("admin_ops", "admin: create, configs, partitions, groups, delete")]:
                r.check(name, what, script([python, kp_script, b, test]))
        node = {"NODE_PATH": args.node_path}
        for test, what in [("codecs", "produce/consume none and gzip"),
                           ("group_rebalance", "2-member group rebalances when one leaves"),
                           ("admin_ops", "admin: create, configs, partitions, offsets by time, groups, delete"),
                           ("idempotent", "idempotent producer"),
                           ("transactions", "producer.transaction(): commit, abort, sendOffsets "
                            "committed only with its transaction")]:
            r.check("kafkajs", what, script(["node", kjs_script, b, test], env=node))

        def kafkajs_keyed():
            out = script(["node", kjs_script, b, "keyed"], env=node)()
            placed = json.loads(out.splitlines()[0])
            assert len(placed) == 200
            for key, partition in placed:
                assert partition == harness.kafka_partition(key.encode(), 5), (key, partition)
        r.check("kafkajs", "keyed records on murmur2 partitions", kafkajs_keyed)

        # Committed offsets survive a broker restart, for each client.
        r.check("confluent-kafka", "commit before a restart", ck.commit_phase, one)
        for name, python in pythons:
            r.check(name, "commit before a restart", script([python, kp_script, b, "commit_phase"]))
        one.restart()
        r.check("confluent-kafka", "resume at the committed offset after a restart", ck.resume_phase, one)
        for name, python in pythons:
            r.check(name, "resume at the committed offset after a restart",
                    script([python, kp_script, b, "resume_phase"]))
    finally:
        one.stop()

    secured = sec.Secured(work)
    try:
        r.check("kcat", "SASL_SSL + SCRAM-SHA-512; wrong or no credentials refused",
                sec.kcat_sasl_ssl, secured)
        r.check("confluent-kafka", "SASL_SSL + SCRAM-SHA-512 producer and group; wrong password refused",
                sec.confluent_sasl_ssl, secured)
        r.check("kafka-python 3", "SASL_PLAINTEXT + PLAIN; wrong password refused",
                sec.kafka_python_plain, secured)
        r.check("kafkajs", "SCRAM-SHA-256: produce/consume",
                sec.kafkajs, secured, args.node_path, kjs_script, "codecs")
        r.check("kafkajs", "SCRAM-SHA-256: re-authenticates as sessions expire",
                sec.kafkajs, secured, args.node_path, kjs_script, "reauth")
        r.check("kafkajs", "SCRAM-SHA-256: wrong password refused",
                sec.kafkajs, secured, args.node_path, kjs_script, "refused", "wrong")
        r.check("kcat", "mTLS, allowed by an ACL on the certificate's subject; no or untrusted "
                "client certificate refused", sec.kcat_mtls, secured)
        r.check("confluent-kafka", "ACLs: admin client creates, lists, deletes; a reader reads only "
                "its prefix and does not see the rest", sec.confluent_acls, secured)
    finally:
        secured.stop()

    if args.postgres:
        three = harness.cluster_of_three(work, args.postgres)
        try:
            r.check("kcat", "3 brokers: -L with replicas and ISR", kc.listing, three, 3)
            r.check("kcat", "3 brokers: every codec, replicated", kc.codecs, three, 3)
            r.check("kcat", "3 brokers in 3 racks: client.rack reads from the follower in its "
                    "rack (KIP-392), as the brokers' metrics show", kc.follower_fetch, three)
            r.check("confluent-kafka", "3 brokers: every codec, acks=all, RF 3", ck.codecs, three, 3)
            r.check("confluent-kafka", "3 brokers: group rebalance", ck.group_rebalance, three)
            r.check("confluent-kafka", "3 brokers: idempotent producer", ck.idempotent, three)
            r.check("confluent-kafka", "3 brokers: consume-transform-produce with "
                    "send_offsets_to_transaction across a SIGKILL of the input's leader and of the "
                    "coordinator's broker: every input record once in the committed output",
                    tx.consume_transform_produce, three)
            r.check("confluent-kafka", "3 brokers: transactions: a replica restarting its log "
                    "inside an aborted transaction takes the copied producer state, then leads",
                    tx.new_replica_takes_producer_state, three)
            b = three.bootstrap
            for name, python in pythons:
                r.check(name, "3 brokers: keyed records", script([python, kp_script, b, "keyed"]))
            r.check("kafkajs", "3 brokers: produce/consume",
                    script(["node", kjs_script, b, "codecs"], env={"NODE_PATH": args.node_path}))
            r.check("kafkajs", "3 brokers: alterPartitionReassignments moves a partition, "
                    "listPartitionReassignments shows it until done",
                    script(["node", kjs_script, b, "reassign"], env={"NODE_PATH": args.node_path}))
            tables = {}

            def translated():
                tables["logs"] = tt.translated_exactly_once(three, 200_000)
            r.check("pyiceberg", "3 brokers, RF 3: a JSON topic's Iceberg table holds its 200,000 "
                    "records exactly once across a SIGKILL of a leader (SQL catalog)", translated)
            if "logs" in tables:
                r.check("pyiceberg", "a time-range scan plans only that hour's files",
                        tt.time_range_prunes, tables["logs"])
                r.check("duckdb", "read_parquet over the table's files", tt.duckdb_reads_the_files,
                        tables["logs"])
                r.check("pyiceberg", "the brokers' read-only REST catalog serves the table",
                        tt.rest_catalog_reads, three, tables["logs"])
        finally:
            three.stop()
    else:
        r.check("suite", "3-broker cluster (needs --postgres or SHALE_TEST_POSTGRES_URL)",
                lambda: (_ for _ in ()).throw(AssertionError("no PostgreSQL URL given")))
    code = r.summary()
    if code == 0:
        harness.cleanup(work)
    else:
        print(f"broker logs kept in {work}")
    return code


if __name__ == "__main__":
    sys.exit(main())
