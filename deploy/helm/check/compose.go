package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// CheckCompose loads a Compose file the way `docker compose config` does (compose-go: the
// Compose specification's schema, interpolation with the variables unset, merge keys, profiles)
// once with no profile and once per profile it declares, and applies the rules a Linux engine
// needs. It returns the profiles checked and every problem found.
func CheckCompose(ctx context.Context, file string) ([]string, []string, error) {
	all, err := loadCompose(ctx, file, []string{"*"})
	if err != nil {
		return nil, nil, err
	}
	profiles := map[string]bool{}
	for _, s := range all.Services {
		for _, p := range s.Profiles {
			profiles[p] = true
		}
	}
	for _, s := range all.DisabledServices {
		for _, p := range s.Profiles {
			profiles[p] = true
		}
	}
	sets := [][]string{nil}
	names := []string{"(default)"}
	for _, p := range sortedSet(profiles) {
		sets = append(sets, []string{p})
		names = append(names, p)
	}
	sets = append(sets, []string{"*"})
	names = append(names, "(all)")
	var problems []string
	for i, set := range sets {
		pr, err := loadCompose(ctx, file, set)
		if err != nil {
			problems = append(problems, fmt.Sprintf("profile %s: %v", names[i], err))
			continue
		}
		for _, p := range composeRules(pr) {
			problems = append(problems, fmt.Sprintf("profile %s: %s", names[i], p))
		}
	}
	return names, dedupe(problems), nil
}

func loadCompose(ctx context.Context, file string, profiles []string) (*types.Project, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	opts, err := cli.NewProjectOptions([]string{abs},
		cli.WithName("wmrl"), cli.WithWorkingDirectory(filepath.Dir(abs)), cli.WithProfiles(profiles),
		// The variables as a user who has set none of them would have: the file's defaults apply.
		cli.WithEnv(nil), cli.WithConsistency(true))
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(ctx)
}

// composeRules are the mistakes the Compose schema cannot see: a host.docker.internal address
// without its host-gateway mapping (Linux engines have no such name), a service that needs a
// server or file from the host in the default profile, a stage serving metrics
// on a port it neither publishes nor health-checks, and stages sharing an --artifact-dir
// without sharing the volume behind it.
func composeRules(p *types.Project) []string {
	var out []string
	artifactVolumes := map[string]string{}
	for _, name := range sortedServices(p) {
		s := p.Services[name]
		text := strings.Join(s.Command, " ")
		for k, v := range s.Environment {
			if v != nil {
				text += " " + k + "=" + *v
			}
		}
		if strings.Contains(text, "host.docker.internal") && !hasHostGateway(s) {
			out = append(out, fmt.Sprintf("service %s uses host.docker.internal without extra_hosts host.docker.internal:host-gateway", name))
		}
		if len(s.Profiles) == 0 && (strings.Contains(text, "host.docker.internal") || hasBindMount(s)) {
			out = append(out, fmt.Sprintf("service %s needs something from the host (a server on host.docker.internal or a bind-mounted file) but starts without a profile", name))
		}
		if port := flagValue(s.Command, "--metrics-addr"); port != "" {
			port = strings.TrimPrefix(port, ":")
			published := false
			for _, pc := range s.Ports {
				published = published || fmt.Sprint(pc.Target) == port && pc.Published != ""
			}
			if !published {
				out = append(out, fmt.Sprintf("service %s serves metrics on :%s but does not publish it", name, port))
			}
			if s.HealthCheck == nil || s.HealthCheck.Disable || !strings.Contains(strings.Join(s.HealthCheck.Test, " "), ":"+port+"/") {
				out = append(out, fmt.Sprintf("service %s has no healthcheck on its metrics port %s", name, port))
			}
		}
		if p := metricsUnreachable(s); p != "" {
			out = append(out, fmt.Sprintf("service %s: %s", name, p))
		}
		if dir := flagValue(s.Command, "--artifact-dir"); dir != "" {
			src := ""
			for _, v := range s.Volumes {
				if v.Target == dir {
					src = v.Type + ":" + v.Source
				}
			}
			if src == "" {
				out = append(out, fmt.Sprintf("service %s: --artifact-dir %s is not a mounted volume", name, dir))
			}
			artifactVolumes[name] = src
		}
		for dep, d := range s.DependsOn {
			ds, ok := p.Services[dep]
			if d.Condition == types.ServiceConditionHealthy && ok && ds.HealthCheck == nil {
				out = append(out, fmt.Sprintf("service %s waits for %s to be healthy, which has no healthcheck", name, dep))
			}
		}
	}
	srcs := map[string]bool{}
	for _, s := range artifactVolumes {
		srcs[s] = true
	}
	if len(srcs) > 1 {
		out = append(out, fmt.Sprintf("the stages' --artifact-dir volumes differ: %v", artifactVolumes))
	}
	return out
}

func hasBindMount(s types.ServiceConfig) bool {
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind {
			return true
		}
	}
	return false
}

func hasHostGateway(s types.ServiceConfig) bool {
	for _, ip := range s.ExtraHosts["host.docker.internal"] {
		if ip == "host-gateway" { // the engine's name for the host's address on the bridge
			return true
		}
	}
	return false
}

// flagValue returns the value of --name in a command given as "--name value" or "--name=value".
// metricsUnreachable explains why a wmrl stage that publishes ports serves /metrics where the
// published port cannot reach it: the stages listen on 127.0.0.1 by default, which inside a
// container is the container's own loopback. Empty when the service is fine.
func metricsUnreachable(s types.ServiceConfig) string {
	if !strings.HasPrefix(s.Image, "wmrl") || len(s.Ports) == 0 {
		return ""
	}
	addr := flagValue(s.Command, "--metrics-addr")
	if addr == "" {
		return "publishes a port but has no --metrics-addr; the stages' default 127.0.0.1 is the container's own loopback: pass --metrics-addr :PORT"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("--metrics-addr %s: %v", addr, err)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		return fmt.Sprintf("--metrics-addr %s binds %s inside the container, which the published port cannot reach: pass --metrics-addr :PORT", addr, host)
	}
	return ""
}

func flagValue(cmd []string, name string) string {
	for i, a := range cmd {
		if a == name && i+1 < len(cmd) {
			return cmd[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func sortedServices(p *types.Project) []string {
	names := make([]string, 0, len(p.Services))
	for n := range p.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
