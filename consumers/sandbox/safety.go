package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrWeakContainment is returned by NewCommandExecutor when the
// configuration is weaker than the jail (no bubblewrap, or jobs under the
// stage's uid or root) and AllowWeakContainment is not set. The message
// names every weakness in one line.
var ErrWeakContainment = errors.New("sandbox: containment weaker than the jail")

// ErrEnvAllow is returned for an EnvAllow name the job must never get.
var ErrEnvAllow = errors.New("sandbox: --env-allow")

// weaknesses lists what makes cfg (defaults applied) weaker than the jail,
// as the start-up log and error say it.
func weaknesses(cfg CommandConfig) []string {
	var w []string
	if !cfg.UseBwrap {
		w = append(w, "no jail (--bwrap=false): the job sees the host's /proc (every process's environment of its uid), file system and network, and writes outside its directory without a quota")
	}
	euid := os.Geteuid()
	switch {
	case cfg.RunAs != nil && cfg.RunAs.UID == 0:
		w = append(w, "jobs run as root (--run-as 0:…)")
	case cfg.RunAs != nil && int(cfg.RunAs.UID) == euid:
		w = append(w, "jobs run with the stage's own uid (--run-as)")
	case cfg.RunAs == nil && !cfg.UseBwrap:
		w = append(w, "jobs run with the stage's own uid (no --run-as and no jail user namespace)")
	}
	return w
}

// openings are what the configuration deliberately opens on top of the jail
// (asked for by name, so not refused), logged at WARN next to weaknesses.
func openings(cfg CommandConfig) []string {
	if cfg.AllowNetwork {
		return []string{"the job shares the host's network (--allow-network): services on 127.0.0.1 are reachable"}
	}
	return nil
}

// allowedEnv reads the EnvAllow variables once. Names of wmrl's own
// settings (WMRL_*: credentials among them) are refused: the job's
// environment is explicit and never carries the stage's secrets.
func allowedEnv(names []string) (map[string]string, error) {
	env := map[string]string{}
	for _, k := range names {
		if strings.HasPrefix(strings.ToUpper(k), "WMRL_") {
			return nil, fmt.Errorf("%w: %s is the stage's own setting (credentials live there), never passed to a job; use --env KEY=VALUE", ErrEnvAllow, k)
		}
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	return env, nil
}
