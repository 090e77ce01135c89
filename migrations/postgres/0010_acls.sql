-- Access control lists, as Kafka's: who (principal, host) may or may not (permission)
-- do what (operation) on which resources (type, name, literal or prefix).
CREATE TABLE acls (
    resource_type TEXT NOT NULL CHECK (resource_type IN ('TOPIC', 'GROUP', 'CLUSTER')),
    resource_name TEXT NOT NULL,
    pattern_type  TEXT NOT NULL CHECK (pattern_type IN ('LITERAL', 'PREFIXED')),
    principal     TEXT NOT NULL,
    host          TEXT NOT NULL,
    operation     TEXT NOT NULL,
    permission    TEXT NOT NULL CHECK (permission IN ('ALLOW', 'DENY')),
    PRIMARY KEY (resource_type, resource_name, pattern_type, principal, host, operation, permission)
);

-- Every broker re-reads the ACLs when they change.
CREATE TRIGGER acls_changed AFTER INSERT OR UPDATE OR DELETE ON acls
    FOR EACH STATEMENT EXECUTE FUNCTION shale_notify_change();
