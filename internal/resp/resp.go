// Package resp speaks the little of Redis's protocol (RESP2) that tidal needs: a command named
// by a redis:// URL, sent as an array of bulk strings, and its reply read through in place.
// The load generator drives a database with it, and the agent probes one for its latency.
package resp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// DefaultPort is Redis's, for a redis:// URL that names none.
const DefaultPort = "6379"

// MaxDepth bounds nested arrays: a reply nested deeper is treated as malformed rather than
// recursed into without end.
const MaxDepth = 8

// ErrMalformed is a reply that is not RESP2.
var ErrMalformed = errors.New("malformed RESP reply")

// Target is a server and the command to send it.
type Target struct {
	HostPort string   // host:port, the port DefaultPort where the URL names none
	Args     []string // the command and its arguments
}

// ParseURL reads redis://HOST[:PORT]/COMMAND/ARG/...: the path's segments, unescaped, are the
// command (redis://127.0.0.1:6379/SINTER/a/b). HOST may be empty where PORT is given
// (redis://:6379/PING), for a caller that fills it in.
func ParseURL(raw string) (Target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Target{}, err
	}
	if u.Scheme != "redis" {
		return Target{}, fmt.Errorf("%q is not a redis:// URL", u.Redacted())
	}
	if u.Host == "" {
		return Target{}, fmt.Errorf("URL %q has no host", u.Redacted())
	}
	hp := u.Host
	if u.Port() == "" {
		hp = net.JoinHostPort(u.Hostname(), DefaultPort)
	}
	var args []string
	for seg := range strings.SplitSeq(strings.Trim(u.EscapedPath(), "/"), "/") {
		arg, err := url.PathUnescape(seg)
		if err != nil {
			return Target{}, fmt.Errorf("URL %q: %v", u.Redacted(), err)
		}
		if arg != "" {
			args = append(args, arg)
		}
	}
	if len(args) == 0 {
		return Target{}, fmt.Errorf("URL %q names no command (want redis://HOST:PORT/COMMAND/ARG/…)", u.Redacted())
	}
	return Target{HostPort: hp, Args: args}, nil
}

// Command encodes args as a RESP array of bulk strings, the form a server reads commands in.
func Command(args []string) []byte {
	b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, "$"+strconv.Itoa(len(a))+"\r\n"+a+"\r\n"...)
	}
	return b
}

// ReadReply reads one whole reply from br and discards it, allocating nothing, and reports
// whether it (or an element of it) was an error reply. A non-nil error leaves br mid-reply:
// the connection must be dropped.
func ReadReply(br *bufio.Reader) (isErr bool, err error) {
	return readReply(br, 0)
}

func readReply(br *bufio.Reader, depth int) (isErr bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return false, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return false, ErrMalformed
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+', ':':
		return false, nil
	case '-':
		return true, nil
	case '$':
		n, ok := length(body)
		if !ok {
			return false, ErrMalformed
		}
		if n < 0 { // the null bulk string
			return false, nil
		}
		_, err := br.Discard(int(n) + 2)
		return false, err
	case '*':
		n, ok := length(body)
		if !ok || depth >= MaxDepth {
			return false, ErrMalformed
		}
		for range max(n, 0) {
			e, err := readReply(br, depth+1)
			if err != nil {
				return false, err
			}
			isErr = isErr || e
		}
		return isErr, nil
	}
	return false, ErrMalformed
}

// length reads a bulk string's or array's length: -1 (null) or a count.
func length(b []byte) (int64, bool) {
	if len(b) == 2 && b[0] == '-' && b[1] == '1' {
		return -1, true
	}
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int64(ch-'0')
	}
	return n, true
}

// Do sends each command to the server at addr on one connection and reads its reply: to check
// that a server answers (PING) or to fill it with data. An error reply is an error naming its
// command.
func Do(ctx context.Context, addr string, cmds ...[]string) error {
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
		if _, err := c.Write(Command(cmd)); err != nil {
			return fmt.Errorf("redis %s: %w", cmd[0], err)
		}
		if first, err := br.Peek(1); err == nil && first[0] == '-' {
			line, _ := br.ReadString('\n')
			return fmt.Errorf("redis %s: %s", cmd[0], strings.TrimSpace(line[1:]))
		}
		isErr, err := ReadReply(br)
		if err != nil {
			return fmt.Errorf("redis %s: %w", cmd[0], err)
		}
		if isErr {
			return fmt.Errorf("redis %s: an error within its reply", cmd[0])
		}
	}
	return nil
}
