package sandbox

import (
	"errors"
	"fmt"
	"strings"
)

// PlaceholderMetaPrefix starts a {meta.KEY} placeholder in CommandConfig.Argv
// elements and Env values (and GradeArgv, GradeEnv): it expands to the value of
// KEY in the rollout's meta (topics.Rollout.Meta), so a step can be told which
// task it runs (`--argv /opt/task/public/harness.py --argv {meta.task}`). Every
// meta key is private — a label, ground truth — unless CommandConfig.InputMeta
// names it: the run step (and the single step) may name only those.
const PlaceholderMetaPrefix = "{meta."

// RolloutFile is the name of the rollout record in the grade step's directory:
// the topics.Rollout JSON (meta included: the labels) of the rollout being
// graded, written whenever Job.Rollout is set (the sandbox stage always sets
// it). It is private data: the run step never gets it.
const RolloutFile = "rollout.json"

// ErrPrivateData is wrapped (with ErrConfig) by NewCommandExecutor's error
// for a configuration that would hand private data to the code being graded:
// a {meta.KEY} not named by InputMeta in the run step's argv or environment.
var ErrPrivateData = errors.New("sandbox: private data in the run step")

// ErrMissingMeta is wrapped by the Reason of a job whose argv or environment
// names a {meta.KEY} its rollout does not have: the job does not start and
// reports StatusError naming the key and the rollout.
var ErrMissingMeta = errors.New("sandbox: meta key missing")

// placeholders holds one step's values for expand; meta holds only what
// that step may see (the InputMeta keys for the run step).
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
				return "", fmt.Errorf("%w: rollout %q has no meta key %q (named by {meta.%s} in the command line or environment)", ErrMissingMeta, p.rollout, key, key)
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

// metaKeys lists the keys of the well-formed {meta.KEY} placeholders in s.
func metaKeys(s string) []string {
	var keys []string
	for rest := s; ; {
		i := strings.Index(rest, PlaceholderMetaPrefix)
		if i < 0 {
			return keys
		}
		key, after, ok := cutMetaKey(rest[i:])
		if !ok {
			return keys
		}
		keys = append(keys, key)
		rest = after
	}
}

// publicMeta is the part of meta the run step may see: the keys named by
// input, nothing else.
func publicMeta(meta map[string]string, input map[string]bool) map[string]string {
	out := make(map[string]string, len(input))
	for k, v := range meta {
		if input[k] {
			out[k] = v
		}
	}
	return out
}
