package telemetry

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A reason is shown to every viewer: a switch's message is bounded and
// cleaned, and credential errors say where to look, not what they hold.
func TestDescribeBoundsWhatViewersSee(t *testing.T) {
	long := status.Error(codes.Unauthenticated, strings.Repeat("é", 400)+"\x00\n\xff")
	if r := describe(ErrKindAuth, long, time.Second); len(r) > maxReason || !utf8.ValidString(r) || strings.ContainsAny(r, "\x00\n") {
		t.Fatalf("reason %q (%d bytes): want at most %d bytes of clean UTF-8", r, len(r), maxReason)
	}
	creds := fmt.Errorf("%w: environment variable FABRICD_GNMI_X is not set", ErrCredentials)
	if r := describe(ErrKindAuth, creds, time.Second); strings.Contains(r, "FABRICD_GNMI_X") || !strings.Contains(r, "see its log") {
		t.Fatalf("credential reason %q", r)
	}
	if r := describe(ErrKindConnect, errors.New("dial: refused"), time.Second); r != "connect: dial: refused" {
		t.Fatalf("plain reason %q", r)
	}
}
