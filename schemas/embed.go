// Package schemas embeds the topics' Protobuf schemas (wmrl/v1/*.proto, one file per topic), so
// the text a process registers with a schema registry is the checked-in source itself.
package schemas

import "embed"

// FS holds wmrl/v1/*.proto.
//
//go:embed wmrl/v1/*.proto
var FS embed.FS
