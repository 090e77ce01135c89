-- Topics and their config overrides (Kafka config names, values as given).
CREATE TABLE topics (
    id                 BLOB PRIMARY KEY,
    name               TEXT NOT NULL UNIQUE,
    partitions         INTEGER NOT NULL CHECK (partitions > 0),
    replication_factor INTEGER NOT NULL CHECK (replication_factor > 0),
    created_at_ms      INTEGER NOT NULL
);

CREATE TABLE topic_configs (
    topic_id BLOB NOT NULL REFERENCES topics (id) ON DELETE CASCADE,
    key      TEXT NOT NULL,
    value    TEXT NOT NULL,
    PRIMARY KEY (topic_id, key)
);
