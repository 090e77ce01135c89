-- The leader epochs of a remote segment's batches and where each starts in it
-- ("epoch:start_offset", comma-separated; empty for segments copied before this column).
-- A new leader compares them with its own epochs: remote segments written under an
-- epoch its log does not share (after an unclean election) leave the remote log, and
-- rows cut at the point of divergence end there.
ALTER TABLE remote_segments ADD COLUMN epochs TEXT NOT NULL DEFAULT '';
-- A row cut so keeps the end offset its objects were written with (their keys name it).
ALTER TABLE remote_segments ADD COLUMN object_end_offset BIGINT;
