package main

import (
	"errors"
	"flag"
	"fmt"
)

// parseFlags parses args with fs. A -h or --help comes back as
// flag.ErrHelp (fs printed its usage); any other mistake wraps errUsage
// (exit status 2) with the flag package's words.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return fmt.Errorf("%w: %v", errUsage, err)
}

// parseInterspersed parses args with fs, accepting flags before, between
// and after the positional arguments, as users type them
// (`confirm ORDER --json`). "--" ends the flags: everything after it is
// an argument, even when it starts with "-". It returns the arguments in
// their order; its errors are parseFlags'.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		left := fs.Args()
		consumed := len(args) - len(left)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(rest, left...), nil // "--": the rest are arguments
		}
		if len(left) == 0 {
			return rest, nil
		}
		rest, args = append(rest, left[0]), left[1:]
	}
}
