// Package formattrial holds the format trial of docs/formats.md: decode benchmarks of the record
// topics in JSON (topics' decoders), Protobuf (topics' *Proto decoders) and Avro
// (github.com/hamba/avro/v2), each followed by the same topics Validate. It is its own module so
// the product does not depend on an Avro library it does not use.
package formattrial
