// Package schemareg puts wmrl's topics in a Confluent-compatible schema registry and frames their
// records in the Confluent wire format (magic byte 0, 4-byte big-endian schema id, for Protobuf
// the message-index list, then the payload), so tools that are not wmrl (Kafka Connect, Flink,
// ksqlDB, confluent-kafka's deserializers) can read the topics through the registry alone.
//
// At start-up a process registers (or finds: registering an identical schema returns its id)
// each topic's schema under the subject `<topic>-value` (TopicNameStrategy) and sets the
// subject's compatibility level, BACKWARD by default. Ids are cached; framing never calls the
// registry. Unframing looks up an id it has not seen once: an id of the topic's subject is cached
// for good (a registered schema never changes), an id the registry does not know is
// topics.ErrSchemaNotRegistered, an id of another subject topics.ErrSchemaMismatch — both
// dead-lettered by the stages with their own reason, and remembered only for Config.NegativeTTL
// — while a registry that cannot be reached is a plain error, for the caller to retry, never a
// dead letter.
//
// The framing is franz-go's (sr.ConfluentHeader); the HTTP client is sr.Client.
package schemareg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/wmrl/wmrl/schemas"
	"github.com/wmrl/wmrl/topics"
)

// DefaultCompat is the compatibility level set on every subject unless configured otherwise:
// consumers upgraded first can read what older producers wrote (a field added as optional is
// allowed, a field removed or retyped is refused by the registry).
const DefaultCompat = sr.CompatBackward

// maxNegative bounds how many unknown or foreign ids a Registry remembers, so that a stream of
// garbage ids cannot grow its memory; past it, such ids are looked up again.
const maxNegative = 1024

// DefaultNegativeTTL is how long an id found unknown or foreign is answered from memory before
// the registry is asked again. An unknown id is not final: a registry whose nodes catch up
// asynchronously (Apicurio on kafkasql storage, Confluent followers) can miss an id another node
// has just handed out, and an id of another subject becomes ours when a writer registers the same
// schema text under our subject (registries give identical schemas one id). 30 s keeps a stream
// of bad ids to one registry call per id per 30 s (at most maxNegative ids: ~34 calls/s in the
// worst case) while a writer that registered late has its records dead-lettered for at most 30 s.
const DefaultNegativeTTL = 30 * time.Second

// Subject is the registry subject of a topic's record values (TopicNameStrategy).
func Subject(topic string) string { return topic + "-value" }

// topicSchemas maps each topic (by suffix) to its schema file in package schemas. The runs topic
// has none: it carries end requests, written only by wmrl's own trainers and operators.
var topicSchemas = map[string]string{
	topics.SuffixRollouts:    "wmrl/v1/rollout.proto",
	topics.SuffixSteps:       "wmrl/v1/step.proto",
	topics.SuffixPredicted:   "wmrl/v1/predicted.proto",
	topics.SuffixExecuted:    "wmrl/v1/executed.proto",
	topics.SuffixAdvantages:  "wmrl/v1/advantages.proto",
	topics.SuffixCalibration: "wmrl/v1/calibration.proto",
	topics.SuffixDLQ:         "wmrl/v1/dead_letter.proto",
}

// TopicSchema is one topic's value schema as registered.
type TopicSchema struct {
	Topic  string
	Schema sr.Schema
}

// Schemas returns the schema of every topic of names that has one (all but the runs topic), in
// names.All's order, read from the checked-in schema folder.
func Schemas(names topics.Names) ([]TopicSchema, error) {
	var out []TopicSchema
	for _, t := range names.All() {
		file, ok := topicSchemas[t[len(names.EffectivePrefix()):]]
		if !ok {
			continue
		}
		text, err := fs.ReadFile(schemas.FS, file)
		if err != nil {
			return nil, fmt.Errorf("schemareg: schema of %s: %w", t, err)
		}
		out = append(out, TopicSchema{Topic: t, Schema: sr.Schema{Schema: string(text), Type: sr.TypeProtobuf}})
	}
	return out, nil
}

// Config says how to reach a registry.
type Config struct {
	// URLs are the registry's base URLs (Apicurio: http://host:port/apis/ccompat/v7); several
	// are tried in order.
	URLs []string
	// Compat is the compatibility level set on each subject at Register; empty: DefaultCompat.
	Compat sr.CompatibilityLevel
	// Opts are further sr.Client options: sr.BasicAuth, sr.BearerToken, sr.DialTLSConfig,
	// sr.HTTPClient.
	Opts []sr.ClientOpt
	// NegativeTTL is how long an unknown or foreign id's verdict is remembered; 0:
	// DefaultNegativeTTL. It must not be negative.
	NegativeTTL time.Duration
}

// Registered is what the registry holds for one topic's subject.
type Registered struct {
	Topic   string
	Subject string
	// ID is the schema id records are framed with; Version the subject version it is.
	ID      int
	Version int
	// Compat is the subject's compatibility level as the registry reports it.
	Compat sr.CompatibilityLevel
}

// Registry registers topics' schemas and frames and unframes their records. It is safe for
// concurrent use.
type Registry struct {
	cl     *sr.Client
	compat sr.CompatibilityLevel
	hdr    sr.ConfluentHeader

	mu sync.RWMutex
	// byTopic is each registered topic's current (framing) id.
	byTopic map[string]Registered
	// accepted holds, per topic, every id known to be one of its subject's versions.
	accepted map[string]map[int]bool
	// negative remembers ids found unknown (ErrSchemaNotRegistered) or foreign, per topic, until
	// their verdict expires; nneg counts them (bounded by maxNegative).
	negative map[string]map[int]negVerdict
	nneg     int
	negTTL   time.Duration
	// now is the clock verdicts expire by (a test's own clock in tests).
	now func() time.Time
}

// negVerdict is a remembered refusal of an id and when it stops being believed.
type negVerdict struct {
	err     error
	expires time.Time
}

// New returns a Registry for cfg. It does not contact the registry; Register does.
func New(cfg Config) (*Registry, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("schemareg: no registry URL")
	}
	compat := cfg.Compat
	if compat == 0 {
		compat = DefaultCompat
	}
	if _, err := compat.MarshalText(); err != nil {
		return nil, fmt.Errorf("schemareg: compatibility level %d: %w", compat, err)
	}
	ttl := cfg.NegativeTTL
	switch {
	case ttl < 0:
		return nil, fmt.Errorf("schemareg: negative TTL %v: must not be negative", ttl)
	case ttl == 0:
		ttl = DefaultNegativeTTL
	}
	opts := append([]sr.ClientOpt{sr.URLs(cfg.URLs...), sr.UserAgent("wmrl")}, cfg.Opts...)
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schemareg: client: %w", err)
	}
	return &Registry{
		cl: cl, compat: compat,
		byTopic:  make(map[string]Registered),
		accepted: make(map[string]map[int]bool),
		negative: make(map[string]map[int]negVerdict),
		negTTL:   ttl, now: time.Now,
	}, nil
}

// NegativeTTL is how long a refused id's verdict is answered from memory (Config.NegativeTTL).
func (r *Registry) NegativeTTL() time.Duration { return r.negTTL }

// Client is the underlying registry client (for checks and tests).
func (r *Registry) Client() *sr.Client { return r.cl }

// ParseCompat parses a compatibility level name (BACKWARD, FULL_TRANSITIVE, NONE, …).
func ParseCompat(s string) (sr.CompatibilityLevel, error) {
	var c sr.CompatibilityLevel
	if err := c.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("compatibility level %q: want one of BACKWARD, BACKWARD_TRANSITIVE, FORWARD, FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE, NONE", s)
	}
	return c, nil
}

// Register sets the compatibility level of each schema's subject, then registers the schema
// (an identical schema already registered keeps its id and version), and caches the id it
// frames that topic's records with. A schema the registry refuses as incompatible with the
// subject's earlier versions fails with the registry's message (sr.ErrIncompatibleSchema).
func (r *Registry) Register(ctx context.Context, schemas ...TopicSchema) ([]Registered, error) {
	out := make([]Registered, 0, len(schemas))
	for _, s := range schemas {
		subject := Subject(s.Topic)
		for _, res := range r.cl.SetCompatibility(ctx, sr.SetCompatibility{Level: r.compat}, subject) {
			if res.Err != nil {
				return out, fmt.Errorf("schemareg: set compatibility %s of %s: %w", r.compat, subject, res.Err)
			}
		}
		ss, err := r.cl.CreateSchema(ctx, subject, s.Schema)
		if err != nil {
			return out, fmt.Errorf("schemareg: register %s: %w", subject, err)
		}
		reg := Registered{Topic: s.Topic, Subject: subject, ID: ss.ID, Version: ss.Version, Compat: r.compat}
		r.mu.Lock()
		r.byTopic[s.Topic] = reg
		r.acceptLocked(s.Topic, ss.ID)
		r.mu.Unlock()
		out = append(out, reg)
	}
	return out, nil
}

func (r *Registry) acceptLocked(topic string, id int) {
	m := r.accepted[topic]
	if m == nil {
		m = make(map[int]bool)
		r.accepted[topic] = m
	}
	m[id] = true
}

// Lookup returns what the registry holds for topic's subject: its latest version and id and its
// compatibility level (the subject's own, else the registry's global one). A subject that does
// not exist is an error wrapping sr.ErrSubjectNotFound.
func (r *Registry) Lookup(ctx context.Context, topic string) (Registered, error) {
	subject := Subject(topic)
	ss, err := r.cl.SchemaByVersion(ctx, subject, -1)
	if err != nil {
		return Registered{}, fmt.Errorf("schemareg: %s: %w", subject, err)
	}
	reg := Registered{Topic: topic, Subject: subject, ID: ss.ID, Version: ss.Version}
	res := r.cl.Compatibility(sr.WithParams(ctx, sr.DefaultToGlobal), subject)
	if len(res) == 1 && res[0].Err == nil {
		reg.Compat = res[0].Level
	} else if len(res) == 1 {
		return reg, fmt.Errorf("schemareg: compatibility of %s: %w", subject, res[0].Err)
	}
	return reg, nil
}

// ID returns the id topic's records are framed with, from Register.
func (r *Registry) ID(topic string) (int, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	reg, ok := r.byTopic[topic]
	return reg.ID, ok
}

// AppendFrame appends to dst the Confluent frame of a topic's record (its registered id and the
// Protobuf message index, e.g. []int{0} for the file's first message) followed by payload.
func (r *Registry) AppendFrame(dst []byte, topic string, index []int, payload []byte) ([]byte, error) {
	id, ok := r.ID(topic)
	if !ok {
		return dst, fmt.Errorf("schemareg: topic %s: schema not registered by this process (Register first)", topic)
	}
	b, err := r.hdr.AppendEncode(dst, id, index)
	if err != nil {
		return dst, fmt.Errorf("schemareg: frame %s: %w", topic, err)
	}
	return append(b, payload...), nil
}

// maxIndexLen bounds the message-index list a frame may carry: wmrl's schemas nest no message
// deeper than this, and a hostile frame must not make the decoder allocate a huge list.
const maxIndexLen = 8

// Frame is what Unframe found in a record value.
type Frame struct {
	ID      int
	Index   []int
	Payload []byte
}

// Unframe splits a record value of topic into its schema id, message index and payload, checking
// that the id is one of topic's subject's versions. Errors: a value without the Confluent frame
// wraps topics.ErrMalformed; an id the registry does not know wraps topics.ErrSchemaNotRegistered;
// an id of another subject wraps topics.ErrSchemaMismatch; a registry that could not be asked
// returns its error (none of the three: retry, do not dead-letter). A dead letter's value keeps
// its source's frame: unframe it as a record of its source topic (header wmrl-dlq-source-topic).
func (r *Registry) Unframe(ctx context.Context, topic string, value []byte) (Frame, error) {
	id, rest, err := r.hdr.DecodeID(value)
	if err != nil {
		return Frame{}, fmt.Errorf("%s: %w: %w", topic, topics.ErrMalformed, err)
	}
	index, payload, err := r.hdr.DecodeIndex(rest, maxIndexLen)
	if err != nil {
		return Frame{}, fmt.Errorf("%s: schema id %d: message index: %w: %w", topic, id, topics.ErrMalformed, err)
	}
	f := Frame{ID: id, Index: index, Payload: payload}
	if err := r.check(ctx, topic, id); err != nil {
		return f, err
	}
	return f, nil
}

// check reports whether id belongs to topic's subject, asking the registry once per id (a
// refusal: once per id per negTTL).
func (r *Registry) check(ctx context.Context, topic string, id int) error {
	r.mu.RLock()
	ok, known := r.accepted[topic][id], r.negative[topic][id]
	r.mu.RUnlock()
	if ok {
		return nil
	}
	if known.err != nil && r.now().Before(known.expires) {
		return known.err
	}
	subject := Subject(topic)
	versions, err := r.cl.SchemaVersionsByID(ctx, id)
	var verdict error
	switch {
	case IsCode(err, sr.ErrSchemaNotFound):
		verdict = fmt.Errorf("%s: schema id %d: %w (registry: %w)", topic, id, topics.ErrSchemaNotRegistered, err)
	case err != nil:
		return fmt.Errorf("schemareg: %s: look up schema id %d: %w", topic, id, err)
	case !slices.ContainsFunc(versions, func(v sr.SubjectVersion) bool { return v.Subject == subject }):
		var subjects []string
		for _, v := range versions {
			subjects = append(subjects, v.Subject)
		}
		verdict = fmt.Errorf("%s: schema id %d is registered under %v, not %s: %w", topic, id, subjects, subject, topics.ErrSchemaMismatch)
	}
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.negative[topic][id]; ok { // expired (or stored by a concurrent check): replaced
		delete(r.negative[topic], id)
		r.nneg--
	}
	if verdict == nil {
		r.acceptLocked(topic, id)
		return nil
	}
	if r.nneg >= maxNegative {
		r.sweepLocked(now)
	}
	if r.nneg < maxNegative {
		m := r.negative[topic]
		if m == nil {
			m = make(map[int]negVerdict)
			r.negative[topic] = m
		}
		m[id] = negVerdict{err: verdict, expires: now.Add(r.negTTL)}
		r.nneg++
	}
	return verdict
}

// sweepLocked forgets the expired refusals, so that ids seen once long ago do not keep newer ones
// out of the bounded memory.
func (r *Registry) sweepLocked(now time.Time) {
	for _, m := range r.negative {
		for id, v := range m {
			if !now.Before(v.expires) {
				delete(m, id)
				r.nneg--
			}
		}
	}
}

// IsCode reports whether err is the registry's answer with want's error code. sr.ResponseError
// does not unwrap to the sr.Error values, so errors.Is cannot tell. Only the code counts, not
// the HTTP status: a 404 for a wrong base URL (a path the server does not serve) is a broken
// setup, never "this id is not registered".
func IsCode(err error, want *sr.Error) bool {
	var re *sr.ResponseError
	return errors.As(err, &re) && re.ErrorCode == want.Code
}
