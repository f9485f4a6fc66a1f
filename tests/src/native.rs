//! Unmodified programs for the interposer's tests and benchmark: the small AscendCL
//! program in `native/acl_app.c`, built against the fake libascendcl, and npud on the acl
//! backend over a device budget that every process shares (`NPU_SIM_SHARED`).

use crate::{Daemon, DaemonBuilder, bin, fake_library};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Builds `native/<source>` against the fake library `-l<link>` into a per-process temp
/// directory as `out`, once per process (each variant, with its extra compiler flags,
/// has its own `out`).
fn build(source: &str, link: &str, out: &str, extra: &[&str]) -> &'static PathBuf {
    static BUILT: Mutex<Vec<(String, &'static PathBuf)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(name, _)| name == out) {
        return path;
    }
    // A handful of programs per process: leaking each path once is what `'static` costs.
    let path: &'static PathBuf = Box::leak(Box::new(compile(source, link, out, extra)));
    built.push((out.to_string(), path));
    path
}

/// Compiles into the build's own directory (`target/<profile>/native-programs`), not a
/// temp directory per test process that nothing would remove. Each process compiles
/// afresh (the sources may have changed) under a name of its own and renames the result
/// into place: another test binary running the previous build keeps its file.
fn compile(source: &str, link: &str, out: &str, extra: &[&str]) -> PathBuf {
    let dir = fake_dir().join("native-programs");
    std::fs::create_dir_all(&dir).expect("build directory");
    let out = dir.join(out);
    let building = out.with_extension(format!("building-{}", std::process::id()));
    let status = Command::new("cc")
        .arg("-O1")
        .args(extra)
        .arg("-o")
        .arg(&building)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("native").join(source))
        .arg("-L")
        .arg(fake_dir())
        .args([&format!("-l{link}"), "-ldl"])
        .status()
        .expect("a C compiler (cc) is needed to build the test program");
    assert!(status.success(), "building {}", out.display());
    std::fs::rename(&building, &out).expect("the built program moved into place");
    out
}

/// `native/cuda_app.c` built once per process: (linked against libcuda, the variant that
/// fetches the driver through `dlsym(handle, "cuGetProcAddress_v2")` as a static cudart
/// does). Arguments and output as [`acl_apps`]' programs, without "available".
pub fn cuda_apps() -> (&'static PathBuf, &'static PathBuf) {
    (build("cuda_app.c", "cuda", "cuda_app", &[]), build("cuda_app.c", "cuda", "cuda_app_pa", &["-DUSE_PROC_ADDRESS"]))
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

/// The fake CUDA driver and NVML as the NVIDIA container toolkit lays them out, side by
/// side under their real names in `dir` (`libcuda.so.1`, `libnvidia-ml.so.1`): npud finds
/// NVML beside the driver. Returns the driver's path.
pub fn nvidia_libraries(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).expect("a directory for the drivers");
    let cuda = dir.join("libcuda.so.1");
    for (link, file) in [(&cuda, "libcuda.so"), (&dir.join("libnvidia-ml.so.1"), "libnvidia_ml.so")] {
        if !link.exists() {
            std::os::unix::fs::symlink(fake_library(file), link).expect("link a fake driver");
        }
    }
    cuda
}

/// A command for the CUDA program on the shared budget, interposed when `npud` is given.
pub fn cuda_command(program: &Path, shared: &Path, npud: Option<(&Daemon, u32)>) -> Command {
    command(program, shared, ("CUDA_APP_LIBRARY", "libcuda.so"), npud)
}

/// The program, built once per process: (linked against libascendcl, dlopen variant).
/// Arguments: STREAMS HOLD_MS (-1 holds until stdin closes); it prints
/// `ok <streams> available <n>` or `fail <code> ...` once its streams exist.
pub fn acl_apps() -> (&'static PathBuf, &'static PathBuf) {
    (build("acl_app.c", "ascendcl", "acl_app", &[]), build("acl_app.c", "ascendcl", "acl_app_dl", &["-DUSE_DLOPEN"]))
}

/// `native/empty_preload.c` built once per process as a shared library: a preload with
/// nothing in it, what loading any `LD_PRELOAD` library costs (npud-bench).
pub fn empty_preload() -> &'static PathBuf {
    build("empty_preload.c", "dl", "libempty_preload.so", &["-shared", "-fPIC"])
}

/// `native/acl_frameworks.c` built once per process: graph capture as frameworks run it,
/// with kernel launches (its header says what it prints).
pub fn acl_frameworks_app() -> &'static PathBuf {
    build("acl_frameworks.c", "ascendcl", "acl_frameworks", &[])
}

/// `native/acl_capture_rules.c` built once per process, against both fake libraries:
/// the runtime's capture rules, one check each (its header says what it prints).
pub fn acl_capture_rules_app() -> &'static PathBuf {
    build("acl_capture_rules.c", "ascendcl", "acl_capture_rules", &["-Wl,--no-as-needed", "-lruntime"])
}

/// `native/acl_app.c` linked against the fake libascendcl with its directory in the
/// program's own run path: the only way a set-uid program finds it, since the loader
/// ignores `LD_LIBRARY_PATH` there (ld.so(8), secure-execution mode).
pub fn acl_app_rpath() -> &'static PathBuf {
    let rpath = format!("-Wl,-rpath,{}", fake_dir().display());
    build("acl_app.c", "ascendcl", "acl_app_rpath", &[&rpath])
}

/// `native/acl_app.c` built once per process with `-DWITHOUT_TSD`: arguments and output as
/// [`acl_apps`]' programs, the device set with aclrtSetDeviceWithoutTsdVXX.
pub fn acl_app_without_tsd() -> &'static PathBuf {
    build("acl_app.c", "ascendcl", "acl_app_without_tsd", &["-DWITHOUT_TSD"])
}

/// `native/init_wait.c` built once per process: (AscendCL, the CUDA driver linked, the
/// CUDA driver through cuGetProcAddress_v2). No arguments; it prints `ready RC` once its
/// runtime is initialised and exits when its input closes, never using a device.
pub fn init_wait_apps() -> [&'static PathBuf; 3] {
    [
        build("init_wait.c", "ascendcl", "init_wait_acl", &[]),
        build("init_wait.c", "cuda", "init_wait_cuda", &["-DUSE_CUDA"]),
        build("init_wait.c", "cuda", "init_wait_cuda_pa", &["-DUSE_CUDA", "-DUSE_PROC_ADDRESS"]),
    ]
}

/// `native/acl_fork.c` built once per process against libascendcl. Argument: N; the
/// program initialises AscendCL and forks, both create N streams on device 0; the child
/// prints `ready child PID` and holds until stdin closes (then `done`), the parent prints
/// `ready parent PID` after it and exits at once.
pub fn acl_fork_app() -> &'static PathBuf {
    build("acl_fork.c", "ascendcl", "acl_fork", &[])
}

/// `native/acl_handoff.c` built once per process against libascendcl. Argument: N; it
/// creates N streams on device 0 and starts a child with a raw clone (no fork handlers)
/// that keeps every descriptor, the connection to npud included, until stdin closes; it
/// prints `ready child PID`, then `ready parent PID`, and exits still holding its streams.
pub fn acl_handoff_app() -> &'static PathBuf {
    build("acl_handoff.c", "ascendcl", "acl_handoff", &[])
}

/// `native/acl_leader_exit.c` built once per process against libascendcl. Argument: N; the
/// main thread leaves with `pthread_exit` and a worker sets device 0 and creates N streams,
/// prints `ok N`, holds them until stdin closes, then `done`.
pub fn acl_leader_exit_app() -> &'static PathBuf {
    build("acl_leader_exit.c", "ascendcl", "acl_leader_exit", &["-pthread"])
}

/// `native/acl_fork_asking.c` built once per process against libascendcl: a thread sets
/// device 0 while the main thread, on a line from stdin, forks a child that never uses the
/// device (`child PID`, holding until stdin closes) and then exits at once (`parent PID`).
pub fn acl_fork_asking_app() -> &'static PathBuf {
    build("acl_fork_asking.c", "ascendcl", "acl_fork_asking", &["-pthread"])
}

/// `native/acl_threads.c` built once per process against libascendcl. Arguments: THREADS
/// STREAMS; the threads set device 0 and create their streams all at once; it prints
/// `ok THREADS STREAMS`, holds them until stdin closes, then `done`.
pub fn acl_threads_app() -> &'static PathBuf {
    build("acl_threads.c", "ascendcl", "acl_threads", &["-pthread"])
}

/// `native/acl_steps.c` built once per process against libascendcl: it sets device 0,
/// then `+N` on stdin creates N streams and `-N` destroys the last N, each answered with
/// `held K`; at the end of stdin it tears down and prints `done`.
pub fn acl_steps_app() -> &'static PathBuf {
    build("acl_steps.c", "ascendcl", "acl_steps", &[])
}

/// `native/acl_events.c` built once per process against libascendcl. Argument: EVENTS;
/// it prints `ok <events> available <n>` (aclrtGetEventAvailNum) or `fail <code> after
/// <k>`, holds its events until stdin closes, and exits.
pub fn acl_events_app() -> &'static PathBuf {
    build("acl_events.c", "ascendcl", "acl_events", &[])
}

/// `native/cuda_callbacks.c` built once per process against libcuda: stream flags,
/// stream callbacks, context sync and error strings; prints `ok` or `fail <what>`.
pub fn cuda_callbacks_app() -> &'static PathBuf {
    build("cuda_callbacks.c", "cuda", "cuda_callbacks", &[])
}

/// `native/cuda_default_stream.c` built once per process against libcuda: the NULL
/// stream, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD, and the legacy stream's ordering
/// against blocking streams; prints `ok` or `fail <what>`.
pub fn cuda_default_stream_app() -> &'static PathBuf {
    build("cuda_default_stream.c", "cuda", "cuda_default_stream", &[])
}

/// `native/cuda_edges.c` built once per process against libcuda: the driver's edge cases,
/// each in a child process, against an H100's answers; prints `ok` or `fail <case> ...`.
pub fn cuda_edges_app() -> &'static PathBuf {
    build("cuda_edges.c", "cuda", "cuda_edges", &[])
}

/// `native/cuda_basics.c` built once per process against libcuda: the everyday calls
/// around streams (context state and flags, a stream's context, memsets, modules from a
/// file) against an H100's answers; prints `ok` or `fail <what>`.
pub fn cuda_basics_app() -> &'static PathBuf {
    build("cuda_basics.c", "cuda", "cuda_basics", &[])
}

/// `native/cuda_value_ops.c` built once per process against libcuda: streams synchronised
/// through memory (cuStreamWaitValue32/64, cuStreamWriteValue32/64) and the driver's
/// refusals, against an H100's answers; prints `ok` or `fail <what>`.
pub fn cuda_value_ops_app() -> &'static PathBuf {
    build("cuda_value_ops.c", "cuda", "cuda_value_ops", &["-pthread"])
}

/// `native/cuda_green_edges.c` built once per process against libcuda: green contexts'
/// edge cases, each in a child process; prints `ok` or `fail <case> ...`.
pub fn cuda_green_edges_app() -> &'static PathBuf {
    build("cuda_green_edges.c", "cuda", "cuda_green_edges", &[])
}

/// `native/cuda_green.c` built once per process against libcuda: (linked, fetching the
/// driver through cuGetProcAddress_v2). ARG N: N streams in a green context of device 0;
/// prints `ok N SMS` (or `fail CODE after K`), on a line destroys the green context
/// (`detached RC`), and when stdin closes destroys the streams (`done`).
pub fn cuda_green_apps() -> (&'static PathBuf, &'static PathBuf) {
    (
        build("cuda_green.c", "cuda", "cuda_green", &[]),
        build("cuda_green.c", "cuda", "cuda_green_pa", &["-DUSE_PROC_ADDRESS"]),
    )
}

/// `native/cuda_contexts.c` built once per process against libcuda: ARGS `ON0 ON1`,
/// streams made on devices 0 and 1 through the context stack (push, pop, create,
/// destroy, set NULL); prints `ok`, holds them until stdin closes, prints `done`.
pub fn cuda_contexts_app() -> &'static PathBuf {
    build("cuda_contexts.c", "cuda", "cuda_contexts", &[])
}

/// `native/cuda_create_cost.c` built once per process against libcuda: ARGS `STREAMS
/// ROUNDS`; prints `create_ns <n> destroy_ns <n> streams <S> rounds <R>` (what a stream
/// costs; scripts/gpu-check.sh times it on a GPU).
pub fn cuda_create_cost_app() -> &'static PathBuf {
    build("cuda_create_cost.c", "cuda", "cuda_create_cost", &[])
}

/// `native/acl_memory.c` built once per process against libascendcl: buffers, copies,
/// memset and run mode as the vendor's samples use them; prints `ok` or `fail <what>`.
pub fn acl_memory_app() -> &'static PathBuf {
    build("acl_memory.c", "ascendcl", "acl_memory", &[])
}

/// `native/acl_default_stream.c` built once per process against libascendcl: the NULL
/// stream as the vendor's samples use it; prints `ok` or `fail <what>`.
pub fn acl_default_stream_app() -> &'static PathBuf {
    build("acl_default_stream.c", "ascendcl", "acl_default_stream", &["-pthread"])
}

/// `native/acl_numbering.c` built once per process against libascendcl: every device it
/// sees through the user, logical and physical numberings, there and back; prints
/// `device U logical L physical P` lines and `ok`, or `fail <what>`.
pub fn acl_numbering_app() -> &'static PathBuf {
    build("acl_numbering.c", "ascendcl", "acl_numbering", &[])
}

/// A budget file for one test: the fake driver's view of the device, shared by everyone.
pub struct Shared {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl Shared {
    pub fn new() -> Shared {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("budget");
        Shared { _dir: dir, path }
    }
}

impl Shared {
    /// The driver's view of a budget file a test made itself.
    pub fn at(path: &Path) -> Shared {
        let dir = tempfile::tempdir().expect("temp dir");
        Shared { _dir: dir, path: path.to_path_buf() }
    }
}

impl Default for Shared {
    fn default() -> Shared {
        Shared::new()
    }
}

impl Shared {
    /// Streams the fake driver counts for live processes other than `except` (npud's own).
    pub fn held_by_others(&self, except: u32) -> u32 {
        self.lines().filter(|(pid, _, _)| *pid != except).map(|(_, _, n)| n).sum()
    }

    /// The same on one physical device only.
    pub fn held_on(&self, physical: u32, except: u32) -> u32 {
        self.lines().filter(|(pid, d, _)| *pid != except && *d == physical).map(|(_, _, n)| n).sum()
    }

    /// The driver's holder lines of live processes: (pid, physical device, streams).
    fn lines(&self) -> impl Iterator<Item = (u32, u32, u32)> {
        // Under the driver's lock, shared: a table being rewritten is never read half done.
        let text = std::fs::File::open(&self.path)
            .and_then(|mut f| {
                f.lock_shared()?;
                let mut text = String::new();
                std::io::Read::read_to_string(&mut f, &mut text)?;
                Ok(text)
            })
            .unwrap_or_default();
        let rows: Vec<(u32, u32, u32)> = text
            .lines()
            .filter_map(|l| {
                let w: Vec<u64> = l.split_whitespace().filter_map(|w| w.parse().ok()).collect();
                let (pid, device, streams) = (u32::try_from(*w.first()?).ok()?, *w.get(1)? as u32, *w.get(2)? as u32);
                // A dead process's line is dropped at the driver's next update; it holds
                // nothing. A line names its process by pid and pid namespace (containers'
                // programs are all pid 1 in theirs): the driver's own test of life.
                let alive = match w.get(3) {
                    Some(ns) => npu_sim::shared::holder_alive(&self.path, pid, *ns),
                    None => Path::new(&format!("/proc/{pid}")).exists(),
                };
                alive.then_some((pid, device, streams))
            })
            .collect();
        rows.into_iter()
    }

    /// npud on the acl backend over the fake library, on this shared budget.
    pub fn daemon(&self, extra: &[&str]) -> Daemon {
        acl_daemon(&self.path, None, extra)
    }

    /// The same on a socket the test chose, so a restarted npud is found where it was.
    pub fn daemon_on(&self, socket: Option<&Path>, extra: &[&str]) -> Daemon {
        acl_daemon(&self.path, socket, extra)
    }
}

/// `native/acl_graph.c` built once per process: `ROUNDS`; captures one copy, replays it
/// with new inputs, prints `ok ROUNDS streams S` (or `fail WHAT`), then holds until stdin
/// closes.
pub fn acl_graph_app() -> &'static PathBuf {
    build("acl_graph.c", "ascendcl", "acl_graph", &[])
}

/// `native/acl_build.c` built once per process: `ROUNDS`; builds a model by hand on
/// persistent streams, executes it with new inputs, prints `ok ROUNDS streams S` (or
/// `fail WHAT`), then holds until stdin closes.
pub fn acl_build_app() -> &'static PathBuf {
    build("acl_build.c", "ascendcl", "acl_build", &[])
}

/// `native/acl_value_ops.c` built once per process: `supported|unsupported`; streams
/// synchronised through device memory (aclrtValueWrite, aclrtValueWait) and what is
/// refused; prints `ok values` or `ok unsupported` (or `fail WHAT`), then holds until
/// stdin closes.
pub fn acl_value_ops_app() -> &'static PathBuf {
    build("acl_value_ops.c", "ascendcl", "acl_value_ops", &["-pthread"])
}

/// `native/acl_host_func.c` built once per process: `COUNT`; runs host functions in stream
/// order with aclrtLaunchHostFunc, prints `ok COUNT` (or `fail WHAT`), then holds until
/// stdin closes.
pub fn acl_host_func_app() -> &'static PathBuf {
    build("acl_host_func.c", "ascendcl", "acl_host_func", &["-pthread"])
}

/// `native/dlsym_probe.c` built once per process, linked against no vendor library:
/// `STREAMS`; finds AscendCL only through `dlsym(RTLD_DEFAULT)`, before and after loading
/// it, prints `ok STREAMS` (or `fail WHAT`), then holds until stdin closes.
pub fn dlsym_probe_app() -> &'static PathBuf {
    build("dlsym_probe.c", "dl", "dlsym_probe", &[])
}

/// `native/acl_wrapped.c` built once per process: `STREAMS`; creates and synchronizes
/// them, prints `ok STREAMS wrapped C S` with the calls [`next_wrapper_library`] saw (-1
/// without it), then holds until stdin closes.
pub fn acl_wrapped_app() -> &'static PathBuf {
    build("acl_wrapped.c", "ascendcl", "acl_wrapped", &[])
}

/// `native/next_wrapper.c` built once per process as a shared library to preload: it
/// wraps `aclrtCreateStream` and `aclrtSynchronizeStream`, finding the wrapped functions
/// with `dlsym(RTLD_NEXT)`, as tracers and shims do.
pub fn next_wrapper_library() -> &'static PathBuf {
    build("next_wrapper.c", "dl", "libnext_wrapper.so", &["-shared", "-fPIC"])
}

/// `native/acl_capture.c` built once per process: `GRAPHS JOINED destroy|reset|exit`;
/// prints `ok GRAPHS streams S` or `fail CODE after G`, then holds until stdin closes.
pub fn acl_capture_app() -> &'static PathBuf {
    build("acl_capture.c", "ascendcl", "acl_capture", &[])
}

/// `native/acl_capture_external.c` built once per process: `ROUNDS`; graphs synchronised
/// with outside streams and each other by EXTERNAL event flags, and what is refused;
/// prints `ok external streams S` (or `fail WHAT`), then holds until stdin closes.
pub fn acl_capture_external_app() -> &'static PathBuf {
    build("acl_capture_external.c", "ascendcl", "acl_capture_external", &[])
}

/// `native/acl_capture_edges.c` built once per process:
/// `long|wrong-thread|unjoined|modes|refusals|context`;
/// prints `ok MODE streams S` (or `fail WHAT`), then holds until stdin closes.
pub fn acl_capture_edges_app() -> &'static PathBuf {
    build("acl_capture_edges.c", "ascendcl", "acl_capture_edges", &["-pthread"])
}

/// `native/acl_stream_state.c` built once per process: `MORE`; checks stream state
/// callbacks and priorities, keeps 4 + MORE streams, prints `ok state streams S` (or
/// `fail WHAT`), then holds until stdin closes.
pub fn acl_stream_state_app() -> &'static PathBuf {
    build("acl_stream_state.c", "ascendcl", "acl_stream_state", &[])
}

/// `native/acl_peer.c` built once per process: `STREAMS`; uses devices 0 and 1 and the
/// peer access between them, keeps STREAMS streams on each, prints `ok peer streams
/// STREAMS` (or `fail WHAT`), then holds until stdin closes.
pub fn acl_peer_app() -> &'static PathBuf {
    build("acl_peer.c", "ascendcl", "acl_peer", &[])
}

/// `native/acl_event_times.c` built once per process: `STREAMS`; reads events' ids and
/// completion times and makes STREAMS streams wait with a timeout, prints `ok times
/// streams STREAMS` (or `fail WHAT`), then holds until stdin closes.
pub fn acl_event_times_app() -> &'static PathBuf {
    build("acl_event_times.c", "ascendcl", "acl_event_times", &[])
}

/// `native/acl_priorities.c` built once per process: makes five streams at several
/// priorities, prints `ok priorities P1 .. P5` as it reads them back (or `fail WHAT`),
/// then holds until stdin closes.
pub fn acl_priorities_app() -> &'static PathBuf {
    build("acl_priorities.c", "ascendcl", "acl_priorities", &[])
}

/// `native/cuda_priorities.c` built once per process: makes four streams at several
/// priorities, prints `ok priorities P1 .. P4` as it reads them back (or `fail WHAT`),
/// then holds until stdin closes.
pub fn cuda_priorities_app() -> &'static PathBuf {
    build("cuda_priorities.c", "cuda", "cuda_priorities", &[])
}

/// `native/rt_steps.c` built three ways: against libruntime only (streams made only
/// through the runtime layer), against both libraries (the layers mixed), against
/// libascendcl only. Commands and output in the source.
pub fn rt_steps_apps() -> [&'static PathBuf; 3] {
    [
        build("rt_steps.c", "runtime", "rt_steps_rt", &["-DRT_ONLY"]),
        build("rt_steps.c", "ascendcl", "rt_steps_mixed", &["-Wl,--no-as-needed", "-lruntime"]),
        build("rt_steps.c", "ascendcl", "rt_steps_acl", &["-DACL_ONLY"]),
    ]
}

/// `native/rt_dlsym.c` built once per process (links no vendor library): reaches the
/// runtime layer through `dlsym` on a handle of libruntime.so loaded `RTLD_LOCAL`.
pub fn rt_dlsym_app() -> &'static PathBuf {
    build("rt_dlsym.c", "c", "rt_dlsym", &[])
}

/// `native/acl_capture_steps.c` built once per process: captures that pull streams in,
/// stopping at checkpoints (`at NAME`, then a line on stdin) mid-capture; modes and output
/// in the source.
pub fn acl_capture_steps_app() -> &'static PathBuf {
    build("acl_capture_steps.c", "ascendcl", "acl_capture_steps", &["-pthread"])
}

/// Where the fake vendor libraries are.
pub fn fake_dir() -> PathBuf {
    fake_library("libascendcl.so").parent().expect("target directory").to_path_buf()
}

/// The interposer library of this build, or the one `NPUD_TEST_PRELOAD` names (the
/// release build for old glibc that `scripts/old-glibc.sh` makes and tests).
pub fn preload_library() -> PathBuf {
    match std::env::var_os("NPUD_TEST_PRELOAD") {
        Some(path) => PathBuf::from(path),
        None => bin("libnpud_preload.so"),
    }
}

/// npud on the acl backend over the fake library and the shared budget at `shared`, on
/// `socket` when given (so a restarted npud is found where it was).
pub fn acl_daemon(shared: &Path, socket: Option<&Path>, extra: &[&str]) -> Daemon {
    let mut builder = acl_builder(shared, extra);
    if let Some(socket) = socket {
        builder = builder.socket(socket);
    }
    builder.start()
}

/// [`acl_daemon`] not yet started, for a test that sets more of its environment (the
/// host's devices, the container's view of them).
pub fn acl_builder(shared: &Path, extra: &[&str]) -> DaemonBuilder {
    let lib = fake_library("libascendcl.so");
    let mut args = vec!["--backend", "acl", "--acl-library", lib.to_str().expect("UTF-8 path")];
    args.extend_from_slice(extra);
    Daemon::builder().args(&args).env("NPU_SIM_SHARED", shared.to_str().expect("UTF-8 path"))
}

/// A command for the AscendCL program on the shared budget, interposed (`LD_PRELOAD`, the
/// way a container runs it) when `npud` is given.
pub fn acl_command(program: &Path, shared: &Path, npud: Option<(&Daemon, u32)>) -> Command {
    command(program, shared, ("ACL_APP_LIBRARY", "libascendcl.so"), npud)
}

/// `program` on the shared budget, finding the fake `library` (its file name, under the
/// variable the dlopen variants read), stdin and stdout piped.
fn command(program: &Path, shared: &Path, library: (&str, &str), npud: Option<(&Daemon, u32)>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("NPU_SIM_SHARED", shared)
        .env("LD_LIBRARY_PATH", fake_dir())
        .env(library.0, fake_library(library.1))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some((d, streams)) = npud {
        cmd.env("LD_PRELOAD", preload_library()).env("NPUD_SOCKET", &d.socket).env("NPUD_STREAMS", streams.to_string());
    }
    cmd
}

/// A running test program that holds its streams until [`App::release`].
pub struct App {
    pub child: Child,
    out: Lines<BufReader<ChildStdout>>,
}

impl App {
    /// Spawns `cmd` (stdout piped).
    pub fn spawn(mut cmd: Command) -> App {
        let mut child = cmd.spawn().expect("spawn the program");
        let out = BufReader::new(child.stdout.take().expect("stdout piped")).lines();
        App { child, out }
    }

    /// The program's verdict on its start-up: Ok(the words after "ok") or Err(the vendor
    /// code it failed with).
    pub fn started(&mut self) -> Result<Vec<String>, i64> {
        let line = self.out.next().expect("a line").expect("readable output");
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["ok", rest @ ..] => Ok(rest.iter().map(|s| s.to_string()).collect()),
            ["fail", code, ..] => Err(code.parse().expect("a numeric code")),
            _ => panic!("unexpected output: {line}"),
        }
    }

    /// Writes a line to the program's input (programs that take a command on it).
    pub fn say(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("stdin piped");
        stdin.write_all(format!("{line}\n").as_bytes()).and_then(|()| stdin.flush()).expect("write to the program");
    }

    /// The program's next output line.
    pub fn line(&mut self) -> String {
        self.out.next().expect("a line").expect("readable output")
    }

    /// Writes `line` (and a newline) to the program's stdin.
    pub fn send(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("stdin is piped and open");
        writeln!(stdin, "{line}").and_then(|()| stdin.flush()).expect("write to the program");
    }

    /// Closes stdin: the program destroys its streams and exits.
    pub fn release(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().expect("wait").success());
    }
}

/// The files `elf` loads (ldd's answer, the fake vendor libraries found where they are
/// built), the interpreter included: what a rootfs needs beside it.
pub fn loads(elf: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd").arg(elf).env("LD_LIBRARY_PATH", fake_dir()).output().expect("ldd");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let path = l.split("=>").nth(1).unwrap_or(l).split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// `apps`' start-up verdicts ([`App::started`]), read off the blocking runtime's threads.
pub async fn started_all(apps: Vec<App>) -> (Vec<Result<Vec<String>, i64>>, Vec<App>) {
    tokio::task::spawn_blocking(move || {
        let mut apps = apps;
        let verdicts = apps.iter_mut().map(App::started).collect();
        (verdicts, apps)
    })
    .await
    .expect("the start-up readers")
}

/// Pids of the processes npud lists as native holders.
pub fn holder_pids(d: &Daemon) -> Vec<u32> {
    let status = d.npuctl_json(&["status"]);
    status["native_holders"].as_array().map_or(Vec::new(), |a| {
        a.iter().filter_map(|h| h["pid"].as_u64().and_then(|p| u32::try_from(p).ok())).collect()
    })
}

/// Streams npud counts for native holders, all together.
pub fn native_held(d: &Daemon) -> u64 {
    let status = d.npuctl_json(&["status"]);
    status["native_holders"].as_array().map_or(0, |a| a.iter().filter_map(|h| h["streams"].as_u64()).sum())
}

/// Streams npud's native holders say they have created, all devices together (what its
/// reconciliation counts; `native_held` is what they were granted).
pub fn native_created(d: &Daemon) -> u64 {
    let status = d.npuctl_json(&["status"]);
    status["native_holders"].as_array().map_or(0, |a| a.iter().filter_map(|h| h["created"].as_u64()).sum())
}

/// The same on one of npud's devices.
pub fn native_created_on(d: &Daemon, device: u64) -> u64 {
    let status = d.npuctl_json(&["status"]);
    let holders = status["native_holders"].as_array().cloned().unwrap_or_default();
    holders.iter().filter(|h| h["device"] == device).filter_map(|h| h["created"].as_u64()).sum()
}

/// Releases programs one at a time in the order npud granted them (each release lets a
/// waiting one in), asserting every one started; `apps` is keyed by the pid npud lists.
pub fn release_as_granted(d: &Daemon, apps: HashMap<u32, App>, timeout: Duration) {
    release_as_granted_checking(d, apps, timeout, || {});
}

/// [`release_as_granted`], running `check` (which asserts what must hold throughout) at
/// every step.
pub fn release_as_granted_checking(
    d: &Daemon,
    mut apps: HashMap<u32, App>,
    timeout: Duration,
    mut check: impl FnMut(),
) {
    let deadline = Instant::now() + timeout;
    while !apps.is_empty() {
        check();
        assert!(Instant::now() < deadline, "{} programs never got their streams:\n{}", apps.len(), d.log());
        let granted = holder_pids(d).into_iter().find(|p| apps.contains_key(p));
        let Some(mut app) = granted.and_then(|p| apps.remove(&p)) else {
            std::thread::sleep(Duration::from_millis(25));
            continue;
        };
        assert!(app.started().is_ok(), "no program fails under npud");
        app.release();
    }
}

/// Runs an `init_wait` program (`cmd`, under the interposer) and checks that its hello
/// reached npud (`metrics_port`) once its runtime was initialised and before it asked for
/// anything, with nothing booked and nothing on the device (`shared`); then lets it exit.
pub fn says_hello_at_init(d: &Daemon, metrics_port: u16, shared: &Shared, cmd: Command) {
    let calls = |call: &str| crate::metric(metrics_port, &format!("npud_budget_calls_total{{call=\"{call}\"}}"));
    let hellos = calls("hello").unwrap_or(0.0);
    let mut app = App::spawn(cmd);
    assert_eq!(app.line(), "ready 0", "the runtime initialised");
    assert!(
        crate::eventually(Duration::from_secs(10), || calls("hello").unwrap_or(0.0) == hellos + 1.0),
        "no hello reached npud while the program had only initialised its runtime\n{}",
        d.log()
    );
    assert_eq!(calls("acquire").unwrap_or(0.0), 0.0, "nothing was asked for");
    assert_eq!(d.in_use(), 0);
    assert_eq!(shared.held_by_others(d.pid()), 0, "the driver counts nothing either");
    drop(app.child.stdin.take());
    assert_eq!(app.line(), "done");
    assert!(app.child.wait().expect("wait").success());
}

/// Runs `program ARG` natively on the fake, then under npud (`npuctl run`): both print
/// `ok`, the program's own checks having passed; while it holds, npud counts `created`
/// streams for it, as the driver does, with nothing outside the books; once it exits,
/// everything returns.
pub fn runs_natively_and_under_npud_with_the_books_equal(program: &Path, arg: &str, ok: &str, created: u32) {
    runs_natively_and_under_npud_on(None, program, arg, ok, created);
}

/// [`runs_natively_and_under_npud_with_the_books_equal`] on the parts of `profile`
/// (`NPU_SIM_PROFILE`: the daemon's devices and the program's alike), or the default.
pub fn runs_natively_and_under_npud_on(profile: Option<&str>, program: &Path, arg: &str, ok: &str, created: u32) {
    runs_natively_and_under_npud_with(profile, &[], program, arg, ok, created);
}

/// [`runs_natively_and_under_npud_on`], the program under npud with `env` besides.
pub fn runs_natively_and_under_npud_with(
    profile: Option<&str>,
    env: &[(&str, &str)],
    program: &Path,
    arg: &str,
    ok: &str,
    created: u32,
) {
    let shared = Shared::new();
    let mut builder = acl_builder(&shared.path, &[]);
    if let Some(p) = profile {
        builder = builder.env("NPU_SIM_PROFILE", p);
    }
    let d = builder.start();
    let on_profile = |mut c: Command| {
        if let Some(p) = profile {
            c.env("NPU_SIM_PROFILE", p);
        }
        c
    };
    let mut native = App::spawn({
        let mut c = on_profile(acl_command(program, &shared.path, None));
        c.arg(arg);
        c
    });
    assert_eq!(native.line(), ok);
    native.release();
    let mut cmd = on_profile(acl_command(&bin("npuctl"), &shared.path, None));
    cmd.envs(env.iter().copied());
    cmd.arg("--socket").arg(&d.socket).arg("run").arg("--").arg(program).arg(arg);
    let mut app = App::spawn(cmd);
    assert_eq!(app.line(), ok);
    // What npud counts the process created (its grant is a start-up's, larger), and the
    // driver.
    created_as_the_driver_holds(&d, &shared, created);
    released_to_nothing(&d, &shared, app);
}

/// npud counts `created` streams made by native holders, and the driver holds as many
/// besides npud's own.
pub fn created_as_the_driver_holds(d: &Daemon, shared: &Shared, created: u32) {
    assert!(
        crate::eventually(Duration::from_secs(10), || native_created(d) == u64::from(created)
            && shared.held_on(0, d.pid()) == created),
        "npud counts {} created, the driver {}",
        native_created(d),
        shared.held_on(0, d.pid())
    );
}

/// Nothing on device 0 is outside npud's books while `app` holds (at npud's next
/// measurement: a program that ran natively just before may have been measured while it
/// held, and a measurement comes every 500 ms; the app's own streams, were they outside the
/// books, would stay outside); once `app` exits, npud and the driver hold nothing for it.
pub fn released_to_nothing(d: &Daemon, shared: &Shared, app: App) {
    assert!(
        crate::eventually(Duration::from_secs(10), || d.device0()["untracked"] == 0),
        "nothing is outside the books: {}",
        d.device0()
    );
    app.release();
    assert!(
        crate::eventually(Duration::from_secs(10), || d.in_use() == 0 && shared.held_by_others(d.pid()) == 0),
        "everything returns: {}",
        d.device0()
    );
}
