package kvtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/multiplane/multiplane/internal/testenv"
	"github.com/multiplane/multiplane/kv"
)

// Cluster is a real etcd cluster of several members, each etcd's own
// server in a process of its own (the test binary, run again as a member),
// with its own data directory and loopback ports: tests run fabricd
// against it as against an external cluster in production, and kill a
// member as a crash would.
type Cluster struct {
	t       testing.TB
	members []*member
	// Store is connected to every member.
	Store *kv.Store
}

type member struct {
	Name, Dir, Client, Peer, Initial string
	cmd                              *exec.Cmd // nil while stopped
	done                             chan struct{}
}

// memberEnv carries a member's configuration to the process that runs it.
const memberEnv = "MULTIPLANE_KVTEST_MEMBER"

func init() {
	if cfg := os.Getenv(memberEnv); cfg != "" {
		os.Exit(runMember(cfg))
	}
}

// runMember runs one member until the process is killed.
func runMember(cfgJSON string) int {
	var m member
	if err := json.Unmarshal([]byte(cfgJSON), &m); err != nil {
		fmt.Fprintln(os.Stderr, "kvtest member:", err)
		return 2
	}
	client, _ := url.Parse(m.Client)
	peer, _ := url.Parse(m.Peer)
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = m.Name, filepath.Join(m.Dir, "data")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster, cfg.InitialClusterToken = m.Initial, "kvtest"
	cfg.LogLevel, cfg.LogOutputs = "error", []string{filepath.Join(m.Dir, "etcd.log")}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvtest member:", err)
		return 1
	}
	err = <-e.Err()
	fmt.Fprintln(os.Stderr, "kvtest member:", err)
	return 1
}

// NewCluster starts an n-member cluster for t, killed when the test ends.
// Ports are picked free but may be taken before a member binds them (by
// any process, as the source port of a connection): a member that exits
// at start because its address is in use has the cluster started again on
// new ports.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	t.Cleanup(c.close)
	for attempt := 1; ; attempt++ {
		err := c.startMembers(n)
		if err == nil {
			break
		}
		c.close()
		if !errors.Is(err, errAddrInUse) || attempt == startAttempts {
			t.Fatalf("kvtest: %v", err)
		}
		t.Logf("kvtest: %v; starting the cluster again on new ports", err)
	}
	s, err := kv.Open(testenv.Context(t), kv.Config{Endpoints: c.Endpoints()}, testenv.Logger(t))
	if err != nil {
		t.Fatalf("kvtest: connect to the cluster: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	c.Store = s
	return c
}

// startAttempts bounds the start-ups retried after a port was taken.
const startAttempts = 4

// errAddrInUse is wrapped when a member exited because its address was taken.
var errAddrInUse = errors.New("address in use")

// startMembers starts n new members on fresh ports and data directories
// and waits until they form a cluster.
func (c *Cluster) startMembers(n int) error {
	c.members = nil
	var initial []string
	for i := range n {
		m := &member{Name: fmt.Sprintf("m%d", i), Dir: c.t.TempDir(),
			Client: "http://" + pickAddr(c.t), Peer: "http://" + pickAddr(c.t)}
		c.members = append(c.members, m)
		initial = append(initial, m.Name+"="+m.Peer)
	}
	for _, m := range c.members {
		m.Initial = strings.Join(initial, ",")
		c.start(m)
	}
	for _, m := range c.members {
		if err := c.waitReady(m); err != nil {
			return err
		}
	}
	return nil
}

// pickAddr picks a member's address; tests replace it to take one.
var pickAddr = freeAddr

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("kvtest: pick a port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (c *Cluster) start(m *member) {
	cfg, _ := json.Marshal(m)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), memberEnv+"="+string(cfg))
	logf, err := os.OpenFile(filepath.Join(m.Dir, "member.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatalf("kvtest: %v", err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the test
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("kvtest: start etcd member %s: %v", m.Name, err)
	}
	m.cmd, m.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(m.done) }()
}

// waitReady waits until m answers as a member of a cluster with a leader.
func (c *Cluster) waitReady(m *member) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if lead, _, err := status(m.Client); err == nil && lead != 0 {
			return nil
		}
		select {
		case <-m.done:
			m.cmd = nil
			err := fmt.Errorf("etcd member %s exited (see %s)", m.Name, filepath.Join(m.Dir, "etcd.log"))
			if m.logSays("address already in use") {
				err = fmt.Errorf("%w: %w", err, errAddrInUse)
			}
			return err
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd member %s not ready after 30s (see %s)", m.Name, filepath.Join(m.Dir, "etcd.log"))
		}
	}
}

// logSays reports whether m's logs contain s.
func (m *member) logSays(s string) bool {
	for _, name := range []string{"member.log", "etcd.log"} {
		if data, err := os.ReadFile(filepath.Join(m.Dir, name)); err == nil && strings.Contains(string(data), s) {
			return true
		}
	}
	return false
}

// status asks the member at endpoint for the cluster's leader and its own id.
func status(endpoint string) (leader, self uint64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return 0, 0, err
	}
	defer cli.Close()
	st, err := cli.Status(ctx, endpoint)
	if err != nil {
		return 0, 0, err
	}
	return st.Leader, st.Header.MemberId, nil
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.members {
		out = append(out, m.Client)
	}
	return out
}

// Leader returns the index of the member that leads the cluster, or -1
// when no running member says it does.
func (c *Cluster) Leader() int {
	for i, m := range c.members {
		if m.cmd == nil {
			continue
		}
		if lead, self, err := status(m.Client); err == nil && lead != 0 && lead == self {
			return i
		}
	}
	return -1
}

// Kill kills member i (SIGKILL) and waits for it to exit; its data stays.
func (c *Cluster) Kill(i int) {
	m := c.members[i]
	if m.cmd != nil {
		m.cmd.Process.Kill()
		<-m.done
		m.cmd = nil
	}
}

// Restart starts the killed member i again from its data, on its ports.
// While another socket holds one of them (a connection's source port),
// it tries again for up to 10 s.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	m := c.members[i]
	if m.cmd != nil {
		c.t.Fatalf("kvtest: member %s is running", m.Name)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.start(m)
		err := c.waitReady(m)
		if err == nil {
			return
		}
		if !errors.Is(err, errAddrInUse) || time.Now().After(deadline) {
			c.t.Fatalf("kvtest: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *Cluster) close() {
	for i := range c.members {
		c.Kill(i)
	}
}
