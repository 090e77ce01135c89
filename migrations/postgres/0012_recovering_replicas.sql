-- Replicas that left the ISR or ELR at an unclean restart, with the log they came back
-- with ("broker:last_epoch:log_end", comma-separated). When every member of the ISR and
-- the ELR has left so, the one with the most complete log is elected (its last epoch,
-- then its log end): replicas that restart uncleanly one after the other no longer
-- leave the partition offline for good, nor elect the one that lost its tail.
ALTER TABLE partition_state ADD COLUMN recovering TEXT NOT NULL DEFAULT '';
