package worldmodel

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

const numberPattern = `[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?`

var (
	// fenceRE matches Markdown code fences such as ```json ... ```; the info string is optional.
	fenceRE = regexp.MustCompile("(?s)```[A-Za-z0-9_+-]*[ \t]*\r?\n?(.*?)```")
	// scoreKeyRE finds a "score" key anywhere, so objects embedded in prose or nested in other
	// objects are still found without a quadratic scan for balanced braces.
	scoreKeyRE  = regexp.MustCompile(`(?i)"score"\s*:\s*`)
	numberRE    = regexp.MustCompile(numberPattern)
	leadNumRE   = regexp.MustCompile(`^` + numberPattern)
	wholeNumRE  = regexp.MustCompile(`^\s*` + numberPattern + `\s*$`)
	errNotFound = errors.New("not found")
)

// ParseScore extracts a score from a world model's reply text, without judging its range.
//
// In order of preference it takes: the reply as a JSON object with a "score" field (key matched
// case-insensitively; a numeric string is accepted) or as a bare JSON number; the same inside the
// last Markdown code fence that holds one; the last `"score": x` pair anywhere in the text; and
// finally the last number in the text. Reasoning before a closing </think> tag is ignored, and a
// reply that ends inside an unclosed <think> block has no answer. A "score" key whose value is
// not a number is an error rather than a reason to fall back to stray numbers.
// Every error wraps ErrNoScore.
func ParseScore(reply string) (float64, error) {
	text, err := answerText(reply)
	if err != nil {
		return 0, err
	}
	if strings.TrimSpace(text) == "" {
		return 0, fmt.Errorf("%w: empty reply", ErrNoScore)
	}
	if v, err := scoreFromJSON(text); !errors.Is(err, errNotFound) {
		return v, err
	}
	fences := fenceRE.FindAllStringSubmatch(text, -1)
	for i := len(fences) - 1; i >= 0; i-- {
		if v, err := scoreFromJSON(fences[i][1]); !errors.Is(err, errNotFound) {
			return v, err
		}
	}
	if keys := scoreKeyRE.FindAllStringIndex(text, -1); len(keys) > 0 {
		rest := text[keys[len(keys)-1][1]:]
		rest = strings.TrimLeft(strings.TrimPrefix(rest, `"`), " \t")
		num := leadNumRE.FindString(rest)
		if num == "" {
			return 0, fmt.Errorf("%w: \"score\" is not followed by a number", ErrNoScore)
		}
		return parseNumber(num)
	}
	locs := numberRE.FindAllStringIndex(text, -1)
	if len(locs) == 0 {
		return 0, fmt.Errorf("%w: no number in reply", ErrNoScore)
	}
	start, end := locs[len(locs)-1][0], locs[len(locs)-1][1]
	num := text[start:end]
	// A sign glued to a preceding word or digit is punctuation ("0-1", "v-2"), not a minus.
	if (num[0] == '-' || num[0] == '+') && start > 0 && isWordByte(text[start-1]) {
		num = num[1:]
	}
	return parseNumber(num)
}

// answerText drops chain-of-thought so numbers inside the reasoning cannot be mistaken for the
// answer. Some chat templates emit only the closing tag, so the last </think> decides.
func answerText(reply string) (string, error) {
	if i := strings.LastIndex(reply, "</think>"); i >= 0 {
		return reply[i+len("</think>"):], nil
	}
	if strings.Contains(reply, "<think>") {
		return "", fmt.Errorf("%w: reply ends inside an unclosed <think> block", ErrNoScore)
	}
	return reply, nil
}

// scoreFromJSON reads text as one JSON value. It returns errNotFound when text is not JSON or is
// JSON without a score, so that the caller can try weaker extraction rules.
func scoreFromJSON(text string) (float64, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return 0, errNotFound
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return 0, errNotFound
	}
	switch t := v.(type) {
	case json.Number:
		return parseNumber(t.String())
	case map[string]any:
		for k, val := range t {
			if !strings.EqualFold(k, "score") {
				continue
			}
			switch sv := val.(type) {
			case json.Number:
				return parseNumber(sv.String())
			case string:
				if !wholeNumRE.MatchString(sv) {
					return 0, fmt.Errorf("%w: \"score\" is the non-numeric string %q", ErrNoScore, excerpt(sv, 40))
				}
				return parseNumber(strings.TrimSpace(sv))
			default:
				return 0, fmt.Errorf("%w: \"score\" is %s, not a number", ErrNoScore, jsonKind(val))
			}
		}
	}
	return 0, errNotFound
}

func parseNumber(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not a finite number", ErrNoScore, excerpt(s, 40))
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%w: %q is not a finite number", ErrNoScore, excerpt(s, 40))
	}
	return v, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

func isWordByte(c byte) bool {
	return c == '_' || c == '.' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

// excerpt shortens s to at most n bytes on a rune boundary, on one line and valid UTF-8, so that
// model output and error bodies can go into a record's reason without bloating it.
func excerpt(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return runePrefix(s, n) + "…"
}

// runePrefix is s cut to at most n < len(s) bytes on a rune boundary.
func runePrefix(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
