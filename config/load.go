package config

import (
	"errors"
	"fmt"
	"net/url"
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
	// it came from the file or the defaults. For a problem with a key the
	// environment reached only below it (an unknown section, a node only
	// the environment has), it names those variables, comma-separated.
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
	*ps = append(*ps, Problem{Path: path, Value: redacted(path, value), Msg: msg})
}

// redacted returns the value a problem at path may print: none of a
// secret's (the problem names the key; the secret never reaches a log),
// and a URL's without its password. Every problem that prints a value
// gets it from here.
func redacted(path string, value any) any {
	if value != nil && isSecret(path) {
		return "<redacted>"
	}
	return redactURL(value)
}

// redactURL returns value with the password of a URL in it redacted (a
// node given as `n1: redis://:secret@host:port`, a go-redis habit), else
// value as it is.
func redactURL(value any) any {
	s, ok := value.(string)
	if !ok || !strings.Contains(s, "@") {
		return value
	}
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || u.User == nil {
		return "<redacted>" // an @ it cannot place: it may be a credential
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "redacted")
	}
	return u.String()
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
	cfg, err := Parse(data, os.Environ())
	if err != nil { // which file: a command may load two (topology apply --from)
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
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
// Names reached through the environment are lower-case: an override may
// add a node, server or route the file does not have, but one naming an
// entry the file spells in another case (SHARDIS_NODES__N1__ADDR for the
// file's N1) is an error rather than a second entry. An override of an
// unknown key is an error like any other unknown key; a problem with a
// value from the environment names the variable (Problem.Env), or the
// variables under the key it is about (an unknown section, a node the
// environment alone added).
func Parse(yamlData []byte, environ []string) (*Config, error) {
	k := koanf.New(keyDelim)
	if err := k.Load(rawbytes.Provider(yamlData), yaml.Parser()); err != nil {
		return nil, fmt.Errorf("config: parse YAML: %w", err)
	}
	file := k.Raw() // the file's keys alone, before the environment's
	ps := append(envConflicts(environ), envMisspelt(environ)...)
	if ps = append(ps, envCaseClashes(environ, file)...); len(ps) > 0 {
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
		vars, inFile := envVars(environ), filePaths("", file, map[string]bool{})
		for i := range problems {
			problems[i].Env = envSource(vars, inFile, problems[i].Path)
		}
		return nil, problems
	}
	return &cfg, nil
}

// envSource returns the variable that set path or one of its parents;
// else those that set keys under path (SHARDIS_NODE__N1__ADDR for an
// unknown section "node"); else those under the nearest parent that
// the file does not have (an entry the environment alone made: a node
// whose addr is missing), comma-separated. inFile holds the file's paths.
func envSource(vars map[string]string, inFile map[string]bool, path string) string {
	if v := envSetter(vars, path); v != "" {
		return v
	}
	for p := path; p != "" && (p == path || !inFile[p]); p = parentPath(p) {
		if names := envUnder(vars, p); names != "" {
			return names
		}
	}
	return ""
}

// envSetter returns the variable that set path or one of its parents.
func envSetter(vars map[string]string, path string) string {
	for p := path; p != ""; p = parentPath(p) {
		if v, ok := vars[p]; ok {
			return v
		}
	}
	return ""
}

// envUnder returns the variables that set keys under path, sorted and
// comma-separated.
func envUnder(vars map[string]string, path string) string {
	var names []string
	for _, k := range sortedKeys(vars) {
		if strings.HasPrefix(k, path+".") {
			names = append(names, vars[k])
		}
	}
	return strings.Join(names, ", ")
}

// parentPath is path without its last key or index ("" at the top).
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// filePaths adds to paths the dotted path of every key of the nested map
// m (the file's), under prefix, and returns paths.
func filePaths(prefix string, m map[string]any, paths map[string]bool) map[string]bool {
	for k, v := range m {
		p := join(prefix, k)
		paths[p] = true
		if sub, ok := v.(map[string]any); ok {
			filePaths(p, sub, paths)
		}
	}
	return paths
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

// envCaseClashes reports overrides that name a map entry (a node, a
// server, a route) the file spells in another case: names reached through
// the environment are lower-case, so SHARDIS_NODES__N1__ADDR for the
// file's node N1 would otherwise add a second node n1 beside it, and
// leave N1 as the file has it.
func envCaseClashes(environ []string, file map[string]any) Problems {
	var ps Problems
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		key, _ := envKey(name, "")
		if key == "" {
			continue
		}
		if path, spelt := caseClash(file, strings.Split(key, keyDelim)); path != "" {
			ps = append(ps, Problem{Path: path, Env: name, Msg: fmt.Sprintf(
				"the file spells this entry %q, and names reached through the environment are lower-case: "+
					"the variable would add a second entry, not override %q; spell it in lower case in the file", spelt, spelt)})
		}
	}
	return ps
}

// caseClash follows the keys segs down the nested map m (the file's). At
// the first key m lacks, it returns that key's dotted path and the key m
// holds in another case, if any; "" otherwise.
func caseClash(m map[string]any, segs []string) (path, spelt string) {
	for i, seg := range segs {
		v, ok := m[seg]
		if !ok {
			for _, k := range sortedKeys(m) {
				if strings.EqualFold(k, seg) {
					return strings.Join(segs[:i+1], "."), k
				}
			}
			return "", ""
		}
		if m, ok = v.(map[string]any); !ok {
			return "", ""
		}
	}
	return "", ""
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
				ps = append(ps, Problem{Path: key, Value: redacted(key, val), Env: name,
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
