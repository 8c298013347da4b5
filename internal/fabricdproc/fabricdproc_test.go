package fabricdproc

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeEnv makes the test binary act as fabricd: the first run in a data
// directory fails as fabricd does when its --listen port was taken, later
// runs serve /readyz until SIGINT.
const fakeEnv = "FABRICDPROC_FAKE_FABRICD"

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) != "" {
		os.Exit(fakeFabricd(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakeFabricd(args []string) int {
	fs := flag.NewFlagSet("fabricd", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "")
	listen := fs.String("listen", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	marker := filepath.Join(*dataDir, "started-once")
	if _, err := os.Stat(marker); err != nil {
		os.WriteFile(marker, nil, 0o644)
		fmt.Printf("level=ERROR msg=\"fabricd failed\" err=\"listen tcp %s: bind: address already in use\"\n", *listen)
		return 1
	}
	os.WriteFile(filepath.Join(*dataDir, "admin.token"), []byte("tok\n"), 0o600)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})}
	go srv.Serve(ln)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	srv.Close()
	return 0
}

// When fabricd exits at start because the port Start picked was taken
// meanwhile, Start picks another and starts it again.
func TestStartPicksAnotherPortWhenTaken(t *testing.T) {
	t.Setenv(fakeEnv, "1")
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Start(ctx, Options{Bin: bin, DataDir: dir, ReadyTimeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer p.Stop()
	log, _ := os.ReadFile(p.LogPath)
	if !strings.Contains(string(log), "address already in use") || p.Token() != "tok" {
		t.Fatalf("started without the retry? token %q, log:\n%s", p.Token(), log)
	}

	// A --listen the caller chose is not replaced.
	os.Remove(filepath.Join(dir, "started-once"))
	if _, err := Start(ctx, Options{Bin: bin, DataDir: t.TempDir(), Listen: "127.0.0.1:1", ReadyTimeout: 20 * time.Second}); !strings.Contains(fmt.Sprint(err), "address already in use") {
		t.Fatalf("Start with a fixed --listen: %v, want the address-in-use failure", err)
	}
}
