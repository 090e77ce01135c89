-- Which incarnation holds the broker's lease (see the PostgreSQL migration).
ALTER TABLE brokers ADD COLUMN lease_epoch INTEGER NOT NULL DEFAULT 0;
UPDATE brokers SET lease_epoch = broker_epoch;
