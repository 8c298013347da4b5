package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"syscall"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/enrollment"
	"github.com/multiplane/multiplane/history"
	"github.com/multiplane/multiplane/intents"
	"github.com/multiplane/multiplane/internal/page"
	"github.com/multiplane/multiplane/kv"
	"github.com/multiplane/multiplane/pki"
	"github.com/multiplane/multiplane/planes"
	"github.com/multiplane/multiplane/policy/fleet"
	"github.com/multiplane/multiplane/store"
)

// Error is an API error with its HTTP status. Its JSON form is
// {"error":{"code","message","field"}}.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	Details any    `json:"details,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Its field and message are bounded: they may quote the request.
func badRequest(code, field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: code, Field: planes.Shown(field, maxErrorField),
		Message: planes.Shown(fmt.Sprintf(format, args...), maxErrorMessage)}
}

// Bounds of what an error response quotes of a request.
const (
	maxErrorField   = 256
	maxErrorMessage = 1024
)

// ctxErrorCode is where fail leaves the error code for the audit log.
const ctxErrorCode = "api.error_code"

// fail maps err to an API error and writes it; the one place that decides
// which domain error gets which status.
func fail(c *gin.Context, err error) {
	apiErr := toAPIError(err)
	if apiErr.Status >= 500 {
		loggerFrom(c).Error("request failed", "method", c.Request.Method, "route", c.FullPath(), "err", err)
	}
	if apiErr.Status == http.StatusServiceUnavailable {
		c.Header("Retry-After", "1")
	}
	if apiErr.Status == http.StatusUnauthorized {
		c.Header("WWW-Authenticate", `Bearer realm="multiplane"`)
	}
	c.Set(ctxErrorCode, apiErr.Code)
	c.AbortWithStatusJSON(apiErr.Status, gin.H{"error": apiErr})
}

func toAPIError(err error) *Error {
	var apiErr *Error
	var verr *planes.ValidationError
	var pageErr *page.FieldError
	var maxBytes *http.MaxBytesError
	switch {
	case errors.As(err, &apiErr):
		return apiErr
	case errors.As(err, &verr):
		first := verr.Fields[0]
		return &Error{Status: http.StatusBadRequest, Code: "invalid_topology", Field: first.Field,
			Message: verr.Error(), Details: verr.Fields}
	case errors.As(err, &pageErr):
		return badRequest("invalid_parameter", pageErr.Field, "%s", pageErr.Msg)
	case errors.As(err, &maxBytes):
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
			Message: fmt.Sprintf("request body is larger than %d bytes", maxBytes.Limit)}
	case unavailable(err):
		return &Error{Status: http.StatusServiceUnavailable, Code: "unavailable",
			Message: "a store fabricd depends on is unavailable; retry shortly (see /readyz)"}
	case errors.Is(err, planes.ErrNotFound), errors.Is(err, auth.ErrNotFound), errors.Is(err, intents.ErrNotFound),
		errors.Is(err, fleet.ErrNoStatus), errors.Is(err, history.ErrUnknown):
		return &Error{Status: http.StatusNotFound, Code: "not_found", Message: trimPkg(err)}
	case errors.Is(err, history.ErrNotRecorded):
		return &Error{Status: http.StatusNotFound, Code: "not_recorded", Message: trimPkg(err) + " (fabricd --history-max-links)"}
	case errors.Is(err, auth.ErrUnauthenticated):
		return &Error{Status: http.StatusUnauthorized, Code: "unauthenticated",
			Message: "a valid bearer token is required (Authorization: Bearer <token>)"}
	case errors.Is(err, auth.ErrForbidden):
		return &Error{Status: http.StatusForbidden, Code: "forbidden", Message: trimPkg(err)}
	case errors.Is(err, auth.ErrInvalidRole):
		return badRequest("invalid_field", "role", "%s", trimPkg(err))
	case errors.Is(err, intents.ErrDrained):
		return &Error{Status: http.StatusConflict, Code: "already_drained", Field: "target", Message: trimPkg(err) + "; end that drain first"}
	case errors.Is(err, intents.ErrInUse):
		return &Error{Status: http.StatusConflict, Code: "conflict", Message: trimPkg(err)}
	case errors.Is(err, auth.ErrLastAdmin):
		return &Error{Status: http.StatusConflict, Code: "last_admin", Field: "id", Message: trimPkg(err)}
	case errors.Is(err, auth.ErrInvalidName):
		return badRequest("invalid_field", "name", "%s", trimPkg(err))
	case errors.Is(err, auth.ErrInvalidTTL):
		return badRequest("invalid_field", "ttl_seconds", "%s", trimPkg(err))
	case errors.Is(err, enrollment.ErrDisabled):
		return &Error{Status: http.StatusConflict, Code: "enrollment_disabled", Message: trimPkg(err)}
	case errors.Is(err, enrollment.ErrUnknownEndpoint):
		return &Error{Status: http.StatusNotFound, Code: "not_found", Field: "endpoint", Message: trimPkg(err)}
	case errors.Is(err, enrollment.ErrReservedName):
		return badRequest("invalid_field", "endpoint", "%s", trimPkg(err))
	case errors.Is(err, enrollment.ErrInvalidTTL):
		return badRequest("invalid_field", "ttl_seconds", "%s", trimPkg(err))
	case errors.Is(err, enrollment.ErrInvalidToken):
		return &Error{Status: http.StatusUnauthorized, Code: "invalid_bootstrap_token", Message: trimPkg(err) + "; ask an operator for a new one"}
	case errors.Is(err, enrollment.ErrRevoked):
		return &Error{Status: http.StatusUnauthorized, Code: "revoked", Message: trimPkg(err) + "; enroll again with a new bootstrap token"}
	case errors.Is(err, pki.ErrBadCSR):
		return badRequest("invalid_field", "csr", "%s", trimPkg(err))
	case errors.Is(err, auth.ErrDuplicateName):
		return &Error{Status: http.StatusConflict, Code: "conflict", Field: "name", Message: trimPkg(err)}
	}
	return &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error; see the fabricd log"}
}

// unavailable reports whether err says a store could not be reached (the
// private PostgreSQL restarting, say), as opposed to a bug.
func unavailable(err error) bool {
	var connErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	var netErr net.Error
	switch {
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, kv.ErrUnavailable), errors.As(err, &connErr),
		errors.As(err, &netErr), pgconn.Timeout(err), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNREFUSED):
		return true
	case errors.As(err, &pgErr):
		// 08: connection exception; 57P: the server is shutting down or starting.
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P")
	}
	return false
}

// checkKeys refuses what encoding/json lets through: a key given twice
// (the last would win unseen) and a key that matches a field only when case
// is ignored. It looks at the top level of the object, where every field of
// the API's request bodies is; a malformed body is left to the decoder.
func checkKeys(data []byte, v any) error {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	known := map[string]bool{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		known[name] = true
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		switch {
		case seen[key]:
			return badRequest("invalid_json", key, "field %s is given twice", quoteBounded(key))
		case !known[key]:
			return badRequest("invalid_json", key, "unknown field %s (field names are case-sensitive)", quoteBounded(key))
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil
		}
	}
	return nil
}

// trimPkg drops the "pkg: " prefix of a domain error for users.
func trimPkg(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, ": "); i > 0 && !strings.Contains(msg[:i], " ") {
		return msg[i+2:]
	}
	return msg
}

// decodeJSON decodes a JSON object strictly: unknown fields, trailing data
// and wrong types are 400 errors naming the field.
// Every string of the result is then checked as text (checkBodyStrings).
func decodeJSON(data []byte, v any) error {
	if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) > 0 && trimmed[0] != '{' {
		return badRequest("invalid_json", "", "the request body must be a JSON object")
	}
	// encoding/json would turn invalid UTF-8 into U+FFFD unseen; mark it
	// with a noncharacter instead, which checkBodyStrings refuses by field.
	data = bytes.ToValidUTF8(data, []byte(invalidUTF8Mark))
	if err := checkKeys(data, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		switch {
		case errors.As(err, &typeErr):
			return badRequest("invalid_json", typeErr.Field, "field %s must be %s (in its range)", typeErr.Field, typeErr.Type)
		case errors.As(err, &syntaxErr):
			return badRequest("invalid_json", "", "malformed JSON at byte %d: %v", syntaxErr.Offset, err)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return badRequest("invalid_json", field, "unknown field %q", field)
		case err.Error() == "EOF":
			return badRequest("invalid_json", "", "request body is empty")
		}
		return badRequest("invalid_json", "", "malformed JSON: %v", err)
	}
	if dec.More() {
		return badRequest("invalid_json", "", "unexpected data after the JSON object")
	}
	return checkBodyStrings(v)
}
