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
// 2.0 moved the planes' states out of the endpoint documents into the
// generation document (docs/etcd-layout.md).
const SchemaVersion = "2.0"

// SchemaMajor is SchemaVersion's major version.
const SchemaMajor = 2

// oldestReportMajor is the oldest major of the documents whose shape 2.0
// kept: statuses and the configuration an agent applies and saves.
const oldestReportMajor = 1

// ErrSchema is wrapped by the errors of CheckSchema.
var ErrSchema = errors.New("contract: unsupported schema version")

// CheckSchema reports whether a fabric document (generation, endpoint
// document) of schema version v can be read by this code: its major only.
func CheckSchema(v string) error { return checkSchema(v, SchemaMajor) }

// CheckReportSchema reports whether a status, or an applied configuration
// (EndpointDoc) saved as last known good, of schema version v can be read:
// their shape is unchanged since 1.0, so agents of either major report to
// fabricd during an upgrade.
func CheckReportSchema(v string) error { return checkSchema(v, oldestReportMajor) }

func checkSchema(v string, oldest uint64) error {
	if v == "" {
		v = "1.0"
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
	if maj < oldest {
		return fmt.Errorf("%w: document schema %s is older than this agent's %s (upgrade fabricd)", ErrSchema, v, SchemaVersion)
	}
	return nil
}
