// Package cliconf parses a command's flags with an environment variable twin
// for every flag and an optional YAML config file. Precedence, highest
// first: command line, environment, config file, defaults.
//
//	fs := flag.NewFlagSet("fabricd", flag.ContinueOnError)
//	cfg.RegisterFlags(fs)
//	err := cliconf.Parse(fs, os.Args[1:], "FABRICD")
//
// A flag named data-dir has the twin FABRICD_DATA_DIR and the config file
// key data-dir. The --config flag (twin FABRICD_CONFIG) names the file.
package cliconf

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// EnvName is the environment twin of a flag.
func EnvName(prefix, flagName string) string {
	return prefix + "_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(flagName))
}

// commandLineOnly are the flags without a config file key; --version has
// no environment twin either (--config's is read first, by Parse).
var commandLineOnly = map[string]bool{"config": true, "version": true}

// Version registers --version (command line only) on fs; the command
// prints its version and exits 0 when it is set after Parse.
func Version(fs *flag.FlagSet) *bool {
	return fs.Bool("version", false, "print the version (module version and commit) and exit")
}

// Parse registers --config, parses args, then fills every flag not given on
// the command line from its environment twin, then from the config file.
func Parse(fs *flag.FlagSet, args []string, envPrefix string) error {
	configFile := fs.String("config", "", "optional YAML config file: a mapping of flag names to values")
	setUsage(fs, envPrefix)
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	if !given["config"] {
		if v, ok := os.LookupEnv(EnvName(envPrefix, "config")); ok {
			*configFile = v
		}
	}
	fileValues := map[string]string{}
	if *configFile != "" {
		var err error
		if fileValues, err = readConfig(fs, *configFile); err != nil {
			return err
		}
	}
	var errs []string
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || commandLineOnly[f.Name] {
			return
		}
		env := EnvName(envPrefix, f.Name)
		if v, ok := os.LookupEnv(env); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Sprintf("%s=%q: %v", env, v, err))
			}
			return
		}
		if v, ok := fileValues[f.Name]; ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Sprintf("%s: %s: %q: %v", *configFile, f.Name, v, err))
			}
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("cliconf: %s", strings.Join(errs, "; "))
	}
	return nil
}

func readConfig(fs *flag.FlagSet, path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cliconf: config file: %w", err)
	}
	var raw map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil && err.Error() != "EOF" {
		return nil, fmt.Errorf("cliconf: config file %s: %w", path, err)
	}
	out := map[string]string{}
	for k, v := range raw {
		if fs.Lookup(k) == nil || commandLineOnly[k] {
			return nil, fmt.Errorf("cliconf: config file %s: unknown setting %q (see --help)", path, k)
		}
		switch v := v.(type) {
		case []any:
			parts := make([]string, len(v))
			for i, p := range v {
				parts[i] = fmt.Sprint(p)
			}
			out[k] = strings.Join(parts, ",")
		case map[string]any, nil:
			return nil, fmt.Errorf("cliconf: config file %s: %s must be a scalar or a list", path, k)
		default:
			out[k] = fmt.Sprint(v)
		}
	}
	return out, nil
}

func setUsage(fs *flag.FlagSet, envPrefix string) {
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage of %s:\n", fs.Name())
		fs.VisitAll(func(f *flag.Flag) {
			name, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(w, "  --%s", f.Name)
			if name != "" {
				fmt.Fprintf(w, " %s", name)
			}
			fmt.Fprintf(w, "\n    \t%s", strings.ReplaceAll(usage, "\n", "\n    \t"))
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
				fmt.Fprintf(w, " (default %q)", f.DefValue)
			}
			if f.Name == "version" {
				fmt.Fprintln(w)
				return
			}
			fmt.Fprintf(w, "\n    \tenv: %s\n", EnvName(envPrefix, f.Name))
		})
	}
}

// SplitList splits a comma-separated flag value, dropping blanks.
func SplitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
