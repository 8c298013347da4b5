package abuse

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/multiplane/multiplane/internal/fabricdproc"
)

// target is the fabricd under test and a connection to its database.
type target struct {
	fd      *fabricdproc.Proc
	db      *pgx.Conn
	dataDir string
}

// startTarget starts fabricd in a fresh data directory under cfg.WorkDir and
// connects to its private PostgreSQL over the unix socket it logged.
func startTarget(ctx context.Context, cfg Config) (*target, error) {
	dir, err := os.MkdirTemp(cfg.WorkDir, "bench-abuse-")
	if err != nil {
		return nil, err
	}
	// As root, PostgreSQL runs as the postgres user, who must reach the directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	t := &target{dataDir: dir}
	t.fd, err = fabricdproc.Start(ctx, fabricdproc.Options{Bin: cfg.FabricdBin, DataDir: dir,
		Args: []string{"--topology", cfg.Topology, "--log-format", "json", "--log-level", "info"}})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	socket, err := socketDir(t.fd.LogPath, dir)
	if err == nil {
		q := url.Values{"host": {socket}, "sslmode": {"disable"}}
		t.db, err = pgx.Connect(ctx, (&url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/multiplane", RawQuery: q.Encode()}).String())
	}
	if err != nil {
		t.close(cfg.Keep)
		return nil, fmt.Errorf("abuse: fabricd's database: %w", err)
	}
	return t, nil
}

func (t *target) close(keep bool) {
	if t.db != nil {
		t.db.Close(context.Background())
	}
	t.fd.Stop()
	if !keep {
		os.RemoveAll(t.dataDir)
	}
}

// socketDir reads the unix socket directory of fabricd's private PostgreSQL
// from its JSON log ("PostgreSQL started", socket_dir); a fabricd that does
// not log it is assumed to use <data dir>/postgresql/run.
func socketDir(logPath, dataDir string) (string, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg       string `json:"msg"`
			SocketDir string `json:"socket_dir"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.SocketDir != "" {
			return line.SocketDir, nil
		}
	}
	dir := filepath.Join(dataDir, "postgresql", "run")
	if _, err := os.Stat(dir); err != nil {
		return "", errors.New("abuse: fabricd logged no socket_dir and " + dir + " is missing")
	}
	return dir, nil
}

// sizes are the database and audit table sizes in bytes; audit is -1 when
// there is no audit_log table.
func (t *target) sizes(ctx context.Context) (db, audit int64, err error) {
	err = t.db.QueryRow(ctx, `SELECT pg_database_size(current_database()),
		COALESCE(pg_total_relation_size(to_regclass('audit_log')), -1)`).Scan(&db, &audit)
	return db, audit, err
}

// rss is fabricd's resident set in bytes (VmRSS).
func (t *target) rss() int64 {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(t.fd.Pid()) + "/status")
	if err != nil {
		return 0
	}
	_, rest, _ := strings.Cut(string(status), "VmRSS:")
	kb, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
	n, _ := strconv.ParseInt(kb, 10, 64)
	return n << 10
}

// apiURL is fabricd's base URL.
func apiURL(t *target) *url.URL {
	u, _ := url.Parse(t.fd.URL())
	return u
}
