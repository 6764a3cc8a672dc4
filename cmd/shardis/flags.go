package main

import "flag"

// parseInterspersed parses args with fs, accepting flags before, between
// and after the positional arguments, as users type them
// (`confirm ORDER --json`). "--" ends the flags: everything after it is
// an argument, even when it starts with "-". It returns the arguments in
// their order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
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
