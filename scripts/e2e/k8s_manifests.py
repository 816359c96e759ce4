#!/usr/bin/env python3
"""deploy/k8s, read the way Kubernetes would read it, for the two k8s tests.

  k8s_manifests.py validate DIR
      Renders DIR's kustomization (the subset it uses: files as resources, configMapGenerator from
      files, generatorOptions without name hashes, images), validates every object strictly (unknown
      fields refused) against the Kubernetes JSON schemas that kubernetes-validate bundles, for the
      oldest version with native sidecars (1.29) and the newest it has, and checks the properties the
      fence depends on. Prints PASS/FAIL lines; exits 1 on any FAIL.

  k8s_manifests.py dockerfile DIR REPO
      Parses DIR/Dockerfile with BuildKit's own parser and checks that it builds what the pod runs:
      a target per image, entrypoints equal to the pod's commands, the sidecar's uid, nftables in
      the fence image, COPY sources that exist, a Rust image no older than the workspace's MSRV.

  k8s_manifests.py materialise DIR ROOT
      Makes ROOT/<volume> for each of the pod's volumes (ConfigMap volumes filled with their files,
      emptyDirs empty) and prints bash assignments for scripts/e2e/k8s_fence.sh: the fence init
      container's and the fenzi sidecar's argv (with `$(VAR)` expanded as the kubelet does and
      container paths moved under ROOT), and the uids, groups and proxy address of the pod.
"""

import os
import re
import shlex
import sys

import yaml

SCHEMA_VERSIONS = ["1.29.0"]  # the newest bundled one is added at run time
KUSTOMIZE_KEYS = {"apiVersion", "kind", "resources", "configMapGenerator", "generatorOptions", "images"}


class RenderError(Exception):
    pass


def render(directory):
    """The objects `kubectl apply -k DIR` would create, for the kustomize subset DIR uses."""
    path = os.path.join(directory, "kustomization.yaml")
    with open(path) as f:
        kust = yaml.safe_load(f)
    unknown = set(kust) - KUSTOMIZE_KEYS
    if unknown:
        # Refuse rather than ignore: a field this renderer skips would make the test check
        # something other than what the cluster gets.
        raise RenderError(f"{path}: fields this renderer does not implement: {sorted(unknown)}")
    if kust.get("kind") != "Kustomization" or not str(kust.get("apiVersion", "")).startswith(
        "kustomize.config.k8s.io/"
    ):
        raise RenderError(f"{path}: not a Kustomization")
    objects = []
    for res in kust.get("resources", []):
        file = os.path.join(directory, res)
        if not os.path.isfile(file):
            raise RenderError(f"{path}: resource {res} is not a file in {directory}")
        with open(file) as f:
            objects += [d for d in yaml.safe_load_all(f) if d is not None]
    options = kust.get("generatorOptions", {})
    if kust.get("configMapGenerator") and options.get("disableNameSuffixHash") is not True:
        raise RenderError(f"{path}: name hashes are not implemented here; set disableNameSuffixHash")
    for gen in kust.get("configMapGenerator", []):
        extra = set(gen) - {"name", "files"}
        if extra:
            raise RenderError(f"{path}: configMapGenerator {gen.get('name')}: unsupported {sorted(extra)}")
        data = {}
        for entry in gen["files"]:
            key, _, rel = entry.rpartition("=")
            key = key or os.path.basename(rel)
            if key in data:
                raise RenderError(f"{path}: configMapGenerator {gen['name']}: key {key} twice")
            with open(os.path.join(directory, rel)) as f:
                data[key] = f.read()
        objects.append(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data}
        )
    for image in kust.get("images", []):
        for obj in objects:
            for ctn in all_containers(obj):
                name, _, tag = ctn["image"].partition(":")
                if name == image["name"]:
                    ctn["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"
    return objects


def all_containers(obj):
    spec = obj.get("spec", {}) if obj.get("kind") == "Pod" else {}
    return spec.get("initContainers", []) + spec.get("containers", [])


def security(pod, ctn, key):
    """A securityContext field as it applies to the container: its own, else the pod's."""
    own = ctn.get("securityContext", {})
    if key in own:
        return own[key]
    return pod["spec"].get("securityContext", {}).get(key)


def expand(value, env):
    """The kubelet's `$(VAR)` expansion in command and args (`$$` escapes a `$`)."""
    return re.sub(
        r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
        lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
        value,
    )


def plain_env(ctn):
    return {e["name"]: e["value"] for e in ctn.get("env", []) if "value" in e}


def argv(ctn):
    env = plain_env(ctn)
    return [expand(a, env) for a in ctn.get("command", []) + ctn.get("args", [])]


def flag(args, name):
    """The value after `name` in args, or None."""
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None


def mount_of(ctn, path):
    """The volume mount holding `path` in the container (longest mount path), or None."""
    best = None
    for m in ctn.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"].rstrip("/")):
                best = m
    return best


class Pod:
    """The one Pod in the rendered objects, with its three roles found by what they run."""

    def __init__(self, objects):
        pods = [o for o in objects if o.get("kind") == "Pod"]
        if len(pods) != 1:
            raise RenderError(f"expected one Pod, found {len(pods)}")
        self.obj = pods[0]
        self.spec = self.obj["spec"]
        self.config_maps = {
            o["metadata"]["name"]: o for o in objects if o.get("kind") == "ConfigMap"
        }
        self.inits = self.spec.get("initContainers", [])
        self.agents = self.spec.get("containers", [])
        fences = [c for c in self.inits if argv(c)[:1] and os.path.basename(argv(c)[0]) == "nft"]
        fenzis = [c for c in self.inits if "proxy" in argv(c)[1:2]]
        if len(fences) != 1 or len(fenzis) != 1:
            raise RenderError("expected one nft init container and one `fenzi proxy` init container")
        self.fence, self.fenzi = fences[0], fenzis[0]
        self.volumes = {v["name"]: v for v in self.spec.get("volumes", [])}

    def fence_uid(self):
        """The uid the fence lets out: the value of `-D fenzi_uid=N`."""
        for a in argv(self.fence):
            if a.startswith("fenzi_uid="):
                return a.split("=", 1)[1]
        return None

    def fence_file(self):
        """(ConfigMap name, key) of the file nft -f loads."""
        path = flag(argv(self.fence), "-f")
        mount = mount_of(self.fence, path) if path else None
        if mount is None:
            return None, None
        cm = self.volumes[mount["name"]].get("configMap", {}).get("name")
        return cm, os.path.relpath(path, mount["mountPath"])


def validate(directory):
    import kubernetes_validate
    from kubernetes_validate import utils as kv

    fails = 0

    def check(name, ok, why=""):
        nonlocal fails
        print(f"PASS {name}" if ok else f"FAIL {name}{': ' + why if why else ''}")
        fails += 0 if ok else 1

    try:
        objects = render(directory)
        pod = Pod(objects)
    except (RenderError, OSError, yaml.YAMLError, KeyError) as e:
        print(f"FAIL render {directory}: {e}")
        return 1

    versions = SCHEMA_VERSIONS + [kv.latest_version()]
    for version in versions:
        for obj in objects:
            name = f"{obj['kind']}/{obj['metadata']['name']}"
            try:
                kubernetes_validate.validate(obj, version, strict=True)
                check(f"schema {version} (strict): {name}", True)
            except kv.ValidationError as e:
                where = "/".join(str(p) for p in e.path)
                check(f"schema {version} (strict): {name}", False, f"{where}: {e.message}")

    # The schemas are strict only if they refuse what they do not know: a misspelt field must fail.
    import copy

    misspelt = copy.deepcopy(pod.obj)
    misspelt["spec"]["initContainers"][0]["restartPolicyy"] = "Always"
    try:
        kubernetes_validate.validate(misspelt, versions[-1], strict=True)
        check("schema: a misspelt field is refused (strictness self-check)", False, "accepted")
    except kv.ValidationError:
        check("schema: a misspelt field is refused (strictness self-check)", True)

    spec, fence, fenzi = pod.spec, pod.fence, pod.fenzi
    fenzi_uid = security(pod.obj, fenzi, "runAsUser")
    fenzi_gid = security(pod.obj, fenzi, "runAsGroup")
    fargs = argv(fenzi)

    check("pod: not on the host's network", spec.get("hostNetwork") is not True)
    check("pod: no shared process namespace", spec.get("shareProcessNamespace") is not True)
    check("pod: no service account token", spec.get("automountServiceAccountToken") is False)
    check(
        "fence init container comes first, before fenzi",
        pod.inits.index(fence) == 0 and pod.inits.index(fence) < pod.inits.index(fenzi),
    )
    check("fence init container is a plain init container (runs to completion)",
          "restartPolicy" not in fence)
    fcaps = fence.get("securityContext", {}).get("capabilities", {})
    check("fence: capabilities are exactly NET_ADMIN (drop ALL, add NET_ADMIN)",
          fcaps.get("drop") == ["ALL"] and fcaps.get("add") == ["NET_ADMIN"], str(fcaps))
    check("fence: no privilege escalation, not privileged",
          security(pod.obj, fence, "allowPrivilegeEscalation") is False
          and not security(pod.obj, fence, "privileged"))
    cm, key = pod.fence_file()
    check("fence: loads fence.nft from the fenzi-fence ConfigMap (the file the test loads)",
          cm in pod.config_maps and key == "fence.nft"
          and mount_of(fence, flag(argv(fence), "-f")).get("readOnly") is True, f"{cm}/{key}")
    nft_text = pod.config_maps.get(cm, {}).get("data", {}).get(key, "")
    check("fence: the ruleset lets out `meta skuid $fenzi_uid`, the variable -D defines",
          "meta skuid $fenzi_uid" in nft_text and pod.fence_uid() is not None)

    check("fenzi: a native sidecar (initContainers entry, restartPolicy Always)",
          fenzi.get("restartPolicy") == "Always")
    check("fenzi: runAsUser is the uid the fence lets out",
          fenzi_uid is not None and str(fenzi_uid) == pod.fence_uid(),
          f"runAsUser {fenzi_uid}, fence {pod.fence_uid()}")
    check("fenzi: not root, runAsNonRoot", fenzi_uid not in (None, 0)
          and security(pod.obj, fenzi, "runAsNonRoot") is True)
    fzcaps = fenzi.get("securityContext", {}).get("capabilities", {})
    check("fenzi: drops ALL capabilities, adds none, read-only root, no privilege escalation",
          fzcaps.get("drop") == ["ALL"] and not fzcaps.get("add")
          and security(pod.obj, fenzi, "readOnlyRootFilesystem") is True
          and security(pod.obj, fenzi, "allowPrivilegeEscalation") is False)
    listen = flag(fargs, "--listen") or ""
    check("fenzi: listens on loopback only", listen.startswith("127.0.0.1:"), listen)
    for opt in ("--config", "--machine"):
        m = mount_of(fenzi, flag(fargs, opt) or "")
        check(f"fenzi: {opt} comes from a ConfigMap mounted read-only",
              m is not None and m.get("readOnly") is True
              and "configMap" in pod.volumes[m["name"]])
    audit_mount = mount_of(fenzi, flag(fargs, "--audit") or "")
    ca_dir = flag(fargs, "--ca-dir") or ""
    ca_mount = mount_of(fenzi, ca_dir)
    check("fenzi: --audit is on a volume of its own", audit_mount is not None
          and audit_mount["name"] != (ca_mount or {}).get("name"))
    check("fenzi: --ca-dir is the shared volume's mount point (the agent can enter it)",
          ca_mount is not None and ca_mount["mountPath"].rstrip("/") == ca_dir.rstrip("/")
          and "emptyDir" in pod.volumes[ca_mount["name"]])
    if "--group-readable" in fargs:
        check("pod: supplementalGroups holds fenzi's group (for --group-readable)",
              fenzi_gid in spec.get("securityContext", {}).get("supplementalGroups", []))

    for agent in pod.agents:
        n = f"agent {agent['name']}"
        uid = security(pod.obj, agent, "runAsUser")
        check(f"{n}: runAsNonRoot and a uid that is neither root nor fenzi's",
              security(pod.obj, agent, "runAsNonRoot") is True
              and uid not in (None, 0) and str(uid) != pod.fence_uid(), f"runAsUser {uid}")
        caps = agent.get("securityContext", {}).get("capabilities", {})
        check(f"{n}: no NET_ADMIN (or any added capability), drops ALL",
              caps.get("drop") == ["ALL"] and not caps.get("add"), str(caps))
        check(f"{n}: no privilege escalation, not privileged",
              security(pod.obj, agent, "allowPrivilegeEscalation") is False
              and not security(pod.obj, agent, "privileged"))
        names = {m["name"]: m for m in agent.get("volumeMounts", [])}
        check(f"{n}: does not mount the audit volume", audit_mount["name"] not in names)
        check(f"{n}: mounts fenzi's CA volume read-only",
              ca_mount["name"] in names and names[ca_mount["name"]].get("readOnly") is True)
        env = plain_env(agent)
        check(f"{n}: HTTPS_PROXY and HTTP_PROXY point at fenzi",
              env.get("HTTPS_PROXY") == env.get("HTTP_PROXY") == f"http://{listen}",
              f"{env.get('HTTPS_PROXY')} vs http://{listen}")
        ca_in_agent = names.get(ca_mount["name"], {}).get("mountPath", "?") + "/ca.pem"
        check(f"{n}: NODE_EXTRA_CA_CERTS is fenzi's ca.pem", env.get("NODE_EXTRA_CA_CERTS") == ca_in_agent)

    print(f"k8s manifests: {fails} failed")
    return 1 if fails else 0


def check_dockerfile(directory, repo):
    """DIR/Dockerfile parses (BuildKit's parser) and builds what the pod runs."""
    import dockerfile

    fails = 0

    def check(name, ok, why=""):
        nonlocal fails
        print(f"PASS {name}" if ok else f"FAIL {name}{': ' + why if why else ''}")
        fails += 0 if ok else 1

    path = os.path.join(directory, "Dockerfile")
    try:
        commands = dockerfile.parse_file(path)
    except dockerfile.GoParseError as e:
        print(f"FAIL {path} does not parse: {e}")
        return 1
    check(f"{path} parses", True)
    stages, current = {}, None
    for c in commands:
        if c.cmd == "FROM":
            value = [v for v in c.value]
            current = value[2] if len(value) == 3 and value[1].upper() == "AS" else value[0]
            stages[current] = {"from": value[0], "cmds": []}
        elif current is None:
            check(f"{path}:{c.start_line}: {c.cmd} before any FROM", c.cmd == "ARG")
        else:
            stages[current]["cmds"].append(c)

    def last(stage, cmd):
        found = [c for c in stages.get(stage, {}).get("cmds", []) if c.cmd == cmd]
        return found[-1] if found else None

    pod = Pod(render(directory))
    for role, ctn in (("fenzi-fence", pod.fence), ("fenzi", pod.fenzi)):
        image = ctn["image"].rsplit("/", 1)[-1].split(":")[0]
        check(f"Dockerfile: a `{image}` target for the pod's {ctn['name']} image", image in stages)
        entry = last(image, "ENTRYPOINT")
        check(f"Dockerfile: {image}'s ENTRYPOINT is the pod's command ({argv(ctn)[0]})",
              entry is not None and entry.json and list(entry.value) == [argv(ctn)[0]])
    user = last("fenzi", "USER")
    check("Dockerfile: the fenzi image runs as the pod's fenzi uid and group",
          user is not None and user.value[0] == f"{security(pod.obj, pod.fenzi, 'runAsUser')}:"
          f"{security(pod.obj, pod.fenzi, 'runAsGroup')}")
    runs = " ".join(" ".join(c.value) for st in stages.values() for c in st["cmds"] if c.cmd == "RUN")
    check("Dockerfile: builds fenzi from the workspace (cargo build --locked -p fenzi)",
          "cargo build --release --locked -p fenzi" in runs)
    check("Dockerfile: the fence image installs nftables",
          any("nftables" in " ".join(c.value) for c in stages.get("fenzi-fence", {}).get("cmds", [])
              if c.cmd == "RUN"))
    for st in stages.values():
        for c in st["cmds"]:
            if c.cmd == "COPY" and not any(f.startswith("--from") for f in c.flags):
                src = c.value[0]
                check(f"Dockerfile:{c.start_line}: COPY source {src} exists in the repository",
                      os.path.exists(os.path.join(repo, src)))
    with open(os.path.join(repo, "Cargo.toml")) as f:
        msrv = re.search(r'^rust-version\s*=\s*"([0-9.]+)"', f.read(), re.M).group(1)
    rust = re.match(r"rust:([0-9]+)\.([0-9]+)", stages.get("build", {}).get("from", ""))
    check(f"Dockerfile: the Rust image is at least the workspace's rust-version {msrv}",
          rust is not None and (int(rust.group(1)), int(rust.group(2)))
          >= tuple(int(x) for x in msrv.split(".")[:2]))
    print(f"k8s Dockerfile: {fails} failed")
    return 1 if fails else 0


def materialise(directory, root):
    pod = Pod(render(directory))
    for name, vol in pod.volumes.items():
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        if "configMap" in vol:
            cm = pod.config_maps[vol["configMap"]["name"]]
            items = vol["configMap"].get("items") or [{"key": k, "path": k} for k in cm["data"]]
            for item in items:
                with open(os.path.join(d, item["path"]), "w") as f:
                    f.write(cm["data"][item["key"]])
                os.chmod(os.path.join(d, item["path"]), 0o644)
            os.chmod(d, 0o755)
        else:
            os.chmod(d, 0o777)  # an emptyDir is world-writable, as on a node

    def moved(ctn):
        out = []
        for a in argv(ctn):
            m = mount_of(ctn, a) if a.startswith("/") else None
            if m is not None:
                a = os.path.join(root, m["name"], os.path.relpath(a, m["mountPath"])).rstrip("/.")
            out.append(a)
        return out

    fenzi_args = argv(pod.fenzi)
    agent = pod.agents[0]
    values = {
        "FENCE_ARGV": moved(pod.fence),
        "FENZI_ARGV": moved(pod.fenzi),
        "FENZI_UID": str(security(pod.obj, pod.fenzi, "runAsUser")),
        "FENZI_GID": str(security(pod.obj, pod.fenzi, "runAsGroup")),
        "FENCE_UID": pod.fence_uid(),
        "FENZI_LISTEN": flag(fenzi_args, "--listen"),
        "FENZI_SECRET_ENV": [e["name"] for e in pod.fenzi.get("env", []) if "valueFrom" in e],
        "AGENT_UID": str(security(pod.obj, agent, "runAsUser")),
        "AGENT_GID": str(security(pod.obj, agent, "runAsGroup")),
        "AGENT_GROUPS": ",".join(str(g) for g in pod.spec.get("securityContext", {}).get("supplementalGroups", [])),
        "AGENT_PROXY": plain_env(agent).get("HTTPS_PROXY", ""),
        "CA_VOLUME": os.path.join(root, mount_of(pod.fenzi, flag(fenzi_args, "--ca-dir"))["name"]),
        "AUDIT_VOLUME": os.path.join(root, mount_of(pod.fenzi, flag(fenzi_args, "--audit"))["name"]),
        "POLICY_VOLUME": os.path.join(root, mount_of(pod.fenzi, flag(fenzi_args, "--config"))["name"]),
    }
    for k, v in values.items():
        if isinstance(v, list):
            print(f"{k}=({' '.join(shlex.quote(x) for x in v)})")
        else:
            print(f"{k}={shlex.quote(v or '')}")
    return 0


def main(argv_):
    if len(argv_) == 3 and argv_[1] == "validate":
        return validate(argv_[2])
    if len(argv_) == 4 and argv_[1] == "dockerfile":
        return check_dockerfile(argv_[2], argv_[3])
    if len(argv_) == 4 and argv_[1] == "materialise":
        try:
            return materialise(argv_[2], argv_[3])
        except (RenderError, OSError, KeyError) as e:
            print(f"k8s_manifests: {e}", file=sys.stderr)
            return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
