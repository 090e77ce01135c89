-- Which incarnation holds the broker's lease. Registering a new incarnation keeps the
-- lease's expiry (an older process that still runs trusts it, so leadership cannot
-- move from it before then), but the lease makes the new incarnation live, and so
-- electable, only once that incarnation renews it itself, after it has left the ISRs
-- its restart may have made it unfit for.
ALTER TABLE brokers ADD COLUMN lease_epoch BIGINT NOT NULL DEFAULT 0;
UPDATE brokers SET lease_epoch = broker_epoch;
