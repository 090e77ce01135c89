-- Producer ids and committed consumer-group offsets (see the PostgreSQL migration).
CREATE TABLE producer_ids (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    next_id INTEGER NOT NULL
);
INSERT INTO producer_ids (id, next_id) VALUES (1, 0);

CREATE TABLE group_offsets (
    group_id      TEXT NOT NULL,
    topic_id      BLOB NOT NULL REFERENCES topics (id) ON DELETE CASCADE,
    partition_id  INTEGER NOT NULL,
    committed     INTEGER NOT NULL,
    metadata      TEXT NOT NULL,
    commit_ms     INTEGER NOT NULL,
    PRIMARY KEY (group_id, topic_id, partition_id)
);
