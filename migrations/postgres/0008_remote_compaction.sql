-- Remote compaction adds a state: COPY_FINISHED -> COMPACTED -> DELETE_STARTED.
-- A COMPACTED segment was replaced by its compacted rewrite in one transaction; it is
-- no longer readable, and its objects are deleted after a grace period.
ALTER TABLE remote_segments DROP CONSTRAINT remote_segments_state_check;
ALTER TABLE remote_segments ADD CONSTRAINT remote_segments_state_check CHECK (state IN
    ('COPY_STARTED', 'COPY_FINISHED', 'COMPACTED', 'DELETE_STARTED', 'DELETE_FINISHED'));
