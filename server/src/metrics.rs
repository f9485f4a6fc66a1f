//! Prometheus metrics. Counters and histograms are updated where things happen; gauges are
//! read from the daemon's state at scrape time, so they always match `status`.

use crate::daemon::Daemon;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::{Arc, OnceLock};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub reason: String,
    pub native_code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceLabels {
    device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabels {
    tenant: String,
    device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    call: String,
}

/// Metrics that accumulate over the daemon's life.
pub struct Metrics {
    pub failures: Family<FailureLabels, Counter>,
    budget_calls: Family<CallLabels, Counter>,
    pub grant_wait: Histogram,
    pub hardware_create: Histogram,
    reclaimed: Family<KindLabels, Counter>,
}

impl Metrics {
    fn new() -> Self {
        Self {
            failures: Family::default(),
            budget_calls: Family::default(),
            // 100 µs .. ~100 s
            grant_wait: Histogram::new(exponential_buckets(0.0001, 4.0, 11)),
            // 10 µs .. ~10 s per batch
            hardware_create: Histogram::new(exponential_buckets(0.00001, 4.0, 11)),
            reclaimed: Family::default(),
        }
    }

    pub fn failure(&self, reason: &str, native_code: Option<i64>) {
        let labels = FailureLabels {
            reason: reason.to_string(),
            native_code: native_code.map_or(String::new(), |c| c.to_string()),
        };
        self.failures.get_or_create(&labels).inc();
    }

    /// One call on a budget session (`hello`, `acquire`, `release`, …).
    pub fn budget_call(&self, call: &str) {
        self.budget_calls.get_or_create(&CallLabels { call: call.to_string() }).inc();
    }

    pub fn reclaimed(&self, streams: u32, events: u32) {
        self.reclaimed.get_or_create(&KindLabels { kind: "session".into() }).inc();
        self.reclaimed.get_or_create(&KindLabels { kind: "stream".into() }).inc_by(u64::from(streams));
        self.reclaimed.get_or_create(&KindLabels { kind: "event".into() }).inc_by(u64::from(events));
    }
}

/// The process's metrics (one daemon per process).
pub fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

fn gauge_family<L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    values: Vec<(L, i64)>,
) {
    let family: Family<L, Gauge> = Family::default();
    for (labels, v) in values {
        family.get_or_create(&labels).set(v);
    }
    registry.register(name, help, family);
}

/// The text exposition of everything, gauges read now.
pub fn render(daemon: &Arc<Daemon>) -> String {
    let m = global();
    let mut r = Registry::with_prefix("npud");
    let devices: Vec<_> = daemon.devices().iter().map(|d| (d.id, daemon.admission.view(d.id))).collect();
    let dev = |id: u32| DeviceLabels { device: id.to_string() };
    let per_device = |f: &dyn Fn(&crate::admission::BudgetView) -> u32| -> Vec<(DeviceLabels, i64)> {
        devices.iter().map(|(id, v)| (dev(*id), i64::from(f(v)))).collect()
    };
    gauge_family(
        &mut r,
        "device_capacity_streams",
        "Streams npud hands out on the device",
        per_device(&|v| v.capacity),
    );
    gauge_family(&mut r, "device_in_use_streams", "Streams held by clients", per_device(&|v| v.in_use));
    gauge_family(&mut r, "device_pooled_streams", "Healthy streams kept warm for reuse", per_device(&|v| v.pooled));
    gauge_family(
        &mut r,
        "device_draining_streams",
        "Released streams finishing their work",
        per_device(&|v| v.draining),
    );
    gauge_family(
        &mut r,
        "device_free_streams",
        "Capacity not held, pooled or draining",
        per_device(&|v| v.capacity.saturating_sub(v.in_use + v.pooled + v.draining)),
    );
    gauge_family(&mut r, "device_reserved_streams", "Streams reserved by tenants", per_device(&|v| v.reserved));
    gauge_family(&mut r, "device_queued_requests", "Create requests waiting for budget", per_device(&|v| v.queued));
    let counts = daemon.registry.tenant_counts();
    let mut streams = Vec::new();
    let mut queued = Vec::new();
    for (id, v) in &devices {
        for (t, f) in &v.tenants {
            let labels = TenantLabels { tenant: t.to_string(), device: id.to_string() };
            streams.push((labels.clone(), i64::from(f.streams)));
            queued.push((labels, i64::from(f.waiting_requests)));
        }
    }
    let mut events = Vec::new();
    let mut sessions = Vec::new();
    for (t, (n, per_dev)) in &counts {
        sessions.push((TenantOnly { tenant: t.to_string() }, i64::from(*n)));
        for (d, e) in per_dev {
            events.push((TenantLabels { tenant: t.to_string(), device: d.to_string() }, i64::from(*e)));
        }
    }
    gauge_family(&mut r, "tenant_streams", "Streams a tenant holds", streams);
    gauge_family(&mut r, "tenant_queued_requests", "Create requests a tenant has waiting", queued);
    gauge_family(&mut r, "tenant_events", "Events a tenant holds", events);
    gauge_family(&mut r, "tenant_sessions", "Open sessions of a tenant", sessions);
    let native: Vec<_> = daemon
        .natives
        .totals()
        .into_iter()
        .map(|((d, t), n)| (TenantLabels { tenant: t.to_string(), device: d.to_string() }, i64::from(n)))
        .collect();
    gauge_family(
        &mut r,
        "tenant_native_streams",
        "Streams a tenant's processes created in their own context (admitted through the budget API)",
        native,
    );
    let processes: Gauge = Gauge::default();
    processes.set(daemon.natives.connections() as i64);
    r.register("native_sessions", "Budget sessions open (interposed processes and BudgetService streams)", processes);
    let pool_hits: Counter = Counter::default();
    pool_hits.inc_by(daemon.admission.pool_hits());
    r.register("pool_hits", "Streams handed out from the warm pool", pool_hits);
    let creations: Counter = Counter::default();
    creations.inc_by(daemon.devices().iter().map(|d| daemon.backend.hardware_creations(d.id)).sum());
    r.register("hardware_creations", "Streams created on hardware", creations);
    let dropped: Counter = Counter::default();
    dropped.inc_by(daemon.reports.dropped());
    r.register("reports_undeliverable", "Reports that could not be delivered", dropped);
    r.register("failures", "Failed requests by reason and native code", m.failures.clone());
    r.register(
        "budget_calls",
        "Calls on budget sessions, by kind (round trips of interposed processes)",
        m.budget_calls.clone(),
    );
    r.register("reclaimed", "Sessions, streams and events reclaimed", m.reclaimed.clone());
    r.register("grant_wait_seconds", "Time create requests waited for budget", m.grant_wait.clone());
    r.register("hardware_create_seconds", "Time one paced creation batch took", m.hardware_create.clone());
    let mut out = String::new();
    if let Err(e) = encode(&mut out, &r) {
        tracing::error!(error = %e, "encoding metrics");
    }
    out
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantOnly {
    tenant: String,
}

/// Serves `GET /metrics` on `addr` until the daemon stops.
pub async fn serve(
    daemon: Arc<Daemon>,
    listener: tokio::net::TcpListener,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    use http_body_util::Full;
    use hyper::body::Bytes;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let daemon = Arc::clone(&daemon);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let daemon = Arc::clone(&daemon);
                async move {
                    let (status, body, kind) = if req.uri().path() == "/metrics" {
                        (200, render(&daemon), "application/openmetrics-text; version=1.0.0; charset=utf-8")
                    } else {
                        (404, "only /metrics is served here\n".to_string(), "text/plain")
                    };
                    hyper::Response::builder()
                        .status(status)
                        .header("content-type", kind)
                        .body(Full::new(Bytes::from(body)))
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await {
                tracing::debug!(error = %e, "metrics connection ended");
            }
        });
    }
}
