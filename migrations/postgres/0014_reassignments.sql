-- A partition reassignment in flight (Kafka's KIP-455): the replicas being added and
-- those being removed, comma-separated broker ids. While one runs, `replicas` holds the
-- target replicas followed by the original ones leaving; the controller finishes it once
-- every adding replica is in the ISR. Empty: none in flight.
ALTER TABLE partition_state ADD COLUMN adding_replicas TEXT NOT NULL DEFAULT '';
ALTER TABLE partition_state ADD COLUMN removing_replicas TEXT NOT NULL DEFAULT '';
