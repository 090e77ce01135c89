-- Each partition's local log size as its leader last measured it. The controller's
-- balancer keeps the brokers' local disk use within a band with it. No trigger:
-- brokers do not re-read their metadata when a size changes.
CREATE TABLE partition_sizes (
    topic_id     UUID NOT NULL,
    partition_id INTEGER NOT NULL,
    local_bytes  BIGINT NOT NULL CHECK (local_bytes >= 0),
    PRIMARY KEY (topic_id, partition_id),
    FOREIGN KEY (topic_id, partition_id)
        REFERENCES partition_state (topic_id, partition_id) ON DELETE CASCADE
);
