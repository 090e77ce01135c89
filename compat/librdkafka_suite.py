#!/usr/bin/env python3
"""librdkafka's own test suite (tests/ of Debian's librdkafka source package) against
a three-broker Shale cluster, configured as the suite's default scenario expects
(auto-created topics with 4 partitions and 3 replicas).

Usage:
  librdkafka_suite.py --tests DIR --postgres URL --list FILE      run the listed tests
  librdkafka_suite.py --tests DIR --postgres URL --discover OUT   try every test
                                                                  that needs a broker

DIR is the built tests/ directory (test-runner). The list has one test number per
line (`# comments` allowed); every listed test must pass, at its first try or its
second (the summary names those that needed two). Each test runs alone
(`TESTS=NNNN test-runner -L -K -p1`: full mode, no local-only tests, none marked
as known issues), with a time limit, against the libraries built beside it.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402

# The suite's default scenario (tests/scenarios/default.json), and the broker
# version the tests are told to expect (it gates which tests and features they use).
CLUSTER_TOML = "num_partitions = 4\ndefault_replication_factor = 3\n"
KAFKA_VERSION = "3.0.0"
TIME_LIMIT_S = 300


def candidates(tests_dir):
    """Every test of the suite that needs a broker: (number, name), in order."""
    src = open(os.path.join(tests_dir, "test.c")).read()
    start = src.index("struct test tests[]")
    body = src[start:src.index("};", start)]
    out = []
    for m in re.finditer(r"_TEST\((\w+),\s*([^,)]*)", body):
        name, flags = m.group(1), m.group(2)
        if "LOCAL" in flags or "MANUAL" in flags or name.startswith("0000"):
            continue
        out.append((name[:4], name))
    return out


def print_tail(log):
    """The end of a test's log, where it says why it failed (logs do not outlive a CI
    machine)."""
    for line in open(log, errors="replace").read().splitlines()[-40:]:
        print(f"  | {line}", flush=True)


# Test 0098 runs Apache Kafka's Java transactional producer (tests/java/
# TransactionProducerCli) through $KAFKA_PATH/bin/kafka-run-class.sh; the Java client is
# not installable here, so a KAFKA_PATH whose only class is a stand-in on confluent-kafka
# (compat/txn_producer_cli.py) is given to that test alone (with KAFKA_PATH set, others
# would create topics with kafka-topics.sh). Its tests/java/*.class are left empty and
# fresh, so the test's `make java` compiles nothing.
JAVA_STAND_IN = {"0098"}
KAFKA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kafka-path")


def stand_in_classes(tests_dir):
    java = os.path.join(tests_dir, "java")
    for src in os.listdir(java):
        if src.endswith(".java"):
            open(os.path.join(java, src[:-5] + ".class"), "a").close()
            os.utime(os.path.join(java, src[:-5] + ".class"))


def run_one(tests_dir, conf, num, log_dir, suffix=""):
    # The libraries built beside the tests, not whichever the system has installed.
    tests_dir = os.path.abspath(tests_dir)
    built = [os.path.join(tests_dir, "..", d) for d in ("src", "src-cpp")]
    library_path = os.pathsep.join(built + [os.environ.get("LD_LIBRARY_PATH", "")])
    env = {**os.environ, "TESTS": num, "TEST_KAFKA_VERSION": KAFKA_VERSION,
           "RDKAFKA_TEST_CONF": conf, "LD_LIBRARY_PATH": library_path}
    if num in JAVA_STAND_IN:
        stand_in_classes(tests_dir)
        env["KAFKA_PATH"] = KAFKA_PATH
    started = time.time()
    log = os.path.join(log_dir, f"{num}{suffix}.log")
    with open(log, "w") as f:
        try:
            rc = subprocess.run(["./test-runner", "-L", "-K", "-p1"], cwd=tests_dir,
                                env=env, stdout=f, stderr=subprocess.STDOUT,
                                timeout=TIME_LIMIT_S).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    took = time.time() - started
    text = open(log, errors="replace").read()
    passed = rc == 0 and "ALL TESTS PASSED" in text
    if num in JAVA_STAND_IN and re.search(r"Test \w+ SKIPPED", text):
        # Skipped whole (built without RapidJSON, or no Java stand-in): not a pass.
        passed, rc = False, "skipped"
    return passed, rc, took, log


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tests", required=True, help="built tests/ directory of librdkafka")
    ap.add_argument("--postgres", required=True)
    ap.add_argument("--list", help="file of test numbers that must pass")
    ap.add_argument("--discover", help="run every broker test, write the results here")
    args = ap.parse_args()
    if bool(args.list) == bool(args.discover):
        ap.error("give --list or --discover")
    if args.list:
        nums = [line.split("#")[0].strip() for line in open(args.list)]
        nums = [n for n in nums if n]
    else:
        nums = sorted({num for num, _ in candidates(args.tests)})

    work = harness.workdir()
    cluster = harness.cluster_of_three(work, args.postgres, CLUSTER_TOML)
    logs = tempfile.mkdtemp(prefix="librdkafka-suite-", dir=work)
    conf = os.path.join(work, "test.conf")
    with open(conf, "w") as f:
        f.write(f"metadata.broker.list={cluster.bootstrap}\n")
        # Fresh topic names per run: a test never meets an earlier run's topic.
        f.write("test.topic.random=true\n")
        # A debug broker on two shared cores is slower than the clusters the suite
        # was tuned on.
        f.write("test.timeout.multiplier=3\n")
    results = []
    flaky = []
    try:
        for num in nums:
            passed, rc, took, log = run_one(args.tests, conf, num, logs)
            print(f"{'PASS' if passed else 'FAIL'} librdkafka test {num} ({took:.1f} s)"
                  + ("" if passed else f" rc={rc}, log {log}"), flush=True)
            if not passed:
                print_tail(log)
            if not passed and args.list:
                # The suite's tests are timing-sensitive on two shared cores: one
                # more try, and a test that passes then is named flaky in the summary.
                passed, rc, took, log = run_one(args.tests, conf, num, logs, "-again")
                print(f"{'PASS' if passed else 'FAIL'} librdkafka test {num} on its "
                      f"second try ({took:.1f} s)"
                      + ("" if passed else f" rc={rc}, log {log}"), flush=True)
                if passed:
                    flaky.append(num)
                else:
                    print_tail(log)
            results.append((num, passed, rc, took, log))
    finally:
        cluster.stop()
    failed = [r for r in results if not r[1]]
    if args.discover:
        with open(args.discover, "w") as f:
            for num, passed, rc, took, log in results:
                f.write(f"{num} {'pass' if passed else 'fail'} rc={rc} {took:.1f}s {log}\n")
        print(f"{len(results) - len(failed)} of {len(results)} tests passed; "
              f"results in {args.discover}")
        return 0
    print(f"\n{len(results) - len(failed)} of {len(results)} listed librdkafka tests passed"
          + (f"; passed on a second try: {', '.join(flaky)}" if flaky else ""))
    if failed:
        print(f"broker and test logs kept in {work}")
        return 1
    harness.cleanup(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
