package sandbox

import (
	"errors"
	"fmt"
	"strings"
)

// PlaceholderMetaPrefix starts a {meta.KEY} placeholder in CommandConfig.Argv
// elements and Env values: it expands to the value of KEY in the rollout's
// meta (topics.Rollout.Meta), so a job can be told which task it grades
// (`--argv /opt/eval/run --argv {meta.tests}`) without parsing rollout.json.
const PlaceholderMetaPrefix = "{meta."

// RolloutFile is the name of the rollout record in the job directory: the
// topics.Rollout JSON (meta included) of the rollout being executed, written
// whenever Job.Rollout is set (the sandbox stage always sets it).
const RolloutFile = "rollout.json"

// ErrMissingMeta is wrapped by the Reason of a job whose argv or environment
// names a {meta.KEY} its rollout does not have: the job does not start and
// reports StatusError naming the key and the rollout.
var ErrMissingMeta = errors.New("sandbox: meta key missing")

// placeholders holds one job's values for expand.
type placeholders struct {
	dir, artifact string
	meta          map[string]string
	rollout       string // the rollout id, for errors
}

// expand replaces {artifact}, {dir} and {meta.KEY} in s in one pass, so a
// meta value that itself contains a placeholder is taken literally.
func (p placeholders) expand(s string) (string, error) {
	if !strings.Contains(s, "{") {
		return s, nil
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '{')
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		b.WriteString(s[:i])
		s = s[i:]
		switch {
		case strings.HasPrefix(s, PlaceholderArtifact):
			b.WriteString(p.artifact)
			s = s[len(PlaceholderArtifact):]
		case strings.HasPrefix(s, PlaceholderDir):
			b.WriteString(p.dir)
			s = s[len(PlaceholderDir):]
		case strings.HasPrefix(s, PlaceholderMetaPrefix):
			key, rest, ok := cutMetaKey(s)
			if !ok {
				b.WriteByte('{')
				s = s[1:]
				continue
			}
			v, found := p.meta[key]
			if !found {
				return "", fmt.Errorf("%w: rollout %q has no meta key %q (named by {meta.%s} in --argv/--env)", ErrMissingMeta, p.rollout, key, key)
			}
			b.WriteString(v)
			s = rest
		default:
			b.WriteByte('{')
			s = s[1:]
		}
	}
}

// cutMetaKey splits "{meta.KEY}rest" into KEY and rest; ok is false when
// there is no closing brace or the key is empty.
func cutMetaKey(s string) (key, rest string, ok bool) {
	body := s[len(PlaceholderMetaPrefix):]
	j := strings.IndexByte(body, '}')
	if j <= 0 {
		return "", "", false
	}
	return body[:j], body[j+1:], true
}

// checkMetaPlaceholders rejects a malformed {meta.…} (empty key, no closing
// brace) at start-up, where it is a configuration error, not a job failure.
func checkMetaPlaceholders(where, s string) error {
	for rest := s; ; {
		i := strings.Index(rest, PlaceholderMetaPrefix)
		if i < 0 {
			return nil
		}
		if _, after, ok := cutMetaKey(rest[i:]); ok {
			rest = after
			continue
		}
		return fmt.Errorf("%w: %s %q: %s needs a key and a closing brace, e.g. {meta.label}", ErrConfig, where, s, PlaceholderMetaPrefix)
	}
}
