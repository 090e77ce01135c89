"""kcat (Debian's, on librdkafka 2.0.2): listing, produce and consume with every
codec, keyed records on Kafka's partitions, and a group shared with `shale consume`."""

import json
import subprocess
import time

from harness import CLI_BIN, eventually, kafka_partition, run, shale

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def kcat(cluster, *args, input=None, timeout=60):
    return run(["kcat", "-b", cluster.bootstrap, *args], input=input, timeout=timeout)


def listing(cluster, replicas=1):
    topic = f"kcat-list-{replicas}"
    shale(cluster, "topic", "create", topic, "--partitions", "3",
          "--replication-factor", str(replicas))

    def listed():
        meta = json.loads(kcat(cluster, "-L", "-J").stdout)
        t = next((t for t in meta["topics"] if t["topic"] == topic), None)
        ok = (t and len(t["partitions"]) == 3
              and all(p["leader"] >= 0 and len(p["isrs"]) == replicas for p in t["partitions"]))
        return meta if ok else None
    meta = eventually(listed, what="kcat -L showing leaders and full ISRs")
    assert len(meta["brokers"]) == len(cluster.brokers), meta["brokers"]
    assert meta["controllerid"] in [b["id"] for b in meta["brokers"]], meta
    text = kcat(cluster, "-L").stdout.decode()
    assert "(controller)" in text and f'topic "{topic}" with 3 partitions' in text, text


def codecs(cluster, replicas=1):
    for codec in CODECS:
        topic = f"kcat-{codec}-{replicas}"
        shale(cluster, "topic", "create", topic, "--replication-factor", str(replicas))
        lines = "".join(f"{codec}-{i}\n" for i in range(500)).encode()
        kcat(cluster, "-P", "-t", topic, "-z", codec, "-X", "acks=all", input=lines)
        got = kcat(cluster, "-C", "-t", topic, "-e", "-q", "-f", "%s\n").stdout
        assert got == lines, f"{codec}: {len(got.splitlines())} of 500 lines back"


def keyed(cluster):
    """Keyed records land where Kafka's default partitioner (murmur2) puts them, for
    kcat and for Shale's own client alike."""
    topic = "kcat-keyed"
    shale(cluster, "topic", "create", topic, "--partitions", "6")
    keys = [f"key-{i}" for i in range(200)]
    records = "".join(f"{k}:v\n" for k in keys).encode()
    kcat(cluster, "-P", "-t", topic, "-K", ":", "-X", "partitioner=murmur2_random",
         input=records)
    shale(cluster, "produce", topic, "-K", ":", input=records)
    got = kcat(cluster, "-C", "-t", topic, "-e", "-q", "-f", "%k %p\n").stdout.decode()
    placed = {}
    for line in got.splitlines():
        k, p = line.split()
        placed.setdefault(k, set()).add(int(p))
    assert len(placed) == len(keys)
    for k in keys:
        assert placed[k] == {kafka_partition(k.encode(), 6)}, (k, placed[k])


def shared_group(cluster):
    """A kcat member and a `shale consume --group` member split one topic."""
    topic, group = "kcat-shared", "kcat-and-shale"
    shale(cluster, "topic", "create", topic, "--partitions", "4")
    kc = subprocess.Popen(["kcat", "-b", cluster.bootstrap, "-G", group, "-q",
                           "-X", "auto.offset.reset=earliest", "-f", "%p %s\n", topic],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    sc = subprocess.Popen([CLI_BIN, "--bootstrap", cluster.grpc, "consume", topic,
                           "--group", group, "--from-beginning", "-f", "%p %s\\n"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        def split_between_two():
            # Stable, and the partitions held by two members: the rebalance is over (two
            # members listed can still be a rebalance in progress, with kcat holding all 4).
            d = json.loads(shale(cluster, "group", "describe", group, "-o", "json"))
            holders = {p["member_id"] for p in d.get("partitions", []) if p["member_id"]}
            return d.get("state") == "Stable" and len(holders) == 2
        eventually(split_between_two, timeout=60, what="the group's 4 partitions split between two members")
        time.sleep(1)  # both members start fetching what they were given
        # Keyed, so the records spread over the 4 partitions: librdkafka's random
        # partitioner sends each batch to one partition, and once put 399 of 400 on the
        # partition kcat held, leaving the other member nothing to read.
        values = "".join(f"k{i}:m{i}\n" for i in range(400)).encode()
        kcat(cluster, "-P", "-t", topic, "-K", ":", input=values)
        time.sleep(6)
    finally:
        for p in (kc, sc):
            p.terminate()
    out_k = kc.communicate(timeout=30)[0].decode().splitlines()
    out_s = sc.communicate(timeout=30)[0].decode().splitlines()
    got_k = {line.split()[1] for line in out_k}
    got_s = {line.split()[1] for line in out_s}
    assert got_k and got_s, f"kcat got {len(got_k)}, shale got {len(got_s)}: not one group"
    assert not (got_k & got_s), "a record went to both members"
    assert len(got_k | got_s) == 400, f"{len(got_k | got_s)} of 400 records consumed"
    parts_k = {line.split()[0] for line in out_k}
    parts_s = {line.split()[0] for line in out_s}
    assert not (parts_k & parts_s), f"a partition went to both: {parts_k} {parts_s}"


def wait_cleaned(cluster, topic):
    """Until the broker's cleaner has cleaned every sealed segment of every partition of
    `topic` (a cleaning during the writes leaves later segments dirty)."""
    def cleaned():
        d = json.loads(shale(cluster, "topic", "describe", topic, "-o", "json"))
        d = d[0] if isinstance(d, list) else d
        return all((p.get("last_cleaned_ms") or -1) >= 0 and p.get("dirty_bytes") == 0
                   for p in d["partitions"])
    eventually(cleaned, timeout=60, what=f"a cleaning of {topic}")


def compacted(cluster):
    """A compacted topic: kcat produces 30 updates of 100 keys, and after a cleaning
    reads each key once, with its latest value, from the beginning."""
    topic = "kcat-compacted"
    shale(cluster, "topic", "create", topic, "--config", "cleanup.policy=compact",
          "--config", "segment.bytes=4096", "--config", "min.cleanable.dirty.ratio=0.01",
          "--config", "remote.storage.enable=false")
    for rnd in range(30):
        lines = "".join(f"k{k}:{rnd}\n" for k in range(100)).encode()
        kcat(cluster, "-P", "-t", topic, "-K", ":", "-X", "acks=all", input=lines)
    wait_cleaned(cluster, topic)
    got = kcat(cluster, "-C", "-t", topic, "-e", "-q", "-f", "%k %s %o\n").stdout.decode()
    rows = [line.split() for line in got.splitlines()]
    latest = {k: v for k, v, _ in rows}
    assert latest == {f"k{k}": "29" for k in range(100)}, latest
    assert len(rows) < 3000 // 2, f"{len(rows)} of 3000 records: nothing was compacted"
    offsets = [int(o) for _, _, o in rows]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def follower_fetch(cluster):
    """KIP-392: kcat with `client.rack` reads from the in-sync follower in its rack
    (broker i runs in rack-i), as the brokers' metrics show: the leader sends it there
    (shale_fetch_preferred_replica_total) and the follower serves the records
    (shale_follower_fetched_bytes_total); without a rack it reads from the leader."""
    topic = "kcat-rack"
    shale(cluster, "topic", "create", topic, "--replication-factor", "3")
    lines = "".join(f"rack-{i:05}\n" for i in range(3000)).encode()
    kcat(cluster, "-P", "-t", topic, "-X", "acks=all", input=lines)

    def in_sync():
        meta = json.loads(kcat(cluster, "-L", "-J", "-t", topic).stdout)
        p = meta["topics"][0]["partitions"][0]
        return p if len(p["isrs"]) == 3 else None
    p = eventually(in_sync, what=f"{topic}'s three replicas in sync")
    leader = p["leader"]
    follower = next(r["id"] for r in p["replicas"] if r["id"] != leader)
    brokers = {b.id: b for b in cluster.brokers}

    def served():
        return {i: b.metric("shale_follower_fetched_bytes_total") for i, b in brokers.items()}
    sent_before = brokers[leader].metric("shale_fetch_preferred_replica_total")
    before = served()
    # Without a rack: the leader answers, no follower serves.
    got = kcat(cluster, "-C", "-t", topic, "-e", "-q", "-f", "%s\n").stdout
    assert got == lines, f"{len(got.splitlines())} of 3000 lines from the leader"
    assert served() == before, (before, served())

    # A follower learns the high watermark a replica fetch later than the leader: a
    # read that stops at its end early is tried again.
    def read_in_rack():
        got = kcat(cluster, "-C", "-t", topic, "-e", "-q", "-f", "%s\n",
                   "-X", f"client.rack=rack-{follower}").stdout
        return got if got == lines else None
    eventually(read_in_rack, timeout=30, what=f"all 3000 lines read in rack-{follower}")
    after = served()
    assert after[follower] - before[follower] >= len(lines), (follower, before, after)
    for i in brokers:
        if i != follower:
            assert after[i] == before[i], (i, before, after)
    sent = brokers[leader].metric("shale_fetch_preferred_replica_total") - sent_before
    assert sent >= 1, f"leader {leader} sent no consumer to follower {follower}"
