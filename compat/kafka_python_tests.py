"""kafka-python (Debian's 2.0.2 and PyPI's 3.x): run as
`python kafka_python_tests.py BOOTSTRAP TEST` under each interpreter."""

import sys
import time

import kafka
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic

sys.path.insert(0, __import__("os").path.dirname(__file__))
from harness import eventually, kafka_partition  # noqa: E402

BOOTSTRAP = sys.argv[1]
OLD = kafka.__version__.startswith("2.")
TAG = "kp2" if OLD else "kp3"


def admin():
    return KafkaAdminClient(bootstrap_servers=BOOTSTRAP)


def create(topic, partitions=1):
    a = admin()
    a.create_topics([NewTopic(topic, partitions, 1)])
    a.close()
    eventually(lambda: KafkaConsumer(bootstrap_servers=BOOTSTRAP).partitions_for_topic(topic),
               what=f"{topic} visible")


def consume(topic, expected, group=None, timeout_ms=20000):
    c = KafkaConsumer(topic, bootstrap_servers=BOOTSTRAP, auto_offset_reset="earliest",
                      group_id=group, consumer_timeout_ms=timeout_ms,
                      enable_auto_commit=False)
    got = []
    for m in c:
        got.append(m)
        if len(got) >= expected:
            break
    c.close()
    return got


def codecs():
    import kafka.codec as kc
    available = {"gzip": kc.has_gzip(), "snappy": kc.has_snappy(), "lz4": kc.has_lz4(),
                 "zstd": kc.has_zstd()}
    for codec in [None, "gzip", "snappy", "lz4", "zstd"]:
        if codec and not available[codec]:
            raise AssertionError(f"{codec} codec library missing for kafka-python {kafka.__version__}")
        topic = f"{TAG}-{codec or 'none'}"
        create(topic, 2)
        p = KafkaProducer(bootstrap_servers=BOOTSTRAP, compression_type=codec, acks="all")
        values = [f"{codec}-{i}".encode() for i in range(500)]
        for v in values:
            p.send(topic, v)
        p.flush(30)
        p.close()
        got = consume(topic, len(values))
        assert sorted(m.value for m in got) == sorted(values), f"{codec}: {len(got)} back"


def keyed():
    topic = f"{TAG}-keyed"
    create(topic, 7)
    p = KafkaProducer(bootstrap_servers=BOOTSTRAP)
    keys = [f"k{i}".encode() for i in range(200)]
    for k in keys:
        p.send(topic, key=k, value=b"v")
    p.flush(30)
    got = consume(topic, len(keys))
    assert len(got) == len(keys)
    for m in got:
        assert m.partition == kafka_partition(m.key, 7), (m.key, m.partition)


def group_rebalance():
    """Two members, each polling in its own thread (as applications do): they split
    the partitions, and when one leaves the other takes them all."""
    import threading
    topic, group = f"{TAG}-group", f"{TAG}-group-g"
    create(topic, 4)
    conf = dict(bootstrap_servers=BOOTSTRAP, group_id=group, auto_offset_reset="earliest",
                session_timeout_ms=6000, heartbeat_interval_ms=500)
    members = {name: (KafkaConsumer(topic, **conf), threading.Event()) for name in "ab"}

    def poll(c, stop):
        while not stop.is_set():
            c.poll(200)
        c.close()
    threads = [threading.Thread(target=poll, args=m, daemon=True) for m in members.values()]
    for t in threads:
        t.start()
    (a, stop_a), (b, stop_b) = members["a"], members["b"]
    try:
        eventually(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2,
                   timeout=60, what="two members with two partitions each")
        stop_b.set()
        threads[1].join(30)
        eventually(lambda: len(a.assignment()) == 4, timeout=60,
                   what="the remaining member owning all four")
    finally:
        stop_a.set()
        stop_b.set()
        for t in threads:
            t.join(30)


def commit_phase():
    topic, group = f"{TAG}-resume", f"{TAG}-resume-g"
    create(topic, 1)
    p = KafkaProducer(bootstrap_servers=BOOTSTRAP)
    for i in range(100):
        p.send(topic, f"r{i}".encode())
    p.flush(30)
    c = KafkaConsumer(topic, bootstrap_servers=BOOTSTRAP, group_id=group,
                      auto_offset_reset="earliest", enable_auto_commit=False)
    seen = 0
    while seen < 40:
        for records in c.poll(1000, max_records=40 - seen).values():
            seen += len(records)
    c.commit()
    c.close()


def resume_phase():
    topic, group = f"{TAG}-resume", f"{TAG}-resume-g"
    c = KafkaConsumer(topic, bootstrap_servers=BOOTSTRAP, group_id=group,
                      auto_offset_reset="earliest", consumer_timeout_ms=20000)
    first = next(iter(c))
    c.close()
    assert (first.offset, first.value) == (40, b"r40"), first


def offsets_for_times():
    topic = f"{TAG}-times"
    create(topic, 1)
    p = KafkaProducer(bootstrap_servers=BOOTSTRAP)
    for i in range(10):
        p.send(topic, b"t", timestamp_ms=1_000_000 + i * 1000)
    p.flush(30)
    c = KafkaConsumer(bootstrap_servers=BOOTSTRAP)
    tp = TopicPartition(topic, 0)
    for ts, offset in [(1_003_000, 3), (1_003_500, 4), (0, 0)]:
        got = c.offsets_for_times({tp: ts})[tp]
        assert got is not None and got.offset == offset, (ts, got)
    assert c.offsets_for_times({tp: 2_000_000})[tp] is None
    assert (c.beginning_offsets([tp])[tp], c.end_offsets([tp])[tp]) == (0, 10)
    c.close()


def topic_configs(a, topic):
    """{name: value} of a topic's configs, from either major version's answer."""
    resources = [ConfigResource(ConfigResourceType.TOPIC, topic)]
    # 3.x shows only changed configs unless asked for all.
    described = (a.describe_configs(resources) if OLD
                 else a.describe_configs(resources, config_filter="all"))
    if isinstance(described, dict):  # 3.x: {'topic': {name: {config: value or entry}}}
        entries = described["topic"][topic]
        return {k: (v["value"] if isinstance(v, dict) else v) for k, v in entries.items()}
    return {e[0]: e[1] for e in described[0].resources[0][4]}


def group_ids(a):
    listed = a.list_consumer_groups() if OLD else a.list_groups()
    out = set()
    for g in listed:
        if isinstance(g, tuple):
            out.add(g[0])
        elif isinstance(g, dict):
            out.add(g.get("group_id") or g.get("group"))
        else:
            out.add(getattr(g, "group_id", g))
    return out


def group_state(a, group):
    """(state, member count)."""
    if OLD:
        d = a.describe_consumer_groups([group])[0]
        return d.state, len(d.members)
    d = a.describe_groups([group])[group]
    return d["group_state"], len(d["members"])


def admin_ops():
    a = admin()
    topic = f"{TAG}-admin"
    a.create_topics([NewTopic(topic, 2, 1, topic_configs={"retention.ms": "3600000"})])
    entries = topic_configs(a, topic)
    assert entries.get("retention.ms") == "3600000", entries
    assert len(entries) > 5, "DescribeConfigs answers every config"
    a.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                    configs={"retention.ms": "7200000"})])
    entries = topic_configs(a, topic)
    assert entries.get("retention.ms") == "7200000", entries
    a.create_partitions({topic: NewPartitions(4)})
    eventually(lambda: len(KafkaConsumer(bootstrap_servers=BOOTSTRAP)
                           .partitions_for_topic(topic) or ()) == 4, what="four partitions")
    # A group with a committed offset is listed and described.
    p = KafkaProducer(bootstrap_servers=BOOTSTRAP)
    p.send(topic, b"x", partition=0)
    p.flush(30)
    c = KafkaConsumer(topic, bootstrap_servers=BOOTSTRAP, group_id=f"{TAG}-admin-g",
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=20000)
    next(iter(c))
    c.commit()
    groups = group_ids(a)
    assert f"{TAG}-admin-g" in groups, groups
    state = group_state(a, f"{TAG}-admin-g")
    assert state == ("Stable", 1), state
    c.close()
    a.delete_topics([topic])
    eventually(lambda: topic not in KafkaConsumer(bootstrap_servers=BOOTSTRAP).topics(),
               what="topic deleted")
    a.close()


def delete_records():
    """DeleteRecords (kafka-python 3: KafkaAdminClient.delete_records)."""
    a = admin()
    topic = f"{TAG}-delete-records"
    a.create_topics([NewTopic(topic, 1, 1)])
    p = KafkaProducer(bootstrap_servers=BOOTSTRAP)
    for i in range(50):
        p.send(topic, b"d%d" % i, partition=0)
    p.flush(30)
    tp = TopicPartition(topic, 0)
    result = a.delete_records({tp: 20})
    assert result[tp]["low_watermark"] == 20, result
    c = KafkaConsumer(bootstrap_servers=BOOTSTRAP, consumer_timeout_ms=10000)
    assert c.beginning_offsets([tp])[tp] == 20
    c.assign([tp])
    c.seek_to_beginning(tp)
    offsets = [m.offset for m in c]
    assert offsets == list(range(20, 50)), offsets[:5]
    c.close()
    a.close()


TESTS = {f.__name__: f for f in [codecs, keyed, group_rebalance, commit_phase, resume_phase,
                                  offsets_for_times, admin_ops, delete_records]}

if __name__ == "__main__":
    started = time.time()
    TESTS[sys.argv[2]]()
    print(f"ok {TAG} {sys.argv[2]} ({time.time() - started:.1f} s)")
