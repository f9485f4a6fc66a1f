"""Operations seen through standard tooling: grpcio's own health and reflection clients,
the Prometheus parser, and the Kubernetes schemas."""

import pathlib
import socket
import time
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from conftest import Daemon

DEPLOY = pathlib.Path(__file__).resolve().parents[3] / "deploy"


def unix_channel(d):
    # grpcio's defaults, as a stranger writes them: grpc-core sends the socket's path as
    # :authority, which npud normalises on the Unix socket.
    return grpc.insecure_channel("unix:" + str(d.socket))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_standard_health_client_sees_every_service(daemon):
    stub = health_pb2_grpc.HealthStub(unix_channel(daemon))
    for service in ["", "npud.v1.StreamService", "npud.v1.EventService", "npud.v1.ReportService"]:
        reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, service
    with pytest.raises(grpc.RpcError) as info:
        stub.Check(health_pb2.HealthCheckRequest(service="npud.v1.Nothing"), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_default_grpcio_channel_works_with_every_form_of_unix_target(daemon):
    from npud.v1 import device_pb2, device_pb2_grpc, session_pb2, session_pb2_grpc, stream_pb2, stream_pb2_grpc

    for target in ["unix:" + str(daemon.socket), "unix://" + str(daemon.socket)]:
        channel = grpc.insecure_channel(target)
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        devices = device_pb2_grpc.DeviceServiceStub(channel).List(device_pb2.ListDevicesRequest(), timeout=10)
        assert devices.devices[0].capacity > 0
        session = session_pb2_grpc.SessionServiceStub(channel).Open(session_pb2.OpenSessionRequest(), timeout=10)
        metadata = [("npud-session", str(session.session))]
        streams = stream_pb2_grpc.StreamServiceStub(channel)
        created = streams.Create(stream_pb2.CreateStreamsRequest(device=0, count=3), timeout=10, metadata=metadata)
        assert len(created.streams) == 3
        channel.close()


def test_standard_reflection_client_lists_and_describes_the_services(daemon):
    stub = reflection_pb2_grpc.ServerReflectionStub(unix_channel(daemon))
    replies = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10))
    names = {s.name for s in replies[0].list_services_response.service}
    assert {"npud.v1.StreamService", "npud.v1.AdminService", "grpc.health.v1.Health"} <= names
    ask = reflection_pb2.ServerReflectionRequest(file_containing_symbol="npud.v1.StreamService")
    files = list(stub.ServerReflectionInfo(iter([ask]), timeout=10))[0].file_descriptor_response.file_descriptor_proto
    assert files, "the descriptor of npud.v1.StreamService is served"


def test_metrics_are_valid_openmetrics_and_match_status():
    port = free_port()
    d = Daemon("--metrics", f"127.0.0.1:{port}", "--sim-profile", "atlas-a2")
    try:
        from npud import _session
        from npud.v1 import admin_pb2, stream_pb2

        s = _session.Session(target="unix:" + str(d.socket), renew=False)
        s.call(s.streams.Create, stream_pb2.CreateStreamsRequest(device=0, count=12))
        status = s.call(s.admin.Status, admin_pb2.StatusRequest())
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        values = {(f.name, tuple(sorted(sm.labels.items()))): sm.value for f in families.values() for sm in f.samples}
        device = (("device", "0"),)
        assert values[("npud_device_in_use_streams", device)] == status.devices[0].in_use == 12
        assert values[("npud_device_capacity_streams", device)] == status.devices[0].capacity == 1982
        assert values[("npud_device_pooled_streams", device)] == status.devices[0].pooled
        assert values[("npud_tenant_streams", (("device", "0"), ("tenant", "root")))] == 12
        assert "npud_grant_wait_seconds" in families and families["npud_grant_wait_seconds"].type == "histogram"
        assert "npud_hardware_create_seconds" in families
        s.close()
    finally:
        d.stop()


def test_kubernetes_manifests_validate_against_the_schemas():
    import kubernetes_validate
    import yaml

    # kustomization.yaml is kustomize's, not an object of the API; the overlays' patches
    # are partial objects, rendered and validated whole by the overlay test below.
    kube = DEPLOY / "kubernetes"
    manifests = sorted([*kube.glob("*.yaml"), *(kube / "base").glob("*.yaml"), *(kube / "admission-policy").glob("policy.yaml")])
    manifests = [p for p in manifests if p.name != "kustomization.yaml"]
    assert len(manifests) >= 7, manifests
    for path in manifests:
        for doc in yaml.safe_load_all(path.read_text()):
            for version in KUBERNETES_VERSIONS:
                kubernetes_validate.validate(doc, version, strict=True)


# The Kubernetes releases the manifests are checked against (strict: no unknown fields).
KUBERNETES_VERSIONS = ["1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0"]


def test_a_session_that_vanished_is_reopened_by_the_next_call(daemon):
    """A lease that lapsed while the process was stalled (here: the session closed from
    elsewhere) costs the process nothing but what the session held."""
    from npud._session import Session
    from npud.v1 import session_pb2, stream_pb2

    s = Session(name="heal-me")
    lost = s.id
    other = Session()
    other.call(other.sessions.Close, session_pb2.CloseSessionRequest(name="heal-me"))
    made = s.call(s.streams.Create, stream_pb2.CreateStreamsRequest(device=0, count=1))
    assert s.id != lost and s.reopened == 1
    handle = made.streams[0].handle
    s.call(s.streams.Synchronize, stream_pb2.SynchronizeStreamRequest(handle=handle))
    s.call(s.streams.Destroy, stream_pb2.DestroyStreamsRequest(handles=[handle]))
    s.close()
    other.close()


def test_a_plain_grpcio_client_holds_budget_for_as_long_as_its_budget_stream_lives(daemon):
    """A program in any language that creates streams itself asks npud first through
    BudgetService: one bidirectional stream is one session."""
    from npud.v1 import budget_pb2, budget_pb2_grpc, admin_pb2, admin_pb2_grpc
    import queue

    channel = unix_channel(daemon)
    calls = queue.Queue()

    def requests():
        while (call := calls.get()) is not None:
            yield call

    replies = budget_pb2_grpc.BudgetServiceStub(channel).Budget(requests(), timeout=60)
    calls.put(budget_pb2.BudgetCall(hello=budget_pb2.BudgetHello(program="pytest")))
    assert next(replies).WhichOneof("reply") == "welcome"
    calls.put(budget_pb2.BudgetCall(acquire=budget_pb2.AcquireBudgetRequest(device=0, count=70, wait_ms=10_000)))
    granted = next(replies)
    assert granted.WhichOneof("reply") == "acquired", granted
    assert granted.acquired.share.holds == 70
    calls.put(budget_pb2.BudgetCall(created=budget_pb2.CreatedBudgetRequest(device=0)))
    assert next(replies).WhichOneof("reply") == "created"

    admin = admin_pb2_grpc.AdminServiceStub(channel)
    holders = admin.Status(admin_pb2.StatusRequest(), timeout=10).native_holders
    assert [(h.program, h.streams) for h in holders] == [("pytest", 70)]

    calls.put(None)  # the client ends its side: the session ends and its budget goes back
    assert list(replies) == []
    deadline = time.monotonic() + 30
    while admin.Status(admin_pb2.StatusRequest(), timeout=10).native_holders:
        assert time.monotonic() < deadline, "the holding outlived its stream"
        time.sleep(0.05)


def test_garbage_request_bytes_are_the_callers_error_with_a_detail(daemon):
    """Bytes that are not the method's message: INVALID_ARGUMENT and npud's ErrorDetail,
    as for any other bad input (not INTERNAL, which reads as npud's fault)."""
    from npud.errors import NpudError
    from npud.v1 import errors_pb2

    channel = unix_channel(daemon)
    raw = channel.unary_unary(
        "/npud.v1.DeviceService/List", request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    with pytest.raises(grpc.RpcError) as info:
        raw(b"\xff\xff\xff\xff", timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    err = NpudError.from_rpc(info.value)
    assert err.reason == errors_pb2.INVALID_ARGUMENT_OTHER
    assert "not a valid message" in err.message


def test_oversized_metadata_gets_a_grpc_error_that_says_so(daemon):
    """Metadata over what the HTTP/2 layer takes used to come back as a bare HTTP 431
    (UNKNOWN to a gRPC client); on the socket it is an error that names the problem, and the
    connection stays usable."""
    channel = unix_channel(daemon)
    stub = health_pb2_grpc.HealthStub(channel)
    with pytest.raises(grpc.RpcError) as info:
        stub.Check(health_pb2.HealthCheckRequest(), metadata=[("x-huge", "v" * 20000)], timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert "metadata is" in info.value.details()
    assert stub.Check(health_pb2.HealthCheckRequest(), timeout=10).status == health_pb2.HealthCheckResponse.SERVING


def test_a_session_open_presents_the_pods_allocation_token(tmp_path, monkeypatch):
    """On Kubernetes the device plugin mounts a token and names it in NPUD_ALLOCATION; the
    client presents it when a session opens (and only then)."""
    from npud import _session

    monkeypatch.delenv("NPUD_ALLOCATION", raising=False)
    assert _session._allocation_metadata() == ()
    token = tmp_path / "token"
    token.write_text("0123abcd\n")
    monkeypatch.setenv("NPUD_ALLOCATION", str(token))
    assert _session._allocation_metadata() == (("npud-allocation", "0123abcd"),)
    monkeypatch.setenv("NPUD_ALLOCATION", str(tmp_path / "missing"))
    assert _session._allocation_metadata() == (), "an unreadable file presents nothing"


def _render(path):
    """`kubectl kustomize` of a directory under deploy/, as parsed documents."""
    import shutil
    import subprocess

    import yaml

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("SKIPPED LOUDLY: kubectl is not installed here, so no overlay can be rendered")
    out = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, check=True)
    return list(yaml.safe_load_all(out.stdout))


def _daemonset(docs):
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    return ds["spec"]["template"]["spec"]


@pytest.mark.parametrize("overlay", ["ascend", "nvidia", "sim", "admission-policy"])
def test_every_overlay_renders_and_validates_against_the_api_schemas(overlay):
    """Each overlay of deploy/kubernetes renders and every object in it validates against
    the Kubernetes 1.30 schemas; the base alone names no backend and is no overlay."""
    import kubernetes_validate

    docs = _render(DEPLOY / "kubernetes" / overlay)
    for doc in docs:
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)
    kinds = sorted(d["kind"] for d in docs)
    if overlay == "admission-policy":
        assert kinds == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
        (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
        assert binding["spec"]["validationActions"] == ["Deny"]
        return
    assert kinds == ["ConfigMap", "DaemonSet", "Namespace", "NetworkPolicy"]
    (ns,) = [d for d in docs if d["kind"] == "Namespace"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert ns["metadata"]["name"] == f"npud-{overlay}", "each overlay its own namespace"
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    rolling = ds["spec"]["updateStrategy"]["rollingUpdate"]
    assert (rolling["maxSurge"], rolling["maxUnavailable"]) == (1, 0), "an upgrade is a handover"
    spec = _daemonset(docs)
    assert spec["automountServiceAccountToken"] is False and spec["hostPID"] is True
    if overlay != "sim":
        tolerated = {t["key"] for t in spec["tolerations"] if t["operator"] == "Exists"}
        assert tolerated >= {"huawei.com/Ascend910", "nvidia.com/gpu"}
    assert "initContainers" not in spec, "npud installs the interposer itself, never over a mapped file"
    (npud,) = spec["containers"]
    registry = npud["image"].split("/")[0]
    assert "." in registry or ":" in registry, f"a registry-qualified image: {npud['image']}"
    backend = {"ascend": "acl", "nvidia": "cuda", "sim": "sim"}[overlay]
    assert f"--backend={backend}" in npud["args"]
    env = {e["name"]: e.get("value") for e in npud.get("env", [])}
    mounts = {m["mountPath"] for m in npud["volumeMounts"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert npud[probe]["timeoutSeconds"] >= 5, f"{probe}: an exec probe's 1 s default is too short"
    assert "cpu" not in npud["resources"]["limits"], "a CPU limit throttles admission in a crowd"
    if overlay == "ascend":
        assert spec["nodeSelector"] == {"accelerator": "huawei-Ascend910"}
        assert "/usr/local/Ascend/driver/lib64" in env["LD_LIBRARY_PATH"].split(":")
        assert "/usr/local/Ascend" in mounts
        # No mount names a CANN package a node may lack (only the driver is on every node).
        paths = {v["hostPath"]["path"]: v["hostPath"].get("type") for v in spec["volumes"] if "hostPath" in v}
        assert not any("toolkit" in p or "nnae" in p or "nnrt" in p for p in paths), paths
    if overlay == "nvidia":
        assert spec["runtimeClassName"] == "nvidia"
        assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and "compute" in env["NVIDIA_DRIVER_CAPABILITIES"]
    if overlay == "sim":
        # Never on an accelerator node, nor on its host paths.
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        absent = {e["key"] for e in terms[0]["matchExpressions"] if e["operator"] == "DoesNotExist"}
        assert {"accelerator", "nvidia.com/gpu.present"} <= absent, terms
        assert not {t["key"] for t in spec["tolerations"]} & {"huawei.com/Ascend910", "nvidia.com/gpu"}
        host = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
        assert {"/run/npud-sim", "/var/lib/npud-sim"} <= host and not {"/run/npud", "/var/lib/npud"} & host, host
        assert mounts >= {"/run/npud-sim", "/var/lib/npud-sim"} and "/run/npud" not in mounts, mounts


def test_every_overlay_can_be_applied_to_one_cluster():
    """Ascend, NVIDIA and sim nodes in one cluster: the overlays rendered together name no
    object twice, so applying one never replaces another's."""
    seen = {}
    for overlay in ["ascend", "nvidia", "sim", "admission-policy"]:
        for d in _render(DEPLOY / "kubernetes" / overlay):
            key = (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
            assert key not in seen, f"{key} is in both {seen.get(key)} and {overlay}"
            seen[key] = overlay


def test_the_prometheus_operator_overlay_adds_a_pod_monitor():
    docs = _render(DEPLOY / "overlays" / "prometheus-operator")
    assert "PodMonitor" in {d["kind"] for d in docs}


def _admission(pod):
    """The admission policy's CEL, evaluated on `pod` as the API server would: its
    variables in order, then its validations; (allowed, messages)."""
    import celpy
    import yaml

    (policy, _binding) = yaml.safe_load_all((DEPLOY / "kubernetes" / "admission-policy" / "policy.yaml").read_text())
    env = celpy.Environment()
    # Kubernetes' CEL has the strings extension's join; the library leaves it to us.
    functions = {"join": lambda items, sep: celpy.celtypes.StringType(str(sep).join(str(i) for i in items))}
    activation = {"object": celpy.json_to_cel(pod)}
    known = {}
    for v in policy["spec"]["variables"]:
        activation["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(k): x for k, x in known.items()})
        known[v["name"]] = env.program(env.compile(v["expression"])).evaluate(activation)
    activation["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(k): x for k, x in known.items()})
    allowed, messages = True, []
    for check in policy["spec"]["validations"]:
        if not env.program(env.compile(check["expression"])).evaluate(activation):
            allowed = False
            messages.append(str(env.program(env.compile(check["messageExpression"]), functions=functions).evaluate(activation)))
    return allowed, messages


def _pod(containers, init=()):
    limits = lambda l: {"resources": {"limits": l}} if l is not None else {}  # noqa: E731
    spec = {"containers": [{"name": n, "image": "x", **limits(l)} for n, l in containers]}
    if init:
        spec["initContainers"] = [{"name": n, "image": "x", **limits(l)} for n, l in init]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


def _binding():
    import yaml

    (policy, binding) = yaml.safe_load_all((DEPLOY / "kubernetes" / "admission-policy" / "policy.yaml").read_text())
    return policy, binding


def _selects(selector, labels):
    """A label selector's matchExpressions (In, NotIn, Exists, DoesNotExist) on `labels`."""
    for e in selector.get("matchExpressions", []):
        present, value = e["key"] in labels, labels.get(e["key"])
        ok = {
            "In": present and value in e.get("values", []),
            "NotIn": not present or value not in e.get("values", []),
            "Exists": present,
            "DoesNotExist": not present,
        }[e["operator"]]
        if not ok:
            return False
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def test_the_admission_policy_judges_only_new_pods_in_the_namespaces_it_is_scoped_to():
    """CREATE only: an UPDATE of an older pod that took an NPU without streams (the Job
    controller removing its tracking finalizer) is never refused. Scoped by namespace: the
    system and npud's own are out, and any namespace labelled npud.io/admission=off."""
    policy, binding = _binding()
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["operations"] == ["CREATE"] and rule["resources"] == ["pods"]
    old_pod = _pod([("main", {"huawei.com/Ascend910": "8"})])
    old_pod["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    assert not _admission(old_pod)[0], "such a pod is refused when it is made"
    assert "UPDATE" not in rule["operations"], "its finalizer's removal is not judged at all"
    selector = binding["spec"]["matchResources"]["namespaceSelector"]
    ns = lambda name, **labels: {"kubernetes.io/metadata.name": name, **labels}  # noqa: E731
    assert _selects(selector, ns("team-a"))
    assert not _selects(selector, ns("team-b", **{"npud.io/admission": "off"}))
    for system in ["kube-system", "npud-ascend", "npud-nvidia", "npud-sim", "mindx-dl", "gpu-operator"]:
        assert not _selects(selector, ns(system)), system


def test_the_admission_policy_covers_shared_and_partitioned_accelerators():
    """vNPUs (static templates and Volcano's npu-core), time-sliced GPUs and MIG devices take
    an accelerator too: without npud.io/streams they are refused, with it admitted."""
    for name in [
        "huawei.com/Ascend910-2c",
        "huawei.com/Ascend910-16c",
        "huawei.com/Ascend310P-1c",
        "huawei.com/Ascend310P-2c.1cpu",
        "huawei.com/npu-core",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.5gb",
        "nvidia.com/mig-3g.40gb",
    ]:
        allowed, why = _admission(_pod([("main", {name: "1"})]))
        assert not allowed and "main" in why[0], (name, why)
        assert _admission(_pod([("main", {name: "1", "npud.io/streams": "4"})])) == (True, []), name
    # Names that only look alike are not accelerators.
    assert _admission(_pod([("main", {"huawei.com/hccs": "1", "nvidia.com/gpumem": "1000"})])) == (True, [])


def test_the_examples_are_what_they_say():
    """Each example passes the admission policy, and the two servers each take an NPU and
    their streams in the same container."""
    import yaml

    kube = DEPLOY / "kubernetes"
    pod = yaml.safe_load((kube / "example-workload.yaml").read_text())
    assert _admission(pod) == (True, [])
    (deployment,) = [d for d in yaml.safe_load_all((kube / "example-two-servers.yaml").read_text()) if d]
    template = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t"}, "spec": deployment["spec"]["template"]["spec"]}
    assert _admission(template) == (True, [])
    (server,) = template["spec"]["containers"]
    assert server["resources"]["limits"]["huawei.com/Ascend910"] == "1"
    assert int(server["resources"]["limits"]["npud.io/streams"]) * 8 >= 70, "a torch_npu process's streams"
    assert "LD_PRELOAD" not in (kube / "example-workload.yaml").read_text().split("(no LD_PRELOAD")[0]


def test_the_admission_policy_refuses_accelerators_without_streams():
    """The optional ValidatingAdmissionPolicy: an NPU or GPU without npud.io/streams in the
    same container is refused, init containers included; everything else passes."""
    both = {"huawei.com/Ascend910": "8", "npud.io/streams": "200"}
    assert _admission(_pod([("main", both)])) == (True, [])
    assert _admission(_pod([("web", {"cpu": "1"}), ("plain", None)])) == (True, [])
    assert _admission(_pod([("gpu", {"nvidia.com/gpu": "1", "npud.io/streams": "9"})])) == (True, [])
    allowed, why = _admission(_pod([("main", {"huawei.com/Ascend910": "8"}), ("side", None)]))
    assert not allowed and "main" in why[0] and "side" not in why[0], why
    allowed, why = _admission(_pod([("main", both)], init=[("warmup", {"nvidia.com/gpu": "1"})]))
    assert not allowed and "warmup" in why[0], why
    allowed, _ = _admission(_pod([("main", both)], init=[("setup", {"cpu": "1"})]))
    assert allowed


def test_every_metric_the_dashboard_queries_is_served():
    """The Grafana dashboard under deploy/ queries only metrics npud's /metrics serves."""
    import json
    import re

    dashboard = json.loads((DEPLOY / "grafana" / "npud-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queried = {m for e in exprs for m in re.findall(r"\bnpud_[a-z_]+", e)}
    assert len(queried) >= 8, queried
    port = free_port()
    d = Daemon("--metrics", f"127.0.0.1:{port}", "--sim-profile", "atlas-a2")
    try:
        from npud import _session
        from npud.errors import NpudError
        from npud.v1 import stream_pb2

        s = _session.Session(target="unix:" + str(d.socket), renew=False)
        s.call(s.streams.Create, stream_pb2.CreateStreamsRequest(device=0, count=3))
        with pytest.raises(NpudError):  # a refusal, so the failures counter has a sample
            s.call(s.streams.Create, stream_pb2.CreateStreamsRequest(device=0, count=0))
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        served = {sm.name for f in text_string_to_metric_families(text) for sm in f.samples}
        # Pods' bookings have samples only where a pod is booked: the Kubernetes suite
        # (tests/tests/pods.rs) reads each of them off a node's /metrics.
        pods = {m for m in queried if m.startswith("npud_pod_")}
        kubernetes_suite = (DEPLOY.parent / "tests" / "tests" / "pods.rs").read_text()
        assert pods and all(f'"{m}"' in kubernetes_suite for m in pods), pods
        queried -= pods
        assert queried <= served, f"queried but not served: {sorted(queried - served)}"
        s.close()
    finally:
        d.stop()
