package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/multiplane/multiplane/internal/testenv"
)

const repo = "../.."

func TestBuildsTwoDebsWithBinaryUnitAndConfig(t *testing.T) {
	dpkg := testenv.RequireCommand(t, "dpkg-deb")
	bin := t.TempDir()
	for _, p := range Packages {
		if err := os.WriteFile(filepath.Join(bin, p.Binary), []byte("#!/bin/sh\necho "+p.Binary+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	paths, err := Build(Config{Repo: repo, BinDir: bin, OutDir: t.TempDir(), Version: "v1.2.3-4-gabcdef"})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 2 {
		t.Fatalf("built %v, want two packages", paths)
	}
	for i, p := range Packages {
		info, err := exec.Command(dpkg, "--info", paths[i]).CombinedOutput()
		if err != nil {
			t.Fatalf("dpkg-deb --info %s: %v\n%s", paths[i], err, info)
		}
		for _, want := range []string{"Package: " + p.Name, "Version: 1.2.3+git4.gabcdef", "Architecture: amd64", "Depends: adduser", "postinst", "conffiles"} {
			if !strings.Contains(string(info), want) {
				t.Errorf("%s: --info lacks %q:\n%s", p.Name, want, info)
			}
		}
		contents, err := exec.Command(dpkg, "--contents", paths[i]).CombinedOutput()
		if err != nil {
			t.Fatalf("dpkg-deb --contents: %v\n%s", err, contents)
		}
		for _, want := range []string{"-rwxr-xr-x root/root", "./usr/bin/" + p.Binary, "./lib/systemd/system/" + p.Unit, "./etc/multiplane/" + p.Config} {
			if !strings.Contains(string(contents), want) {
				t.Errorf("%s: --contents lacks %q:\n%s", p.Name, want, contents)
			}
		}
	}
	if _, err := Build(Config{Repo: repo, BinDir: bin, OutDir: t.TempDir(), Version: "latest"}); err == nil {
		t.Error("a version that is not a Debian version was accepted")
	}
	if _, err := Build(Config{Repo: repo, BinDir: t.TempDir(), OutDir: t.TempDir(), Version: "1"}); err == nil {
		t.Error("packaged missing binaries")
	}
}

// TestUnitsVerifyAndAreHardened runs systemd-analyze verify on the units
// (ExecStart pointed at an executable that exists here); any warning fails.
func TestUnitsVerifyAndAreHardened(t *testing.T) {
	sa := testenv.RequireCommand(t, "systemd-analyze")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var units []string
	for _, p := range Packages {
		data, err := os.ReadFile(filepath.Join(repo, "deploy", "systemd", p.Unit))
		if err != nil {
			t.Fatal(err)
		}
		unit := string(data)
		for _, want := range []string{"User=multiplane", "ProtectSystem=strict", "NoNewPrivileges=yes", "Restart=on-failure",
			"StateDirectory=multiplane multiplane/", "ExecStart=/usr/bin/" + p.Binary + " ", "CapabilityBoundingSet=\n", "ProtectHome=yes"} {
			if !strings.Contains(unit, want) {
				t.Errorf("%s lacks %q", p.Unit, want)
			}
		}
		path := filepath.Join(dir, p.Unit)
		if err := os.WriteFile(path, []byte(strings.Replace(unit, "/usr/bin/"+p.Binary, self, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		units = append(units, path)
	}
	out, err := exec.Command(sa, append([]string{"verify"}, units...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestPostinstCreatesStateDirectories runs the postinst script with the
// commands it calls replaced by ones that record their arguments: it adds
// the user on a fresh host only, and creates the state directories the
// enrollment step writes to, owned by that user, before any unit starts.
func TestPostinstCreatesStateDirectories(t *testing.T) {
	sh := testenv.RequireCommand(t, "sh")
	stubs, log := t.TempDir(), filepath.Join(t.TempDir(), "calls")
	for name, code := range map[string]string{"getent": "exit ${GETENT_CODE:-2}", "adduser": "", "install": "", "systemctl": ""} {
		script := "#!/bin/sh\necho \"" + name + " $*\" >> " + log + "\n" + code + "\n"
		if err := os.WriteFile(filepath.Join(stubs, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, fresh := range []bool{true, false} {
		os.Remove(log)
		cmd := exec.Command(sh, filepath.Join(repo, "deploy", "packaging", "postinst.sh"), "configure")
		cmd.Env = []string{"PATH=" + stubs}
		if !fresh {
			cmd.Env = append(cmd.Env, "GETENT_CODE=0")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("postinst: %v\n%s", err, out)
		}
		data, _ := os.ReadFile(log)
		calls := string(data)
		for _, want := range []string{
			"install -d -o multiplane -g multiplane -m 0755 /var/lib/multiplane\n",
			"install -d -o multiplane -g multiplane -m 0700 /var/lib/multiplane/endpoint\n",
			"install -d -o multiplane -g multiplane -m 0700 /var/lib/multiplane/fabricd\n",
		} {
			if !strings.Contains(calls, want) {
				t.Errorf("postinst did not run %q; it ran:\n%s", strings.TrimSpace(want), calls)
			}
		}
		if strings.Contains(calls, "adduser") != fresh {
			t.Errorf("fresh host %v, calls:\n%s", fresh, calls)
		}
	}
}
