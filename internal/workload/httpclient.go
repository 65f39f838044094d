package workload

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
)

// A minimal HTTP/1.1 client for one persistent connection: the request bytes
// are built once, the response is parsed in place from a bufio.Reader and
// the body discarded, so a request allocates nothing. It handles
// Content-Length, chunked and read-until-close bodies and "Connection:
// close".

var (
	errStatus    = errors.New("non-2xx status or Redis error reply")
	errMalformed = errors.New("malformed HTTP response")
)

var (
	bHTTP1            = []byte("HTTP/1.")
	bColon            = []byte(":")
	bComma            = []byte(",")
	bContentLength    = []byte("Content-Length")
	bTransferEncoding = []byte("Transfer-Encoding")
	bConnection       = []byte("Connection")
	bChunked          = []byte("chunked")
	bClose            = []byte("close")
	bKeepAlive        = []byte("keep-alive")
)

// target is what a load generator's worker sends on its connection, and how it reads the
// answer: ok means a successful response (2xx, or a Redis reply that is no error).
type target struct {
	hostport string
	request  []byte
	exchange func(c net.Conn, br *bufio.Reader, req []byte) (ok, keep bool, err error)
}

func parseTarget(raw string, gzip bool) (*target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("loadgen: bad URL %q: %v", raw, err)
	}
	switch u.Scheme {
	case "http":
	case "redis":
		if gzip {
			return nil, fmt.Errorf("loadgen: URL %q: gzip is for http:// only", raw)
		}
		return parseRedisTarget(raw)
	default:
		return nil, fmt.Errorf("loadgen: URL %q: only http:// and redis:// are supported", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("loadgen: URL %q has no host", raw)
	}
	hp := u.Host
	if u.Port() == "" {
		hp = net.JoinHostPort(u.Hostname(), "80")
	}
	path := u.RequestURI()
	accept := ""
	if gzip {
		accept = "Accept-Encoding: gzip\r\n"
	}
	req := "GET " + path + " HTTP/1.1\r\nHost: " + u.Host +
		"\r\nUser-Agent: tidal-loadgen\r\nAccept: */*\r\n" + accept + "\r\n"
	return &target{hostport: hp, request: []byte(req), exchange: httpExchange}, nil
}

// httpExchange is one HTTP request and response; ok for a 2xx status.
func httpExchange(c net.Conn, br *bufio.Reader, req []byte) (ok, keep bool, err error) {
	code, keep, err := roundTrip(c, br, req)
	return code >= 200 && code <= 299, keep, err
}

// roundTrip writes the request and reads one response from br. It returns
// the status code and whether the connection may be reused; a non-nil error
// means the connection is broken (or the response malformed) and must be
// dropped.
func roundTrip(c net.Conn, br *bufio.Reader, req []byte) (code int, keep bool, err error) {
	if _, err := c.Write(req); err != nil {
		return 0, false, err
	}
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, bHTTP1) || line[8] != ' ' {
		return 0, false, errMalformed
	}
	for _, ch := range line[9:12] {
		if ch < '0' || ch > '9' {
			return 0, false, errMalformed
		}
		code = code*10 + int(ch-'0')
	}
	contentLength := int64(-1)
	chunked, closeConn := false, line[7] == '0' // HTTP/1.0 closes by default
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			return 0, false, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, val, ok := bytes.Cut(h, bColon)
		if !ok {
			return 0, false, errMalformed
		}
		val = bytes.TrimSpace(val)
		switch {
		case bytes.EqualFold(name, bContentLength):
			n, ok := parseUint(val, 10)
			if !ok {
				return 0, false, errMalformed
			}
			contentLength = n
		case bytes.EqualFold(name, bTransferEncoding):
			chunked = containsFold(val, bChunked)
		case bytes.EqualFold(name, bConnection):
			if containsFold(val, bClose) {
				closeConn = true
			} else if containsFold(val, bKeepAlive) {
				closeConn = false
			}
		}
	}
	switch {
	case code/100 == 1 || code == 204 || code == 304:
		// no body
	case chunked:
		if err := discardChunked(br); err != nil {
			return 0, false, err
		}
	case contentLength >= 0:
		if _, err := br.Discard(int(contentLength)); err != nil {
			return 0, false, err
		}
	default:
		if _, err := io.Copy(io.Discard, br); err != nil {
			return 0, false, err
		}
		closeConn = true
	}
	return code, !closeConn, nil
}

func discardChunked(br *bufio.Reader) error {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		n, ok := parseUint(bytes.TrimSpace(line), 16)
		if !ok {
			return errMalformed
		}
		if n == 0 {
			for { // trailers up to the empty line
				t, err := br.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(t, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if _, err := br.Discard(int(n) + 2); err != nil {
			return err
		}
	}
}

func parseUint(b []byte, base int64) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, ch := range b {
		var d int64
		switch {
		case ch >= '0' && ch <= '9':
			d = int64(ch - '0')
		case base == 16 && ch >= 'a' && ch <= 'f':
			d = int64(ch-'a') + 10
		case base == 16 && ch >= 'A' && ch <= 'F':
			d = int64(ch-'A') + 10
		default:
			return 0, false
		}
		n = n*base + d
	}
	return n, true
}

// containsFold reports whether the comma-separated header value contains tok.
func containsFold(val, tok []byte) bool {
	for len(val) > 0 {
		var part []byte
		part, val, _ = bytes.Cut(val, bComma)
		if bytes.EqualFold(bytes.TrimSpace(part), tok) {
			return true
		}
	}
	return false
}
