package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/wmrl/wmrl/sim"
)

// pairedFiles are what simulate writes beside its report when anchor policies are compared.
const (
	pairedCSV = "paired.csv"
	pairedMD  = "paired.md"
)

// writePaired prints the blocks' paired tables (docs/anchors.md, "Metrics and intervals") to w
// and, if out is not empty, writes them to out/paired.md and out/paired.csv, the csv's rows
// prefixed by each block's values of keys. title names a block in the Markdown (empty: no heading).
func writePaired(w io.Writer, out string, keys []string, blocks []sim.PairedBlock, title func(sim.PairedBlock) string, targetFraction float64) error {
	md := func(w io.Writer) error {
		for _, b := range blocks {
			if t := title(b); t != "" {
				if _, err := fmt.Fprintf(w, "\n### %s\n\n", t); err != nil {
					return err
				}
			}
			if err := sim.PairedTable(w, b.Comparisons, targetFraction); err != nil {
				return err
			}
		}
		return nil
	}
	fmt.Fprintln(w, "\npaired comparisons by seed (a policy arm vs the same arm under random anchors; a gated arm vs the same arm without the gate):")
	if err := md(w); err != nil {
		return err
	}
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if err := writeFile(filepath.Join(out, pairedMD), func(f *os.File) error { return md(f) }); err != nil {
		return err
	}
	return writeFile(filepath.Join(out, pairedCSV), func(f *os.File) error { return sim.WritePairedGridCSV(f, keys, blocks) })
}
