package gnmisim

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/multiplane/multiplane/internal/testenv"
)

const gnmiCLIPkg = "github.com/openconfig/gnmi/cmd/gnmi_cli"

// buildGnmiCLI builds OpenConfig's gnmi_cli, which go.mod declares as a
// tool (so go.sum pins its modules).
func buildGnmiCLI(t *testing.T) string {
	t.Helper()
	goBin := testenv.RequireCommand(t, "go")
	bin := filepath.Join(t.TempDir(), "gnmi_cli")
	ctx, cancel := context.WithTimeout(testenv.Context(t), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, gnmiCLIPkg).CombinedOutput()
	if err != nil {
		t.Fatalf("build gnmi_cli: %v\n%s", err, out)
	}
	return bin
}

// TestGnmiCLISubscribes subscribes to an emulated switch with OpenConfig's
// own command-line client, without a target and with one.
func TestGnmiCLISubscribes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gnmi_cli")
	}
	cli := buildGnmiCLI(t)
	src := NewStaticSource([]string{"eth1", "eth2"})
	sw, err := Start(Config{Name: "sw1", Source: src, Tick: 50 * time.Millisecond, Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	src.Traffic(3, 1000)
	sw.SetOperStatus("eth2", "DOWN")

	for _, target := range []string{"", "sw1"} {
		t.Run("target="+target, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(testenv.Context(t), time.Minute)
			defer cancel()
			args := []string{"-address", sw.Addr(), "-insecure", "-qt", "s", "-sd", "500ms", "-dt", "single",
				"-q", "/interfaces/interface[name=*]/state,/qos/interfaces/interface[interface-id=*]/output/queues",
				"-logtostderr"}
			if target != "" {
				args = append(args, "-t", target)
			}
			cmd := exec.CommandContext(ctx, cli, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			// With -sd, gnmi_cli ends the stream itself and exits non-zero
			// with code DeadlineExceeded.
			if err := cmd.Run(); err != nil && !strings.Contains(stdout.String()+stderr.String(), "DeadlineExceeded") {
				t.Fatalf("gnmi_cli: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			out := stdout.String()
			for _, want := range []string{
				"interfaces/interface/eth1/state/oper-status, UP",
				"interfaces/interface/eth2/state/oper-status, DOWN",
				"interfaces/interface/eth1/state/counters/in-octets, 3000",
				"interfaces/interface/eth1/state/counters/out-pkts, 3",
				"qos/interfaces/interface/eth1/output/queues/queue/0/state/ecn-marked-pkts, 0",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("gnmi_cli output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}
