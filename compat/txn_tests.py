"""Kafka transactions with confluent-kafka (its bundled librdkafka): commits and aborts
seen through read_committed and read_uncommitted consumers, a zombie producer fenced by
a new instance of its transactional id, a transaction left open past its timeout
aborted by the coordinator, and a consume-transform-produce loop that commits its
input offsets inside its transactions across a SIGKILL of the input's leader and of
the transaction coordinator's broker, whose output holds every input record once."""

import os
import signal
import threading
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from confluent_tests import consume_all, create, produce
from harness import eventually


def coordinator_of(key, broker_ids):
    """The broker Shale's rendezvous hashing picks for a group or transactional id
    (FNV-1a over the id and the broker id, then a final mix; the highest wins)."""
    def score(broker):
        h = 0xcbf29ce484222325
        for b in key.encode() + broker.to_bytes(4, "big", signed=True):
            h ^= b
            h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 33
        h = (h * 0xff51afd7ed558ccd) & 0xFFFFFFFFFFFFFFFF
        return h ^ (h >> 33)
    return max(broker_ids, key=score)


def txn_producer(bootstrap, txn_id, **conf):
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                  "linger.ms": 5, **conf})
    p.init_transactions(60)
    return p


def read(bootstrap, topic, partitions, committed, timeout=20):
    """Every record of the topic (by assignment from offset 0) until `timeout` passes
    with nothing new."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4()}",
                  "isolation.level": "read_committed" if committed else "read_uncommitted",
                  "enable.auto.commit": False, "enable.partition.eof": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, idle_since = [], time.time()
    while time.time() - idle_since < 3 and time.time() < idle_since + timeout:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            raise KafkaException(m.error())
        got.append(m.value().decode())
        idle_since = time.time()
    c.close()
    return got


def commit_and_abort(cluster):
    topic = "tx-basic"
    create(cluster, topic, 2)
    p = txn_producer(cluster.bootstrap, "tx-basic-app")
    for tag, commit in [("c1", True), ("a1", False), ("c2", True), ("a2", False)]:
        p.begin_transaction()
        for i in range(50):
            p.produce(topic, key=str(i), value=f"{tag}-{i}")
        if commit:
            p.commit_transaction(30)
        else:
            p.flush(30)
            p.abort_transaction(30)
    committed = read(cluster.bootstrap, topic, 2, True)
    everything = read(cluster.bootstrap, topic, 2, False)
    assert sorted(committed) == sorted(f"{t}-{i}" for t in ("c1", "c2") for i in range(50)), \
        committed[:10]
    assert len(everything) == 200, len(everything)


def stored_markers(broker, topic, partition=0):
    """The transaction markers (control batches) in the partition's local log files.
    A file a cleaning swaps away while it is read makes the count start again."""
    d = os.path.join(broker.dir, "data", f"{topic}-{partition}")
    while True:
        try:
            count = 0
            for name in sorted(os.listdir(d)):
                if not name.endswith(".log"):
                    continue
                with open(os.path.join(d, name), "rb") as f:
                    data = f.read()
                pos = 0
                while pos + 61 <= len(data):
                    length = int.from_bytes(data[pos + 8:pos + 12], "big")
                    count += bool(int.from_bytes(data[pos + 21:pos + 23], "big") & 0x20)
                    pos += 12 + length
            return count
        except FileNotFoundError:
            continue


def compacted_transactions(cluster):
    """A compacted topic written by transactions. Cleanings remove the records of
    aborted transactions (read_uncommitted no longer reads them), then the markers
    whose transactions have no record left (delete.retention.ms=0), and read_committed
    still reads each key's latest committed value, the producer's commits after its
    aborts among them (an abort's index entry left without its marker would drop
    them)."""
    from kcat_tests import wait_cleaned
    topic = "tx-compacted"
    create(cluster, topic, 1, config={"cleanup.policy": "compact", "segment.bytes": "4096",
                                      "min.cleanable.dirty.ratio": "0.01",
                                      "delete.retention.ms": "0",
                                      "remote.storage.enable": "false"})
    p = txn_producer(cluster.bootstrap, "tx-compacted-app")
    # Six rounds over the same 40 keys, every other one aborted; then five committed
    # transactions of other keys, so the producer's state no longer names the rounds'
    # batches (it keeps a producer's last five) and a cleaning may remove them.
    for rnd in range(6):
        p.begin_transaction()
        for k in range(40):
            p.produce(topic, key=f"k{k}", value=f"{rnd}")
        if rnd % 2 == 0:
            p.commit_transaction(30)
        else:
            p.flush(30)
            p.abort_transaction(30)
    for t in range(5):
        p.begin_transaction()
        p.produce(topic, key=f"tail{t}", value="t")
        p.commit_transaction(30)
    broker = cluster.brokers[0]
    before = stored_markers(broker, topic)
    assert before == 11, before
    after = before
    for i in range(8):
        # New dirty segments: each cleaning takes the log one step further.
        produce(cluster.bootstrap, topic, [(b"filler", f"f{i}-{j}".encode()) for j in range(150)],
                acks="all")
        wait_cleaned(cluster, topic)
        after = stored_markers(broker, topic)
        if after <= 6:
            break
    everything = read(cluster.bootstrap, topic, 1, False)
    committed = read(cluster.bootstrap, topic, 1, True)
    for got in (everything, committed):
        kept = [v for v in got if not v.startswith("f")]
        assert sorted(kept) == sorted(["4"] * 40 + ["t"] * 5), (len(got), sorted(set(kept)))
    assert after <= 6, f"{before} markers before the cleanings, {after} after"


def idle_id_expires(work):
    """A broker whose transactional ids expire after 2 s idle
    (`[transactions] transactional_id_expiration_ms`): the id of a producer idle past
    that is removed, so that producer's next transaction fails and a new instance of
    the id starts afresh; an id whose transaction is open does not expire, and its
    producer commits later."""
    from confluent_kafka import KafkaException as Failed
    from harness import Broker, Cluster
    b = Broker(os.path.join(work, "tx-expire"),
               sections_toml="[transactions]\ntransactional_id_expiration_ms = 2000\n")
    b.start()
    cluster = Cluster([b])
    try:
        topic = "tx-expire"
        create(cluster, topic, 1)
        idle = txn_producer(cluster.bootstrap, "tx-expire-idle")
        idle.begin_transaction()
        idle.produce(topic, value="first")
        idle.commit_transaction(30)
        held = txn_producer(cluster.bootstrap, "tx-expire-open",
                            **{"transaction.timeout.ms": 60000})
        held.begin_transaction()
        held.produce(topic, value="open")
        held.flush(30)
        # Past the expiration and a pass of the coordinator (each second).
        time.sleep(5)
        idle.begin_transaction()
        idle.produce(topic, value="late")
        try:
            idle.commit_transaction(30)
            raise AssertionError("a transaction of an expired id committed")
        except Failed:
            pass
        fresh = txn_producer(cluster.bootstrap, "tx-expire-idle")
        fresh.begin_transaction()
        fresh.produce(topic, value="second")
        fresh.commit_transaction(30)
        held.commit_transaction(30)
        committed = read(cluster.bootstrap, topic, 1, True)
        assert sorted(committed) == ["first", "open", "second"], committed
        log = open(os.path.join(b.dir, "broker.log")).read()
        assert "transactional id expired" in log and "tx-expire-idle" in log
    finally:
        cluster.stop()


def zombie_fenced(cluster):
    topic = "tx-zombie"
    create(cluster, topic, 1)
    old = txn_producer(cluster.bootstrap, "tx-zombie-app")
    old.begin_transaction()
    for i in range(5):
        old.produce(topic, value=f"zombie-{i}")
    old.flush(30)
    # A new instance of the id aborts the open transaction and fences the old one.
    new = txn_producer(cluster.bootstrap, "tx-zombie-app")
    try:
        old.commit_transaction(30)
    except KafkaException as e:
        err = e.args[0]
        assert err.fatal() or "fenced" in str(err).lower(), err
    else:
        raise AssertionError("the fenced producer committed")
    new.begin_transaction()
    for i in range(3):
        new.produce(topic, value=f"new-{i}")
    new.commit_transaction(30)
    assert sorted(read(cluster.bootstrap, topic, 1, True)) == [f"new-{i}" for i in range(3)]


def timeout_aborts(cluster):
    topic = "tx-timeout"
    create(cluster, topic, 1)
    p = txn_producer(cluster.bootstrap, "tx-timeout-app", **{"transaction.timeout.ms": 3000})
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=f"late-{i}")
    p.flush(30)
    time.sleep(7)
    # The coordinator aborted it: read_committed consumers are not held, and see none.
    assert read(cluster.bootstrap, topic, 1, True, timeout=10) == []
    try:
        p.commit_transaction(30)
    except KafkaException:
        pass
    else:
        raise AssertionError("a transaction past its timeout committed")
    plain = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"w-{uuid.uuid4()}",
                      "isolation.level": "read_committed"})
    low, high = plain.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    plain.close()
    assert high >= 6, (low, high)  # five records and the coordinator's abort marker


def consume_transform_produce(cluster, records=3000):
    """Input offsets committed inside the output's transactions; SIGKILL of the input
    partition's leader and of the coordinator's broker halfway; the output read with
    read_committed holds every input record exactly once."""
    src, dst, group, txn_id = "ctp-in", "ctp-out", "ctp-group", "ctp-app"
    create(cluster, src, 2, 3)
    create(cluster, dst, 2, 3)
    produce(cluster.bootstrap, src, [f"{i}".encode() for i in range(records)],
            **{"enable.idempotence": True})
    ids = [b.id for b in cluster.brokers]
    victims = {coordinator_of(txn_id, ids)}
    meta = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "meta"})
    victims.add(meta.list_topics(src, timeout=10).topics[src].partitions[0].leader)
    meta.close()
    done, killed = [0], threading.Event()
    deadline = time.time() + 240

    def chaos():
        while done[0] < records // 3 and time.time() < deadline:
            time.sleep(0.2)
        for b in cluster.brokers:
            if b.id in victims:
                b.stop(signal.SIGKILL)
        killed.set()
        time.sleep(3)
        for b in cluster.brokers:
            if b.id in victims:
                b.start()

    t = threading.Thread(target=chaos)
    t.start()
    parts = [TopicPartition(src, 0), TopicPartition(src, 1)]
    finished = [False]
    try:
        while not finished[0] and time.time() < deadline:
            c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                          "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                          "enable.auto.commit": False})
            c.subscribe([src])
            p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
                          "linger.ms": 5})
            try:
                p.init_transactions(60)
                while time.time() < deadline:
                    batch = [m for m in c.consume(100, 1.0) if not m.error()]
                    if not batch:
                        # Done once the group's committed offsets reach the end (a
                        # commit whose answer was lost may have counted nowhere).
                        committed = c.committed(parts, timeout=10)
                        if sum(max(tp.offset, 0) for tp in committed) == records:
                            finished[0] = True
                            break
                        continue
                    p.begin_transaction()
                    for m in batch:
                        p.produce(dst, key=m.key(), value=b"out-" + m.value(),
                                  partition=m.partition())
                    p.send_offsets_to_transaction(c.position(c.assignment()),
                                                  c.consumer_group_metadata(), 30)
                    p.commit_transaction(30)
                    done[0] += len(batch)
            except KafkaException as e:
                # Abort what may be open, then start over from the committed offsets
                # with a new producer (which fences this one).
                print(f"  transaction failed ({e.args[0]}); starting over", flush=True)
                try:
                    p.abort_transaction(10)
                except KafkaException:
                    pass
            finally:
                c.close()
    finally:
        t.join()
    assert finished[0], f"the loop did not finish: {done[0]} of {records} copied"
    assert killed.is_set(), "the brokers were never killed"
    out = read(cluster.bootstrap, dst, 2, True, timeout=60)
    want = sorted(f"out-{i}" for i in range(records))
    dupes = len(out) - len(set(out))
    assert sorted(set(out)) == want, f"{len(set(out))} distinct of {records}"
    assert dupes == 0, f"{dupes} duplicates"
    # The group's committed offsets are the input's end.
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    committed = c.committed([TopicPartition(src, 0), TopicPartition(src, 1)], timeout=10)
    c.close()
    assert sum(tp.offset for tp in committed) == records, committed


class _Bootstrap:
    def __init__(self, bootstrap):
        self.bootstrap = bootstrap


def tiered_read_committed(work):
    """Committed and aborted transactions (two of them across several segments) on a
    tiered topic of a broker on a real S3 server (s3s-fs), replayed with read_committed
    once every marker is only in the object store: exactly the aborted records are
    dropped, among them those of an aborted transaction whose earlier segments hold
    none of its marker."""
    from console_tests import Stack
    stack = Stack(os.path.join(work, "tx-tiered"))
    try:
        cluster = _Bootstrap(f"127.0.0.1:{stack.kafka}")
        topic = "tx-tiered"
        create(cluster, topic, 1, config={"segment.bytes": "8192", "local.retention.bytes": "1"})
        pad = "x" * 300
        p = txn_producer(cluster.bootstrap, "tx-tiered-app")
        # (tag, records, commit): small ones, and two spanning about ten segments each.
        plan = [(f"t{n}", 15, n % 3 != 1) for n in range(24)]
        plan[5] = ("big-abort", 250, False)
        plan[12] = ("big-commit", 250, True)
        want = []
        for tag, count, commit in plan:
            p.begin_transaction()
            for i in range(count):
                p.produce(topic, value=f"{tag}-{i}-{pad}")
            p.flush(30)
            if commit:
                p.commit_transaction(30)
                want += [f"{tag}-{i}-{pad}" for i in range(count)]
            else:
                p.abort_transaction(30)
        # Plain records after them, so that the last marker's segment is sealed too.
        plain = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
        for i in range(100):
            plain.produce(topic, value=f"plain-{i}-{pad}")
        plain.flush(30)
        want += [f"plain-{i}-{pad}" for i in range(100)]
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"w-{uuid.uuid4()}"})
        markers_end = sum(count + 1 for _, count, _ in plan)

        def only_remote():
            # ListOffsets -4 (the earliest local offset) passes the last marker.
            local = c.offsets_for_times([TopicPartition(topic, 0, -4)], timeout=10)[0].offset
            return local >= markers_end
        eventually(only_remote, timeout=120, what="every marker in the object store only")
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.close()
        assert low == 0, low
        got = read(cluster.bootstrap, topic, 1, True, timeout=120)
        assert len(got) == len(set(got)), f"{len(got) - len(set(got))} duplicates"
        aborted = [v.split("-")[0] for v in got if v not in set(want)]
        assert not aborted, f"{len(aborted)} aborted records read: {sorted(set(aborted))}"
        assert sorted(got) == sorted(want), f"{len(got)} of {len(want)} committed records"
        everything = read(cluster.bootstrap, topic, 1, False, timeout=120)
        total = sum(count for _, count, _ in plan) + 100
        assert len(everything) == total, (len(everything), total, high)
    finally:
        stack.stop()


def new_replica_takes_producer_state(cluster):
    """A replica whose log restarts at its leader's local log start, in the middle of
    an aborted transaction's records, takes the producer state copied with the remote
    segment before that start. Once it leads and copies the segment with the abort
    marker itself, a read_committed replay from offset 0 still drops every record of
    that transaction, those in segments only the old leader held among them."""
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = "tx-reseed"
    a = AdminClient({"bootstrap.servers": cluster.bootstrap})
    a.create_topics([NewTopic(topic, 1, replica_assignment=[[0, 1]], config={
        "segment.bytes": "8192", "local.retention.bytes": "1",
        "min.insync.replicas": "1"})])[topic].result(30)

    def partition():
        return a.list_topics(topic, timeout=10).topics[topic].partitions[0]

    def local_start(broker):
        c = Consumer({"bootstrap.servers": broker.kafka, "group.id": f"w-{uuid.uuid4()}"})
        try:
            return c.offsets_for_times([TopicPartition(topic, 0, -4)], timeout=10)[0].offset
        finally:
            c.close()

    eventually(lambda: partition().leader == 0 and sorted(partition().isrs) == [0, 1],
               timeout=60, what="broker 0 leading with broker 1 in sync")
    old, new = cluster.brokers[0], cluster.brokers[1]
    new.stop()
    eventually(lambda: partition().isrs == [0], timeout=60, what="broker 1 out of sync")
    pad = "x" * 300
    # A transactional id whose coordinator is broker 2, which stays up throughout.
    txn_id = next(t for t in (f"tx-reseed-{n}" for n in range(1000))
                  if coordinator_of(t, [0, 1, 2]) == 2)
    p = txn_producer(old.kafka, txn_id)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, value=f"kept-{i}-{pad}")
    p.commit_transaction(30)
    # 11 offsets so far (10 records and a marker): the aborted transaction starts at 11,
    # spans several segments, and its marker stays in the active segment.
    p.begin_transaction()
    for i in range(100):
        p.produce(topic, value=f"gone-{i}-{pad}")
    p.flush(30)
    p.abort_transaction(30)
    eventually(lambda: local_start(old) > 11, timeout=120,
               what="the aborted transaction's first segments only in the object store")
    new.start()
    eventually(lambda: sorted(partition().isrs) == [0, 1], timeout=60,
               what="broker 1 back in sync")
    old.stop(signal.SIGKILL)
    try:
        eventually(lambda: partition().leader == 1, timeout=60, what="broker 1 leading")
        # Plain records roll the marker's segment, which broker 1 copies.
        plain = Producer({"bootstrap.servers": new.kafka, "linger.ms": 5})
        for i in range(60):
            plain.produce(topic, value=f"plain-{i}-{pad}")
        plain.flush(30)
        eventually(lambda: local_start(new) > 111, timeout=120,
                   what="the abort marker only in the object store")
    finally:
        old.start()
    got = read(cluster.bootstrap, topic, 1, True, timeout=60)
    gone = [v for v in got if v.startswith("gone-")]
    assert not gone, f"{len(gone)} records of the aborted transaction read"
    want = [f"kept-{i}-{pad}" for i in range(10)] + [f"plain-{i}-{pad}" for i in range(60)]
    assert sorted(got) == sorted(want), f"{len(got)} of {len(want)} committed records"
    log = open(os.path.join(new.dir, "broker.log")).read()
    assert "took the producer state copied with the remote segment" in log, \
        "broker 1 restarted its log without the producer state"
