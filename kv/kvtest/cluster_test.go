package kvtest

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"
)

// hold listens on addr, as another process holding a member's port would.
func hold(t *testing.T, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("take %s: %v", addr, err)
	}
	return l
}

func TestNewClusterStartsAgainWhenAPortIsTaken(t *testing.T) {
	taken := hold(t, "127.0.0.1:0")
	defer taken.Close()
	picks := 0
	pickAddr = func(t testing.TB) string {
		if picks++; picks == 1 {
			return taken.Addr().String()
		}
		return freeAddr(t)
	}
	defer func() { pickAddr = freeAddr }()

	c := NewCluster(t, 3)
	if picks <= 6 {
		t.Fatalf("%d addresses picked: the cluster was not started again", picks)
	}
	for _, ep := range c.Endpoints() {
		if u, _ := url.Parse(ep); u.Host == taken.Addr().String() {
			t.Fatalf("endpoint %s is the taken address", ep)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Store.Client.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put: %v", err)
	}
}

func TestRestartWaitsForItsPort(t *testing.T) {
	c := NewCluster(t, 3)
	c.Kill(1)
	u, _ := url.Parse(c.Endpoints()[1])
	l := hold(t, u.Host)
	time.AfterFunc(time.Second, func() { l.Close() })
	c.Restart(1) // fails the test unless it tries again once the port is free
	if _, _, err := status(c.Endpoints()[1]); err != nil {
		t.Fatalf("member 1 after restart: %v", err)
	}
}
