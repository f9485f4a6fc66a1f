//! Generates the npud.v1 code with protox (a pure-Rust protobuf compiler), so building
//! needs no system `protoc`. The descriptor set is kept for gRPC server reflection.
use prost::Message;
use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "npud/v1/errors.proto",
    "npud/v1/common.proto",
    "npud/v1/device.proto",
    "npud/v1/session.proto",
    "npud/v1/stream.proto",
    "npud/v1/event.proto",
    "npud/v1/report.proto",
    "npud/v1/admin.proto",
    "npud/v1/budget.proto",
];

const KUBELET: [&str; 6] = [
    "k8s/deviceplugin/v1beta1/api.proto",
    "k8s/podresources/v1/api.proto",
    "k8s/cri/runtime/v1/api.proto",
    "k8s/dra/v1/api.proto",
    "k8s/pluginregistration/v1/api.proto",
    "k8s/dra-health/v1alpha1/api.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let fds = protox::compile(PROTOS, ["."])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("npud_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(fds)?;
    // The kubelet's device plugin, pod-resources, DRA and plugin registration APIs and the
    // runtime's CRI (vendored wire facts), served or called by npud on Kubernetes, and
    // faked by the tests.
    for proto in KUBELET {
        println!("cargo:rerun-if-changed={proto}");
        let kubelet = protox::compile([proto], ["."])?;
        tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(kubelet)?;
    }
    Ok(())
}
