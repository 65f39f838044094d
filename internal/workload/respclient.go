package workload

import (
	"bufio"
	"fmt"
	"net"

	"github.com/tidalqos/tidal/internal/resp"
)

// The load generator drives a database as well as web servers, over one persistent connection
// per worker: the command's bytes are built once and each reply is read through in place,
// allocating nothing (package resp).

// parseRedisTarget reads redis://HOST[:PORT]/COMMAND/ARG/...: the path's segments, unescaped,
// are the command sent for every request (redis://127.0.0.1:6379/SINTER/a/b).
func parseRedisTarget(raw string) (*target, error) {
	t, err := resp.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("loadgen: %v", err)
	}
	return &target{hostport: t.HostPort, request: resp.Command(t.Args), exchange: respRoundTrip}, nil
}

// respRoundTrip writes the command and reads its whole reply from br. ok is false for an error
// reply (the connection stays usable); a non-nil error means the connection must be dropped.
func respRoundTrip(c net.Conn, br *bufio.Reader, req []byte) (ok, keep bool, err error) {
	if _, err := c.Write(req); err != nil {
		return false, false, err
	}
	isErr, err := resp.ReadReply(br)
	if err != nil {
		return false, false, err
	}
	return !isErr, true, nil
}
