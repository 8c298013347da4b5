package store

// Exported for tests in package store_test.
const (
	MigrateLockClass = migrateLockClass
	MigrateLockObj   = migrateLockObj
)
