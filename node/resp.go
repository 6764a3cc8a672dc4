package node

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
)

// RESP2 for the stamp read of a new connection (dialcheck.go), which runs
// on the raw connection before go-redis's handshake: commands as arrays of
// bulk strings, and the replies those commands get.

// appendCommands appends cmds to b in RESP (arrays of bulk strings).
func appendCommands(b []byte, cmds [][]string) []byte {
	for _, c := range cmds {
		b = append(b, '*')
		b = strconv.AppendInt(b, int64(len(c)), 10)
		b = append(b, '\r', '\n')
		for _, a := range c {
			b = append(b, '$')
			b = strconv.AppendInt(b, int64(len(a)), 10)
			b = append(b, '\r', '\n')
			b = append(b, a...)
			b = append(b, '\r', '\n')
		}
	}
	return b
}

// respError is an error reply read by readRESP.
type respError string

func (e respError) Error() string { return string(e) }

// readRESP reads one RESP2 reply: a simple or bulk string as string, an
// integer as int64, a null as nil, an array as []any (nested up to depth
// 4), an error reply as a respError error.
func readRESP(rd *bufio.Reader, depth int) (any, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("malformed reply line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return nil, respError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		return readBulk(rd, body)
	case '*':
		return readArray(rd, body, depth)
	}
	return nil, fmt.Errorf("unknown reply type %q", kind)
}

// readBulk reads a bulk string's body after its header (length body).
func readBulk(rd *bufio.Reader, body string) (any, error) {
	size, err := strconv.Atoi(body)
	if err != nil || size < -1 || size > 1<<20 {
		return nil, fmt.Errorf("malformed bulk length %q", body)
	}
	if size == -1 {
		return nil, nil
	}
	buf := make([]byte, size+2)
	if _, err := io.ReadFull(rd, buf); err != nil {
		return nil, err
	}
	return string(buf[:size]), nil
}

// readArray reads an array's elements after its header (length body), at
// nesting depth.
func readArray(rd *bufio.Reader, body string, depth int) (any, error) {
	size, err := strconv.Atoi(body)
	if err != nil || size < -1 || size > 1<<16 || depth >= 4 {
		return nil, fmt.Errorf("malformed array length %q", body)
	}
	if size == -1 {
		return nil, nil
	}
	out := make([]any, size)
	for i := range out {
		if out[i], err = readRESP(rd, depth+1); err != nil {
			return nil, err
		}
	}
	return out, nil
}
