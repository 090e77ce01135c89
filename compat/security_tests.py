"""Security with real Kafka clients: one broker with three Kafka listeners,
SASL_SSL (SCRAM), SASL_PLAINTEXT (PLAIN and SCRAM-SHA-256, sessions of 1.5 s) and SSL
with client certificates (mTLS), and ACLs on (alice is a super user; so is the
anonymous gRPC caller, the CLI, as gRPC does not authenticate yet). Certificates are
made with the openssl command.

- kcat and confluent-kafka with SASL_SSL + SCRAM-SHA-512;
- kafka-python with SASL_PLAINTEXT + PLAIN;
- kafkajs with SCRAM-SHA-256, re-authenticating on its connections;
- kcat with mTLS, allowed by an ACL on its certificate's subject;
- confluent-kafka's admin client managing ACLs, and a consumer that reads only what
  they allow;
and for each: a wrong password, no credentials, or an untrusted certificate is
refused, and nothing is written."""

import os
import subprocess

import harness
from harness import free_port, run, shale

PASSWORD = "s3cret-Pa55"


def openssl(*args, cwd=None):
    run(["openssl", *args], timeout=60)


def make_certs(d):
    """A CA, the broker's certificate (localhost, 127.0.0.1), a client certificate it
    signed, and one from another CA."""
    def ca(name):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                "-subj", f"/CN={name}", "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.pem",
                cwd=d)

    def leaf(name, ca_name, cn, server):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/O=Shale Compat/CN={cn}",
                "-keyout", f"{d}/{name}.key", "-out", f"{d}/{name}.csr", cwd=d)
        ext = f"{d}/{name}.ext"
        with open(ext, "w") as f:
            f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n" if server
                    else "extendedKeyUsage=clientAuth\n")
        openssl("x509", "-req", "-in", f"{d}/{name}.csr", "-CA", f"{d}/{ca_name}.pem",
                "-CAkey", f"{d}/{ca_name}.key", "-CAcreateserial", "-days", "2",
                "-extfile", ext, "-out", f"{d}/{name}.pem", cwd=d)
    ca("ca")
    ca("rogue-ca")
    leaf("server", "ca", "localhost", True)
    leaf("client", "ca", "compat-client", False)
    leaf("rogue", "rogue-ca", "rogue-client", False)


class Secured:
    """The broker and how to reach each of its listeners."""

    def __init__(self, workdir):
        self.certs = os.path.join(workdir, "certs")
        os.makedirs(self.certs, exist_ok=True)
        make_certs(self.certs)
        c = self.certs
        self.plain_port, self.mtls_port = free_port(), free_port()
        listeners = f"""
[listeners.kafka]
security_protocol = "SASL_SSL"
tls_cert = "{c}/server.pem"
tls_key = "{c}/server.key"

[listeners.sasl_plain]
protocol = "kafka"
listen = "127.0.0.1:{self.plain_port}"
security_protocol = "SASL_PLAINTEXT"
sasl_mechanisms = ["PLAIN", "SCRAM-SHA-256"]
connections_max_reauth_ms = 1500

[listeners.mtls]
protocol = "kafka"
listen = "127.0.0.1:{self.mtls_port}"
security_protocol = "SSL"
tls_cert = "{c}/server.pem"
tls_key = "{c}/server.key"
tls_client_ca = "{c}/ca.pem"

[authorization]
enable = true
super_users = ["User:alice", "User:ANONYMOUS"]
"""
        b = harness.Broker(os.path.join(workdir, "secured"), listeners_toml=listeners)
        b.start()
        self.cluster = harness.Cluster([b])
        for user in ["alice", "reader"]:
            shale(self.cluster, "user", "create", user, "--password-file", "-",
                  input=PASSWORD.encode())

    @property
    def sasl_ssl(self):
        return self.cluster.brokers[0].kafka

    @property
    def sasl_plain(self):
        return f"127.0.0.1:{self.plain_port}"

    @property
    def mtls(self):
        return f"127.0.0.1:{self.mtls_port}"

    def end_offset(self, topic):
        out = shale(self.cluster, "offsets", topic)
        return sum(int(line.rsplit(":", 1)[1]) for line in out.split())

    def stop(self):
        self.cluster.stop()


def kcat_scram(s, password):
    return ["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
            "-X", "sasl.username=alice", "-X", f"sasl.password={password}",
            "-X", f"ssl.ca.location={s.certs}/ca.pem"]


def kcat_sasl_ssl(s):
    topic = "sec-kcat"
    shale(s.cluster, "topic", "create", topic)
    lines = "".join(f"m{i}\n" for i in range(100)).encode()
    run(["kcat", "-b", s.sasl_ssl, *kcat_scram(s, PASSWORD), "-P", "-t", topic,
         "-X", "acks=all"], input=lines)
    got = run(["kcat", "-b", s.sasl_ssl, *kcat_scram(s, PASSWORD), "-C", "-t", topic,
               "-e", "-q", "-f", "%s\n"]).stdout
    assert got == lines, f"{len(got.splitlines())} of 100 lines back"
    # A wrong password: kcat fails, and nothing more is written.
    bad = run(["kcat", "-b", s.sasl_ssl, *kcat_scram(s, "wrong"), "-P", "-t", topic,
               "-X", "message.timeout.ms=5000"], input=b"intruder\n", timeout=60, check=False)
    err = bad.stderr.decode()
    assert bad.returncode != 0, "kcat with a wrong password succeeded"
    assert "Authentication failed" in err or "SASL" in err, err[-1000:]
    # No credentials (TLS only) on the SASL listener.
    bare = run(["kcat", "-b", s.sasl_ssl, "-X", "security.protocol=SSL",
                "-X", f"ssl.ca.location={s.certs}/ca.pem", "-P", "-t", topic,
                "-X", "message.timeout.ms=5000"], input=b"anonymous\n", timeout=60, check=False)
    assert bare.returncode != 0, "kcat without credentials succeeded"
    assert s.end_offset(topic) == 100


def confluent_sasl_ssl(s):
    from confluent_kafka import Consumer, KafkaException, Producer
    topic = "sec-confluent"
    shale(s.cluster, "topic", "create", topic, "--partitions", "2")
    conf = {"bootstrap.servers": s.sasl_ssl, "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
            "sasl.password": PASSWORD, "ssl.ca.location": f"{s.certs}/ca.pem"}
    p = Producer({**conf, "enable.idempotence": True})
    for i in range(200):
        p.produce(topic, key=f"k{i}", value=f"v{i}")
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": "sec-g", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = set()
    deadline = harness.time.time() + 60
    while len(got) < 200 and harness.time.time() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            got.add(m.value().decode())
    c.close()
    assert len(got) == 200, f"{len(got)} of 200"
    errors, delivered = [], []
    bad = Producer({**conf, "sasl.password": "wrong", "message.timeout.ms": 5000,
                    "error_cb": errors.append})
    bad.produce(topic, value=b"intruder", on_delivery=lambda err, _m: delivered.append(err))
    bad.flush(15)
    assert delivered and delivered[0] is not None, f"delivered with a wrong password: {delivered}"
    assert any("Authentication failed" in e.str() or "SASL" in e.str() for e in errors), errors
    try:
        bad.list_topics(timeout=3)
        raise AssertionError("metadata with a wrong password")
    except KafkaException:
        pass
    assert s.end_offset(topic) == 200


def kafka_python_plain(s):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError
    topic = "sec-kafka-python"
    shale(s.cluster, "topic", "create", topic)
    conf = {"bootstrap_servers": s.sasl_plain, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice"}
    p = KafkaProducer(**conf, sasl_plain_password=PASSWORD, acks="all")
    for i in range(50):
        p.send(topic, f"p{i}".encode())
    p.flush(30)
    p.close()
    c = KafkaConsumer(topic, **conf, sasl_plain_password=PASSWORD,
                      auto_offset_reset="earliest", consumer_timeout_ms=5000)
    got = [m.value.decode() for m in c]
    c.close()
    assert got == [f"p{i}" for i in range(50)], got[:5]
    try:
        bad = KafkaProducer(**conf, sasl_plain_password="wrong", max_block_ms=5000)
        bad.send(topic, b"intruder").get(timeout=10)
        raise AssertionError("kafka-python with a wrong password wrote a record")
    except KafkaError as e:
        text = f"{type(e).__name__} {e}"
        assert "Authentication" in text or "NoBrokersAvailable" in text or "Timeout" in text, text
    assert s.end_offset(topic) == 50


def kcat_mtls(s):
    topic = "sec-mtls"
    shale(s.cluster, "topic", "create", topic)
    c = s.certs
    # The client's principal is its certificate's subject, as Kafka writes it.
    for op in ["READ", "WRITE"]:
        shale(s.cluster, "acl", "add", "--topic", topic, "--operation", op,
              "--principal", "User:CN=compat-client,O=Shale Compat")

    def tls(cert):
        args = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={c}/ca.pem"]
        if cert:
            args += ["-X", f"ssl.certificate.location={c}/{cert}.pem",
                     "-X", f"ssl.key.location={c}/{cert}.key"]
        return args
    run(["kcat", "-b", s.mtls, *tls("client"), "-P", "-t", topic], input=b"a\nb\n")
    got = run(["kcat", "-b", s.mtls, *tls("client"), "-C", "-t", topic, "-e", "-q",
               "-f", "%s\n"]).stdout
    assert got == b"a\nb\n", got
    for cert in [None, "rogue"]:
        out = run(["kcat", "-b", s.mtls, *tls(cert), "-P", "-t", topic,
                   "-X", "message.timeout.ms=5000"], input=b"intruder\n", timeout=60, check=False)
        assert out.returncode != 0, f"kcat with certificate {cert} was let in"
    assert s.end_offset(topic) == 2
    log = open(os.path.join(s.cluster.brokers[0].dir, "broker.log")).read()
    assert "TLS handshake failed" in log


def kafkajs(s, node_path, script, test, password=PASSWORD, mechanism="scram-sha-256"):
    env = {**os.environ, "NODE_PATH": node_path, "SHALE_SASL": f"{mechanism}:alice:{password}"}
    out = subprocess.run(["node", script, s.sasl_plain, test], capture_output=True, text=True,
                         timeout=300, env=env)
    if out.returncode != 0:
        raise AssertionError(out.stderr[-3000:] or out.stdout[-3000:])


def confluent_acls(s):
    """The admin client creates, lists and deletes ACLs; a consumer with READ on the
    prefix `logs.` and on its group reads logs.app, is refused billing, and does not
    see it."""
    from confluent_kafka import Consumer, KafkaError, Producer
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                       AclPermissionType, AdminClient, ResourcePatternType,
                                       ResourceType)
    tls = {"bootstrap.servers": s.sasl_ssl, "security.protocol": "SASL_SSL",
           "sasl.mechanisms": "SCRAM-SHA-512", "ssl.ca.location": f"{s.certs}/ca.pem"}
    admin_conf = {**tls, "sasl.username": "alice", "sasl.password": PASSWORD}
    reader_conf = {**tls, "sasl.username": "reader", "sasl.password": PASSWORD}
    for t in ["logs.app", "billing"]:
        shale(s.cluster, "topic", "create", t)
    p = Producer(admin_conf)
    for t in ["logs.app", "billing"]:
        p.produce(t, value=f"{t}-record".encode())
    assert p.flush(30) == 0
    admin = AdminClient(admin_conf)
    bindings = [
        AclBinding(ResourceType.TOPIC, "logs.", ResourcePatternType.PREFIXED, "User:reader",
                   "*", AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, "reader-g", ResourcePatternType.LITERAL, "User:reader",
                   "*", AclOperation.READ, AclPermissionType.ALLOW),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(30)
    listed = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:reader", None,
        AclOperation.ANY, AclPermissionType.ANY)).result(30)
    assert len(listed) == 2, listed

    c = Consumer({**reader_conf, "group.id": "reader-g", "auto.offset.reset": "earliest"})
    c.subscribe(["logs.app"])
    got = None
    deadline = harness.time.time() + 60
    while got is None and harness.time.time() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            got = m.value()
    assert got == b"logs.app-record", got
    c.commit(asynchronous=False)
    topics = c.list_topics(timeout=10).topics
    assert "billing" not in topics and "logs.app" in topics, sorted(topics)
    c.close()
    c = Consumer({**reader_conf, "group.id": "reader-g", "auto.offset.reset": "earliest"})
    c.subscribe(["billing"])
    refused = None
    deadline = harness.time.time() + 30
    while refused is None and harness.time.time() < deadline:
        m = c.poll(1)
        if m is not None and m.error():
            refused = m.error()
        elif m is not None:
            raise AssertionError("reader read billing")
    c.close()
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused

    deleted = admin.delete_acls([AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:reader", None,
        AclOperation.ANY, AclPermissionType.ANY)])
    for f in deleted.values():
        assert len(f.result(30)) == 2
