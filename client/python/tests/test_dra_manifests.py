"""Issue 78: the DRA manifests (deploy/kubernetes/dra). The component renders into an
accelerator overlay, everything validates against the Kubernetes 1.34 and 1.36 schemas,
npud's API server token exists only where the component puts it, the DeviceClass's CEL
selects npud's devices and nothing else, and the node-restriction policy matches npud's
service accounts and no one else's."""

import shutil

import pytest

from test_ops import DEPLOY, _render

DRA_VERSIONS = ["1.34.0", "1.35.0", "1.36.0"]


def _validate(docs):
    import kubernetes_validate

    for doc in docs:
        for version in DRA_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def _with_component(tmp_path, overlay):
    """The overlay rendered with `components: [../dra]` added, as docs/kubernetes.md says."""
    tree = tmp_path / "deploy"
    shutil.copytree(DEPLOY, tree)
    kustomization = tree / "kubernetes" / overlay / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text() + "components:\n  - ../dra\n")
    return _render(tree / "kubernetes" / overlay)


@pytest.mark.parametrize("overlay", ["ascend", "nvidia", "sim"])
def test_the_dra_component_gives_npud_its_token_role_and_directories(tmp_path, overlay):
    docs = _with_component(tmp_path, overlay)
    _validate(docs)
    by_kind = {d["kind"]: d for d in docs}
    assert sorted(by_kind) == [
        "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Namespace", "NetworkPolicy", "ServiceAccount",
    ]
    spec = by_kind["DaemonSet"]["spec"]["template"]["spec"]
    sa = by_kind["ServiceAccount"]["metadata"]
    assert spec["automountServiceAccountToken"] is True and spec["serviceAccountName"] == sa["name"]
    (subject,) = by_kind["ClusterRoleBinding"]["subjects"]
    assert (subject["name"], subject["namespace"]) == (sa["name"], sa["namespace"]), "bound to this overlay's account"
    assert by_kind["ClusterRoleBinding"]["roleRef"]["name"] == by_kind["ClusterRole"]["metadata"]["name"]
    rules = {(tuple(r["resources"]), tuple(r["verbs"])) for r in by_kind["ClusterRole"]["rules"]}
    assert rules == {
        (("resourceclaims",), ("get",)),
        (("resourceclaims/status",), ("patch",)),
        (("resourceslices",), ("get", "list", "watch", "create", "update", "delete")),
    }, "the least it needs: no pods, no secrets, no writes to claims"
    (npud,) = spec["containers"]
    env = {e["name"]: e for e in npud["env"]}
    assert env["NPUD_KUBERNETES_MODE"]["value"] == "both"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert any(a.startswith("--backend=") for a in npud["args"]) or overlay == "sim", "the overlay's own args stay"
    mounts = {m["mountPath"] for m in npud["volumeMounts"]}
    assert {"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry", "/var/run/cdi"} <= mounts


@pytest.mark.parametrize("overlay", ["ascend", "nvidia", "sim"])
def test_without_the_component_npud_has_no_token(overlay):
    docs = _render(DEPLOY / "kubernetes" / overlay)
    assert not [d for d in docs if d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")]
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    assert ds["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_the_cluster_objects_and_examples_validate_for_1_36():
    import yaml

    cluster = _render(DEPLOY / "kubernetes" / "dra" / "cluster")
    _validate(cluster)
    assert sorted(d["kind"] for d in cluster) == [
        "DeviceClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    ]
    (device_class,) = [d for d in cluster if d["kind"] == "DeviceClass"]
    assert device_class["metadata"]["name"] == "streams.npud.io" and "namespace" not in device_class["metadata"]
    for example in ["streams-claim.yaml", "npu-and-streams.yaml"]:
        docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "dra" / "examples" / example).read_text()))
        _validate(docs)
        (template,) = [d for d in docs if d["kind"] == "ResourceClaimTemplate"]
        requests = {r["name"]: r["exactly"] for r in template["spec"]["spec"]["devices"]["requests"]}
        assert requests["streams"]["deviceClassName"] == "streams.npud.io"
        assert requests["streams"]["capacity"]["requests"]["streams"] == "200"
        (pod,) = [d for d in docs if d["kind"] == "Pod"]
        claim = pod["spec"]["resourceClaims"][0]
        assert claim["resourceClaimTemplateName"] == template["metadata"]["name"]
        assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": claim["name"]}]
    (pair,) = [d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / "dra" / "examples" / "npu-and-streams.yaml").read_text()) if d["kind"] == "ResourceClaimTemplate"]
    (constraint,) = pair["spec"]["spec"]["devices"]["constraints"]
    assert constraint == {"requests": ["npu", "streams"], "matchAttribute": "npu.huawei.com/physicId"}


def _device(driver, name, attributes):
    """A device as DRA's CEL sees it (`device.driver`, `device.attributes[domain][name]`)."""
    domain = {}
    for key, value in attributes.items():
        d, _, n = key.rpartition("/")
        domain.setdefault(d or driver, {})[n] = value
    return {"driver": driver, "attributes": domain, "capacity": {}, "name": name}


def test_the_device_class_cel_selects_npuds_devices_and_no_others():
    import celpy

    cluster = _render(DEPLOY / "kubernetes" / "dra" / "cluster")
    (device_class,) = [d for d in cluster if d["kind"] == "DeviceClass"]
    env = celpy.Environment()
    (selector,) = device_class["spec"]["selectors"]
    program = env.program(env.compile(selector["cel"]["expression"]))
    npud = _device("streams.npud.io", "npu-3", {"vendor": "huawei", "npu.huawei.com/physicId": 3})
    huawei = _device("npu.huawei.com", "davinci-3", {"physicId": 3, "deviceType": "910B"})
    nvidia = _device("gpu.nvidia.com", "gpu-0", {"uuid": "GPU-0"})
    assert program.evaluate({"device": celpy.json_to_cel(npud)}) is not False
    assert bool(program.evaluate({"device": celpy.json_to_cel(npud)}))
    assert not bool(program.evaluate({"device": celpy.json_to_cel(huawei)}))
    assert not bool(program.evaluate({"device": celpy.json_to_cel(nvidia)}))


def test_the_node_restriction_policy_matches_npuds_accounts_only():
    import celpy

    cluster = _render(DEPLOY / "kubernetes" / "dra" / "cluster")
    (policy,) = [d for d in cluster if d["kind"] == "ValidatingAdmissionPolicy"]
    (condition,) = policy["spec"]["matchConditions"]
    env = celpy.Environment()
    program = env.program(env.compile(condition["expression"]))

    def matches(user):
        return bool(program.evaluate({"request": celpy.json_to_cel({"userInfo": {"username": user}})}))

    for ours in ["system:serviceaccount:npud-ascend:npud-ascend", "system:serviceaccount:npud-nvidia:npud-nvidia",
                 "system:serviceaccount:npud-sim:npud-sim"]:
        assert matches(ours), ours
    for other in ["system:serviceaccount:kube-system:npud", "system:serviceaccount:npud-ascend:default",
                  "system:node:node-1", "admin"]:
        assert not matches(other), other
