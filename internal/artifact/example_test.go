package artifact_test

import (
	"context"
	"fmt"
	"os"

	"github.com/wmrl/wmrl/internal/artifact"
)

func Example() {
	dir, _ := os.MkdirTemp("", "claims")
	defer os.RemoveAll(dir)
	store, err := artifact.NewStore(dir, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	// The generator stores a large artifact and publishes ref.URI and ref.SHA256 ...
	ref, _ := store.Put([]byte("def train(): ..."))
	// ... and a consumer sharing the directory resolves and verifies it.
	data, err := store.Get(context.Background(), ref.URI, ref.SHA256)
	fmt.Printf("%s %v\n", data, err)
	// Output: def train(): ... <nil>
}
