-- SCRAM credentials (RFC 5802): salted and iterated, never the password. PLAIN logins
-- are checked against them too.
CREATE TABLE scram_credentials (
    user_name  TEXT NOT NULL,
    mechanism  TEXT NOT NULL CHECK (mechanism IN ('SCRAM-SHA-256', 'SCRAM-SHA-512')),
    salt       BYTEA NOT NULL,
    stored_key BYTEA NOT NULL,
    server_key BYTEA NOT NULL,
    iterations INTEGER NOT NULL CHECK (iterations > 0),
    PRIMARY KEY (user_name, mechanism)
);

-- Every broker re-reads the credentials when they change.
CREATE TRIGGER scram_credentials_changed AFTER INSERT OR UPDATE OR DELETE ON scram_credentials
    FOR EACH STATEMENT EXECUTE FUNCTION shale_notify_change();
