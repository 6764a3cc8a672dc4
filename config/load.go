package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"
)

// EnvPrefix is the prefix of environment variables that override the file.
const EnvPrefix = "SHARDIS_"

// keyDelim separates key levels inside koanf. It is a byte no YAML key of
// ours contains, so node and route names may hold dots.
const keyDelim = "\x1f"

// Problem is one thing wrong with a configuration.
type Problem struct {
	// Path is the key path, e.g. "servers.inventory.routes.clothes[1]".
	Path string
	// Value is the offending value as written, or nil when the key itself
	// is the problem.
	Value any
	// Msg says what is wrong.
	Msg string
	// Env names the environment variable the value came from, or "" when
	// it came from the file or the defaults.
	Env string
}

// String formats the problem as "path: msg (got value)", with
// " (from VARIABLE)" after the path when an environment variable set it.
func (p Problem) String() string {
	path := p.Path
	if p.Env != "" {
		path += " (from " + p.Env + ")"
	}
	if p.Value == nil {
		return path + ": " + p.Msg
	}
	return fmt.Sprintf("%s: %s (got %q)", path, p.Msg, fmt.Sprint(p.Value))
}

// Problems is every problem found in a configuration. It is the error type
// returned by [Load], [Parse] and [Config.Validate]; it is never empty when
// returned as an error.
type Problems []Problem

// Error lists all problems, one per line.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = "  " + p.String()
	}
	noun := "problems"
	if len(ps) == 1 {
		noun = "problem"
	}
	return fmt.Sprintf("invalid configuration (%d %s):\n%s", len(ps), noun, strings.Join(lines, "\n"))
}

func (ps *Problems) add(path string, value any, msg string) {
	if value != nil && isSecret(path) {
		value = "<redacted>" // the problem names the key; the secret never reaches a log
	}
	*ps = append(*ps, Problem{Path: path, Value: value, Msg: msg})
}

// isSecret reports whether a key path holds a credential. The sync
// section itself counts: a DSN is what a scalar given to it most likely
// is (`sync: postgres://…`, SHARDIS_SYNC=…).
func isSecret(path string) bool {
	return strings.HasSuffix(path, ".password") || path == "service.auth_token" || path == "sync.dsn" || path == "sync"
}

// Load reads the YAML file at path, applies SHARDIS_* environment overrides
// from the process environment, applies defaults and validates the result.
// See [Parse] for the environment mapping.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, os.Environ())
}

// Parse is [Load] on YAML bytes and an explicit environment (KEY=VALUE
// strings, as os.Environ returns; nil means none).
//
// Environment mapping: only SHARDIS_ variables whose name holds a double
// underscore are overrides (so SHARDIS_TOKEN or SHARDIS_URL, which the CLI
// and scripts use, are left alone: every key has at least two levels).
// Strip SHARDIS_, lower-case, and read a double underscore as a level
// separator, so single underscores stay part of a key:
//
//	SHARDIS_SERVICE__LISTEN=0.0.0.0:7400            service.listen
//	SHARDIS_HEALTH__HEARTBEAT=250ms                 health.heartbeat
//	SHARDIS_BREAKER__OPEN_TIMEOUT=2s                breaker.open_timeout
//	SHARDIS_NODES__N1__PASSWORD=secret              nodes.n1.password
//	SHARDIS_HEALTH__BACKOFF=500ms,1s,5s             lists are comma-separated
//	SHARDIS_SERVERS__INVENTORY__ROUTES__CLOTHES=n1,n2
//
// Names reached through the environment are lower-case. An override of an
// unknown key is an error like any other unknown key; a problem with a
// value from the environment names the variable (Problem.Env).
func Parse(yamlData []byte, environ []string) (*Config, error) {
	k := koanf.New(keyDelim)
	if err := k.Load(rawbytes.Provider(yamlData), yaml.Parser()); err != nil {
		return nil, fmt.Errorf("config: parse YAML: %w", err)
	}
	if ps := append(envConflicts(environ), envMisspelt(environ)...); len(ps) > 0 {
		return nil, ps
	}
	envProvider := env.Provider(keyDelim, env.Opt{
		Prefix:        EnvPrefix,
		EnvironFunc:   func() []string { return environ },
		TransformFunc: envKey,
	})
	if err := k.Load(envProvider, nil); err != nil {
		return nil, fmt.Errorf("config: environment: %w", err)
	}
	cfg := Default()
	var problems Problems
	decoder{problems: &problems}.decodeStruct("", k.Raw(), reflectValue(&cfg))
	// A value that failed to decode kept its default; do not report the
	// same path a second time from the semantic checks.
	bad := map[string]bool{}
	for _, p := range problems {
		bad[p.Path] = true
	}
	for _, p := range cfg.problems() {
		if !bad[p.Path] {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		vars := envVars(environ)
		for i := range problems {
			problems[i].Env = envSource(vars, problems[i].Path)
		}
		return nil, problems
	}
	return &cfg, nil
}

// envSource returns the variable that set path or one of its parents.
func envSource(vars map[string]string, path string) string {
	for p := path; p != ""; {
		if v, ok := vars[p]; ok {
			return v
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return ""
		}
		p = p[:i]
	}
	return ""
}

// envKey maps SHARDIS_A__B_C=v to the koanf key a␟b_c, and a variable
// without a double underscore (not an override) to "", which koanf skips.
func envKey(k, v string) (string, any) {
	k = strings.ToLower(strings.TrimPrefix(k, EnvPrefix))
	if !strings.Contains(k, "__") {
		return "", nil
	}
	return strings.ReplaceAll(k, "__", keyDelim), v
}

// envVars maps the dotted key path of every override in environ to the
// variable's name.
func envVars(environ []string) map[string]string {
	keys := map[string]string{}
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		if k, _ := envKey(name, ""); k != "" {
			keys[strings.ReplaceAll(k, keyDelim, ".")] = name
		}
	}
	return keys
}

// envConflicts reports overrides that give a key both a value and
// sub-keys (SHARDIS_HEALTH__X=1 with SHARDIS_HEALTH__X__Y=1s): koanf would
// resolve them in map order, differently from run to run.
func envConflicts(environ []string) Problems {
	keys := envVars(environ)
	var ps Problems
	for _, k := range sortedKeys(keys) {
		for parent := k; strings.Contains(parent, "."); {
			parent = parent[:strings.LastIndex(parent, ".")]
			if v, ok := keys[parent]; ok {
				ps.add(parent, nil, fmt.Sprintf("environment sets both %s and %s: a key holds a value or sub-keys, not both", v, keys[k]))
			}
		}
	}
	return ps
}

// envMisspelt reports SHARDIS_ variables without a double underscore that
// name a configuration section (SHARDIS_BREAKER_OPEN_TIMEOUT for
// SHARDIS_BREAKER__OPEN_TIMEOUT, SHARDIS_HEALTH=1s): they would otherwise be
// ignored. Other such variables (SHARDIS_TOKEN, SHARDIS_URL) are not the
// configuration's and are left alone.
func envMisspelt(environ []string) Problems {
	var ps Problems
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) || strings.Contains(name, "__") {
			continue
		}
		key := strings.ToLower(strings.TrimPrefix(name, EnvPrefix))
		for _, sec := range sections() {
			switch {
			case key == sec:
				var value any = val
				if isSecret(key) {
					value = "<redacted>"
				}
				ps = append(ps, Problem{Path: key, Value: value, Env: name,
					Msg: "a section is not set from one variable: name a key, e.g. " + EnvPrefix + strings.ToUpper(sec) + "__<KEY>"})
			case strings.HasPrefix(key, sec+"_"):
				ps = append(ps, Problem{Path: key, Env: name,
					Msg: "not an override: levels are separated by a double underscore, e.g. " +
						EnvPrefix + strings.ToUpper(sec) + "__" + strings.ToUpper(key[len(sec)+1:])})
			}
		}
	}
	return ps
}

// sections returns the top-level keys of a configuration.
func sections() []string {
	t := reflect.TypeOf(Config{})
	out := make([]string, 0, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		out = append(out, t.Field(i).Tag.Get("koanf"))
	}
	return out
}

// IsProblems reports whether err is (or wraps) a [Problems] list, and
// returns it.
func IsProblems(err error) (Problems, bool) {
	var ps Problems
	ok := errors.As(err, &ps)
	return ps, ok
}
