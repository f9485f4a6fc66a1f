//! The daemon served in the test's own process: `npud::serve` on a thread with its own
//! runtime, on the same kind of temporary Unix socket the binary would use, stopped by a
//! shutdown signal when the handle drops (tonic's integration-test shape). Suites use it
//! where no process boundary is under test; signals, exit codes, restarts and crashes
//! need the binary (`DaemonBuilder::start` without `in_process`).

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A daemon serving in this process.
pub struct InProcess {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    /// Why serving ended, when it did on its own (for the harness's panic messages).
    pub(crate) failure: Arc<Mutex<Option<String>>>,
}

impl InProcess {
    /// Loads the config from npud's own command line and serves it until dropped.
    pub fn start(argv: Vec<String>) -> InProcess {
        use clap::Parser;
        let args = npud::config::Args::try_parse_from(&argv).unwrap_or_else(|e| panic!("npud {argv:?}: {e}"));
        let config = npud::Config::load(&args).unwrap_or_else(|e| panic!("npud {argv:?}: invalid configuration: {e}"));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let failure = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&failure);
        let thread = std::thread::Builder::new()
            .name("npud-in-process".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("a runtime for the daemon");
                let result = runtime.block_on(async move {
                    let daemon = npud::Daemon::open(config).map_err(|e| e.to_string())?;
                    npud::serve(daemon, async {
                        let _ = stopped.await;
                    })
                    .await
                    .map_err(|e| e.to_string())
                });
                if let Err(e) = result {
                    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                }
            })
            .expect("spawn the daemon's thread");
        InProcess { stop: Some(stop), thread: Some(thread), failure }
    }

    /// Whether serving has ended (it only does on its own after a failure).
    pub fn finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    pub fn failure(&self) -> String {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_default()
    }
}

impl Drop for InProcess {
    /// Asks the daemon to shut down and leaves its thread to finish on its own (as the
    /// harness kills a binary without waiting for its drain): a test does not wait out
    /// the shutdown grace of sessions it left open.
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        drop(self.thread.take());
    }
}
