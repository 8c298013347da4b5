DROP TABLE endpoint_credentials;
DROP TABLE enrollment_tokens;
