package sandbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/wmrl/wmrl/consumers/sandbox"
	"github.com/wmrl/wmrl/consumers/sandbox/jail"
)

func ExampleNewCommandExecutor() {
	// The rollout artifact is a shell script the run step executes; a real
	// deployment would run e.g. []string{"python3", "-I", "{artifact}"}.
	// The grade step compares what it printed with the rollout's private
	// meta "answer", which the run step never sees. UseBwrap is the jail:
	// without it the executor refuses to start unless AllowWeakContainment
	// is set.
	e, err := sandbox.NewCommandExecutor(sandbox.CommandConfig{
		Argv: []string{"/bin/sh", sandbox.PlaceholderArtifact},
		GradeArgv: []string{"/bin/sh", "-c",
			`if [ "$(cat {dir}/run/stdout)" = "$ANSWER" ]; then echo '{"score": 1}'; else echo '{"score": 0}'; fi`},
		GradeEnv: map[string]string{"ANSWER": "{meta.answer}"},
		Timeout:  5 * time.Second,
		Config: jail.Config{UseBwrap: true,
			Limits: jail.Limits{CPUSeconds: 5, AddressSpaceBytes: 1 << 30, FileSizeBytes: 16 << 20}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, script := range []string{
		`echo 42`,
		`echo '{"score": 1}'`,
		`echo "segfault in solver" >&2; exit 139`,
	} {
		r := e.Execute(context.Background(), sandbox.Job{RolloutID: "r", Artifact: []byte(script), ArtifactName: "solution.sh",
			Meta: map[string]string{"answer": "42"}})
		fmt.Printf("%s score=%v stderr=%q\n", r.Status, r.Score, r.StderrTail)
	}
	// Output:
	// ok score=1 stderr=""
	// ok score=0 stderr=""
	// ok score=0 stderr="segfault in solver\n"
}
