package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/rs/zerolog"
)

// cmdSpec is what a command accepts, read by running the command in
// describe mode (env.describe set, args -h): newFlags records its flag set,
// subcommands records its subcommands, and connect refuses to connect.
// Shell completion is built from it, so a flag or subcommand added to a
// command completes with nothing else to keep in step.
type cmdSpec struct {
	name, summary string
	flags         *flag.FlagSet // nil: none
	subs          []*cmdSpec
	words         []string // the words its argument takes, when it is one of a few (help, completion)
}

// describe reads c's spec.
func describe(ctx context.Context, e *env, c command) *cmdSpec {
	spec := &cmdSpec{name: c.name, summary: c.summary}
	de := &env{stdout: io.Discard, stderr: io.Discard, log: zerolog.Nop(), cfg: e.cfg, commands: e.commands, describe: spec}
	_ = c.run(ctx, de, []string{"-h"})
	return spec
}

// valueFlag reports whether f takes a value (every flag but a bool).
func valueFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return !ok || !b.IsBoolFlag()
}

// subcommands runs the subcommand that args start with.
// usage is the command's own help, printed on stdout for -h (and on stderr
// when the subcommand is missing). A command with subcommands (dlq) calls
// it so that help and completion see them.
func subcommands(ctx context.Context, e *env, usage string, subs []command, args []string) error {
	if e.describe != nil {
		for _, s := range subs {
			spec := &cmdSpec{name: s.name, summary: s.summary}
			se := *e
			se.describe = spec
			_ = s.run(ctx, &se, []string{"-h"})
			e.describe.subs = append(e.describe.subs, spec)
		}
		return flag.ErrHelp
	}
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.name
	}
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usage)
		return usageErr("want a subcommand: %s", strings.Join(names, ", "))
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(e.stdout, usage)
		return nil
	}
	if s := lookup(subs, args[0]); s != nil {
		return s.run(ctx, e, args[1:])
	}
	return usageErr("unknown subcommand %q: want %s", args[0], strings.Join(names, ", "))
}

func cmdHelp(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "help", "[COMMAND [SUBCOMMAND]]",
		"Show jetpool's commands, environment and exit codes; or one command's usage and flags (as 'jetpool COMMAND -h').")
	if e.describe != nil {
		for _, c := range e.commands {
			e.describe.words = append(e.describe.words, c.name)
		}
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		usage(e.stdout, e.commands)
		return nil
	}
	c := lookup(e.commands, pos[0])
	if c == nil {
		return usageErr("unknown command %q", pos[0])
	}
	return c.run(ctx, e, append(pos[1:], "-h"))
}
