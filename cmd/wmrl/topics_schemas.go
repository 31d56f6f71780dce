package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/wmrl/wmrl/topics/schemareg"
)

// registerSchemas registers every topic's schema with the configured registry (none configured:
// nothing to do) and prints each subject's id, version and compatibility level.
func (o *topicsOptions) registerSchemas(ctx context.Context) error {
	reg, err := o.a.conn.SchemaRegistry()
	if err != nil || reg == nil {
		return err
	}
	ss, err := schemareg.Schemas(o.a.conn.Names())
	if err != nil {
		return err
	}
	regs, err := reg.Register(ctx, ss...)
	for _, r := range regs {
		fmt.Fprintf(o.a.stdout, "%-40s registered: id %d, version %d, %s\n", r.Subject, r.ID, r.Version, r.Compat)
	}
	return err
}

// checkSchemas prints, when a registry is configured, each topic's subject with its latest
// version, id and compatibility level, and returns how many are missing or at another level
// than --schema-compatibility.
func (o *topicsOptions) checkSchemas(ctx context.Context) (int, error) {
	reg, err := o.a.conn.SchemaRegistry()
	if err != nil || reg == nil {
		return 0, err
	}
	want := schemareg.DefaultCompat
	if c := o.a.conn.Registry.Compat; c != "" {
		if want, err = schemareg.ParseCompat(c); err != nil {
			return 0, err
		}
	}
	ss, err := schemareg.Schemas(o.a.conn.Names())
	if err != nil {
		return 0, err
	}
	tw := tabwriter.NewWriter(o.a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBJECT\tVERSION\tID\tCOMPATIBILITY\tSTATE")
	bad := 0
	for _, s := range ss {
		r, err := reg.Lookup(ctx, s.Topic)
		switch {
		case schemareg.IsCode(err, sr.ErrSubjectNotFound):
			bad++
			fmt.Fprintf(tw, "%s\t-\t-\t-\tmissing\n", schemareg.Subject(s.Topic))
			continue
		case err != nil:
			return bad, err
		}
		state := "ok"
		if r.Compat != want {
			bad++
			state = "compatibility is not " + want.String()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", r.Subject, r.Version, r.ID, r.Compat, state)
	}
	return bad, tw.Flush()
}
