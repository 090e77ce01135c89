-- The aborted transactions of a remote segment (see the PostgreSQL migration).
ALTER TABLE remote_segments ADD COLUMN aborted TEXT NOT NULL DEFAULT '';
