-- Each broker's address on every listener it has ("grpc=host:port,kafka=host:port"),
-- so Metadata and FindCoordinator answer a client with addresses of its own protocol.
-- `address` stays the inter-broker (replication) address.
ALTER TABLE brokers ADD COLUMN endpoints TEXT NOT NULL DEFAULT '';
