-- The leader epochs of a remote segment's batches (see the PostgreSQL migration).
ALTER TABLE remote_segments ADD COLUMN epochs TEXT NOT NULL DEFAULT '';
-- A row cut so keeps the end offset its objects were written with (their keys name it).
ALTER TABLE remote_segments ADD COLUMN object_end_offset BIGINT;
