// Command fabricctl is the Multiplane operator CLI over fabricd's REST
// API: planes, switches, links, endpoints, events, drains, audit and
// tokens, as aligned tables or JSON. `fabricctl --help` lists the commands,
// the global flags and the exit codes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/multiplane/multiplane/fabricctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := fabricctl.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
