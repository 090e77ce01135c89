-- Remote compaction adds a state: COPY_FINISHED -> COMPACTED -> DELETE_STARTED.
-- A COMPACTED segment was replaced by its compacted rewrite in one transaction; it is
-- no longer readable, and its objects are deleted after a grace period.
-- SQLite cannot alter a CHECK constraint: the table is rebuilt.
CREATE TABLE remote_segments_v8 (
    segment_id    BLOB PRIMARY KEY,
    topic_id      BLOB NOT NULL,
    partition_id  INTEGER NOT NULL,
    base_offset   INTEGER NOT NULL,
    end_offset    INTEGER NOT NULL CHECK (end_offset >= base_offset),
    max_timestamp INTEGER NOT NULL,
    leader_epoch  INTEGER NOT NULL,
    size_bytes    INTEGER NOT NULL CHECK (size_bytes >= 0),
    state         TEXT NOT NULL CHECK (state IN
        ('COPY_STARTED', 'COPY_FINISHED', 'COMPACTED', 'DELETE_STARTED', 'DELETE_FINISHED')),
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    copied        INTEGER NOT NULL DEFAULT 0
);
INSERT INTO remote_segments_v8 (segment_id, topic_id, partition_id, base_offset, end_offset,
        max_timestamp, leader_epoch, size_bytes, state, created_at_ms, updated_at_ms, copied)
    SELECT segment_id, topic_id, partition_id, base_offset, end_offset,
        max_timestamp, leader_epoch, size_bytes, state, created_at_ms, updated_at_ms, copied
    FROM remote_segments;
DROP TABLE remote_segments;
ALTER TABLE remote_segments_v8 RENAME TO remote_segments;
CREATE INDEX remote_segments_by_partition ON remote_segments (topic_id, partition_id, base_offset);
CREATE UNIQUE INDEX remote_segments_one_finished
    ON remote_segments (topic_id, partition_id, base_offset) WHERE state = 'COPY_FINISHED';
