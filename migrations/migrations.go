// Package migrations holds fabricd's PostgreSQL schema as numbered
// golang-migrate files (NNNN_name.up.sql with a matching .down.sql), embedded
// in FS.
//
// The files are append-only: once a migration has landed it is never edited;
// change the schema by adding the next number. Apply them with
// store.DB.Migrate, which runs golang-migrate's pgx/v5 driver over an iofs
// source built from FS; the store package derives the head version from
// these files, and store/testdata/schema.golden records the schema they
// produce (go test ./store -run Schema -update rewrites it).
package migrations

import "embed"

// FS holds the migration files, at the root of the file system.
//
//go:embed *.sql
var FS embed.FS
