"""Runs one container of a rendered Kubernetes pod as a local process, as the
kubelet would start it, inside the network namespace this is started in:

    ip netns exec NS python3 pod_exec.py SPEC.json

tests/manifests_test.py writes SPEC (JSON) from the rendered manifests:
  argv            the container's command + args, $(VAR)s already expanded
  env             the container's whole environment
  hostname        the pod's name (its own UTS namespace: gethostname() too)
  mounts          [{"src", "dst", "ro"}]: the pod's volumes (a ConfigMap's
                  files, emptyDirs, claims) and the image's binaries, bound at
                  the paths the manifests name
  scratch         an empty directory of the test's, for this runner's own use
  uid, gid, groups, read_only_root, no_new_privs: the security context

Everything happens in a private mount namespace (a slave of the host's, so
nothing mounted here reaches the host): a mount point that does not exist
on the host (/etc/tessel, a binary under /usr/local/bin) is made in an
overlay of its nearest existing parent, kept in a tmpfs on `scratch`, with
the parent's own submounts (the /etc/hosts and /etc/resolv.conf that
`ip netns exec` binds from /etc/netns/NS) bound again on top. Then the root
and the overlays are made read-only (readOnlyRootFilesystem), privileges are
dropped to uid/gid/groups with no_new_privs, and argv is exec'd: the
process's pid is this runner's, so the test's signals reach it. Needs root;
stdlib only. Exit status 127 and a line on stderr when the setup fails.
"""
import ctypes
import json
import os
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SLAVE = 0x80000
PR_SET_NO_NEW_PRIVS = 38

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))


def _mount(src, dst, fstype, flags, data=None):
    _check(_libc.mount(None if src is None else src.encode(), dst.encode(),
                       None if fstype is None else fstype.encode(), ctypes.c_ulong(flags),
                       None if data is None else data.encode()),
           "mount %s on %s (%s)" % (src, dst, fstype or "bind/remount"))


def _mountpoints():
    """Mount points of this namespace, in mount order (/proc/self/mountinfo)."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            p = line.split()[4].encode().decode("unicode_escape")
            points.append(p)
    return points


def _under(path, root):
    return path == root or path.startswith(root.rstrip("/") + "/")


class _Overlays:
    """Writable overlays of existing directories, so that missing mount
    points can be made without touching the host's file system."""

    def __init__(self, scratch):
        self.scratch = scratch
        self.roots = []
        self.count = 0

    def make_room(self, dst, is_dir):
        parent = os.path.dirname(dst.rstrip("/")) or "/"
        anc = parent
        while not os.path.isdir(anc):
            anc = os.path.dirname(anc) or "/"
        if not any(_under(anc, r) for r in self.roots):
            self._overlay(anc)
        os.makedirs(parent, exist_ok=True)
        if is_dir:
            os.makedirs(dst, exist_ok=True)
        else:
            open(dst, "a").close()

    def _overlay(self, lower):
        if lower == "/":
            raise OSError("cannot overlay / for a mount point")
        n = self.count
        self.count += 1
        base = os.path.join(self.scratch, "overlay%d" % n)
        upper, work, keep = base + "/upper", base + "/work", base + "/keep"
        for d in (upper, work, keep):
            os.makedirs(d)
        # The parent's submounts (e.g. /etc/hosts from /etc/netns/NS) would be
        # hidden by the overlay: hold them aside and bind them back on top.
        subs = [p for p in _mountpoints() if p != lower and _under(p, lower)]
        held = []
        for i, p in enumerate(subs):
            hold = os.path.join(keep, str(i))
            if os.path.isdir(p):
                os.makedirs(hold)
            else:
                open(hold, "w").close()
            _mount(p, hold, None, MS_BIND)
            held.append((hold, p))
        _mount("overlay", lower, "overlay", 0,
               "lowerdir=%s,upperdir=%s,workdir=%s" % (lower, upper, work))
        for hold, p in held:
            _mount(hold, p, None, MS_BIND)
        self.roots.append(lower)


def setup(spec):
    _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWUTS), "unshare")
    _mount(None, "/", None, MS_REC | MS_SLAVE)
    name = spec["hostname"].encode()
    _check(_libc.sethostname(name, len(name)), "sethostname")

    # Parents before children, as container runtimes mount them. Sources are
    # held open first: a mount (e.g. an emptyDir on /tmp) may hide the path
    # of a later one's source.
    mounts = sorted(spec["mounts"], key=lambda m: len(m["dst"].rstrip("/").split("/")))
    held = [os.open(m["src"], os.O_PATH) for m in mounts]
    scratch = spec["scratch"]
    _mount("tmpfs", scratch, "tmpfs", 0, "mode=0700")
    overlays = _Overlays(scratch)
    for m in mounts:
        if not os.path.lexists(m["dst"]):
            overlays.make_room(m["dst"], os.path.isdir(m["src"]))
    for m, fd in zip(mounts, held):
        _mount("/proc/self/fd/%d" % fd, m["dst"], None, MS_BIND)
        os.close(fd)
        if m.get("ro"):
            _mount(None, m["dst"], None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    if spec.get("read_only_root"):
        for root in ["/"] + overlays.roots:
            _mount(None, root, None, MS_REMOUNT | MS_BIND | MS_RDONLY)

    os.chdir(spec.get("working_dir") or "/")
    os.setgroups(spec.get("groups", []))
    os.setgid(spec["gid"])
    os.setuid(spec["uid"])
    if spec.get("no_new_privs"):
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def main():
    if len(sys.argv) != 2:
        print("usage: ip netns exec NS python3 pod_exec.py SPEC.json", file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    try:
        setup(spec)
    except OSError as e:
        print("pod_exec: %s: setup failed: %s" % (spec.get("hostname"), e), file=sys.stderr)
        return 127
    argv = spec["argv"]
    sys.stdout.flush()
    try:
        os.execve(argv[0], argv, spec["env"])
    except OSError as e:
        print("pod_exec: %s: cannot exec %s: %s" % (spec.get("hostname"), argv[0], e),
              file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
