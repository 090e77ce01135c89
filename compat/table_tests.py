"""Topics as Iceberg tables, read by the engines analysts use: pyiceberg through the
SQL catalog in the cluster's PostgreSQL, and DuckDB over the table's Parquet files.

A three-broker cluster writes a JSON topic at RF 3 with `iceberg.mode=value_schema`;
the leader of partition 0 is SIGKILLed halfway and started again, and the second half
brings a new field. The table must hold exactly the topic's records (count, the sum of
a numeric column, every (partition, offset) once), with the new field's column added;
a record of the wrong type must be in the dead-letter table with its reason; and a
time-range scan must plan only the files of the matching hours.

Run by compat/run.py on its three-broker cluster; standalone, against a fresh one:
    table_tests.py --postgres URL [--records N]
"""

import json
import os
import signal
import sys
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import harness

HOUR_MS = 3_600_000
# Records spread over five hours of a past day, so the table has five hourly partitions.
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOURS = 5


def record(i, widened=False):
    fields = {"n": i, "v": i % 1000, "level": "info" if i % 7 else "error"}
    if widened:
        fields["host"] = f"h{i % 3}"
    value = json.dumps(fields)
    return f"k{i}".encode(), value.encode(), BASE_MS + (i % HOURS) * HOUR_MS + i % 1000


def catalog(cluster):
    from pyiceberg.catalog.sql import SqlCatalog
    url = cluster.brokers[0].metastore
    uri = "postgresql+psycopg2://" + url.split("://", 1)[1]
    # The brokers created the catalog's tables; pyiceberg only reads them.
    return SqlCatalog("shale", uri=uri, init_catalog_tables="false")


def produce(bootstrap, topic, start, end, widened=False):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all",
                  "enable.idempotence": True, "message.timeout.ms": 120000})
    errors = []
    for i in range(start, end):
        key, value, ts = record(i, widened)
        while True:
            try:
                p.produce(topic, value=value, key=key, timestamp=ts,
                          on_delivery=lambda err, _m: err and errors.append(err))
                break
            except BufferError:
                p.poll(0.1)
    left = p.flush(180)
    assert left == 0 and not errors, f"{left} undelivered, errors: {errors[:3]}"


def leader_of(bootstrap, topic, partition):
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return md.topics[topic].partitions[partition].leader


def high_watermarks(bootstrap, topic, partitions):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "table-probe"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
    finally:
        c.close()


def rows_in_table(cat, topic):
    try:
        table = cat.load_table(("shale", topic))
    except Exception:  # noqa: BLE001 - not created yet
        return 0
    return len(table.scan(selected_fields=("shale_offset",)).to_arrow())


def translated_exactly_once(cluster, records=200_000, topic="tbl-logs"):
    """The table holds the topic's records once each, across a leader's SIGKILL."""
    partitions = 3
    a = AdminClient({"bootstrap.servers": cluster.bootstrap})
    config = {"iceberg.mode": "value_schema", "iceberg.commit.interval.ms": "1000"}
    a.create_topics([NewTopic(topic, partitions, 3, config=config)])[topic].result(30)
    cat = catalog_when_ready(cluster)
    half = records // 2
    produce(cluster.bootstrap, topic, 0, half)
    harness.eventually(lambda: rows_in_table(cat, topic) > 0, timeout=120,
                       what="the first rows in the table")
    victim = next(b for b in cluster.brokers if b.id == leader_of(cluster.bootstrap, topic, 0))
    victim.stop(signal.SIGKILL)
    others = ",".join(b.kafka for b in cluster.brokers if b is not victim)
    produce(others, topic, half, records, widened=True)
    # A record whose field has the wrong type: a dead letter, not a row.
    p = Producer({"bootstrap.servers": others, "acks": "all"})
    p.produce(topic, value=b'{"n": "many", "v": 1}', partition=1)
    assert p.flush(60) == 0
    victim.start()

    hws = high_watermarks(cluster.bootstrap, topic, partitions)
    assert sum(hws) == records + 1, f"the topic holds {sum(hws)} records, {records + 1} were sent"
    harness.eventually(lambda: rows_in_table(cat, topic) >= records, timeout=300, every=2,
                       what=f"{records} rows in the table")
    table = cat.load_table(("shale", topic))
    rows = table.scan(selected_fields=("shale_partition", "shale_offset", "v", "host")).to_arrow()
    assert rows.num_rows == records, f"{rows.num_rows} rows for {records} records"
    seen = set(zip(rows.column("shale_partition").to_pylist(), rows.column("shale_offset").to_pylist()))
    want = {(p, o) for p in range(partitions) for o in range(hws[p])}
    def dead_letters():
        try:
            return cat.load_table(("shale", topic + "~dlq")).scan().to_arrow()
        except Exception:  # noqa: BLE001 - not created yet
            return None
    # The dead letter's commit may come after the last rows'.
    dead = harness.eventually(lambda: (d := dead_letters()) is not None and d.num_rows >= 1 and d,
                              timeout=60, what="the dead letter in its table")
    assert dead.num_rows == 1, f"{dead.num_rows} dead letters"
    assert dead.column("reason").to_pylist() == ['field n: expected long, got "many"'], \
        dead.column("reason").to_pylist()
    want.discard((1, dead.column("offset")[0].as_py()))
    assert seen == want, f"{len(want - seen)} (partition, offset) missing, {len(seen - want)} extra"
    assert sum(rows.column("v").to_pylist()) == sum(i % 1000 for i in range(records)), \
        "the sum of column v"
    hosts = sum(1 for h in rows.column("host").to_pylist() if h is not None)
    assert hosts == records - half, f"{hosts} rows with the new field's column"
    return table


def catalog_when_ready(cluster):
    """pyiceberg's catalog, once the brokers created the catalog's tables (at their
    first commit pass)."""
    def ready():
        cat = catalog(cluster)
        cat.list_namespaces()
        return cat
    return harness.eventually(ready, timeout=60, what="the SQL catalog's tables")


def time_range_prunes(table):
    """A scan of one hour plans only that hour's files, and returns that hour's rows."""
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan
    import datetime as dt
    all_files = list(table.scan().plan_files())
    hour = BASE_MS + 2 * HOUR_MS
    since = dt.datetime.fromtimestamp(hour / 1000, dt.timezone.utc).isoformat()
    until = dt.datetime.fromtimestamp((hour + HOUR_MS) / 1000, dt.timezone.utc).isoformat()
    expr = And(GreaterThanOrEqual("shale_timestamp", since), LessThan("shale_timestamp", until))
    scan = table.scan(row_filter=expr, selected_fields=("v", "shale_timestamp"))
    planned = list(scan.plan_files())
    assert 0 < len(planned) < len(all_files), f"{len(planned)} of {len(all_files)} files planned"
    hours = {f.file.partition[0] for f in planned}
    assert hours == {hour // HOUR_MS}, f"files of hours {hours} planned for hour {hour // HOUR_MS}"
    rows = scan.to_arrow()
    n = rows.num_rows
    total = len(table.scan(selected_fields=("shale_offset",)).to_arrow())
    assert n == sum(1 for i in range(total) if i % HOURS == 2), f"{n} rows in hour 2"


def rest_catalog_reads(cluster, table, topic="tbl-logs"):
    """The broker's read-only REST catalog lists the table and hands out the same
    snapshot; an unknown table is NoSuchTableError, a write is refused."""
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.exceptions import NoSuchTableError
    b = cluster.brokers[1]
    rest = RestCatalog("shale", uri=f"http://127.0.0.1:{b.http_port}/iceberg")
    assert [tuple(n) for n in rest.list_namespaces()] == [("shale",)]
    assert ("shale", topic) in [tuple(t) for t in rest.list_tables("shale")]
    loaded = rest.load_table(("shale", topic))
    assert loaded.metadata_location == table.metadata_location or \
        loaded.metadata.last_sequence_number >= table.metadata.last_sequence_number
    rows = loaded.scan(selected_fields=("shale_partition", "shale_offset", "v")).to_arrow()
    direct = table.scan(selected_fields=("shale_partition", "shale_offset", "v")).to_arrow()
    assert rows.num_rows == direct.num_rows, (rows.num_rows, direct.num_rows)
    assert sum(rows.column("v").to_pylist()) == sum(direct.column("v").to_pylist()), "sum of v"
    pairs = set(zip(rows.column("shale_partition").to_pylist(), rows.column("shale_offset").to_pylist()))
    assert len(pairs) == rows.num_rows, "a (partition, offset) twice through the REST catalog"
    try:
        rest.load_table(("shale", "no-such-topic"))
        raise AssertionError("an unknown table was loaded")
    except NoSuchTableError:
        pass
    try:
        rest.drop_table(("shale", topic))
        raise AssertionError("the read-only catalog dropped a table")
    except AssertionError:
        raise
    except Exception:  # noqa: BLE001 - refused, as it must be
        pass
    assert rest.table_exists(("shale", topic))


def duckdb_reads_the_files(table):
    """DuckDB's read_parquet over the table's data files counts every row."""
    import duckdb
    files = [t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()]
    n = duckdb.sql(f"select count(*) from read_parquet({files!r}, union_by_name=true)").fetchone()[0]
    total = len(table.scan(selected_fields=("shale_offset",)).to_arrow())
    assert n == total, f"duckdb counted {n}, pyiceberg {total}"
    errors = duckdb.sql(
        "select count(*) from read_parquet(?, union_by_name=true) where level = 'error'",
        params=[files]).fetchone()[0]
    assert errors == sum(1 for i in range(total) if i % 7 == 0), f"{errors} error records"


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--postgres", required=True)
    ap.add_argument("--records", type=int, default=1_000_000)
    args = ap.parse_args()
    work = harness.workdir()
    cluster = harness.cluster_of_three(work, args.postgres)
    try:
        started = time.time()
        table = translated_exactly_once(cluster, args.records)
        print(f"{args.records} records in the table, exactly once, in {time.time() - started:.0f} s")
        time_range_prunes(table)
        duckdb_reads_the_files(table)
        rest_catalog_reads(cluster, table)
        print("time-range pruning, DuckDB and the REST catalog: ok")
    finally:
        cluster.stop()
        harness.cleanup(work)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
