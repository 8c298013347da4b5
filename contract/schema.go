package contract

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// SchemaVersion is the version, MAJOR.MINOR, of the documents this code
// writes. A reader accepts every minor version of its major (a newer minor
// only adds fields, which it ignores) and refuses a newer major, whose
// meaning it cannot know. A document without one predates versions: 1.0.
const SchemaVersion = "1.1"

// SchemaMajor is SchemaVersion's major version.
const SchemaMajor = 1

// ErrSchema is wrapped by the errors of CheckSchema.
var ErrSchema = errors.New("contract: unsupported schema version")

// CheckSchema reports whether a document of schema version v can be read
// by this code.
func CheckSchema(v string) error {
	if v == "" {
		return nil
	}
	major, minor, ok := strings.Cut(v, ".")
	maj, err1 := strconv.ParseUint(major, 10, 32)
	_, err2 := strconv.ParseUint(minor, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("%w: %q is not MAJOR.MINOR", ErrSchema, v)
	}
	if maj > SchemaMajor {
		return fmt.Errorf("%w: document schema %s is newer than this agent's %s (upgrade the agent)", ErrSchema, v, SchemaVersion)
	}
	if maj < SchemaMajor {
		return fmt.Errorf("%w: document schema %s is older than this agent's %s", ErrSchema, v, SchemaVersion)
	}
	return nil
}
