-- Cluster state (see the PostgreSQL migration); with SQLite the cluster is one broker.
CREATE TABLE brokers (
    broker_id        INTEGER PRIMARY KEY CHECK (broker_id >= 0),
    address          TEXT NOT NULL,
    lease_expires_ms INTEGER NOT NULL,
    registered_at_ms INTEGER NOT NULL
);

CREATE TABLE controller (
    id               INTEGER PRIMARY KEY CHECK (id = 1),
    broker_id        INTEGER NOT NULL,
    epoch            INTEGER NOT NULL,
    lease_expires_ms INTEGER NOT NULL
);

CREATE TABLE partition_state (
    topic_id     BLOB NOT NULL REFERENCES topics (id) ON DELETE CASCADE,
    partition_id INTEGER NOT NULL,
    replicas     TEXT NOT NULL,
    leader       INTEGER NOT NULL,
    leader_epoch INTEGER NOT NULL,
    isr          TEXT NOT NULL,
    version      INTEGER NOT NULL,
    PRIMARY KEY (topic_id, partition_id)
);
