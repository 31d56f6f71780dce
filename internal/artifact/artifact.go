// Package artifact is the claim check for rollout artifacts too large to travel inline in a
// Kafka record: the generator writes the bytes to a content-addressed directory and publishes a
// file:// URI plus the SHA-256; consumers read the file back and verify the digest, so a torn,
// replaced or foreign file is detected instead of being scored or executed.
//
// A file:// URI is only meaningful where the file is. Stages that run on different machines need
// the directory on a shared filesystem (NFS, a Kubernetes ReadWriteMany volume, …) mounted at the
// same path everywhere; an object store would be a new Resolver for its URI scheme. A URI this
// package cannot resolve is a property of the rollout, reported by the stages as status invalid.
package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// DefaultMaxBytes bounds what Get reads, so a hostile or corrupted reference cannot make a
// consumer buffer an unbounded file.
const DefaultMaxBytes = 256 << 20

// Errors returned (wrapped) by Get; stages turn every one of them into a status-invalid record.
var (
	ErrUnsupportedScheme = errors.New("artifact: unsupported URI scheme")
	ErrOutsideStore      = errors.New("artifact: URI points outside the artifact directory")
	ErrUnreachable       = errors.New("artifact: cannot read referenced artifact")
	ErrDigestMismatch    = errors.New("artifact: SHA-256 mismatch")
	ErrTooLarge          = errors.New("artifact: referenced artifact too large")
	ErrBadDigest         = errors.New("artifact: malformed SHA-256")
)

// Ref names a stored artifact: what a rollout carries in artifact_uri, artifact_sha256 and
// artifact_size.
type Ref struct {
	URI    string
	SHA256 string
	Size   int64
}

// Resolver fetches the artifact a rollout references and verifies it against sha256 (64
// lowercase hex digits). Consumers depend on this interface so that other stores (an object
// store) can be added by URI scheme.
type Resolver interface {
	Get(ctx context.Context, uri, sha256 string) ([]byte, error)
}

// Store is a claim-check directory. Files are named by their SHA-256, so writing the same
// artifact twice (a generator retrying a step) is idempotent.
type Store struct {
	dir      string
	maxBytes int64
}

// NewStore opens (creating if needed) the directory dir. maxBytes bounds reads; 0 means
// DefaultMaxBytes.
func NewStore(dir string, maxBytes int64) (*Store, error) {
	if dir == "" {
		return nil, errors.New("artifact: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("artifact: directory %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("artifact: create directory: %w", err)
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	return &Store{dir: abs, maxBytes: maxBytes}, nil
}

// Dir returns the store's absolute directory.
func (s *Store) Dir() string { return s.dir }

// Digest returns the lowercase hex SHA-256 of data.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Put writes data as <dir>/<sha256> and returns its reference. The file is written to a
// temporary name, synced and renamed, so a reader never sees a partial artifact under the final
// name, and the rollout that cites it is only published after the bytes are durable.
func (s *Store) Put(data []byte) (Ref, error) {
	digest := Digest(data)
	ref := Ref{URI: (&url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Join(s.dir, digest))}).String(), SHA256: digest, Size: int64(len(data))}
	final := filepath.Join(s.dir, digest)
	if st, err := os.Stat(final); err == nil && st.Size() == int64(len(data)) {
		return ref, nil
	}
	f, err := os.CreateTemp(s.dir, ".tmp-"+digest+"-*")
	if err != nil {
		return Ref{}, fmt.Errorf("artifact: put: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, final)
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return Ref{}, fmt.Errorf("artifact: put %s: %w", digest, werr)
	}
	return ref, nil
}

// Get reads the artifact at uri, which must be a file:// URI inside the store's directory, and
// verifies its SHA-256 against want. Reads go through an os.Root, so neither ".." nor a symlink
// can reach a file outside the directory: a rollout record must not be able to make a consumer
// read (and send to a model or a sandbox) an arbitrary file of its host.
func (s *Store) Get(ctx context.Context, uri, want string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(want) != sha256.Size*2 || strings.ToLower(want) != want {
		return nil, fmt.Errorf("%w: %q", ErrBadDigest, want)
	}
	if _, err := hex.DecodeString(want); err != nil {
		return nil, fmt.Errorf("%w: %q", ErrBadDigest, want)
	}
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrUnsupportedScheme, uri, err)
	}
	if u.Scheme != "file" {
		return nil, fmt.Errorf("%w %q in %q (only file:// claim checks are implemented)", ErrUnsupportedScheme, u.Scheme, uri)
	}
	if u.Host != "" && u.Host != "localhost" {
		return nil, fmt.Errorf("%w: %q names host %q", ErrUnsupportedScheme, uri, u.Host)
	}
	rel, err := filepath.Rel(s.dir, filepath.Clean(filepath.FromSlash(u.Path)))
	if err != nil || rel == "." || !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("%w: %q is not under %s", ErrOutsideStore, uri, s.dir)
	}
	root, err := os.OpenRoot(s.dir)
	if err != nil {
		return nil, fmt.Errorf("%w: open directory %s: %w", ErrUnreachable, s.dir, err)
	}
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s: not found (is --artifact-dir shared with the generator?)", ErrUnreachable, uri)
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrUnreachable, uri, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, s.maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnreachable, uri, err)
	}
	if int64(len(data)) > s.maxBytes {
		return nil, fmt.Errorf("%w: %s exceeds %d bytes", ErrTooLarge, uri, s.maxBytes)
	}
	if got := Digest(data); got != want {
		return nil, fmt.Errorf("%w: %s has %s, rollout says %s", ErrDigestMismatch, uri, got, want)
	}
	return data, nil
}

// Resolve fetches the artifact a rollout sends by reference (uri, sha256) with res, the stage's
// resolver; nil means the stage was started without an artifact directory.
func Resolve(ctx context.Context, res Resolver, uri, sha256 string) ([]byte, error) {
	if res == nil {
		return nil, fmt.Errorf("artifact %s sent by reference but no --artifact-dir is configured", uri)
	}
	data, err := res.Get(ctx, uri, sha256)
	if err != nil {
		return nil, fmt.Errorf("resolve artifact: %w", err)
	}
	return data, nil
}
