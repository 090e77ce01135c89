-- The rack a broker runs in (its `[broker] rack`), set at each registration: replicas
-- are spread over racks, and consumers that name their rack read from a replica there.
ALTER TABLE brokers ADD COLUMN rack TEXT;
