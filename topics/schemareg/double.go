package schemareg

import "github.com/twmb/franz-go/pkg/sr/srfake"

// NewDouble starts an in-process stand-in for a schema registry, for fast unit tests (and the
// embedded demo, once its stages frame records): franz-go's srfake, the Confluent REST API in memory behind an
// httptest server on 127.0.0.1 (URL() is its base URL; Close stops it). It registers, hands out
// ids and versions, and keeps compatibility levels, but it checks no compatibility rule: every
// schema is accepted, whatever the level (srfake's documented limit). The evolution rules are
// tested against a real registry (deploy/local/registry.sh) and by the schema folder's own check.
func NewDouble() *srfake.Registry { return srfake.New() }
