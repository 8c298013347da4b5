// Command mkpackages builds the .deb packages of fabricd and the endpoint
// agent (make packages; internal/packaging).
//
//	mkpackages --bin bin --out dist --version v0.1.0
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/multiplane/multiplane/internal/cliconf"
	"github.com/multiplane/multiplane/internal/packaging"
)

func main() {
	cfg := packaging.Config{Repo: ".", BinDir: "bin", OutDir: "dist", Arch: "amd64"}
	fs := flag.NewFlagSet("mkpackages", flag.ContinueOnError)
	fs.StringVar(&cfg.Repo, "repo", cfg.Repo, "repository root (deploy/ and docs/ are read from it)")
	fs.StringVar(&cfg.BinDir, "bin", cfg.BinDir, "directory holding the fabricd and endpoint binaries")
	fs.StringVar(&cfg.OutDir, "out", cfg.OutDir, "directory the .deb files are written to")
	fs.StringVar(&cfg.Version, "version", "", "package version, e.g. v0.1.0 (required)")
	fs.StringVar(&cfg.Arch, "arch", cfg.Arch, "Debian architecture of the binaries")
	if err := cliconf.Parse(fs, os.Args[1:], "MKPACKAGES"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "mkpackages:", err)
		os.Exit(2)
	}
	paths, err := packaging.Build(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkpackages:", err)
		os.Exit(1)
	}
	for _, p := range paths {
		fmt.Println(p)
	}
}
