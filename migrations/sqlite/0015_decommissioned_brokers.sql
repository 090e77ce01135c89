-- A broker being decommissioned (see the PostgreSQL migration).
ALTER TABLE brokers ADD COLUMN decommissioned BOOLEAN NOT NULL DEFAULT FALSE;
