-- 0001_init: fabricd's initial schema.
--
-- Inventory (planes, switches and their interfaces, endpoints and their
-- per-plane ports, the links view), the accepted topology documents, the
-- append-only event history, operator intents (drains, rate classes), API
-- tokens, the audit log and the fabric generation counter.

-- Planes: independent networks; every endpoint has one port on each.
CREATE TABLE planes (
    name        text        PRIMARY KEY CHECK (name <> ''),
    description text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Switches, each in one plane, reached over gNMI. gnmi_password_env names an
-- environment variable of fabricd holding the password; secrets are never
-- stored here.
CREATE TABLE switches (
    name                 text        PRIMARY KEY CHECK (name <> ''),
    plane                text        NOT NULL REFERENCES planes (name),
    gnmi_address         text        NOT NULL CHECK (gnmi_address <> ''),
    gnmi_insecure        boolean     NOT NULL DEFAULT false,
    gnmi_tls_ca          text,
    gnmi_tls_cert        text,
    gnmi_tls_key         text,
    gnmi_tls_server_name text,
    gnmi_username        text,
    gnmi_password_env    text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    -- A client certificate needs its key and the key its certificate.
    CONSTRAINT switches_gnmi_tls_cert_key_check
        CHECK ((gnmi_tls_cert IS NULL) = (gnmi_tls_key IS NULL))
);

CREATE INDEX switches_plane_idx ON switches (plane);

CREATE TABLE switch_interfaces (
    switch    text   NOT NULL REFERENCES switches (name) ON DELETE CASCADE,
    name      text   NOT NULL CHECK (name <> ''),
    speed_bps bigint NOT NULL DEFAULT 0 CHECK (speed_bps >= 0),
    PRIMARY KEY (switch, name)
);

CREATE TABLE endpoints (
    name        text        PRIMARY KEY CHECK (name <> ''),
    description text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- One port per endpoint and plane, cabled to one switch interface.
CREATE TABLE endpoint_ports (
    endpoint  text NOT NULL REFERENCES endpoints (name) ON DELETE CASCADE,
    plane     text NOT NULL REFERENCES planes (name),
    address   inet NOT NULL UNIQUE,
    switch    text NOT NULL,
    interface text NOT NULL,
    PRIMARY KEY (endpoint, plane),
    FOREIGN KEY (switch, interface) REFERENCES switch_interfaces (switch, name),
    UNIQUE (switch, interface)
);

CREATE INDEX endpoint_ports_plane_idx ON endpoint_ports (plane);

-- A port must be cabled to a switch of its own plane. (An unknown switch is
-- left to the foreign key to report.)
CREATE FUNCTION endpoint_ports_check_plane() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    switch_plane text;
BEGIN
    SELECT s.plane INTO switch_plane FROM switches s WHERE s.name = NEW.switch;
    IF FOUND AND switch_plane <> NEW.plane THEN
        RAISE EXCEPTION 'endpoint port %/% is on plane % but switch % is on plane %',
            NEW.endpoint, NEW.plane, NEW.plane, NEW.switch, switch_plane
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER endpoint_ports_check_plane
    BEFORE INSERT OR UPDATE ON endpoint_ports
    FOR EACH ROW EXECUTE FUNCTION endpoint_ports_check_plane();

-- Links: the cable between a switch interface and an endpoint port, one row
-- per endpoint port, named switch:interface.
CREATE VIEW links AS
SELECT p.switch || ':' || p.interface AS name,
       p.plane,
       p.switch,
       p.interface,
       p.endpoint,
       p.address,
       i.speed_bps
FROM endpoint_ports p
JOIN switch_interfaces i ON i.switch = p.switch AND i.name = p.interface;

-- Accepted topology documents; the highest revision is the current one.
CREATE TABLE topology_revisions (
    revision   bigserial   PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now(),
    applied_by text        NOT NULL,
    sha256     text        NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    document   jsonb       NOT NULL
);

-- History: state transitions and other happenings, append-only.
CREATE TABLE events (
    id           bigserial   PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT now(),
    subject_kind text        NOT NULL CHECK (subject_kind <> ''),
    subject      text        NOT NULL,
    kind         text        NOT NULL CHECK (kind <> ''),
    from_state   text,
    to_state     text,
    reason       text        NOT NULL DEFAULT '',
    evidence     jsonb
);

CREATE INDEX events_at_idx ON events (at);
CREATE INDEX events_subject_at_idx ON events (subject_kind, subject, at);

CREATE FUNCTION events_reject_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER events_append_only
    BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_reject_change();

CREATE TRIGGER events_append_only_truncate
    BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_reject_change();

-- Operator drains. Targets are names, deliberately without foreign keys: a
-- drain may outlive (or precede) the topology object it names. A drain is
-- active while removed_at is null.
CREATE TABLE drains (
    id          bigserial   PRIMARY KEY,
    target_kind text        NOT NULL CHECK (target_kind IN ('plane', 'switch', 'link')),
    target      text        NOT NULL CHECK (target <> ''),
    reason      text        NOT NULL,
    created_by  text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    removed_at  timestamptz,
    removed_by  text,
    CONSTRAINT drains_removed_check
        CHECK ((removed_at IS NULL) = (removed_by IS NULL))
);

CREATE INDEX drains_active_idx ON drains (target_kind, target) WHERE removed_at IS NULL;
CREATE INDEX drains_created_at_idx ON drains (created_at);

CREATE TABLE rate_classes (
    name        text        PRIMARY KEY CHECK (name <> ''),
    egress_bps  bigint      NOT NULL CHECK (egress_bps >= 0),
    ingress_bps bigint      NOT NULL CHECK (ingress_bps >= 0),
    priority    int         NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE endpoint_rate_classes (
    endpoint text PRIMARY KEY REFERENCES endpoints (name) ON DELETE CASCADE,
    class    text NOT NULL REFERENCES rate_classes (name)
);

CREATE INDEX endpoint_rate_classes_class_idx ON endpoint_rate_classes (class);

-- API tokens: only a hash of the secret is kept; prefix is the short public
-- part shown in listings.
CREATE TABLE api_tokens (
    id           bigserial   PRIMARY KEY,
    name         text        NOT NULL UNIQUE CHECK (name <> ''),
    role         text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    hash         bytea       NOT NULL UNIQUE CHECK (octet_length(hash) >= 16),
    prefix       text        NOT NULL CHECK (prefix <> ''),
    created_by   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    revoked_at   timestamptz,
    last_used_at timestamptz
);

-- Audit log of operator actions through the API.
CREATE TABLE audit_log (
    id          bigserial   PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text        NOT NULL,
    role        text        NOT NULL,
    method      text        NOT NULL,
    path        text        NOT NULL,
    action      text        NOT NULL,
    target      text        NOT NULL DEFAULT '',
    status      int         NOT NULL CHECK (status BETWEEN 100 AND 599),
    result      text        NOT NULL,
    remote_addr text        NOT NULL DEFAULT '',
    detail      jsonb
);

CREATE INDEX audit_log_at_idx ON audit_log (at);

-- The fabric generation: a single row, bumped whenever computed state changes.
CREATE TABLE fabric_state (
    id         int    PRIMARY KEY CHECK (id = 1),
    generation bigint NOT NULL DEFAULT 0 CHECK (generation >= 0)
);

INSERT INTO fabric_state (id, generation) VALUES (1, 0);
