-- The transaction coordinator's record of each transactional id. partitions and
-- groups are JSON arrays ([[topic_id, partition], …] and [group, …]); version is the
-- compare-and-set version every write checks.
CREATE TABLE transactions (
    transactional_id TEXT PRIMARY KEY,
    producer_id      INTEGER NOT NULL,
    producer_epoch   INTEGER NOT NULL,
    state            TEXT NOT NULL,
    timeout_ms       INTEGER NOT NULL,
    partitions       TEXT NOT NULL,
    groups           TEXT NOT NULL,
    start_ms         INTEGER NOT NULL,
    update_ms        INTEGER NOT NULL,
    marker_epoch     INTEGER NOT NULL,
    version          INTEGER NOT NULL
);

-- Offsets a transaction committed: the groups' offsets once it commits, dropped if it
-- aborts.
CREATE TABLE txn_offsets (
    transactional_id TEXT NOT NULL REFERENCES transactions (transactional_id) ON DELETE CASCADE,
    group_id         TEXT NOT NULL,
    topic_id         BLOB NOT NULL REFERENCES topics (id) ON DELETE CASCADE,
    partition_id     INTEGER NOT NULL,
    committed        INTEGER NOT NULL,
    metadata         TEXT NOT NULL,
    commit_ms        INTEGER NOT NULL,
    PRIMARY KEY (transactional_id, group_id, topic_id, partition_id)
);
CREATE INDEX txn_offsets_group ON txn_offsets (group_id);
