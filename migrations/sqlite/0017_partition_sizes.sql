-- Each partition's local log size as its leader last measured it (see the PostgreSQL
-- migration).
CREATE TABLE partition_sizes (
    topic_id     BLOB NOT NULL,
    partition_id INTEGER NOT NULL,
    local_bytes  INTEGER NOT NULL CHECK (local_bytes >= 0),
    PRIMARY KEY (topic_id, partition_id),
    FOREIGN KEY (topic_id, partition_id)
        REFERENCES partition_state (topic_id, partition_id) ON DELETE CASCADE
);
