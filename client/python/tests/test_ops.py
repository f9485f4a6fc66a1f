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
            kubernetes_validate.validate(doc, "1.30.0", strict=True)


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
        kubernetes_validate.validate(doc, "1.30.0", strict=True)
    kinds = sorted(d["kind"] for d in docs)
    if overlay == "admission-policy":
        assert kinds == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
        (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
        assert binding["spec"]["validationActions"] == ["Deny"]
        return
    assert kinds == ["ConfigMap", "DaemonSet", "Namespace", "NetworkPolicy"]
    (ns,) = [d for d in docs if d["kind"] == "Namespace"]
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    spec = _daemonset(docs)
    assert spec["automountServiceAccountToken"] is False and spec["hostPID"] is True
    assert {t["key"] for t in spec["tolerations"] if t["operator"] == "Exists"} >= {"huawei.com/Ascend910", "nvidia.com/gpu"}
    assert "initContainers" not in spec, "npud installs the interposer itself, never over a mapped file"
    (npud,) = spec["containers"]
    registry = npud["image"].split("/")[0]
    assert "." in registry or ":" in registry, f"a registry-qualified image: {npud['image']}"
    backend = {"ascend": "acl", "nvidia": "cuda", "sim": "sim"}[overlay]
    assert f"--backend={backend}" in npud["args"]
    env = {e["name"]: e.get("value") for e in npud.get("env", [])}
    mounts = {m["mountPath"] for m in npud["volumeMounts"]}
    if overlay == "ascend":
        assert spec["nodeSelector"] == {"accelerator": "huawei-Ascend910"}
        assert env["ASCEND_HOME_PATH"] == "/usr/local/Ascend/ascend-toolkit/latest"
        assert "/usr/local/Ascend/driver/lib64" in env["LD_LIBRARY_PATH"].split(":")
        assert {"/usr/local/Ascend/driver", "/usr/local/Ascend/ascend-toolkit"} <= mounts
    if overlay == "nvidia":
        assert spec["runtimeClassName"] == "nvidia"
        assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and "compute" in env["NVIDIA_DRIVER_CAPABILITIES"]
    if overlay == "sim":
        assert "nodeSelector" not in spec, "the simulator runs anywhere it is applied"


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
