-- SCRAM credentials (RFC 5802): salted and iterated, never the password. PLAIN logins
-- are checked against them too.
CREATE TABLE scram_credentials (
    user_name  TEXT NOT NULL,
    mechanism  TEXT NOT NULL CHECK (mechanism IN ('SCRAM-SHA-256', 'SCRAM-SHA-512')),
    salt       BLOB NOT NULL,
    stored_key BLOB NOT NULL,
    server_key BLOB NOT NULL,
    iterations INTEGER NOT NULL CHECK (iterations > 0),
    PRIMARY KEY (user_name, mechanism)
);
