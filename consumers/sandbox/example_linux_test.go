package sandbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/wmrl/wmrl/consumers/sandbox"
	"github.com/wmrl/wmrl/consumers/sandbox/jail"
)

func ExampleNewCommandExecutor() {
	// The rollout artifact is a shell script; a real deployment would run
	// e.g. []string{"python3", "{artifact}"}. UseBwrap is the jail: without
	// it the executor refuses to start unless AllowWeakContainment is set.
	e, err := sandbox.NewCommandExecutor(sandbox.CommandConfig{
		Argv:    []string{"/bin/sh", sandbox.PlaceholderArtifact},
		Timeout: 5 * time.Second,
		Config: jail.Config{UseBwrap: true,
			Limits: jail.Limits{CPUSeconds: 5, AddressSpaceBytes: 1 << 30, FileSizeBytes: 16 << 20}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, script := range []string{
		`echo "training"; echo '{"score": 0.625}'`,
		`echo "no score here"`,
		`echo "segfault in solver" >&2; exit 139`,
	} {
		r := e.Execute(context.Background(), sandbox.Job{RolloutID: "r", Artifact: []byte(script), ArtifactName: "solution.sh"})
		fmt.Printf("%s score=%v exit=%d stderr=%q\n", r.Status, r.Score, r.ExitCode, r.StderrTail)
	}
	// Output:
	// ok score=0.625 exit=0 stderr=""
	// invalid score=0 exit=0 stderr=""
	// error score=0 exit=139 stderr="segfault in solver\n"
}
