package node

import (
	"bufio"
	"reflect"
	"strings"
	"testing"
)

// readRESP reads each RESP2 reply kind the stamp read can meet (AUTH and
// SELECT's +OK, an error reply, ROLE's nested arrays, HMGET's bulk strings
// and nulls) and refuses malformed input.
func TestReadRESP(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want any
		err  string
	}{
		{in: "+OK\r\n", want: "OK"},
		{in: "-WRONGPASS invalid username-password pair\r\n", err: "WRONGPASS invalid username-password pair"},
		{in: ":42\r\n", want: int64(42)},
		{in: "$3\r\nabc\r\n", want: "abc"},
		{in: "$0\r\n\r\n", want: ""},
		{in: "$-1\r\n", want: nil},
		{in: "*-1\r\n", want: nil},
		{in: "*4\r\n$2\r\nn1\r\n$-1\r\n$2\r\n10\r\n$1\r\n0\r\n", want: []any{"n1", nil, "10", "0"}},
		{in: "*3\r\n$6\r\nmaster\r\n:3129659\r\n*1\r\n*3\r\n$9\r\n127.0.0.1\r\n$4\r\n9001\r\n$7\r\n3129242\r\n",
			want: []any{"master", int64(3129659), []any{[]any{"127.0.0.1", "9001", "3129242"}}}},
		{in: "?1\r\n", err: "unknown reply type"},
		{in: "+OK\n", err: "malformed reply line"},
		{in: "$x\r\n", err: "malformed bulk length"},
		{in: "$5\r\nab\r\n", err: "EOF"},
		{in: "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", err: "malformed array length"},
	} {
		got, err := readRESP(bufio.NewReader(strings.NewReader(tc.in)), 0)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, %v; want an error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %#v, %v; want %#v", tc.in, got, err, tc.want)
		}
	}
}

// appendCommands writes arrays of bulk strings, as redis-cli would.
func TestAppendCommands(t *testing.T) {
	got := string(appendCommands(nil, [][]string{{"AUTH", "pw"}, {"HMGET", StampKey, "name"}}))
	want := "*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*3\r\n$5\r\nHMGET\r\n$12\r\nshardis:node\r\n$4\r\nname\r\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
