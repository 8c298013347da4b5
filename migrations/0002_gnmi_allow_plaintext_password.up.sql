-- 0002_gnmi_allow_plaintext_password: a switch entry says explicitly that
-- its gNMI password may travel over a connection without TLS
-- (gnmi.allow_plaintext_password in the topology file); without it fabricd
-- refuses a password over plaintext.
ALTER TABLE switches
    ADD COLUMN gnmi_allow_plaintext_password boolean NOT NULL DEFAULT false;
