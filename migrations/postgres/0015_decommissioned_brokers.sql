-- A broker being decommissioned: the controller moves every replica off it, and new
-- partitions are not placed on it. Cleared by recommissioning.
ALTER TABLE brokers ADD COLUMN decommissioned BOOLEAN NOT NULL DEFAULT FALSE;
