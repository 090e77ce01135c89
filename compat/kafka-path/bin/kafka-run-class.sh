#!/bin/sh
# A KAFKA_PATH for librdkafka's test 0098 (see compat/txn_producer_cli.py): runs the
# test's Java transactional producer as its Python stand-in. Nothing else is here.
here=$(cd "$(dirname "$0")/../.." && pwd)
case "$1" in
  TransactionProducerCli)
    shift
    exec "${SHALE_COMPAT_PYTHON:-python3}" "$here/txn_producer_cli.py" "$@" ;;
  *)
    echo "kafka-run-class.sh: only TransactionProducerCli is available here, not $1" >&2
    exit 1 ;;
esac
