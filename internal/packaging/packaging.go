// Package packaging builds the .deb packages of fabricd and the endpoint
// agent with nfpm as a library (no external tool): each carries its
// binary, its hardened systemd unit (deploy/systemd), a configuration
// file under /etc/multiplane (a conffile, kept on upgrade) and scripts
// that create the unprivileged multiplane user.
//
//	paths, err := packaging.Build(packaging.Config{Repo: ".", BinDir: "bin", OutDir: "dist", Version: "0.1.0"})
package packaging

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the deb packager
	"github.com/goreleaser/nfpm/v2/files"
)

// Config says what to package and where.
type Config struct {
	Repo    string // the repository root (deploy/, docs/)
	BinDir  string // where fabricd and endpoint were built
	OutDir  string // where the .deb files go
	Version string // package version; a leading "v" is dropped
	Arch    string // Debian architecture (default amd64)
}

// Package describes one package.
type Package struct {
	Name, Binary, Unit, Config, Description string
}

// Packages are the two packages Build makes.
var Packages = []Package{
	{Name: "multiplane-fabricd", Binary: "fabricd", Unit: "fabricd.service", Config: "fabricd.yaml",
		Description: "Multiplane control plane: health of multi-plane AI fabrics, path sets and rate policies for endpoints"},
	{Name: "multiplane-endpoint", Binary: "endpoint", Unit: "multiplane-endpoint.service", Config: "endpoint.yaml",
		Description: "Multiplane endpoint agent: multipath transport steered by fabricd"},
}

var (
	debVersion = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~-]*$`)
	// gitDescribe is `git describe` past a tag: v0.1.0-3-g0d7785d1aa67.
	gitDescribe = regexp.MustCompile(`^([0-9]+\.[0-9]+\.[0-9]+)-([0-9]+)-g([0-9a-f]+)$`)
)

// Build writes one .deb per package into OutDir and returns their paths.
func Build(cfg Config) ([]string, error) {
	v := strings.TrimPrefix(cfg.Version, "v")
	// Commits past a tag sort after it: 0.1.0+git3.g0d7785d (a "-" would
	// make it a pre-release, before 0.1.0).
	v = gitDescribe.ReplaceAllString(v, "$1+git$2.g$3")
	if !debVersion.MatchString(v) {
		return nil, fmt.Errorf("packaging: version %q is not a Debian version (digits first)", cfg.Version)
	}
	if cfg.Arch == "" {
		cfg.Arch = "amd64"
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("packaging: %w", err)
	}
	var out []string
	for _, p := range Packages {
		path, err := build(cfg, v, p)
		if err != nil {
			return out, err
		}
		out = append(out, path)
	}
	return out, nil
}

func build(cfg Config, version string, p Package) (string, error) {
	deploy := filepath.Join(cfg.Repo, "deploy")
	bin := filepath.Join(cfg.BinDir, p.Binary)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("packaging: %s: %w (make build first)", bin, err)
	}
	info := nfpm.WithDefaults(&nfpm.Info{
		Name: p.Name, Arch: cfg.Arch, Platform: "linux", Version: version, Section: "net", Priority: "optional",
		Maintainer: "Multiplane <multiplane@example.invalid>", Description: p.Description,
		Homepage: "https://github.com/multiplane/multiplane", License: "Apache-2.0",
		Overridables: nfpm.Overridables{
			Depends: []string{"adduser"},
			Contents: files.Contents{
				{Source: bin, Destination: "/usr/bin/" + p.Binary, FileInfo: &files.ContentFileInfo{Mode: 0o755}},
				{Source: filepath.Join(deploy, "systemd", p.Unit), Destination: "/lib/systemd/system/" + p.Unit, FileInfo: &files.ContentFileInfo{Mode: 0o644}},
				{Source: filepath.Join(deploy, "packaging", p.Config), Destination: "/etc/multiplane/" + p.Config, Type: files.TypeConfig, FileInfo: &files.ContentFileInfo{Mode: 0o644}},
				{Source: filepath.Join(cfg.Repo, "docs", "deploy.md"), Destination: "/usr/share/doc/" + p.Name + "/deploy.md", FileInfo: &files.ContentFileInfo{Mode: 0o644}},
			},
			Scripts: nfpm.Scripts{
				PostInstall: filepath.Join(deploy, "packaging", "postinst.sh"),
				PostRemove:  filepath.Join(deploy, "packaging", "postrm.sh"),
			},
		},
	})
	if err := nfpm.Validate(info); err != nil {
		return "", fmt.Errorf("packaging: %s: %w", p.Name, err)
	}
	pkgr, err := nfpm.Get("deb")
	if err != nil {
		return "", fmt.Errorf("packaging: %w", err)
	}
	path := filepath.Join(cfg.OutDir, pkgr.ConventionalFileName(info))
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("packaging: %w", err)
	}
	if err := pkgr.Package(info, f); err != nil {
		f.Close()
		os.Remove(path)
		return "", fmt.Errorf("packaging: %s: %w", p.Name, err)
	}
	if err := f.Close(); err != nil {
		return "", errors.Join(fmt.Errorf("packaging: %w", err), os.Remove(path))
	}
	return path, nil
}
