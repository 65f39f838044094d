package resp

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// Every kind of reply is read through exactly, to the next reply's first byte; an error reply,
// or one nested within an array, says so; anything else is malformed.
func TestReadReply(t *testing.T) {
	cases := []struct {
		reply         string
		isErr, broken bool
	}{
		{"+OK\r\nNEXT", false, false},
		{":42\r\nNEXT", false, false},
		{"$5\r\nhello\r\nNEXT", false, false},
		{"$-1\r\nNEXT", false, false},
		{"*3\r\n$1\r\na\r\n:7\r\n*1\r\n+x\r\nNEXT", false, false},
		{"*-1\r\nNEXT", false, false},
		{"-ERR wrong number of arguments\r\nNEXT", true, false},
		{"*2\r\n+a\r\n-WRONGTYPE\r\nNEXT", true, false},
		{"garbage\r\n", false, true},
		{"$x\r\n", false, true},
		{"+OK\n", false, true},
		{"$5\r\nhel", false, true},
		{strings.Repeat("*1\r\n", MaxDepth+1) + "+x\r\n", false, true},
	}
	for _, c := range cases {
		br := bufio.NewReader(strings.NewReader(c.reply))
		isErr, err := ReadReply(br)
		if (err != nil) != c.broken || isErr != c.isErr {
			t.Errorf("%q: isErr=%v err=%v", c.reply, isErr, err)
		}
		if !c.broken {
			if rest, _ := io.ReadAll(br); string(rest) != "NEXT" {
				t.Errorf("%q: reply not consumed exactly, left %q", c.reply, rest)
			}
		}
	}
}

func TestParseURL(t *testing.T) {
	good := map[string]Target{
		"redis://127.0.0.1/SINTER/a%2Fb/c": {HostPort: "127.0.0.1:6379", Args: []string{"SINTER", "a/b", "c"}},
		"redis://[::1]:7000/PING":          {HostPort: "[::1]:7000", Args: []string{"PING"}},
		"redis://:6380/PING":               {HostPort: ":6380", Args: []string{"PING"}},
	}
	for raw, want := range good {
		got, err := ParseURL(raw)
		if err != nil || got.HostPort != want.HostPort || strings.Join(got.Args, " ") != strings.Join(want.Args, " ") {
			t.Errorf("%s: %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for _, bad := range []string{"redis://127.0.0.1:6379/", "redis:///PING", "redis://127.0.0.1/%zz", "http://127.0.0.1/PING", "::"} {
		if _, err := ParseURL(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	if got := string(Command([]string{"SET", "k", ""})); got != "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n" {
		t.Errorf("Command = %q", got)
	}
}

// Do sends its commands in order on one connection and names the one a server refused.
func TestDoNamesTheRefusedCommand(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		// Two commands: the first is answered, the second refused.
		for _, reply := range []string{"+PONG\r\n", "-ERR unknown command 'NOPE'\r\n"} {
			if _, err := ReadReply(br); err != nil { // a command is an array, readable as a reply
				return
			}
			c.Write([]byte(reply))
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = Do(ctx, ln.Addr().String(), []string{"PING"}, []string{"NOPE"})
	if err == nil || !strings.Contains(err.Error(), "redis NOPE: ERR unknown command") {
		t.Errorf("Do = %v, want the refused command named", err)
	}
}
