-- The aborted transactions whose abort markers a remote segment holds
-- ("producer_id:first_offset:last_offset:last_stable_offset", comma-separated; empty
-- for most segments and for those copied before this column). A read_committed read
-- of remote offsets returns them, so that clients drop the aborted records.
ALTER TABLE remote_segments ADD COLUMN aborted TEXT NOT NULL DEFAULT '';
