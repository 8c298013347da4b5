package fabricctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/multiplane/multiplane/internal/cliconf"
	"github.com/multiplane/multiplane/internal/version"
)

// Exit codes.
const (
	ExitOK          = 0 // done
	ExitAPI         = 1 // fabricd refused or failed the request (its error is printed)
	ExitUsage       = 2 // a flag, command or argument is wrong
	ExitUnreachable = 3 // fabricd could not be reached (connection, TLS, timeout)
)

// Config is fabricctl's global settings.
type Config struct {
	Server    string
	Token     string
	TokenFile string
	CAFile    string
	Timeout   time.Duration
	Output    string
	// FollowEvery is how often events --follow asks for new events.
	FollowEvery time.Duration
}

// RegisterFlags registers the global flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Server, "server", "http://127.0.0.1:8080", "fabricd's API, http://HOST:PORT or https://HOST:PORT")
	fs.StringVar(&c.Token, "token", "", "API bearer token (prefer FABRICCTL_TOKEN or --token-file: a flag shows in ps)")
	fs.StringVar(&c.TokenFile, "token-file", "", "file holding the API token (such as fabricd's <data-dir>/admin.token)")
	fs.StringVar(&c.CAFile, "ca-file", "", "CA certificate (PEM) to trust for https, such as fabricd's <data-dir>/pki/ca.crt")
	fs.DurationVar(&c.Timeout, "timeout", 15*time.Second, "timeout of each request")
	fs.StringVar(&c.Output, "output", "table", "output: table (aligned columns) or json")
	fs.StringVar(&c.Output, "o", "table", "short for --output")
	fs.DurationVar(&c.FollowEvery, "follow-interval", time.Second, "how often events --follow asks for new events")
}

// commandsHelp follows the flags' help: the commands and exit codes.
func commandsHelp(out io.Writer) {
	fmt.Fprintf(out, `
fabricctl: the Multiplane operator CLI over fabricd's REST API.
Usage: fabricctl [global flags] COMMAND [flags] [args]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(out, "  %-10s %s\n", c.name, c.help)
		if c.args != "" {
			fmt.Fprintf(out, "  %-10s   %s %s\n", "", c.name, c.args)
		}
	}
	fmt.Fprintf(out, `
Exit codes: %d done; %d fabricd refused or failed the request; %d usage error;
%d fabricd unreachable. "fabricctl COMMAND --help" shows a command's flags.
`, ExitOK, ExitAPI, ExitUsage, ExitUnreachable)
}

// Main runs fabricctl with args (without the program name) until ctx
// ends, and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cfg Config
	fs := flag.NewFlagSet("fabricctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.RegisterFlags(fs)
	showVersion := cliconf.Version(fs)
	if err := cliconf.Parse(fs, args, "FABRICCTL"); err != nil {
		if errors.Is(err, flag.ErrHelp) { // the flags were printed
			commandsHelp(stderr)
			return ExitOK
		}
		fmt.Fprintln(stderr, "fabricctl:", err)
		return ExitUsage
	}
	if *showVersion {
		fmt.Fprintln(stdout, "fabricctl", version.Get().String())
		return ExitOK
	}
	if fs.NArg() == 0 {
		fs.Usage()
		commandsHelp(stderr)
		return ExitUsage
	}
	cmd := lookup(fs.Arg(0))
	if cmd == nil {
		fmt.Fprintf(stderr, "fabricctl: unknown command %q (fabricctl --help lists them)\n", fs.Arg(0))
		return ExitUsage
	}
	cfs := flag.NewFlagSet("fabricctl "+cmd.name, flag.ContinueOnError)
	cfs.SetOutput(stderr)
	if cmd.flags != nil {
		cmd.flags(cfs)
	}
	cfs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: fabricctl [global flags] %s %s\n%s\n", cmd.name, cmd.args, cmd.help)
		cfs.PrintDefaults()
	}
	if err := cfs.Parse(interleave(cfs, fs.Args()[1:])); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if cfg.Output != "table" && cfg.Output != "json" {
		fmt.Fprintf(stderr, "fabricctl: -o %q: table or json\n", cfg.Output)
		return ExitUsage
	}
	if cfg.FollowEvery < 100*time.Millisecond {
		fmt.Fprintf(stderr, "fabricctl: --follow-interval %v: at least 100ms\n", cfg.FollowEvery)
		return ExitUsage
	}
	token := cfg.Token
	if token == "" && cfg.TokenFile != "" {
		data, err := os.ReadFile(cfg.TokenFile)
		if err != nil {
			fmt.Fprintln(stderr, "fabricctl: --token-file:", err)
			return ExitUsage
		}
		token = strings.TrimSpace(string(data))
	}
	cli, err := NewClient(cfg.Server, token, cfg.CAFile, cfg.Timeout)
	if err != nil {
		fmt.Fprintln(stderr, "fabricctl:", err)
		return ExitUsage
	}
	e := &env{ctx: ctx, cli: cli, out: stdout, json: cfg.Output == "json", follow: cfg.FollowEvery}
	err = cmd.run(e, cfs)
	var ae *APIError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "fabricctl:", strings.TrimPrefix(err.Error(), "usage: "))
		return ExitUsage
	case errors.As(err, &ae):
		fmt.Fprintf(stderr, "fabricctl: %s: %v\n", cmd.name, ae)
		if ae.Status == 401 && token == "" {
			fmt.Fprintln(stderr, "fabricctl: no token given: set FABRICCTL_TOKEN or --token-file")
		}
		return ExitAPI
	case errors.Is(err, ErrUnreachable):
		fmt.Fprintf(stderr, "fabricctl: %s: %v\n", cmd.name, err)
		return ExitUnreachable
	default:
		fmt.Fprintf(stderr, "fabricctl: %s: %v\n", cmd.name, err)
		return ExitAPI
	}
}

// interleave moves a command's flags before its positional arguments, so
// that "drain plane p1 --reason R" parses as "drain --reason R plane p1".
func interleave(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // Parse reports it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	return append(flags, pos...)
}
