package api

import (
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
)

// Bounds on what a client may send outside request bodies.
const (
	maxParamBytes = 256  // a path or query parameter
	maxTextBytes  = 1024 // a free-text body field (a drain reason)
	maxNameBytes  = 253  // a name field in a body (a DNS name's length)
)

// invalidUTF8Mark stands for invalid UTF-8 in a JSON body: U+FFFE (a
// noncharacter no client has reason to send) as raw UTF-8, so a mark after
// a backslash is still an invalid escape.
const invalidUTF8Mark = "\ufffe"

// textProblem says what is wrong with s as a name or parameter of at most
// max bytes, or "".
func textProblem(s string, max int) string { return problem(s, max, false) }

// problem says what is wrong with s, or ""; free text may hold tabs and
// line breaks, names and parameters no control character at all.
func problem(s string, max int, freeText bool) string {
	switch {
	case len(s) > max:
		return "is longer than " + strconv.Itoa(max) + " bytes"
	case !utf8.ValidString(s) || strings.ContainsRune(s, '\ufffe'):
		return "is not valid UTF-8"
	case strings.ContainsRune(s, utf8.RuneError):
		return "holds U+FFFD (a lone surrogate or a replaced character)"
	case strings.ContainsRune(s, 0):
		return "contains a NUL byte"
	}
	for _, r := range s {
		if (r < 0x20 || r == 0x7f) && !(freeText && (r == '\t' || r == '\n' || r == '\r')) {
			return "contains a control character"
		}
	}
	return ""
}

// checkText returns a 400 naming field when s is not an acceptable name
// (freeText false) or free text.
func checkText(field, s string, max int, freeText bool) error {
	if p := problem(s, max, freeText); p != "" {
		return badRequest("invalid_field", field, "%s %s", field, p)
	}
	return nil
}

// checkBodyStrings walks every string of a decoded request body (by its
// JSON field names) so no field can carry NUL, invalid UTF-8 or an
// unbounded length to the stores. Fields tagged `limit:"text"` may be
// longer (free text); the rest are names.
func checkBodyStrings(v any) error {
	return walkStrings(reflect.ValueOf(v), "", func(field string, s string, text bool) error {
		max := maxNameBytes
		if text {
			max = maxTextBytes
		}
		return checkText(field, s, max, text)
	})
}

func walkStrings(v reflect.Value, path string, check func(field, s string, text bool) error) error {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return walkStrings(v.Elem(), path, check)
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if f.Anonymous {
				name = ""
			}
			sub := joinField(path, name)
			if f.Type.Kind() == reflect.String {
				if err := check(sub, v.Field(i).String(), f.Tag.Get("limit") == "text"); err != nil {
					return err
				}
				continue
			}
			if err := walkStrings(v.Field(i), sub, check); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if err := walkStrings(v.Index(i), path+"["+strconv.Itoa(i)+"]", check); err != nil {
				return err
			}
		}
	case reflect.String:
		return check(path, v.String(), false)
	}
	return nil
}

func joinField(path, name string) string {
	switch {
	case path == "":
		return name
	case name == "":
		return path
	}
	return path + "." + name
}

// checkRange returns a 400 naming field unless lo <= n <= hi.
func checkRange(field string, n, lo, hi int64, meaning string) error {
	if n < lo || n > hi {
		return badRequest("invalid_field", field, "%s must be %s (%d to %d)", field, meaning, lo, hi)
	}
	return nil
}

// allowQuery admits only the named query parameters and checks that every
// path and query value is acceptable text, so handlers and stores never
// see NUL, invalid UTF-8 or unbounded parameters.
func allowQuery(names ...string) gin.HandlerFunc {
	return func(c *gin.Context) {
		for _, p := range c.Params {
			if textProblem(p.Value, maxParamBytes) != "" {
				fail(c, badRequest("invalid_parameter", p.Key, "path parameter %s %s", p.Key, textProblem(p.Value, maxParamBytes)))
				return
			}
		}
		q, err := url.ParseQuery(c.Request.URL.RawQuery)
		if err != nil { // e.g. a ';', which URL.Query would drop unseen
			fail(c, badRequest("invalid_parameter", "(query)", "the query string is malformed: %s", quoteBounded(err.Error())))
			return
		}
		var unknown []string
		for k, vs := range q {
			if !slices.Contains(names, k) {
				unknown = append(unknown, k)
				continue
			}
			if len(vs) > 1 {
				fail(c, badRequest("invalid_parameter", k, "query parameter %s is given %d times; give it once", k, len(vs)))
				return
			}
			if p := textProblem(vs[0], maxParamBytes); p != "" {
				fail(c, badRequest("invalid_parameter", k, "query parameter %s %s", k, p))
				return
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			field := unknown[0]
			switch {
			case field == "":
				field = "(empty name)"
			case textProblem(field, maxParamBytes) != "":
				field = "(unprintable)"
			}
			allowed := "none"
			if len(names) > 0 {
				allowed = strings.Join(names, ", ")
			}
			fail(c, &Error{Status: http.StatusBadRequest, Code: "invalid_parameter", Field: field,
				Message: "unknown query parameter " + quoteBounded(field) + "; this route takes: " + allowed})
			return
		}
		c.Next()
	}
}

// quoteBounded quotes s for a message, cut to 64 bytes.
func quoteBounded(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return `"` + strings.ToValidUTF8(s, "?") + `"`
}
