"""Shared pieces of the Kafka compatibility suite: brokers as real processes, the
check runner, and Kafka's murmur2 partitioner (to check where keyed records land)."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("SHALE_TARGET_DIR", os.path.join(ROOT, "target", "debug"))
BROKER_BIN = os.path.join(TARGET, "shale-broker")
CLI_BIN = os.path.join(TARGET, "shale")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BROKER_TOML = """
[log]
cleaner_backoff_ms = 300

[groups]
initial_rebalance_delay_ms = 300
min_session_timeout_ms = 1000
consumer_heartbeat_interval_ms = 1000

[cluster]
lease_ms = 3000
heartbeat_interval_ms = 500
# The suite's topics stay where they were created (the balancer has tests of its own).
auto_balance_enable = false
"""


class Broker:
    """One shale-broker process with a Kafka and a gRPC listener."""

    def __init__(self, workdir, broker_id=0, metastore=None, objects=None, extra_toml="",
                 listeners_toml="", rack=None, sections_toml=""):
        self.id = broker_id
        self.dir = os.path.join(workdir, f"broker{broker_id}")
        os.makedirs(self.dir, exist_ok=True)
        self.kafka_port = free_port()
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.metastore = metastore
        self.objects = objects
        self.proc = None
        with open(os.path.join(self.dir, "shale.toml"), "w") as f:
            f.write(BROKER_TOML.replace("[cluster]\n", "[cluster]\n" + extra_toml))
            # More listeners, or the `kafka` listener's security keys.
            f.write(listeners_toml)
            if rack:
                f.write(f'\n[broker]\nrack = "{rack}"\n')
            # Sections of its own (`[transactions]`, ...).
            f.write("\n" + sections_toml)

    @property
    def kafka(self):
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def grpc(self):
        return f"127.0.0.1:{self.grpc_port}"

    def metric(self, name):
        """The sum of a Prometheus metric's samples on this broker's /metrics."""
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.split("{")[0].split(" ")[0] == name)

    def start(self):
        args = [
            BROKER_BIN,
            "--config", os.path.join(self.dir, "shale.toml"),
            "--data-dir", os.path.join(self.dir, "data"),
            "--broker-id", str(self.id),
            "--listen", self.grpc,
            "--kafka-listen", self.kafka,
            "--http-listen", f"127.0.0.1:{self.http_port}",
        ]
        if self.metastore:
            args += ["--metastore-url", self.metastore]
        if self.objects:
            args += ["--object-store-url", self.objects]
        log_path = os.path.join(self.dir, "broker.log")
        log = open(log_path, "a")
        # Readiness is judged by this start's lines only (a restart appends).
        since = log.tell()
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log,
                                     env={**os.environ, "RUST_LOG": "info"})
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker {self.id} exited: see {self.dir}/broker.log")
            try:
                with socket.create_connection(("127.0.0.1", self.kafka_port), timeout=1):
                    pass
                with open(log_path) as f:
                    f.seek(since)
                    if "shale-broker ready" in f.read():
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"broker {self.id} did not come up")

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self):
        self.stop()
        self.start()


class Cluster:
    def __init__(self, brokers, on_stop=None):
        self.brokers = brokers
        self.on_stop = on_stop

    @property
    def bootstrap(self):
        return ",".join(b.kafka for b in self.brokers)

    @property
    def grpc(self):
        return self.brokers[0].grpc

    def restart(self):
        for b in self.brokers:
            b.restart()

    def stop(self):
        for b in self.brokers:
            b.stop()
        if self.on_stop:
            self.on_stop()


def single(workdir):
    b = Broker(workdir)
    b.start()
    return Cluster([b])


def cluster_of_three(workdir, postgres_url, cluster_toml=""):
    """Three brokers on one PostgreSQL database (a fresh one) and one object store,
    broker i in rack `rack-i`; `cluster_toml`: more `[cluster]` settings."""
    import urllib.parse
    db = "shale_compat_" + os.urandom(4).hex()
    parsed = urllib.parse.urlparse(postgres_url)
    admin = subprocess.run(
        ["psql", postgres_url, "-c", f"CREATE DATABASE {db}"],
        capture_output=True, text=True)
    if admin.returncode != 0:
        raise RuntimeError(f"cannot create database {db}: {admin.stderr}")
    url = parsed._replace(path="/" + db).geturl()
    workdir = os.path.join(workdir, "cluster")
    objects = "file://" + os.path.join(workdir, "objects")
    brokers = [Broker(workdir, i, metastore=url, objects=objects, extra_toml=cluster_toml,
                      rack=f"rack-{i}")
               for i in range(3)]
    cluster = Cluster(brokers, on_stop=lambda: subprocess.run(
        ["psql", postgres_url, "-c", f"DROP DATABASE IF EXISTS {db}"], capture_output=True))
    try:
        for b in brokers:
            b.start()
    except Exception:
        cluster.stop()
        raise
    return cluster


def shale(cluster, *args, input=None, timeout=60):
    """Runs the shale CLI against the cluster's gRPC listener."""
    out = subprocess.run([CLI_BIN, "--bootstrap", cluster.grpc, *args], input=input,
                         capture_output=True, timeout=timeout)
    if out.returncode != 0:
        raise AssertionError(f"shale {' '.join(args)} failed: {out.stderr.decode()}")
    return out.stdout.decode()


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (seed 0x9747b28c), as its default partitioner uses it."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = data[length - rest:]
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a key."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class Results:
    def __init__(self):
        self.rows = []

    def check(self, client, name, fn, *args):
        started = time.time()
        try:
            fn(*args)
            status, detail = "PASS", ""
        except Exception as e:  # noqa: BLE001 - every failure is reported
            status = "FAIL"
            detail = "".join(traceback.format_exception_only(type(e), e)).strip()
            traceback.print_exc()
        took = time.time() - started
        self.rows.append((client, name, status, took, detail))
        print(f"{status} {client}: {name} ({took:.1f} s) {detail}", flush=True)

    def summary(self):
        failed = [r for r in self.rows if r[2] != "PASS"]
        print(f"\n{len(self.rows) - len(failed)} of {len(self.rows)} compatibility checks passed")
        for c, n, _, _, d in failed:
            print(f"  FAILED {c}: {n}: {d}")
        return 0 if not failed else 1


def workdir():
    d = tempfile.mkdtemp(prefix="shale-compat-")
    return d


def cleanup(d):
    shutil.rmtree(d, ignore_errors=True)


def eventually(fn, timeout=30, every=0.3, what="condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            got = fn()
            if got:
                return got
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        time.sleep(every)
    raise AssertionError(f"{what} not reached in {timeout} s (last error: {last})")


def run(cmd, input=None, timeout=60, check=True):
    out = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.decode()[-2000:]}")
    return out
