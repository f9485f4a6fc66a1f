//! The interposer's cost and effect: an unmodified program's start-up natively and under
//! the interposer, the round trips it makes, and the 40×60 scenario with real processes.

use super::Samples;
use super::timeline::Life;
use crate::Daemon;
use crate::native::{acl_apps, acl_command, preload_library};
use crate::{free_port, metric};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Startup {
    pub streams: u32,
    pub native: Samples,
    pub interposed: Samples,
    /// Interposed p50 over native p50 in each half of the rounds: (the interposed start-up
    /// right after a native one, with the native one before it; the interposed start-up
    /// right after an interposed one, with the native one after it). Shows how much the
    /// order moves the ratio; the target is taken over both.
    pub by_order: (f64, f64),
    /// `true` (a program that makes no vendor call) natively and with the interposer
    /// loaded: what loading the library alone costs a process.
    pub load: (Samples, Samples),
    /// Budget calls per interposed process, and the acquires among them.
    pub calls_per_process: f64,
    pub acquires_per_process: f64,
    /// The interposed start-up taken apart, in rounds of its own, each kind as
    /// [`DECOMPOSED`] names it.
    pub decomposed: [Samples; 4],
}

/// The kinds of start-up the decomposition runs, in its rounds' order: what any preloaded
/// library costs, what the interposer costs on the process's side (npud replaced by a
/// stand-in that grants at once, `standin`), and the interposer with npud.
pub const DECOMPOSED: [&str; 4] = [
    "native",
    "any preloaded library (an empty one)",
    "the interposer, npud replaced by a stand-in that grants at once",
    "the interposer with npud",
];

/// npud as a node runs it: the fake AscendCL with `devices` devices on the shared budget
/// file `shared`, keeping the native holders' books in `state` beside it (`--state-dir`,
/// as the deployed unit does), with `config` appended to its file and `extra` flags. Every
/// interposed row of the bench runs on one.
pub fn node_daemon(shared: &Path, devices: u32, config: &str, extra: &[&str]) -> Daemon {
    crate::native::acl_builder(shared, extra)
        .env("NPU_SIM_DEVICES", &devices.to_string())
        .config(config)
        .state_dir(&shared.with_file_name("state"))
        .start()
}

/// `runs` processes of each kind that each create `streams` (default stream included),
/// hold nothing and exit, natively and with the interposer, interleaved so that a noisy
/// neighbour slows both alike.
///
/// The rounds run native, interposed, interposed, native: each kind follows each kind
/// equally often. What ran just before a start-up moves its load by tens of µs on a VM,
/// and a fixed order turns that into a bias: with `true` and a preloaded `true` between
/// the rounds (the order of the first sixteen passes), every native start-up followed a
/// short process that had just loaded the same libraries, loaded 60-80 µs faster, and the
/// ratio read about 2% higher than with the two kinds alone (BENCHMARKS.md). So `true`,
/// bare and preloaded, is timed in a loop of its own, the same way.
pub fn startup(streams: u32, runs: usize) -> Startup {
    let (program, _) = acl_apps();
    let dir = tempfile::tempdir().expect("temp dir");
    let shared = dir.path().join("budget");
    let port = free_port();
    let d = node_daemon(&shared, 1, "", &["--metrics", &format!("127.0.0.1:{port}")]);
    let created = (streams - 1).to_string();
    let timed = |mut cmd: Command| {
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let t = Instant::now();
        let status = cmd.status().expect("run the program");
        assert!(status.success(), "the program failed ({status})");
        t.elapsed()
    };
    let time = |interposed: bool| {
        let mut cmd = acl_command(program, &shared, interposed.then_some((&d, streams)));
        cmd.args([created.as_str(), "0"]);
        timed(cmd)
    };
    let load = |preloaded: bool| {
        let mut cmd = Command::new("true");
        if preloaded {
            cmd.env("LD_PRELOAD", preload_library());
        }
        timed(cmd)
    };
    let calls = || {
        ["hello", "acquire", "release", "created", "share", "declare"]
            .iter()
            .map(|c| metric(port, &format!("npud_budget_calls_total{{call=\"{c}\"}}")).unwrap_or(0.0))
            .sum::<f64>()
    };
    let acquires = || metric(port, "npud_budget_calls_total{call=\"acquire\"}").unwrap_or(0.0);
    // One of each first, so both sides run with warm page caches.
    time(false);
    time(true);
    let (calls_before, acquires_before) = (calls(), acquires());
    let rounds = runs.div_ceil(2);
    // [native, interposed] of each round's first and second halves.
    let mut halves: [[Vec<Duration>; 2]; 2] = Default::default();
    for _ in 0..rounds {
        halves[0][0].push(time(false));
        halves[0][1].push(time(true));
        halves[1][1].push(time(true));
        halves[1][0].push(time(false));
    }
    // The quiet-batch report comes from a watcher thread; let the last one land.
    std::thread::sleep(Duration::from_millis(200));
    let (calls_after, acquires_after) = (calls(), acquires());
    let standin = super::standin::StandIn::start();
    let empty = crate::native::empty_preload();
    let kind = |k: usize| {
        let mut cmd = acl_command(program, &shared, (k >= 2).then_some((&d, streams)));
        if k == 1 {
            cmd.env("LD_PRELOAD", empty);
        }
        if k == 2 {
            cmd.env("NPUD_SOCKET", &standin.socket);
        }
        cmd.args([created.as_str(), "0"]);
        timed(cmd)
    };
    let mut decomposed: [Vec<Duration>; 4] = Default::default();
    for _ in 0..rounds {
        // Each kind follows each other kind about as often.
        for k in [0, 1, 2, 3, 3, 2, 1, 0] {
            decomposed[k].push(kind(k));
        }
    }
    let (mut bare, mut loaded) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        bare.push(load(false));
        loaded.push(load(true));
        loaded.push(load(true));
        bare.push(load(false));
    }
    let ratio =
        |[n, i]: &[Vec<Duration>; 2]| Samples(i.clone()).p50().as_secs_f64() / Samples(n.clone()).p50().as_secs_f64();
    let by_order = (ratio(&halves[0]), ratio(&halves[1]));
    let [[n0, i0], [n1, i1]] = halves;
    let interposed_runs = (i0.len() + i1.len()) as f64;
    Startup {
        streams,
        native: Samples([n0, n1].concat()),
        interposed: Samples([i0, i1].concat()),
        by_order,
        load: (Samples(bare), Samples(loaded)),
        calls_per_process: (calls_after - calls_before) / interposed_runs,
        acquires_per_process: (acquires_after - acquires_before) / interposed_runs,
        decomposed: decomposed.map(Samples),
    }
}

#[derive(Debug, Clone)]
pub struct Crowd {
    pub processes: usize,
    /// Processes that failed (for `Run::Restarted`, start-ups that failed and were run again).
    pub failed: usize,
    pub makespan: Duration,
    /// Waves of processes the device holds at once, times the hold: the best any schedule
    /// can do.
    pub ideal: Duration,
    /// Every start-up, the failed ones and their restarts included.
    pub lives: Vec<Life>,
}

/// How a crowd runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// Natively; a process that fails stays failed.
    Native,
    /// Natively; a process that fails is run again after a short back-off until it starts,
    /// as a supervisor (or a restarted pod) would: the native way to get every one started.
    Restarted,
    /// Natively; a process that fails is run again as the kubelet restarts a failed
    /// container: after 10 s, doubling with each failure, at most five minutes
    /// (Kubernetes' pod lifecycle: "exponential back-off delay (10s, 20s, 40s, ...), that
    /// is capped at five minutes"). What a crowd of pods meets without npud.
    KubeletBackOff,
    /// Under the interposer.
    Interposed,
}

impl Run {
    /// How long a process that failed `failures` times waits before it runs again; None
    /// where it is not run again.
    fn back_off(self, failures: u32) -> Option<Duration> {
        match self {
            Run::Restarted => Some(RESTART_BACKOFF),
            Run::KubeletBackOff => {
                Some((KUBELET_BACKOFF * 2u32.saturating_pow(failures.saturating_sub(1))).min(KUBELET_BACKOFF_MAX))
            }
            Run::Native | Run::Interposed => None,
        }
    }
}

/// How long a restarted process waits before it is run again.
const RESTART_BACKOFF: Duration = Duration::from_millis(50);
/// The kubelet's first restart back-off, and its cap.
const KUBELET_BACKOFF: Duration = Duration::from_secs(10);
const KUBELET_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// `processes` programs of `streams` streams each (default included) started at once on
/// one device, holding `hold`.
pub fn crowd(processes: usize, streams: u32, hold: Duration, run: Run) -> Crowd {
    let (program, _) = acl_apps();
    let dir = tempfile::tempdir().expect("temp dir");
    let shared = dir.path().join("budget");
    let d = node_daemon(&shared, 1, "", &[]);
    crowd_on(&d, &shared, program, 1, processes, streams, hold, run)
}

/// The same crowd on every device of a node of `devices` (issue 59): `processes` programs
/// on each, all started at once. Returns the crowd and npud's CPU (all its threads) over
/// the crowd, with what it spends idle per second, read over `IDLE_WINDOW` before the
/// crowd starts (its periodic measurement of every device).
pub fn node_crowd(devices: u32, processes: usize, streams: u32, hold: Duration, run: Run) -> (Crowd, NodeCpu) {
    let (program, _) = acl_apps();
    let dir = tempfile::tempdir().expect("temp dir");
    let shared = dir.path().join("budget");
    // As many connections as a node's crowd opens at once, and then some.
    let config = "[limits]\nmax_connections_per_tenant = 2048\nmax_connections = 4096\n";
    let d = node_daemon(&shared, devices, config, &[]);
    let cpu = || Duration::from_nanos(super::cpu::cpu_ns(d.pid()).unwrap_or(0));
    let idle_from = cpu();
    std::thread::sleep(IDLE_WINDOW);
    let idle = cpu().saturating_sub(idle_from).as_secs_f64() / IDLE_WINDOW.as_secs_f64();
    let before = cpu();
    let crowd = crowd_on(&d, &shared, program, devices, processes, streams, hold, run);
    let used = cpu().saturating_sub(before);
    (crowd, NodeCpu { used, idle_per_s: idle })
}

/// How long npud's idle CPU is read before a node's crowd.
const IDLE_WINDOW: Duration = Duration::from_secs(2);

/// npud's CPU over a node's crowd.
#[derive(Debug, Clone, Copy)]
pub struct NodeCpu {
    /// Over the whole crowd.
    pub used: Duration,
    /// Idle, per second of wall time.
    pub idle_per_s: f64,
}

impl NodeCpu {
    /// What the crowd itself cost beyond what npud spends idle over the same time.
    pub fn beyond_idle(&self, makespan: Duration) -> Duration {
        self.used.saturating_sub(Duration::from_secs_f64(self.idle_per_s * makespan.as_secs_f64()))
    }
}

/// `processes` programs per device of `d`'s `devices`, on the fake driver's `shared`
/// budget, started at once.
#[allow(clippy::too_many_arguments)]
fn crowd_on(
    d: &Daemon,
    shared: &Path,
    program: &Path,
    devices: u32,
    processes: usize,
    streams: u32,
    hold: Duration,
    run: Run,
) -> Crowd {
    let capacity = d.device0()["capacity"].as_u64().unwrap_or(0) as usize;
    let per_wave = (capacity / streams as usize).max(1);
    let waves = processes.div_ceil(per_wave) as u32;
    let (created, hold_ms, n) = ((streams - 1).to_string(), hold.as_millis().to_string(), devices.to_string());
    let command = |device: u32| {
        let managed = run == Run::Interposed;
        let mut cmd = acl_command(program, shared, managed.then_some((d, streams)));
        cmd.args([created.as_str(), hold_ms.as_str(), &device.to_string()]).stdin(Stdio::null());
        if devices > 1 {
            cmd.env("NPU_SIM_DEVICES", &n);
        }
        if managed {
            cmd.env("NPUD_WAIT", "10m");
        }
        cmd
    };
    let t = Instant::now();
    // Spawned device by device in turn, as a node's pods start: every device's crowd grows
    // together.
    let children: Vec<_> = (0..processes * devices as usize)
        .map(|i| {
            let device = (i % devices as usize) as u32;
            (device, t.elapsed(), command(device).spawn().expect("spawn the program"))
        })
        .collect();
    let mut lives = Vec::new();
    std::thread::scope(|scope| {
        let waiting: Vec<_> = children
            .into_iter()
            .map(|(device, spawned, child)| {
                let command = &command;
                scope.spawn(move || {
                    let mut lives = vec![watch(t, spawned, child)];
                    while lives.last().is_some_and(|l| l.ready.is_none())
                        && let Some(wait) = run.back_off(lives.len() as u32)
                    {
                        std::thread::sleep(wait);
                        let spawned = t.elapsed();
                        lives.push(watch(t, spawned, command(device).spawn().expect("spawn the program again")));
                    }
                    lives
                })
            })
            .collect();
        lives = waiting.into_iter().flat_map(|w| w.join().expect("a watcher thread panicked")).collect();
    });
    let failed = lives.iter().filter(|l| l.ready.is_none()).count();
    Crowd { processes: processes * devices as usize, failed, makespan: t.elapsed(), ideal: hold * waves, lives }
}

/// Follows one process to its exit: when it said `ok` (its streams all exist) or
/// `fail`, and when it was gone. A process that exits without `ok` counts as failed.
fn watch(t: Instant, spawned: Duration, mut child: Child) -> Life {
    let (mut ready, mut failed) = (None, None);
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.starts_with("ok ") {
                ready = Some(t.elapsed());
            } else if line.starts_with("fail ") {
                failed = Some(t.elapsed());
            }
        }
    }
    let status = child.wait();
    let exited = t.elapsed();
    let ok = status.is_ok_and(|s| s.success());
    if !ok && failed.is_none() {
        failed = Some(exited);
    }
    Life { spawned, ready: if ok { ready } else { None }, failed, exited }
}

/// A tensor-parallel start-up (issue 59): `devices` processes, one per device of an
/// `NPU_SIM_DEVICES=devices` node, each creating `streams` (default stream included) and
/// exiting, all started together: the time until the last has exited, natively and under
/// the interposer, `rounds` rounds of each run native, interposed, interposed, native.
pub fn tensor_parallel(devices: u32, streams: u32, rounds: usize) -> (Samples, Samples) {
    let (program, _) = acl_apps();
    let dir = tempfile::tempdir().expect("temp dir");
    let shared = dir.path().join("budget");
    let n = devices.to_string();
    let d = node_daemon(&shared, devices, "", &[]);
    let created = (streams - 1).to_string();
    let start = |interposed: bool| {
        let t = Instant::now();
        let children: Vec<Child> = (0..devices)
            .map(|device| {
                let mut cmd = acl_command(program, &shared, interposed.then_some((&d, streams)));
                cmd.env("NPU_SIM_DEVICES", &n).args([created.as_str(), "0", &device.to_string()]);
                cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
                cmd.spawn().expect("spawn the program")
            })
            .collect();
        for mut c in children {
            assert!(c.wait().is_ok_and(|s| s.success()), "a tensor-parallel process failed");
        }
        t.elapsed()
    };
    // One of each first, so both sides run with warm page caches.
    start(false);
    start(true);
    let (mut native, mut interposed) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        native.push(start(false));
        interposed.push(start(true));
        interposed.push(start(true));
        native.push(start(false));
    }
    (Samples(native), Samples(interposed))
}
