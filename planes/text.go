package planes

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CheckText reports whether value can be stored and shown as free text: valid
// UTF-8, no NUL and no control character other than tab, newline and carriage
// return, and at most maxBytes bytes. It returns nil or a FieldError naming
// field. PostgreSQL rejects NUL and invalid UTF-8 in text columns, so every
// string that reaches the database passes this (or CheckLine) first.
func CheckText(field, value string, maxBytes int) error {
	if msg := textProblem(value, maxBytes, true); msg != "" {
		return FieldError{Field: field, Message: msg}
	}
	return nil
}

// CheckLine is CheckText for single-line values (identifiers, addresses,
// file paths, user names): it also refuses tab, newline and carriage return.
func CheckLine(field, value string, maxBytes int) error {
	if msg := textProblem(value, maxBytes, false); msg != "" {
		return FieldError{Field: field, Message: msg}
	}
	return nil
}

// textProblem returns what is wrong with s, or "".
func textProblem(s string, maxBytes int, multiline bool) string {
	if len(s) > maxBytes {
		return fmt.Sprintf("is %d bytes long, at most %d", len(s), maxBytes)
	}
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	for _, r := range s {
		switch {
		case r == 0:
			return "contains a NUL character"
		case multiline && (r == '\t' || r == '\n' || r == '\r'):
		case unicode.IsControl(r):
			return fmt.Sprintf("contains the control character %U", r)
		}
	}
	return ""
}

// maxQuoted bounds how much of a value an error message repeats.
const maxQuoted = 64

// quote renders a value for an error message: Go-quoted (so NUL, control
// characters and invalid UTF-8 come out escaped, and the message is always
// storable text) and cut to maxQuoted bytes.
func quote(s string) string {
	if len(s) > maxQuoted {
		cut := maxQuoted
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.QuoteToASCII(s[:cut]) + "…"
	}
	return strconv.QuoteToASCII(s)
}

// Shown returns s made fit to store and show as one line: invalid UTF-8
// and control characters replaced, cut to at most maxBytes bytes (with
// "…"). For messages that echo what a client or a device sent.
func Shown(s string, maxBytes int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) <= maxBytes {
		return s
	}
	cut := max(0, maxBytes-len("…"))
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
