package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/user"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/multiplane/multiplane/audit"
	"github.com/multiplane/multiplane/auth"
	"github.com/multiplane/multiplane/store"
	"github.com/multiplane/multiplane/store/pgcluster"
)

// AdminTokenActor is who `fabricd admin-token` is in the audit log and in
// the token's created_by.
const AdminTokenActor = "fabricd admin-token (local)"

// AdminTokenConfig configures `fabricd admin-token`, the local recovery
// path for an operator without a live admin token: it needs access to the
// data directory (or the database), not the API.
type AdminTokenConfig struct {
	DataDir     string
	DatabaseURL string
	Out         string        // write the secret here (0600); empty: print it
	Name        string        // token name; empty: recovery-<UTC time>
	TTL         time.Duration // 0: does not expire
}

// DefaultAdminTokenConfig returns the defaults; DataDir is fabricd's.
func DefaultAdminTokenConfig() AdminTokenConfig {
	return AdminTokenConfig{DataDir: DefaultConfig().DataDir}
}

// RegisterFlags registers every setting of `fabricd admin-token` on fs.
func (c *AdminTokenConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "fabricd's data directory: its private PostgreSQL is started from here when fabricd is stopped, or used through its socket when fabricd runs")
	fs.StringVar(&c.DatabaseURL, "database-url", c.DatabaseURL, "PostgreSQL URL of fabricd's external database (instead of the private cluster under --data-dir)")
	fs.StringVar(&c.Out, "token-file", c.Out, "file to write the new token's secret to (mode 0600, replaced atomically); default: print the secret on stdout")
	fs.StringVar(&c.Name, "token-name", c.Name, fmt.Sprintf("name of the new token, at most %d bytes of printable UTF-8 text (default recovery-<UTC time>)", auth.MaxNameBytes))
	fs.DurationVar(&c.TTL, "token-ttl", c.TTL, fmt.Sprintf("lifetime of the new token, like 24h, at most %v (10 years) (default 0: it does not expire)", auth.MaxTTL))
}

// Validate checks the flags before anything is started, naming the flag
// at fault; the bounds are auth's (auth.MaxNameBytes, auth.MaxTTL), which
// Mint enforces too.
func (c AdminTokenConfig) Validate() error {
	if c.Name != "" && !printableName(c.Name) {
		return fmt.Errorf("fabricd admin-token: --token-name (%d bytes) must be 1 to %d bytes of printable UTF-8 text, without control characters: %w",
			len(c.Name), auth.MaxNameBytes, auth.ErrInvalidName)
	}
	if c.TTL < 0 || c.TTL > auth.MaxTTL {
		return fmt.Errorf("fabricd admin-token: --token-ttl %v must be 0 (no expiry) or a positive lifetime of at most %v (10 years): %w",
			c.TTL, auth.MaxTTL, auth.ErrInvalidTTL)
	}
	return nil
}

func printableName(name string) bool {
	if len(name) > auth.MaxNameBytes || !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if unicode.IsControl(r) || r == utf8.RuneError || r == '\ufffe' {
			return false
		}
	}
	return true
}

// MintAdminToken mints an admin token without the API, records it in the
// audit log (actor AdminTokenActor), and writes the secret to cfg.Out or
// prints it on stdout. It works whether fabricd runs or not: with the
// private cluster stopped it starts it from cfg.DataDir (as fabricd does)
// and stops it again; while fabricd runs, it connects to that cluster's
// socket. The database must have been migrated by fabricd.
func MintAdminToken(ctx context.Context, cfg AdminTokenConfig, stdout io.Writer, logger *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Name == "" {
		cfg.Name = "recovery-" + time.Now().UTC().Format("20060102T150405Z")
	}
	dbURL := cfg.DatabaseURL
	if dbURL == "" {
		if _, err := os.Stat(cfg.DataDir); err != nil {
			return fmt.Errorf("fabricd admin-token: data dir: %w", err)
		}
		cluster, err := startPostgres(ctx, cfg.DataDir, logger)
		var running *pgcluster.RunningError
		switch {
		case errors.As(err, &running):
			logger.Info("fabricd's PostgreSQL is running; using it", "pid", running.Pid)
			dbURL = running.URL
		case err != nil:
			return fmt.Errorf("fabricd admin-token: private PostgreSQL: %w", err)
		default:
			defer stopPostgres(cluster, logger)
			dbURL = cluster.URL()
		}
	}
	db, err := store.Open(ctx, dbURL, logger)
	if err != nil {
		return fmt.Errorf("fabricd admin-token: %w", err)
	}
	defer db.Close()
	if err := db.Ready(ctx); err != nil {
		return fmt.Errorf("fabricd admin-token: %w (start fabricd once to set the database up)", err)
	}

	detail, _ := json.Marshal(map[string]any{"os_user": osUser(), "host": hostname(), "pid": os.Getpid(), "ttl_seconds": int64(cfg.TTL.Seconds())})
	record := func(ctx context.Context, tok auth.Token) error {
		return audit.New(db.Pool()).Record(ctx, audit.Entry{
			Actor: AdminTokenActor, Role: string(auth.RoleAdmin), Method: "LOCAL", Path: "fabricd admin-token",
			Action: "mint admin token (local recovery)", Target: fmt.Sprintf("token %d %s (%s)", tok.ID, tok.Name, tok.Prefix),
			Status: http.StatusCreated, Result: "ok", Detail: detail,
		})
	}
	secret, tok, err := auth.NewTokens(db.Pool()).MintRecovery(ctx, cfg.Name, AdminTokenActor, cfg.TTL, record)
	if err != nil {
		return fmt.Errorf("fabricd admin-token: %w", err)
	}
	logger.Info("admin token minted and recorded in the audit log", "id", tok.ID, "name", tok.Name, "prefix", tok.Prefix)
	if cfg.Out == "" {
		_, err = fmt.Fprintln(stdout, secret)
		return err
	}
	if err := auth.WriteSecret(cfg.Out, secret); err != nil {
		return fmt.Errorf("fabricd admin-token: %w (the token exists: revoke id %d)", err, tok.ID)
	}
	_, err = fmt.Fprintf(stdout, "admin token %q (id %d) written to %s\n", tok.Name, tok.ID, cfg.Out)
	return err
}

func osUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return fmt.Sprint(os.Getuid())
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
