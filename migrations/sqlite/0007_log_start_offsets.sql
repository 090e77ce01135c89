-- Records below a partition's log start offset were deleted (Kafka's DeleteRecords):
-- kept here so that every replica, and every later leader, starts the log there.
-- It only moves up; partition-state compare-and-sets leave it alone.
ALTER TABLE partition_state ADD COLUMN log_start_offset BIGINT NOT NULL DEFAULT 0;
