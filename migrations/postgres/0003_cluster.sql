-- Cluster state: broker leases, the controller lease, and per-partition replica sets
-- with leader, leader epoch and ISR. Every change of a partition is a compare-and-set
-- on its version.
CREATE TABLE brokers (
    broker_id        INTEGER PRIMARY KEY CHECK (broker_id >= 0),
    address          TEXT NOT NULL,
    lease_expires_ms BIGINT NOT NULL,
    registered_at_ms BIGINT NOT NULL
);

CREATE TABLE controller (
    id               INTEGER PRIMARY KEY CHECK (id = 1),
    broker_id        INTEGER NOT NULL,
    epoch            BIGINT NOT NULL,
    lease_expires_ms BIGINT NOT NULL
);

CREATE TABLE partition_state (
    topic_id     UUID NOT NULL REFERENCES topics (id) ON DELETE CASCADE,
    partition_id INTEGER NOT NULL,
    replicas     TEXT NOT NULL,
    leader       INTEGER NOT NULL,
    leader_epoch INTEGER NOT NULL,
    isr          TEXT NOT NULL,
    version      BIGINT NOT NULL,
    PRIMARY KEY (topic_id, partition_id)
);

-- Brokers LISTEN on this channel and re-read the metadata when anything changes.
CREATE FUNCTION shale_notify_change() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('shale_changes', TG_TABLE_NAME);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER partition_state_changed AFTER INSERT OR UPDATE OR DELETE ON partition_state
    FOR EACH STATEMENT EXECUTE FUNCTION shale_notify_change();
CREATE TRIGGER topics_changed AFTER INSERT OR UPDATE OR DELETE ON topics
    FOR EACH STATEMENT EXECUTE FUNCTION shale_notify_change();
CREATE TRIGGER topic_configs_changed AFTER INSERT OR UPDATE OR DELETE ON topic_configs
    FOR EACH STATEMENT EXECUTE FUNCTION shale_notify_change();
