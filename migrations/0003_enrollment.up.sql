-- 0003_enrollment: bootstrap tokens (one-time, expiring, for one endpoint;
-- only their SHA-256 is kept) and the certificates issued to endpoints, by
-- serial, so a revocation outlives re-enrollment and restarts.
CREATE TABLE enrollment_tokens (
    id         bigserial   PRIMARY KEY,
    endpoint   text        NOT NULL CHECK (endpoint <> ''),
    hash       bytea       NOT NULL UNIQUE CHECK (octet_length(hash) = 32),
    prefix     text        NOT NULL CHECK (prefix <> ''),
    created_by text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at    timestamptz
);

CREATE INDEX enrollment_tokens_endpoint_idx ON enrollment_tokens (endpoint);

CREATE TABLE endpoint_credentials (
    serial     text        PRIMARY KEY CHECK (serial ~ '^[0-9a-f]+$'),
    endpoint   text        NOT NULL CHECK (endpoint <> ''),
    via        text        NOT NULL CHECK (via IN ('enroll', 'renew')),
    issued_at  timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    revoked_at timestamptz
);

CREATE INDEX endpoint_credentials_endpoint_idx ON endpoint_credentials (endpoint);
