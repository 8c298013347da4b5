// Package logging builds the log/slog logger of a command from its flags:
// text or JSON, and a level.
package logging

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"log/slog"
)

// Config selects the log format and level.
type Config struct {
	Format string
	Level  string
}

// RegisterFlags registers --log-format and --log-level, defaulting to the
// values already in c (text and info when empty).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Format, "log-format", cmp.Or(c.Format, "text"), "log format: text or json")
	fs.StringVar(&c.Level, "log-level", cmp.Or(c.Level, "info"), "log level: debug, info, warn or error")
}

// New returns a logger writing to w.
func (c Config) New(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.Level)); err != nil {
		return nil, fmt.Errorf("logging: --log-level %q: want debug, info, warn or error", c.Level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch c.Format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("logging: --log-format %q: want text or json", c.Format)
}
