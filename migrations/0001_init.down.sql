-- Reverts 0001_init: drops everything it created.
DROP TABLE IF EXISTS fabric_state;
DROP TABLE IF EXISTS audit_log;
DROP TABLE IF EXISTS api_tokens;
DROP TABLE IF EXISTS endpoint_rate_classes;
DROP TABLE IF EXISTS rate_classes;
DROP TABLE IF EXISTS drains;
DROP TABLE IF EXISTS events;
DROP FUNCTION IF EXISTS events_reject_change();
DROP TABLE IF EXISTS topology_revisions;
DROP VIEW IF EXISTS links;
DROP TABLE IF EXISTS endpoint_ports;
DROP FUNCTION IF EXISTS endpoint_ports_check_plane();
DROP TABLE IF EXISTS endpoints;
DROP TABLE IF EXISTS switch_interfaces;
DROP TABLE IF EXISTS switches;
DROP TABLE IF EXISTS planes;
