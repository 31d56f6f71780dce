package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestEveryCommandHasParsingExamples: every runnable command's help has an Examples section,
// and every example in it names a real command whose flags and arguments parse.
func TestEveryCommandHasParsingExamples(t *testing.T) {
	var walk func(c *cobra.Command)
	var cmds []*cobra.Command
	walk = func(c *cobra.Command) {
		if c.Runnable() && !c.Hidden && c.Name() != "help" && c.Name() != "completion" && c.Parent() != nil && c.Parent().Name() != "completion" {
			cmds = append(cmds, c)
		}
		for _, sc := range c.Commands() {
			walk(sc)
		}
	}
	walk(newRoot(&app{}))
	if len(cmds) < 15 {
		t.Fatalf("only %d commands found; the walk is broken", len(cmds))
	}
	for _, c := range cmds {
		t.Run(c.CommandPath(), func(t *testing.T) {
			if strings.TrimSpace(c.Example) == "" {
				t.Fatalf("%s --help has no Examples section", c.CommandPath())
			}
			for _, line := range strings.Split(c.Example, "\n") {
				line = strings.TrimSpace(line)
				if _, after, piped := strings.Cut(line, "| "); piped {
					line = after
				}
				words, err := shellWords(line)
				if err != nil || len(words) == 0 || words[0] != "wmrl" {
					t.Errorf("example %q: not a wmrl command line (%v)", line, err)
					continue
				}
				// A fresh tree per example: parsing sets flag values.
				found, rest, err := newRoot(&app{}).Find(words[1:])
				if err != nil || found.CommandPath() != c.CommandPath() {
					t.Errorf("example %q runs %v (%v), want %s", line, found.CommandPath(), err, c.CommandPath())
					continue
				}
				if err := found.ParseFlags(rest); err != nil {
					t.Errorf("example %q: %v", line, err)
					continue
				}
				if err := found.ValidateArgs(found.Flags().Args()); err != nil {
					t.Errorf("example %q: %v", line, err)
				}
			}
		})
	}
}

// shellWords splits a command line as a POSIX shell would for the quoting the examples use:
// single quotes, double quotes and blanks.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, errUnclosedQuote
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

var errUnclosedQuote = errors.New("unclosed quote")
