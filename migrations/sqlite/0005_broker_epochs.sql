-- Broker incarnations: every (re)start registers a new broker epoch, and only the
-- newest incarnation may renew the lease. A restarted broker leaves the ISRs before its
-- lease makes it eligible again, so ISR membership is per incarnation.
ALTER TABLE brokers ADD COLUMN broker_epoch INTEGER NOT NULL DEFAULT 0;

-- Whether a remote segment's copy ever finished (1) or was cleaned up unfinished (0):
-- the highest offset ever copied survives the deletion of every remote segment.
ALTER TABLE remote_segments ADD COLUMN copied INTEGER NOT NULL DEFAULT 0;
UPDATE remote_segments SET copied = 1 WHERE state = 'COPY_FINISHED';

-- Eligible leader replicas (see the PostgreSQL migration).
ALTER TABLE partition_state ADD COLUMN elr TEXT NOT NULL DEFAULT '';

-- The cluster's identity (see the PostgreSQL migration).
CREATE TABLE cluster_meta (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    cluster_id BLOB NOT NULL
);
