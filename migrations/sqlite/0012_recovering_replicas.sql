-- Replicas that left the ISR or ELR at an unclean restart (see the PostgreSQL migration).
ALTER TABLE partition_state ADD COLUMN recovering TEXT NOT NULL DEFAULT '';
