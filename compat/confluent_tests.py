"""confluent-kafka (PyPI; it bundles a current librdkafka): every codec, keyed records,
a two-member group that rebalances, offsets resumed after a restart, offsets for
times, admin, the idempotent producer, a mostly-remote topic read from offset 0."""

import logging
import re
import threading
import time
import uuid

from confluent_kafka import (Consumer, ConsumerGroupTopicPartitions, KafkaException, Producer,
                             TopicPartition)
from confluent_kafka.admin import (AdminClient, ConfigResource, NewPartitions, NewTopic,
                                   ResourceType)

from harness import eventually, kafka_partition, shale

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def produce(bootstrap, topic, values, **conf):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    errors = []
    for v in values:
        key, value = v if isinstance(v, tuple) else (None, v)
        p.produce(topic, value=value, key=key,
                  on_delivery=lambda err, _msg: err and errors.append(err))
    left = p.flush(60)
    assert left == 0 and not errors, f"{left} undelivered, errors: {errors[:3]}"


def consume_all(bootstrap, topic, expected, group=None, timeout=60, **conf):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group or f"c-{uuid.uuid4()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})
    c.subscribe([topic])
    got = []
    deadline = time.time() + timeout
    while len(got) < expected and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            raise KafkaException(m.error())
        got.append(m)
    c.close()
    return got


def admin(cluster):
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def create(cluster, topic, partitions=1, replicas=1, config=None):
    a = admin(cluster)  # kept alive until the answer came
    fs = a.create_topics([NewTopic(topic, partitions, replicas, config=config or {})])
    fs[topic].result(30)


def codecs(cluster, replicas=1):
    for codec in CODECS:
        topic = f"ck-{codec}-{replicas}"
        create(cluster, topic, 3, replicas)
        values = [f"{codec}-{i}".encode() for i in range(1000)]
        produce(cluster.bootstrap, topic, values, **{"compression.type": codec, "acks": "all"})
        got = consume_all(cluster.bootstrap, topic, len(values))
        assert sorted(m.value() for m in got) == sorted(values), f"{codec}: {len(got)} back"


def keyed(cluster):
    topic = "ck-keyed"
    create(cluster, topic, 5)
    keys = [f"user-{i}".encode() for i in range(300)]
    produce(cluster.bootstrap, topic, [(k, b"v") for k in keys], partitioner="murmur2_random")
    got = consume_all(cluster.bootstrap, topic, len(keys))
    for m in got:
        assert m.partition() == kafka_partition(m.key(), 5), (m.key(), m.partition())


def group_rebalance(cluster):
    """Two members split the partitions; when one leaves, the other takes them all."""
    topic, group = "ck-group", "ck-group-g"
    create(cluster, topic, 4)
    conf = {"bootstrap.servers": cluster.bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500}
    a, b = Consumer(conf), Consumer(conf)
    a.subscribe([topic])
    b.subscribe([topic])

    def split():
        for c in (a, b):
            c.poll(0.2)
        return len(a.assignment()) == 2 and len(b.assignment()) == 2
    eventually(split, timeout=60, what="two members with two partitions each")
    b.close()

    def one_has_all():
        a.poll(0.2)
        return len(a.assignment()) == 4
    eventually(one_has_all, timeout=60, what="the remaining member owning all four")
    a_admin = admin(cluster)  # kept alive: a collected AdminClient never answers
    desc = a_admin.describe_consumer_groups([group])[group].result(30)
    assert len(desc.members) == 1, desc
    a.close()


class Captured(logging.Handler):
    """A client's log lines (librdkafka's, through confluent-kafka's `logger`)."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def consumer_protocol(cluster):
    """The consumer group protocol (KIP-848, `group.protocol=consumer`): three members
    share 12 partitions while records flow; a fourth joins and only the three
    partitions it takes are revoked from the others (no stop-the-world rebalance: the
    other nine are never revoked); a member leaves and its partitions move; every
    record produced is read, and the group's offsets are committed (OffsetCommit v9
    with member epochs). Also Fetch by topic id: librdkafka picks Fetch v13+."""
    topic, group = "ck-848", f"ck-848-{uuid.uuid4()}"
    create(cluster, topic, 12)
    stop, lock = threading.Event(), threading.Lock()
    produced, consumed = [], set()
    owned, revoked = {}, {}

    def producing():
        p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
        i = 0
        while not stop.is_set():
            p.produce(topic, value=str(i).encode(), partition=i % 12)
            produced.append(i)
            i += 1
            if i % 60 == 0:
                p.poll(0)
                time.sleep(0.05)
        assert p.flush(60) == 0

    # m1 logs its requests, to see the Fetch version it picked.
    sent = Captured()
    log = logging.getLogger("ck-848")
    log.addHandler(sent)
    log.setLevel(logging.DEBUG)

    def member(name, leave):
        debug = {"debug": "protocol", "logger": log} if name == "m1" else {}
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                      "group.protocol": "consumer", "auto.offset.reset": "earliest",
                      "auto.commit.interval.ms": 500, **debug})
        c.subscribe([topic])
        mine = set()
        while not leave.is_set():
            m = c.poll(0.2)
            now = {tp.partition for tp in c.assignment()}
            with lock:
                revoked[name] = revoked.get(name, 0) + len(mine - now)
                owned[name] = now
            mine = now
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            with lock:
                consumed.add(int(m.value()))
        c.close()
        with lock:
            owned.pop(name, None)

    def split(counts):
        with lock:
            return sorted(len(p) for p in owned.values()) == counts and \
                len(set().union(*owned.values())) == 12

    leaves = {f"m{i}": threading.Event() for i in range(4)}
    threads = [threading.Thread(target=producing)]
    threads += [threading.Thread(target=member, args=(n, leaves[n])) for n in ["m0", "m1", "m2"]]
    for t in threads:
        t.start()
    try:
        eventually(lambda: split([4, 4, 4]), timeout=60, what="three members with four each")
        with lock:
            before = sum(revoked.values())
        fourth = threading.Thread(target=member, args=("m3", leaves["m3"]))
        fourth.start()
        threads.append(fourth)
        eventually(lambda: split([3, 3, 3, 3]), timeout=60, what="four members with three each")
        with lock:
            moved = sum(revoked.values()) - before
        assert moved == 3, f"{moved} partitions revoked when a fourth member joined"
        leaves["m0"].set()
        eventually(lambda: split([4, 4, 4]), timeout=60, what="m0's partitions moved")
        time.sleep(1)
    finally:
        stop.set()
        threads[0].join()
    try:
        eventually(lambda: consumed.issuperset(produced), timeout=60,
                   what=f"all {len(produced)} records read")
    finally:
        for e in leaves.values():
            e.set()
        for t in threads[1:]:
            t.join()
    fetches = {m.group(1) for m in map(re.compile(r"Sent FetchRequest \(v(\d+)").search,
                                            sent.lines) if m}
    assert fetches and all(int(v) >= 13 for v in fetches), f"Fetch versions: {fetches}"
    a = admin(cluster)  # kept alive until the answer came
    offsets = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    committed = offsets[group].result(30).topic_partitions
    assert sum(tp.offset for tp in committed if tp.offset > 0) == len(produced), committed


def consumer_protocol_regex(cluster):
    """A consumer-protocol member subscribed by pattern (`^ck-rx-.*`, sent as
    ConsumerGroupHeartbeat v1's regex) reads every topic whose whole name matches, and
    none other."""
    for t in ["ck-rx-1", "ck-rx-2", "no-ck-rx-3"]:
        create(cluster, t, 2)
        produce(cluster.bootstrap, t, [f"{t}/{i}".encode() for i in range(10)])
    got = consume_all(cluster.bootstrap, "^ck-rx-.*", 20, timeout=60,
                      **{"group.protocol": "consumer"})
    topics = sorted({m.topic() for m in got})
    assert len(got) == 20 and topics == ["ck-rx-1", "ck-rx-2"], (len(got), topics)


def commit_phase(cluster, topic="ck-resume", group="ck-resume-g"):
    """Before a restart: 100 records, 40 consumed and committed."""
    create(cluster, topic, 1)
    produce(cluster.bootstrap, topic, [f"r{i}".encode() for i in range(100)])
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    seen = 0
    while seen < 40:
        m = c.poll(1)
        if m is not None and not m.error():
            seen += 1
            if seen == 40:
                c.commit(message=m, asynchronous=False)
    c.close()


def resume_phase(cluster, topic="ck-resume", group="ck-resume-g"):
    """After the restart: the group resumes at offset 40."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest"})
    committed = c.committed([TopicPartition(topic, 0)], timeout=30)
    assert committed[0].offset == 40, committed
    c.subscribe([topic])
    first = None
    deadline = time.time() + 60
    while first is None and time.time() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            first = m
    c.close()
    assert first is not None and first.offset() == 40 and first.value() == b"r40", first


def offsets_for_times(cluster):
    topic = "ck-times"
    create(cluster, topic, 1)
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(10):
        p.produce(topic, value=b"t", timestamp=1_000_000 + i * 1000)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ck-times-g"})
    for ts, offset in [(1_003_000, 3), (1_003_500, 4), (0, 0), (2_000_000, -1)]:
        got = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=30)
        assert got[0].offset == offset, (ts, got)
    low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    assert (low, high) == (0, 10)
    c.close()


def admin_ops(cluster):
    a = admin(cluster)
    topic = "ck-admin"
    create(cluster, topic, 2, config={"retention.ms": "3600000"})
    res = ConfigResource(ResourceType.TOPIC, topic)
    configs = a.describe_configs([res])[res].result(30)
    assert configs["retention.ms"].value == "3600000", configs["retention.ms"]
    assert len(configs) > 5, "DescribeConfigs answers every config"
    a.alter_configs([ConfigResource(ResourceType.TOPIC, topic,
                                    set_config={"retention.ms": "7200000"})])[res].result(30)
    configs = a.describe_configs([res])[res].result(30)
    assert configs["retention.ms"].value == "7200000"
    a.create_partitions([NewPartitions(topic, 5)])[topic].result(30)
    md = eventually(lambda: (m := a.list_topics(topic, timeout=10)).topics[topic].partitions
                    and len(m.topics[topic].partitions) == 5 and m,
                    what="five partitions")
    assert len(md.topics[topic].partitions) == 5
    # A consumer group to list and describe.
    produce(cluster.bootstrap, topic, [b"x"])
    got = consume_all(cluster.bootstrap, topic, 1, group="ck-admin-g",
                      **{"enable.auto.commit": True})
    assert len(got) == 1
    groups = a.list_consumer_groups().result(30)
    assert "ck-admin-g" in {g.group_id for g in groups.valid}, groups.valid
    a.delete_topics([topic])[topic].result(30)
    eventually(lambda: topic not in a.list_topics(timeout=10).topics, what="topic deleted")


def delete_records(cluster):
    """DeleteRecords moves the low watermark; a consumer from the beginning starts there."""
    topic = "ck-delete-records"
    create(cluster, topic, 1)
    produce(cluster.bootstrap, topic, [b"d%d" % i for i in range(100)])
    a = admin(cluster)
    fs = a.delete_records([TopicPartition(topic, 0, 40)])
    deleted = fs[TopicPartition(topic, 0, 40)].result(30)
    assert deleted.low_watermark == 40, deleted
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ck-dr-probe"})
    low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.close()
    assert (low, high) == (40, 100), (low, high)
    got = consume_all(cluster.bootstrap, topic, 60)
    assert [m.offset() for m in got] == list(range(40, 100)), [m.offset() for m in got][:5]
    # Past the high watermark: refused, nothing changes.
    fs = a.delete_records([TopicPartition(topic, 0, 500)])
    try:
        fs[TopicPartition(topic, 0, 500)].result(30)
        raise AssertionError("DeleteRecords past the high watermark succeeded")
    except KafkaException as e:
        assert "OFFSET_OUT_OF_RANGE" in str(e) or "out of range" in str(e).lower(), e


def idempotent(cluster):
    topic = "ck-idempotent"
    create(cluster, topic, 2)
    values = [f"i{i}".encode() for i in range(2000)]
    produce(cluster.bootstrap, topic, values, **{"enable.idempotence": True,
                                                 "max.in.flight.requests.per.connection": 5})
    got = consume_all(cluster.bootstrap, topic, len(values))
    assert sorted(m.value() for m in got) == sorted(values)
    assert len(got) == len(values), "duplicates"


def remote_replay(cluster):
    """Most of a topic in the object store: a consumer from offset 0 reads all of it."""
    topic = "ck-remote"
    create(cluster, topic, 1, config={"segment.bytes": "1048576",
                                      "local.retention.bytes": "1048576"})
    values = [(b"%08d" % i) + b"x" * 1000 for i in range(12_000)]
    produce(cluster.bootstrap, topic, values, **{"compression.type": "none"})
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ck-remote-probe"})

    def mostly_remote():
        # ListOffsets -4 (earliest local) moves up as local segments are deleted.
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        local = c.offsets_for_times([TopicPartition(topic, 0, -4)], timeout=10)[0].offset
        return low == 0 and high == len(values) and local > len(values) // 2
    eventually(mostly_remote, timeout=120, what="most of the topic tiered and deleted locally")
    c.close()
    got = consume_all(cluster.bootstrap, topic, len(values), timeout=120)
    assert [m.value() for m in got] == values, f"{len(got)} of {len(values)} in order"


def compacted(cluster):
    """A compacted topic created through the Kafka admin API: a keyless record is
    refused (INVALID_RECORD), tombstones delete their keys, and a consumer from the
    beginning gets the latest value of each key after a cleaning."""
    from confluent_kafka import KafkaError
    from kcat_tests import wait_cleaned
    topic = "ck-compacted"
    create(cluster, topic, 1, config={"cleanup.policy": "compact", "segment.bytes": "4096",
                                      "min.cleanable.dirty.ratio": "0.01",
                                      "delete.retention.ms": "600000",
                                      "remote.storage.enable": "false"})
    a = admin(cluster)
    res = ConfigResource(ResourceType.TOPIC, topic)
    configs = a.describe_configs([res])[res].result(30)
    assert configs["cleanup.policy"].value == "compact", configs["cleanup.policy"]
    assert configs["delete.retention.ms"].value == "600000"
    # A record without a key is refused.
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "retries": 0})
    errors = []
    p.produce(topic, value=b"no key", on_delivery=lambda err, _m: errors.append(err))
    p.flush(30)
    assert errors and errors[0] and errors[0].code() == KafkaError.INVALID_RECORD, errors
    for rnd in range(20):
        produce(cluster.bootstrap, topic, [(f"k{k}".encode(), f"{rnd}".encode())
                                           for k in range(80)], acks="all")
    produce(cluster.bootstrap, topic, [(f"k{k}".encode(), None) for k in range(10)],
            acks="all")
    produce(cluster.bootstrap, topic, [(b"filler", f"{i}".encode()) for i in range(300)],
            acks="all")
    wait_cleaned(cluster, topic)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"c-{uuid.uuid4()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.subscribe([topic])
    latest, count, deadline = {}, 0, time.time() + 60
    while time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                break
            raise KafkaException(m.error())
        latest[m.key()] = m.value()
        count += 1
    c.close()
    want = {f"k{k}".encode(): b"19" for k in range(10, 80)}
    want.update({f"k{k}".encode(): None for k in range(10)})
    want[b"filler"] = b"299"
    assert latest == want, {k: v for k, v in latest.items() if want.get(k) != v}
    assert count < 80 * 20, f"{count} records read: nothing was compacted"
