package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/wmrl/wmrl/topics"
	"github.com/wmrl/wmrl/topics/schemareg"
)

// errRegistryNeedsProtobuf refuses --format json with --schema-registry: the registry holds the
// Protobuf schemas, and a JSON record has no frame to carry a schema id.
var errRegistryNeedsProtobuf = errors.New("--schema-registry frames Protobuf records: drop --format json (a registry implies --format protobuf) or drop --schema-registry")

// resolveFormat makes --schema-registry imply --format protobuf when --format was not given (by
// flag, env or config file), and refuses an explicit json.
func (a *app) resolveFormat(cmd *cobra.Command) error {
	if !a.conn.Registry.Configured() {
		return nil
	}
	if f := cmd.Flags().Lookup("format"); f != nil && f.Changed {
		if a.conn.Format != topics.FormatProtobuf {
			return errRegistryNeedsProtobuf
		}
		return nil
	}
	a.conn.Format = topics.FormatProtobuf
	return nil
}

// useRegistry is the start-up step of the commands that write or read the record topics: with
// --schema-registry it registers every topic's schema (or finds it registered) and puts the
// registry on a.conn's Names, so what they write is Confluent-framed and the schema ids of what
// they read are checked. Without a registry it does nothing.
func (a *app) useRegistry() error {
	reg, err := a.conn.SchemaRegistry()
	if err != nil || reg == nil {
		return err
	}
	ss, err := schemareg.Schemas(a.conn.Names())
	if err != nil {
		return err
	}
	if _, err := reg.Register(a.startupContext(), ss...); err != nil {
		return fmt.Errorf("--schema-registry: %w", err)
	}
	a.conn.Framer = reg
	return nil
}
