package agent

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/kv"
)

// etcdServerEnv makes the test binary an embedded etcd server in the given
// directory, so that a test can measure agents apart from the server.
const etcdServerEnv = "AGENT_TEST_ETCD_SERVER_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(etcdServerEnv); dir != "" {
		os.Exit(serveEtcd(dir))
	}
	os.Exit(m.Run())
}

func serveEtcd(dir string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	emb, err := kv.StartEmbedded(ctx, dir, kv.EmbeddedOptions{}, slogDiscard())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(strings.Join(emb.Endpoints(), ","))
	<-ctx.Done()
	emb.Close()
	return 0
}

// startEtcdProcess runs an embedded etcd in a child process and returns
// its client URLs; it is stopped when the test ends.
func startEtcdProcess(t testing.TB) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), etcdServerEnv+"="+t.TempDir())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("etcd process: %v", err)
	}
	testenv.Logger(t).Info("etcd process started", "endpoints", strings.TrimSpace(line))
	return strings.Split(strings.TrimSpace(line), ",")
}
