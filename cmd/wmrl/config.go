package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// envPrefix starts the environment variable of every option: --sasl-password is
// WMRL_SASL_PASSWORD.
const envPrefix = "WMRL_"

// envName maps a flag name to its environment variable.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyConfig fills every flag the user did not set on the command line from its WMRL_*
// environment variable, else from the YAML file. Going through pflag's Set keeps one parser per
// option, so env and file values are validated exactly like flags.
func applyConfig(fs *pflag.FlagSet, file string, lookup func(string) (string, bool)) error {
	if file == "" {
		file, _ = lookup(envName("config"))
	}
	values := map[string]string{}
	if file != "" {
		var err error
		if values, err = readConfigFile(file); err != nil {
			return err
		}
	}
	known := map[string]bool{}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		known[f.Name] = true
		if f.Changed || f.Name == "config" || f.Name == "help" {
			return
		}
		if v, ok := lookup(envName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("env %s=%q: %w", envName(f.Name), v, err))
			}
			return
		}
		if v, ok := values[f.Name]; ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("config %s: %s=%q: %w", file, f.Name, v, err))
			}
		}
	})
	for _, k := range slices.Sorted(maps.Keys(values)) {
		if !known[k] && !globalKey(k) {
			err := fmt.Errorf("config %s: unknown option %q for this command", file, k)
			if s := closest(k, slices.Sorted(maps.Keys(allFlagNames()))); s != "" {
				err = fmt.Errorf("%w (did you mean %s?)", err, s)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// globalKey reports whether k is an option of some other subcommand; a shared config file may
// carry options for several stages, so only names no command knows are rejected.
func globalKey(k string) bool { return allFlagNames()[k] }

var flagNamesCache map[string]bool

func allFlagNames() map[string]bool {
	if flagNamesCache != nil {
		return flagNamesCache
	}
	names := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
		for _, sc := range c.Commands() {
			walk(sc)
		}
	}
	walk(newRoot(&app{stdout: os.Stdout, stderr: os.Stderr}))
	flagNamesCache = names
	return names
}

// readConfigFile reads a flat YAML mapping of option name to scalar or list of scalars.
func readConfigFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		switch x := v.(type) {
		case []any:
			parts := make([]string, len(x))
			for i, e := range x {
				parts[i] = fmt.Sprint(e)
			}
			out[k] = strings.Join(parts, ",")
		case map[string]any:
			return nil, fmt.Errorf("config %s: option %q: nested mappings are not supported, use flat option names", path, k)
		case nil:
			out[k] = ""
		default:
			out[k] = fmt.Sprint(x)
		}
	}
	return out, nil
}
