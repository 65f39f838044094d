package workload

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// A minimal Redis (RESP2) client for one persistent connection, so the load generator drives
// a database as well as web servers: the command's bytes are built once and each reply is read
// through in place, allocating nothing.

// maxRESPDepth bounds nested arrays: a reply nested deeper is treated as malformed rather than
// recursed into without end.
const maxRESPDepth = 8

// parseRedisTarget reads redis://HOST[:PORT]/COMMAND/ARG/...: the path's segments, unescaped,
// are the command sent for every request (redis://127.0.0.1:6379/SINTER/a/b).
func parseRedisTarget(u *url.URL) (*target, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("loadgen: URL %q has no host", u.Redacted())
	}
	hp := u.Host
	if u.Port() == "" {
		hp = net.JoinHostPort(u.Hostname(), "6379")
	}
	var args []string
	for seg := range strings.SplitSeq(strings.Trim(u.EscapedPath(), "/"), "/") {
		arg, err := url.PathUnescape(seg)
		if err != nil {
			return nil, fmt.Errorf("loadgen: URL %q: %v", u.Redacted(), err)
		}
		if arg != "" {
			args = append(args, arg)
		}
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("loadgen: URL %q names no command (want redis://HOST:PORT/COMMAND/ARG/…)", u.Redacted())
	}
	return &target{hostport: hp, request: respCommand(args), exchange: respRoundTrip}, nil
}

// respCommand encodes args as a RESP array of bulk strings, the form a server reads commands in.
func respCommand(args []string) []byte {
	b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, "$"+strconv.Itoa(len(a))+"\r\n"+a+"\r\n"...)
	}
	return b
}

// respRoundTrip writes the command and reads its whole reply from br. ok is false for an error
// reply (the connection stays usable); a non-nil error means the connection must be dropped.
func respRoundTrip(c net.Conn, br *bufio.Reader, req []byte) (ok, keep bool, err error) {
	if _, err := c.Write(req); err != nil {
		return false, false, err
	}
	isErr, err := readRESP(br, 0)
	if err != nil {
		return false, false, err
	}
	return !isErr, true, nil
}

// readRESP reads one reply and discards it, reporting whether it (or an element of it) was
// an error reply.
func readRESP(br *bufio.Reader, depth int) (isErr bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return false, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return false, errMalformed
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+', ':':
		return false, nil
	case '-':
		return true, nil
	case '$':
		n, ok := respLength(body)
		if !ok {
			return false, errMalformed
		}
		if n < 0 { // the null bulk string
			return false, nil
		}
		_, err := br.Discard(int(n) + 2)
		return false, err
	case '*':
		n, ok := respLength(body)
		if !ok || depth >= maxRESPDepth {
			return false, errMalformed
		}
		for range max(n, 0) {
			e, err := readRESP(br, depth+1)
			if err != nil {
				return false, err
			}
			isErr = isErr || e
		}
		return isErr, nil
	}
	return false, errMalformed
}

// respLength reads a bulk string's or array's length: -1 (null) or a count.
func respLength(b []byte) (int64, bool) {
	if len(b) == 2 && b[0] == '-' && b[1] == '1' {
		return -1, true
	}
	return parseUint(b, 10)
}

// RedisCommands sends each command to the Redis server at addr on one connection and reads its
// reply: to check that a server answers (PING) or to fill it with the data a load asks for.
// An error reply is an error naming its command.
func RedisCommands(ctx context.Context, addr string, cmds ...[]string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		if err := c.SetDeadline(dl); err != nil {
			return err
		}
	}
	br := bufio.NewReader(c)
	for _, cmd := range cmds {
		if _, err := c.Write(respCommand(cmd)); err != nil {
			return fmt.Errorf("redis %s: %w", cmd[0], err)
		}
		if first, err := br.Peek(1); err == nil && first[0] == '-' {
			line, _ := br.ReadString('\n')
			return fmt.Errorf("redis %s: %s", cmd[0], strings.TrimSpace(line[1:]))
		}
		isErr, err := readRESP(br, 0)
		if err != nil {
			return fmt.Errorf("redis %s: %w", cmd[0], err)
		}
		if isErr {
			return fmt.Errorf("redis %s: an error within its reply", cmd[0])
		}
	}
	return nil
}
