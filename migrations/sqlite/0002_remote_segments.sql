-- Segments copied to the object store, with their copy/delete state machine:
-- COPY_STARTED -> COPY_FINISHED -> DELETE_STARTED -> DELETE_FINISHED.
-- Only COPY_FINISHED rows are readable. Offsets are inclusive.
CREATE TABLE remote_segments (
    segment_id    BLOB PRIMARY KEY,
    topic_id      BLOB NOT NULL,
    partition_id  INTEGER NOT NULL,
    base_offset   INTEGER NOT NULL,
    end_offset    INTEGER NOT NULL CHECK (end_offset >= base_offset),
    max_timestamp INTEGER NOT NULL,
    leader_epoch  INTEGER NOT NULL,
    size_bytes    INTEGER NOT NULL CHECK (size_bytes >= 0),
    state         TEXT NOT NULL CHECK (state IN ('COPY_STARTED', 'COPY_FINISHED', 'DELETE_STARTED', 'DELETE_FINISHED')),
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
);

CREATE INDEX remote_segments_by_partition ON remote_segments (topic_id, partition_id, base_offset);

-- At most one readable copy of a segment start.
CREATE UNIQUE INDEX remote_segments_one_finished
    ON remote_segments (topic_id, partition_id, base_offset) WHERE state = 'COPY_FINISHED';
