package config

import (
	"reflect"
	"strings"
	"testing"
)

// A section set from one variable is refused with the value it was given,
// redacted as every other problem's: a node's URL loses its password there
// too (it once printed SHARDIS_NODES=redis://:hunter2@… as written, where
// SHARDIS_NODES__N1 with the same value was redacted).
func TestMisspeltSectionVariableRedactsURLPassword(t *testing.T) {
	yaml := "nodes:\n  n1: {addr: 127.0.0.1:7001}\nservers:\n  inventory:\n    routes:\n      r: [n1]\n"
	for _, env := range []string{
		"SHARDIS_NODES=redis://:hunter2@10.0.0.1:6379",
		"SHARDIS_NODES__N1=redis://:hunter2@10.0.0.1:6379",
	} {
		_, err := Parse([]byte(yaml), []string{env})
		if err == nil {
			t.Fatalf("%s: Parse accepted it", env)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the problem prints the password:\n%v", env, err)
		}
		if !strings.Contains(err.Error(), "redis://:redacted@10.0.0.1:6379") {
			t.Errorf("%s: the problem does not print the URL without its password:\n%v", env, err)
		}
	}
}

// TestServiceStringNamesEveryField: Service's String names every field of
// the settings (the auth token redacted); it once left out GRPCListen.
func TestServiceStringNamesEveryField(t *testing.T) {
	s := Default().Service
	s.AuthToken = "hunter2"
	got := s.String()
	for _, f := range reflect.VisibleFields(reflect.TypeOf(s)) {
		if !strings.Contains(got, f.Name+":") {
			t.Errorf("Service.String() = %s: no %s", got, f.Name)
		}
	}
	if strings.Contains(got, "hunter2") {
		t.Errorf("Service.String() = %s: prints the auth token", got)
	}
}
