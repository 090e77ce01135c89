-- Producer ids: one counter row; each broker takes a block of ids at a time, so ids
-- are unique across brokers and restarts.
CREATE TABLE producer_ids (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    next_id BIGINT NOT NULL
);
INSERT INTO producer_ids (id, next_id) VALUES (1, 0);

-- Committed consumer-group offsets. Deleting a topic drops its offsets.
CREATE TABLE group_offsets (
    group_id      TEXT NOT NULL,
    topic_id      UUID NOT NULL REFERENCES topics (id) ON DELETE CASCADE,
    partition_id  INTEGER NOT NULL,
    committed     BIGINT NOT NULL,
    metadata      TEXT NOT NULL,
    commit_ms     BIGINT NOT NULL,
    PRIMARY KEY (group_id, topic_id, partition_id)
);
