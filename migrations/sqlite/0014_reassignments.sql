-- A partition reassignment in flight (see the PostgreSQL migration).
ALTER TABLE partition_state ADD COLUMN adding_replicas TEXT NOT NULL DEFAULT '';
ALTER TABLE partition_state ADD COLUMN removing_replicas TEXT NOT NULL DEFAULT '';
