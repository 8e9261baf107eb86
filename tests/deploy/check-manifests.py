#!/usr/bin/python3
"""Offline checks of deploy/kubernetes (no cluster here; `kubectl --dry-run=client`
still wants an API server): every YAML parses, every kustomization names files
that exist and every YAML is used by one, the variants render (`kubectl
kustomize`, when kubectl is installed; else counted skipped), the pod's
security fields are what docs/kubernetes.md says, the seccomp profile holds
moat's additions, and the Deployment's arguments are flags that the built
`moat serve --help` knows.

usage: tests/deploy/check-manifests.py BUILD
Prints TAP (tools/tap.sh), a line per check, then "# check-manifests: N passed, M failed, S skipped".
"""
import json
import os
import re
import shutil
import subprocess
import sys

import yaml

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
K8S = os.path.join(ROOT, "deploy", "kubernetes")
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
MOAT = os.path.join(ROOT, BUILD, "moat") if not os.path.isabs(BUILD) else os.path.join(BUILD, "moat")

passed = failed = skipped = 0


def check(cond, what, why=""):
    global passed, failed
    if cond:
        passed += 1
        print("ok %d - %s" % (passed + failed + skipped, what))
    else:
        failed += 1
        print("not ok %d - %s" % (passed + failed + skipped, what + (": " + why if why else "")))
    return cond


def skip(what, why):
    global skipped
    skipped += 1
    print("ok %d - %s # SKIP %s" % (passed + failed + skipped, what, why))


def rel(p):
    return os.path.relpath(p, ROOT)


def get(obj, path, default=None):
    """get(pod, "spec.securityContext.seccompProfile.type")"""
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return default
        obj = obj[part]
    return obj


# ---- every YAML parses --------------------------------------------------
docs = {}  # file -> [documents]
for d, _, files in os.walk(K8S):
    for f in sorted(files):
        if not f.endswith((".yaml", ".yml")):
            continue
        p = os.path.join(d, f)
        try:
            with open(p) as fh:
                docs[p] = [x for x in yaml.safe_load_all(fh) if x is not None]
            check(len(docs[p]) > 0, "%s parses (%d document(s))" % (rel(p), len(docs[p])),
                  "no document in it")
        except yaml.YAMLError as e:
            check(False, "%s parses" % rel(p), str(e).replace("\n", " "))

# ---- kustomizations name existing files; every YAML is used ---------------
used = set()
for p, ds in sorted(docs.items()):
    if os.path.basename(p) != "kustomization.yaml":
        continue
    k = ds[0] if ds else {}
    used.add(p)
    base = os.path.dirname(p)
    for field in ("resources", "components"):
        for entry in k.get(field) or []:
            target = os.path.normpath(os.path.join(base, entry))
            ok = os.path.isfile(target) or os.path.isfile(os.path.join(target, "kustomization.yaml"))
            check(ok, "%s: %s entry %s exists" % (rel(p), field, entry),
                  "no file and no directory with a kustomization.yaml at " + rel(target))
            if os.path.isfile(target):
                used.add(target)
for p in sorted(docs):
    check(p in used, "%s is named by a kustomization" % rel(p),
          "no kustomization.yaml lists it: kubectl apply -k would leave it out")

kubectl = shutil.which("kubectl")
rendered = {}
for variant in ("", "examples/daemonset", "examples/managed-redis"):
    name = "deploy/kubernetes" + ("/" + variant if variant else "")
    if not kubectl:
        skip("kubectl kustomize " + name, "kubectl is not installed")
        continue
    r = subprocess.run([kubectl, "kustomize", os.path.join(K8S, variant)], capture_output=True,
                       text=True, timeout=120)
    if check(r.returncode == 0, "kubectl kustomize %s renders" % name, r.stderr.strip()[:300]):
        rendered[variant] = [x for x in yaml.safe_load_all(r.stdout) if x]
if "" in rendered:
    kinds = sorted(o["kind"] for o in rendered[""])
    check(kinds == ["ConfigMap", "Deployment", "Namespace", "NetworkPolicy", "RuntimeClass",
                    "Service", "Service", "StatefulSet"],
          "the default kustomization renders moat's objects and the example Redis", str(kinds))
    img = [c["image"] for o in rendered[""] if o["kind"] == "Deployment"
           for c in o["spec"]["template"]["spec"]["containers"]]
    check(img and all("/" in i and ":" in i for i in img),
          "the rendered Deployment names a full image (the images: entry applied)", str(img))
if "examples/daemonset" in rendered:
    kinds = [o["kind"] for o in rendered["examples/daemonset"]]
    check("DaemonSet" in kinds and "Deployment" not in kinds,
          "examples/daemonset renders a DaemonSet instead of the Deployment", str(kinds))
    img = [c["image"] for o in rendered["examples/daemonset"] if o["kind"] == "DaemonSet"
           for c in o["spec"]["template"]["spec"]["containers"]]
    check(img and all("/" in i and ":" in i for i in img),
          "the rendered DaemonSet names a full image (the images: entry applied)", str(img))
    if "" in rendered:
        dep = [c["image"] for o in rendered[""] if o["kind"] == "Deployment"
               for c in o["spec"]["template"]["spec"]["containers"]]
        check(img == dep, "the DaemonSet and the Deployment render the same image", "%r vs %r" % (img, dep))
if "examples/managed-redis" in rendered:
    kinds = sorted(o["kind"] for o in rendered["examples/managed-redis"])
    check(kinds == ["Deployment", "Namespace", "RuntimeClass", "Service"],
          "examples/managed-redis renders moat without the example Redis", str(kinds))


def objects(kind):
    return [(p, o) for p, ds in sorted(docs.items()) for o in ds
            if isinstance(o, dict) and o.get("kind") == kind]


# ---- namespace -----------------------------------------------------------
ns = objects("Namespace")
check(len(ns) == 1, "one Namespace", "found %d" % len(ns))
for p, o in ns:
    labels = get(o, "metadata.labels", {}) or {}
    for mode in ("enforce", "audit", "warn"):
        key = "pod-security.kubernetes.io/" + mode
        check(labels.get(key) == "privileged", "%s: Namespace label %s=privileged" % (rel(p), key),
              "is %r" % labels.get(key))
NAMESPACE = get(ns[0][1], "metadata.name") if ns else None

# ---- runtime class -------------------------------------------------------
rcs = objects("RuntimeClass")
check(len(rcs) == 1 and get(rcs[0][1], "handler"), "one RuntimeClass with a handler")
RC = get(rcs[0][1], "metadata.name") if rcs else None

# ---- moat's pods: the Deployment and the DaemonSet -------------------------
help_text = ""
if os.access(MOAT, os.X_OK):
    r = subprocess.run([MOAT, "serve", "--help"], capture_output=True, text=True, timeout=30)
    help_text = r.stdout + r.stderr
known_flags = set(re.findall(r"(--[a-z][a-z0-9-]*)", help_text))
check(len(known_flags) >= 5, "moat serve --help lists its flags (%s)" % rel(MOAT),
      "got %d flags from %r" % (len(known_flags), help_text[:200]))

serve_pods = [(p, o) for kind in ("Deployment", "DaemonSet") for p, o in objects(kind)
              if get(o, "metadata.name") == "moat"]
check(sorted(o["kind"] for _, o in serve_pods) == ["DaemonSet", "Deployment"],
      "moat serve has a Deployment and a DaemonSet variant")
if len(serve_pods) == 2:
    check(serve_pods[0][1]["spec"]["template"] == serve_pods[1][1]["spec"]["template"],
          "the DaemonSet's pod template is the Deployment's, field for field")

for p, o in serve_pods:
    where = "%s (%s)" % (rel(p), o["kind"])
    check(get(o, "metadata.namespace") == NAMESPACE, where + ": in the moat namespace")
    tmpl = get(o, "spec.template", {})
    spec = tmpl.get("spec", {})
    psc = spec.get("securityContext", {}) or {}
    check(spec.get("hostUsers") is False, where + ": spec.hostUsers is false",
          "is %r" % spec.get("hostUsers"))
    check(spec.get("runtimeClassName") == RC and RC, where + ": runtimeClassName is the RuntimeClass",
          "%r vs %r" % (spec.get("runtimeClassName"), RC))
    check(spec.get("automountServiceAccountToken") is False,
          where + ": automountServiceAccountToken is false (moat needs no API access)")
    check(get(psc, "seccompProfile.type") == "Localhost" and
          get(psc, "seccompProfile.localhostProfile") == "profiles/moat.json",
          where + ": securityContext.seccompProfile is Localhost profiles/moat.json",
          "is %r" % psc.get("seccompProfile"))
    check(get(psc, "appArmorProfile.type") in ("Unconfined", "Localhost"),
          where + ": securityContext.appArmorProfile is Unconfined (or a shipped Localhost one)",
          "is %r" % psc.get("appArmorProfile"))
    run_as = psc.get("runAsUser")
    check(not (run_as == 0 and psc.get("runAsNonRoot") is True),
          where + ": runAsUser and runAsNonRoot agree", "runAsUser 0 with runAsNonRoot true")
    check(run_as != 0 or spec.get("hostUsers") is False,
          where + ": uid 0 only inside the pod's own user namespace (hostUsers false)")
    cs = spec.get("containers", [])
    check(len(cs) == 1, where + ": one container")
    if not cs:
        continue
    c = cs[0]
    sc = c.get("securityContext", {}) or {}
    check(sc.get("procMount") == "Unmasked", where + ": securityContext.procMount is Unmasked",
          "is %r" % sc.get("procMount"))
    check(sc.get("allowPrivilegeEscalation") is False,
          where + ": securityContext.allowPrivilegeEscalation is false")
    check(sc.get("readOnlyRootFilesystem") is True,
          where + ": securityContext.readOnlyRootFilesystem is true")
    check(sc.get("privileged") in (None, False), where + ": securityContext.privileged is not true")
    drop = get(sc, "capabilities.drop", []) or []
    add = get(sc, "capabilities.add", []) or []
    check("ALL" in drop, where + ": securityContext.capabilities.drop has ALL", "is %r" % drop)
    check(set(add) <= {"SETUID", "SETGID"},
          where + ": securityContext.capabilities.add is at most SETUID, SETGID", "is %r" % add)
    if run_as == 0:
        check(set(add) == {"SETUID", "SETGID"},
              where + ": as uid 0 moat's root mode has SETUID and SETGID to write the sandbox's id maps",
              "is %r (without them every run fails: write /proc/N/uid_map: Operation not permitted)" % add)
    ports = {pt.get("name"): pt.get("containerPort") for pt in c.get("ports", [])}
    for probe in ("readinessProbe", "livenessProbe"):
        pr = c.get(probe) or {}
        port = get(pr, "httpGet.port")
        check(get(pr, "httpGet.path") == "/healthz" and (port in ports or port in ports.values()),
              where + ": %s is GET /healthz on the container's port" % probe, "is %r" % pr)
    ann = get(tmpl, "metadata.annotations", {}) or {}
    check(ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/path") == "/metrics"
          and str(ann.get("prometheus.io/port")) in [str(v) for v in ports.values()],
          where + ": Prometheus scrape annotations name /metrics on the container's port",
          "are %r" % ann)
    res = c.get("resources", {}) or {}
    check(get(res, "requests.cpu") and get(res, "requests.memory") and get(res, "limits.memory"),
          where + ": resources: cpu and memory requests, a memory limit", "are %r" % res)
    # the command line
    check(c.get("command") == ["moat"] and (c.get("args") or [None])[0] == "serve",
          where + ": runs moat serve", "command %r args %r" % (c.get("command"), c.get("args")))
    args = c.get("args", [])[1:]
    flags = [a.split("=", 1)[0] for a in args if a.startswith("--")]
    unknown = [f for f in flags if f not in known_flags]
    check(flags and not unknown, where + ": every flag of its args is one moat serve --help knows",
          "unknown to %s serve --help: %s" % (rel(MOAT), " ".join(unknown)))

    def arg(flag):
        return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None

    check("--no-auth" not in args,
          where + ": the service is not run without authentication (--no-auth)")
    listen = arg("--listen") or ""
    check(listen.rsplit(":", 1)[-1] == str(ports.get("http")),
          where + ": --listen's port is the container port", "%r vs %r" % (listen, ports))
    check("--json-log" in args, where + ": logs JSON lines to stdout (--json-log)")
    grace = arg("--grace")
    stop = get(c, "lifecycle.preStop.sleep.seconds", 0) or 0
    tgps = spec.get("terminationGracePeriodSeconds")
    # moat serve stops within --grace + 5 s of SIGTERM (docs/SERVE.md), which
    # the kubelet sends after the preStop hook
    check(grace is not None and tgps is not None and int(tgps) > int(grace) + 5 + int(stop),
          where + ": terminationGracePeriodSeconds exceeds the preStop sleep + --grace + 5 s",
          "%r <= %r + %r + 5" % (tgps, stop, grace))
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in spec.get("volumes", [])}

    def secret_mode_for(path):
        """the defaultMode of the secret volume mounted at path's directory"""
        m = mounts.get(os.path.dirname(path))
        v = vols.get(m["name"]) if m else None
        return get(v, "secret.defaultMode") if v and "secret" in v else None

    tok = arg("--token-file") or ""
    mode = secret_mode_for(tok)
    check(mode is not None and mode & 0o077 == 0,
          where + ": --token-file is in a Secret volume with no group or other bits "
          "(moat refuses a token file others can read)", "defaultMode %r for %s" % (mode, tok))
    kv = arg("--kv") or ""
    env = {e["name"]: e for e in c.get("env", [])}
    m = re.fullmatch(r"\$\(([A-Z_]+)\)", kv)
    check(m and get(env.get(m.group(1), {}), "valueFrom.secretKeyRef.name"),
          where + ": --kv comes from a Secret (its URL names a password file, never a password)",
          "--kv %r" % kv)
    pw = vols.get(get(mounts.get("/var/run/secrets/moat-kv", {}), "name", ""), {})
    check(get(pw, "secret.defaultMode", 0o777) & 0o077 == 0,
          where + ": the Redis password file has no group or other bits (moat refuses it otherwise)")
    cache = mounts.get("/var/cache/moat")
    check(cache and "emptyDir" in vols.get(cache["name"], {}),
          where + ": /var/cache/moat (the seccomp BPF cache) is a writable emptyDir on the read-only root")

# ---- service ---------------------------------------------------------------
svc = [o for _, o in objects("Service") if get(o, "metadata.name") == "moat"]
if check(len(svc) == 1, "a Service for moat serve") and serve_pods:
    labels = get(serve_pods[0][1], "spec.template.metadata.labels", {})
    sel = get(svc[0], "spec.selector", {})
    check(sel and all(labels.get(k) == v for k, v in sel.items()),
          "the Service selects moat serve's pods", "%r vs %r" % (sel, labels))

# ---- redis -----------------------------------------------------------------
cms = [o for _, o in objects("ConfigMap") if get(o, "metadata.name") == "moat-redis"]
conf = get(cms[0], "data", {}).get("redis.conf", "") if cms else ""
lines = {ln.split()[0]: ln.split()[1:] for ln in conf.splitlines() if ln.strip() and not ln.startswith("#")}
check(lines.get("appendonly") == ["yes"], "redis.conf: appendonly yes", "is %r" % lines.get("appendonly"))
check(lines.get("appendfsync") == ["always"],
      "redis.conf: appendfsync always (an acknowledged write is on disk)", "is %r" % lines.get("appendfsync"))
sts = [o for _, o in objects("StatefulSet") if get(o, "metadata.name") == "moat-redis"]
check(len(sts) == 1 and get(sts[0], "spec.volumeClaimTemplates"),
      "Redis is a StatefulSet with a volume claim for its AOF")
if sts:
    rspec = get(sts[0], "spec.template.spec", {})
    check(get(rspec, "securityContext.runAsNonRoot") is True and
          all(get(c, "securityContext.allowPrivilegeEscalation") is False and
              "ALL" in (get(c, "securityContext.capabilities.drop", []) or [])
              for c in rspec.get("containers", []) + rspec.get("initContainers", [])),
          "Redis runs as non-root with every capability dropped (the namespace is privileged)")

# ---- the seccomp profile -----------------------------------------------------
prof_path = os.path.join(K8S, "seccomp", "moat.json")
try:
    prof = json.load(open(prof_path))
    check(True, "deploy/kubernetes/seccomp/moat.json parses")
except (OSError, ValueError) as e:
    prof = {}
    check(False, "deploy/kubernetes/seccomp/moat.json parses", str(e))
check(prof.get("defaultAction") == "SCMP_ACT_ERRNO", "the profile refuses by default (SCMP_ACT_ERRNO)")
rules = prof.get("syscalls", [])
check(all(set(r) <= {"names", "action", "errnoRet", "args", "comment"} for r in rules) and
      set(prof) <= {"defaultAction", "defaultErrnoRet", "architectures", "syscalls", "comment"},
      "the profile uses only runtime-spec fields (containerd ignores Docker's includes/excludes: "
      "a rule would silently apply everywhere)")


def allowed_whole(name):
    return any(name in r.get("names", []) and r.get("action") == "SCMP_ACT_ALLOW" and not r.get("args")
               for r in rules)


for name in ("clone3", "unshare", "mount", "umount2", "pivot_root", "mount_setattr", "sethostname",
             "setdomainname"):
    r = [x for x in rules if name in x.get("names", [])]
    check(allowed_whole(name) and all(x.get("comment", "").startswith("moat:") for x in r),
          "the profile allows %s, documented as moat's addition" % name, "rules %r" % r)
check(not any(r.get("action") == "SCMP_ACT_ERRNO" and "clone3" in r.get("names", []) for r in rules),
      "clone3 is not answered ENOSYS (moat has no fallback to clone)")
for name in ("keyctl", "bpf", "io_uring_setup", "kexec_load", "init_module", "open_by_handle_at", "setns"):
    check(not any(name in r.get("names", []) and r.get("action") == "SCMP_ACT_ALLOW" for r in rules),
          "the profile does not allow %s (neither the default nor moat needs it)" % name)

# moat runs beneath the profile: every name moat's default policy allows must
# get through it (SECURITY.md row 90), whole where the default allows it whole
try:
    default = json.load(open(os.path.join(ROOT, "policies", "default.json")))
except (OSError, ValueError) as e:
    default = {}
    check(False, "policies/default.json parses", str(e))
missing = []
for r in default.get("syscalls", []):
    if r.get("action") != "SCMP_ACT_ALLOW":
        continue
    for name in r.get("names", []):
        if r.get("args") or r.get("includes") or r.get("excludes"):
            ok = any(name in x.get("names", []) and x.get("action") == "SCMP_ACT_ALLOW" for x in rules)
        else:
            ok = allowed_whole(name)
        if not ok:
            missing.append(name)
check(default and not missing, "the profile lets through every call moat's default policy allows",
      "missing %s" % sorted(set(missing)))

# ---- the container image recipe --------------------------------------------------
cf = os.path.join(ROOT, "deploy", "container", "Containerfile")
text = open(cf).read() if os.path.isfile(cf) else ""
check(text, "deploy/container/Containerfile exists")
for pkg in ("python3", "nodejs", "esbuild", "libmicrohttpd12", "libhiredis0.14"):
    check(re.search(r"\b%s\b" % re.escape(pkg), text), "the image installs %s" % pkg)

print("1..%d" % (passed + failed + skipped))
print("# check-manifests: %d passed, %d failed, %d skipped" % (passed, failed, skipped))
sys.exit(1 if failed else 0)
