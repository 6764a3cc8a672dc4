package config

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// decoder turns the nested map koanf produced into a Config, strictly: an
// unknown key or a value of the wrong type is a problem, and decoding goes
// on so that every problem is reported at once.
type decoder struct {
	problems *Problems
}

var durationType = reflect.TypeOf(time.Duration(0))

// decodeStruct decodes raw onto the struct v (which already holds defaults).
func (d decoder) decodeStruct(path string, raw any, v reflect.Value) {
	m, ok := asMap(raw)
	if !ok {
		d.problems.add(path, raw, "want a mapping of keys")
		return
	}
	t := v.Type()
	fields := make(map[string]int, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		if tag := t.Field(i).Tag.Get("koanf"); tag != "" {
			fields[tag] = i
		}
	}
	for _, key := range sortedKeys(m) {
		p := join(path, key)
		if p == "" {
			p = `""` // an empty top-level key ("": in YAML, SHARDIS___X): still name it
		}
		i, ok := fields[key]
		if !ok {
			d.problems.add(p, nil, "unknown key (known: "+strings.Join(sortedKeys(fields), ", ")+")")
			continue
		}
		d.decodeValue(p, m[key], v.Field(i))
	}
}

// decodeValue decodes raw into v according to v's type.
func (d decoder) decodeValue(path string, raw any, v reflect.Value) {
	if raw == nil {
		return // an empty YAML value keeps the default
	}
	if v.Type() == durationType {
		dur, err := parseDuration(raw)
		if err != nil {
			d.problems.add(path, raw, err.Error())
			return
		}
		v.SetInt(int64(dur))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.decodeStruct(path, raw, v)
	case reflect.String:
		s, ok := raw.(string)
		if !ok {
			d.problems.add(path, raw, "want a string (quote the value)")
			return
		}
		v.SetString(s)
	case reflect.Int:
		n, err := parseInt(raw)
		if err != nil {
			d.problems.add(path, raw, err.Error())
			return
		}
		v.SetInt(n)
	case reflect.Bool:
		b, err := parseBool(raw)
		if err != nil {
			d.problems.add(path, raw, err.Error())
			return
		}
		v.SetBool(b)
	case reflect.Slice:
		d.decodeSlice(path, raw, v)
	case reflect.Map:
		d.decodeMap(path, raw, v)
	default:
		panic("config: unsupported field kind " + v.Kind().String() + " at " + path)
	}
}

// decodeSlice decodes a YAML list, or a comma-separated string (the form
// environment variables take), into v.
func (d decoder) decodeSlice(path string, raw any, v reflect.Value) {
	var items []any
	switch r := raw.(type) {
	case []any:
		items = r
	case string:
		for _, s := range strings.Split(r, ",") {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, s)
			}
		}
	default:
		d.problems.add(path, raw, "want a list")
		return
	}
	out := reflect.MakeSlice(v.Type(), len(items), len(items))
	for i, item := range items {
		d.decodeValue(fmt.Sprintf("%s[%d]", path, i), item, out.Index(i))
	}
	v.Set(out)
}

// decodeMap decodes a mapping into the map v. Struct elements start from
// their per-entry defaults.
func (d decoder) decodeMap(path string, raw any, v reflect.Value) {
	m, ok := asMap(raw)
	if !ok {
		d.problems.add(path, raw, "want a mapping of names")
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	for _, key := range sortedKeys(m) {
		elem := reflect.New(v.Type().Elem()).Elem()
		if old := v.MapIndex(reflect.ValueOf(key)); old.IsValid() {
			elem.Set(old)
		} else {
			switch elem.Addr().Interface().(type) {
			case *Node:
				elem.Set(reflect.ValueOf(defaultNode()))
			case *Server:
				elem.Set(reflect.ValueOf(defaultServer()))
			}
		}
		d.decodeValue(join(path, key), m[key], elem)
		v.SetMapIndex(reflect.ValueOf(key), elem)
	}
}

func asMap(raw any) (map[string]any, bool) {
	switch m := raw.(type) {
	case map[string]any:
		return m, true
	case nil:
		return map[string]any{}, true
	}
	return nil, false
}

// parseDuration reads a duration: a string with a unit ("500ms", "2s"),
// or a bare 0 (YAML's integer, as in `hold_back: 0`), which needs none.
// Any other bare number is refused: its unit would be a guess.
func parseDuration(raw any) (time.Duration, error) {
	s, ok := raw.(string)
	if !ok {
		if n, err := parseInt(raw); err == nil && n == 0 {
			return 0, nil
		}
		return 0, fmt.Errorf("want a duration with a unit, like 500ms or 2s")
	}
	dur, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		if durationForm.MatchString(strings.TrimSpace(s)) { // well formed: too long for a time.Duration
			return 0, fmt.Errorf("want a duration of at most %v", time.Duration(math.MaxInt64))
		}
		return 0, fmt.Errorf("want a duration with a unit, like 500ms or 2s")
	}
	return dur, nil
}

// durationForm matches what time.ParseDuration reads (numbers, each with
// a unit), whatever its size: a value of this form it refuses is out of
// time.Duration's range.
var durationForm = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

func parseInt(raw any) (int64, error) {
	switch n := raw.(type) {
	case int:
		return int64(n), nil
	case int64:
		return n, nil
	case uint64:
		if n > 1<<62 {
			return 0, fmt.Errorf("integer too large")
		}
		return int64(n), nil
	case float64:
		if n == float64(int64(n)) {
			return int64(n), nil
		}
	case string:
		if i, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64); err == nil {
			return i, nil
		}
	}
	return 0, fmt.Errorf("want an integer")
}

func parseBool(raw any) (bool, error) {
	switch b := raw.(type) {
	case bool:
		return b, nil
	case string:
		if v, err := strconv.ParseBool(strings.TrimSpace(b)); err == nil {
			return v, nil
		}
	}
	return false, fmt.Errorf("want true or false")
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
