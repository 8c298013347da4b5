-- Reverts 0002_gnmi_allow_plaintext_password.
ALTER TABLE switches DROP COLUMN IF EXISTS gnmi_allow_plaintext_password;
