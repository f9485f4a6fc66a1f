//! Unmodified programs for the interposer's tests and benchmark: the small AscendCL
//! program in `native/acl_app.c`, built against the fake libascendcl, and npud on the acl
//! backend over a device budget that every process shares (`NPU_SIM_SHARED`).

use crate::{Daemon, bin, fake_library};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Builds `native/<source>` against the fake library `-l<link>` into a per-process temp
/// directory, once per variant (extra compiler flags).
fn build(source: &str, link: &str, out: &str, extra: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("npud-native-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("build directory");
    let out = dir.join(out);
    let status = Command::new("cc")
        .arg("-O1")
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("native").join(source))
        .arg("-L")
        .arg(fake_dir())
        .args([&format!("-l{link}"), "-ldl"])
        .status()
        .expect("a C compiler (cc) is needed to build the test program");
    assert!(status.success(), "building {}", out.display());
    out
}

/// `native/cuda_app.c` built once per process: (linked against libcuda, the variant that
/// fetches the driver through `dlsym(handle, "cuGetProcAddress_v2")` as a static cudart
/// does). Arguments and output as [`acl_apps`]' programs, without "available".
pub fn cuda_apps() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        (
            build("cuda_app.c", "cuda", "cuda_app", &[]),
            build("cuda_app.c", "cuda", "cuda_app_pa", &["-DUSE_PROC_ADDRESS"]),
        )
    })
}

/// npud on the cuda backend over the fake driver and the shared budget at `shared`, with
/// a per-device budget equal to the fake device's.
pub fn cuda_daemon(shared: &Path, extra: &[&str]) -> Daemon {
    let lib = fake_library("libcuda.so");
    let mut args = vec!["--backend", "cuda", "--cuda-library", lib.to_str().expect("UTF-8 path")];
    args.extend_from_slice(extra);
    Daemon::builder()
        .args(&args)
        .config("[budget]\ncuda_streams_per_device = 2048\n")
        .env("NPU_SIM_SHARED", shared.to_str().expect("UTF-8 path"))
        .start()
}

/// A command for the CUDA program on the shared budget, interposed when `npud` is given.
pub fn cuda_command(program: &Path, shared: &Path, npud: Option<(&Daemon, u32)>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("NPU_SIM_SHARED", shared)
        .env("LD_LIBRARY_PATH", fake_dir())
        .env("CUDA_APP_LIBRARY", fake_library("libcuda.so"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some((d, streams)) = npud {
        cmd.env("LD_PRELOAD", preload_library()).env("NPUD_SOCKET", &d.socket).env("NPUD_STREAMS", streams.to_string());
    }
    cmd
}

/// The program, built once per process: (linked against libascendcl, dlopen variant).
/// Arguments: STREAMS HOLD_MS (-1 holds until stdin closes); it prints
/// `ok <streams> available <n>` or `fail <code> ...` once its streams exist.
pub fn acl_apps() -> &'static (PathBuf, PathBuf) {
    static BUILT: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BUILT.get_or_init(|| {
        (
            build("acl_app.c", "ascendcl", "acl_app", &[]),
            build("acl_app.c", "ascendcl", "acl_app_dl", &["-DUSE_DLOPEN"]),
        )
    })
}

/// Where the fake vendor libraries are.
pub fn fake_dir() -> PathBuf {
    fake_library("libascendcl.so").parent().expect("target directory").to_path_buf()
}

/// The interposer library of this build.
pub fn preload_library() -> PathBuf {
    bin("libnpud_preload.so")
}

/// npud on the acl backend over the fake library and the shared budget at `shared`, on
/// `socket` when given (so a restarted npud is found where it was).
pub fn acl_daemon(shared: &Path, socket: Option<&Path>, extra: &[&str]) -> Daemon {
    let lib = fake_library("libascendcl.so");
    let mut args = vec!["--backend", "acl", "--acl-library", lib.to_str().expect("UTF-8 path")];
    args.extend_from_slice(extra);
    let mut builder = Daemon::builder().args(&args).env("NPU_SIM_SHARED", shared.to_str().expect("UTF-8 path"));
    if let Some(socket) = socket {
        builder = builder.socket(socket);
    }
    builder.start()
}

/// A command for the program on the shared budget, interposed (`LD_PRELOAD`, the way a
/// container runs it) when `npud` is given.
pub fn acl_command(program: &Path, shared: &Path, npud: Option<(&Daemon, u32)>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("NPU_SIM_SHARED", shared)
        .env("LD_LIBRARY_PATH", fake_dir())
        .env("ACL_APP_LIBRARY", fake_library("libascendcl.so"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some((d, streams)) = npud {
        cmd.env("LD_PRELOAD", preload_library()).env("NPUD_SOCKET", &d.socket).env("NPUD_STREAMS", streams.to_string());
    }
    cmd
}
