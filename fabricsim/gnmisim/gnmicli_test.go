package gnmisim

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/multiplane/multiplane/internal/testenv"
)

const gnmiCLIPkg = "github.com/openconfig/gnmi/cmd/gnmi_cli"

// Modules gnmi_cli needs beyond this module's build list (its imports of
// github.com/openconfig/gnmi/cli pull them in); versions as gnmi v0.14.1's
// go.mod selects them.
var gnmiCLIExtra = []string{
	"github.com/protocolbuffers/txtpbfmt v0.0.0-20240823084532-8e6b51fa9bef",
	"golang.org/x/term v0.48.0",
	"github.com/mitchellh/go-wordwrap v1.0.1",
}

// buildGnmiCLI builds OpenConfig's gnmi_cli offline. It first tries this
// module (works once go.sum has the entries for gnmi_cli's extra modules),
// then a scratch module that copies this module's requirements and adds
// those modules, resolved from the module cache only (GOPROXY=off).
func buildGnmiCLI(t *testing.T) string {
	t.Helper()
	goBin := testenv.RequireCommand(t, "go")
	dir := t.TempDir()
	bin := filepath.Join(dir, "gnmi_cli")
	ctx, cancel := context.WithTimeout(testenv.Context(t), 5*time.Minute)
	defer cancel()
	run := func(wd string, env []string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, goBin, "build", "-o", bin, gnmiCLIPkg)
		cmd.Dir = wd
		cmd.Env = append(os.Environ(), env...)
		return cmd.CombinedOutput()
	}
	out1, err := run(".", []string{"GOFLAGS=-mod=readonly", "GOPROXY=off"})
	if err == nil {
		t.Logf("built gnmi_cli in this module")
		return bin
	}
	gomod, err := exec.CommandContext(ctx, goBin, "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := os.ReadFile(filepath.Join(root, "go.sum"))
	scratch := filepath.Join(dir, "mod")
	os.MkdirAll(scratch, 0o755)
	lines := strings.SplitN(string(mod), "\n", 2)
	mod = []byte("module gnmiclibuild\n" + lines[1] + "\nrequire (\n\t" + strings.Join(gnmiCLIExtra, "\n\t") + "\n)\n")
	os.WriteFile(filepath.Join(scratch, "go.mod"), mod, 0o644)
	os.WriteFile(filepath.Join(scratch, "go.sum"), sum, 0o644)
	out2, err := run(scratch, []string{"GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off"})
	if err != nil {
		testenv.Require(t, false, fmt.Sprintf("cannot build gnmi_cli offline from the module cache:\nin this module: %s\nin a scratch module: %s",
			bytes.TrimSpace(out1), bytes.TrimSpace(out2)))
	}
	t.Logf("built gnmi_cli in a scratch module from the module cache (this module's go.sum lacks %v)", gnmiCLIExtra)
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
