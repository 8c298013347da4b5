// Package fabricctl is the operator CLI over fabricd's REST API (command
// fabricctl): it lists planes, switches, links, endpoints, events, drains,
// the audit log and tokens as aligned tables or JSON, follows the event
// history, and drains and undrains. Main runs it; the exit codes are
// ExitOK, ExitAPI, ExitUsage and ExitUnreachable (docs/fabricctl.md).
//
//	code := fabricctl.Main(ctx, []string{"--server", url, "planes"}, os.Stdout, os.Stderr)
package fabricctl
