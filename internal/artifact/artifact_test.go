package artifact

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPutGet(t *testing.T) {
	s, err := NewStore(filepath.Join(t.TempDir(), "claims"), 64)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("print('hello')\n")
	ref, err := s.Put(data)
	if err != nil {
		t.Fatal(err)
	}
	if ref.SHA256 != Digest(data) || ref.Size != int64(len(data)) || !strings.HasPrefix(ref.URI, "file:///") {
		t.Fatalf("ref = %+v", ref)
	}
	again, err := s.Put(data)
	if err != nil || again != ref {
		t.Fatalf("second Put = %+v, %v; want %+v", again, err, ref)
	}
	got, err := s.Get(context.Background(), ref.URI, ref.SHA256)
	if err != nil || string(got) != string(data) {
		t.Fatalf("Get = %q, %v", got, err)
	}
	entries, _ := os.ReadDir(s.Dir())
	if len(entries) != 1 {
		t.Errorf("%d files in store, want 1 (no temp files left)", len(entries))
	}
}

func TestGetFailures(t *testing.T) {
	base := t.TempDir()
	s, err := NewStore(filepath.Join(base, "claims"), 16)
	if err != nil {
		t.Fatal(err)
	}
	ok, err := s.Put([]byte("small"))
	if err != nil {
		t.Fatal(err)
	}
	big := []byte(strings.Repeat("x", 17))
	bigPath := filepath.Join(s.Dir(), Digest(big))
	if err := os.WriteFile(bigPath, big, 0o644); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(base, "secret")
	if err := os.WriteFile(secret, []byte("top"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(s.Dir(), "link")); err != nil {
		t.Fatal(err)
	}
	// A file whose content changed after Put: the digest in the rollout no longer matches.
	tampered, err := s.Put([]byte("before"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir(), tampered.SHA256), []byte("after!"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := Digest([]byte("never written"))
	tests := []struct {
		name, uri, sha string
		want           error
	}{
		{"digest mismatch", tampered.URI, tampered.SHA256, ErrDigestMismatch},
		{"wrong digest", ok.URI, missing, ErrDigestMismatch},
		{"not found", "file://" + filepath.Join(s.Dir(), missing), missing, ErrUnreachable},
		{"dot-dot escape", "file://" + s.Dir() + "/../secret", Digest([]byte("top")), ErrOutsideStore},
		{"absolute elsewhere", "file://" + secret, Digest([]byte("top")), ErrOutsideStore},
		{"the directory itself", "file://" + s.Dir(), missing, ErrOutsideStore},
		{"symlink escape", "file://" + filepath.Join(s.Dir(), "link"), Digest([]byte("top")), ErrUnreachable},
		{"http scheme", "https://example.com/a", ok.SHA256, ErrUnsupportedScheme},
		{"s3 scheme", "s3://bucket/key", ok.SHA256, ErrUnsupportedScheme},
		{"remote host", "file://otherhost" + filepath.Join(s.Dir(), ok.SHA256), ok.SHA256, ErrUnsupportedScheme},
		{"too large", "file://" + bigPath, Digest(big), ErrTooLarge},
		{"uppercase digest", ok.URI, strings.ToUpper(ok.SHA256), ErrBadDigest},
		{"short digest", ok.URI, "abc", ErrBadDigest},
		{"non-hex digest", ok.URI, strings.Repeat("g", 64), ErrBadDigest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Get(context.Background(), tt.uri, tt.sha)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Get = %q, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestGetCanceled(t *testing.T) {
	s, err := NewStore(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := s.Put([]byte("a"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Get(ctx, ref.URI, ref.SHA256); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestNewStoreEmptyDir(t *testing.T) {
	if _, err := NewStore("", 0); err == nil {
		t.Fatal("NewStore(\"\") succeeded")
	}
}

// FuzzGet feeds arbitrary URIs: Get must never return bytes other than a stored artifact whose
// digest matches, wherever the URI points.
func FuzzGet(f *testing.F) {
	dir := f.TempDir()
	s, err := NewStore(filepath.Join(dir, "claims"), 1<<10)
	if err != nil {
		f.Fatal(err)
	}
	ref, err := s.Put([]byte("stored"))
	if err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "outside"), []byte("stored"), 0o644); err != nil {
		f.Fatal(err)
	}
	f.Add(ref.URI, ref.SHA256)
	f.Add("file://"+dir+"/outside", ref.SHA256)
	f.Add("file://"+s.Dir()+"/../outside", ref.SHA256)
	f.Add("file:"+s.Dir()+"/"+ref.SHA256, ref.SHA256)
	f.Add("%zz", ref.SHA256)
	f.Fuzz(func(t *testing.T, uri, sha string) {
		got, err := s.Get(context.Background(), uri, sha)
		if err != nil {
			return
		}
		if string(got) != "stored" || sha != ref.SHA256 {
			t.Fatalf("Get(%q, %q) = %q", uri, sha, got)
		}
	})
}
