"""Loads a seccomp profile (the JSON of a kubelet Localhost profile) with libseccomp the way runc
and crun load the one a pod names, then executes the command under it.

    /usr/bin/python3 exec.py PROFILE.json COMMAND [ARG...]

Like runc: the native architecture and every listed one are in the filter, a system call this
libseccomp does not know is skipped, the rule's conditions on distinct arguments are ANDed (on
one argument, each becomes a rule of its own), and no_new_privs is set (the pod sets
allowPrivilegeEscalation: false).
"""
import errno
import json
import os
import sys

import seccomp

OPS = {
    "SCMP_CMP_NE": seccomp.NE, "SCMP_CMP_LT": seccomp.LT, "SCMP_CMP_LE": seccomp.LE,
    "SCMP_CMP_EQ": seccomp.EQ, "SCMP_CMP_GE": seccomp.GE, "SCMP_CMP_GT": seccomp.GT,
    "SCMP_CMP_MASKED_EQ": seccomp.MASKED_EQ,
}


def action(name, errno_ret):
    if name == "SCMP_ACT_ALLOW":
        return seccomp.ALLOW
    if name == "SCMP_ACT_ERRNO":
        return seccomp.ERRNO(errno.EPERM if errno_ret is None else errno_ret)
    raise SystemExit(f"exec.py: action {name} is not supported here")


def main():
    path, argv = sys.argv[1], sys.argv[2:]
    with open(path) as f:
        p = json.load(f)
    filt = seccomp.SyscallFilter(defaction=action(p["defaultAction"], p.get("defaultErrnoRet")))
    for a in p.get("architectures", []):
        arch = getattr(seccomp.Arch, a.removeprefix("SCMP_ARCH_"))
        if not filt.exist_arch(arch):
            filt.add_arch(arch)
    for rule in p["syscalls"]:
        act = action(rule["action"], rule.get("errnoRet"))
        args = [seccomp.Arg(a["index"], OPS[a["op"]], a.get("value", 0), *( [a["valueTwo"]] if a.get("valueTwo") else []))
                for a in rule.get("args") or []]
        indices = [a["index"] for a in rule.get("args") or []]
        groups = [[x] for x in args] if len(set(indices)) < len(indices) else [args]
        for name in rule["names"]:
            for g in groups:
                try:
                    filt.add_rule(act, name, *g)
                except (ValueError, RuntimeError):
                    pass  # unknown to this libseccomp or this architecture, as runc skips it
    filt.load()
    os.execvp(argv[0], argv)


main()
