package yamlconf

import (
	"cmp"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Error is one problem in a file: where it is and what is wrong, shown as
// "file:line: key: message". Parsers return one Error per problem, joined with JoinErrors.
type Error struct {
	File string // file name as given to the parser; "" when not from a file (Validate)
	Line int    // 1-based; 0 when unknown
	Key  string // full key path, such as "cpu.growStepMilliCPU"; "" for the whole file
	Msg  string // what is wrong and what is allowed
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			b.WriteString(":")
			b.WriteString(strconv.Itoa(e.Line))
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// SyntaxError turns a YAML syntax error ("yaml: line 3: did not find expected
// key") into an Error with file and line.
//
// The YAML library counts lines from 1 in scanner errors but from 0 in
// parser errors, and leaves the line out when its count is 0; this puts
// both on a 1-based count.
func SyntaxError(name string, err error) error {
	line, msg := syntaxErrorLine(err)
	return &Error{File: name, Line: line, Msg: "invalid YAML: " + msg}
}

// syntaxErrorLine splits a YAML syntax error into its 1-based line (0 when it has none) and
// message.
func syntaxErrorLine(err error) (line int, msg string) {
	msg = strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, after, ok := strings.Cut(rest, ": "); ok {
			if v, err := strconv.Atoi(n); err == nil {
				line, msg = v, after
			}
		}
	}
	switch {
	case yamlParserProblems[msg]:
		line++
	case line == 0 && isYAMLScannerProblem(msg):
		line = 1
	}
	return line, msg
}

// yamlParserProblems are the messages of the YAML library's parser errors.
var yamlParserProblems = map[string]bool{
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"did not find expected '-' indicator":    true,
	"did not find expected <document start>": true,
	"did not find expected <stream-start>":   true,
	"did not find expected key":              true,
	"did not find expected node content":     true,
	"found duplicate %TAG directive":         true,
	"found duplicate %YAML directive":        true,
	"found incompatible YAML document":       true,
	"found undefined tag handle":             true,
}

// isYAMLScannerProblem tells the YAML library's scanner errors, which have
// a position, from its other errors (unknown anchor, bad UTF-8), which may not.
func isYAMLScannerProblem(msg string) bool {
	for _, p := range []string{"did not find ", "could not find ", "found ", "block sequence entries are not allowed", "mapping keys are not allowed", "mapping values are not allowed", "exceeded max depth"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// JoinErrors sorts errs by line, problems without a line last, and joins
// them one per line.
func JoinErrors(errs []*Error) error {
	slices.SortStableFunc(errs, func(a, b *Error) int {
		return cmp.Compare(lineKey(a), lineKey(b))
	})
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

func lineKey(e *Error) int {
	if e.Line <= 0 {
		return math.MaxInt
	}
	return e.Line
}
