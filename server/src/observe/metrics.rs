//! Prometheus metrics that accumulate over the daemon's life. One [`Metrics`] is made with
//! the daemon and handed to what counts (admission, the API, the budget wire); gauges are
//! read from the daemon's state at scrape time (`crate::daemon::metrics`), so they always
//! match `status`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub reason: String,
    pub native_code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeviceLabels {
    pub device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabels {
    pub tenant: String,
    pub device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    limit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    call: String,
}

/// Metrics that accumulate over the daemon's life.
pub struct Metrics {
    failures: Family<FailureLabels, Counter>,
    budget_calls: Family<CallLabels, Counter>,
    grant_wait: Histogram,
    hardware_create: Histogram,
    reclaimed: Family<KindLabels, Counter>,
    connections_refused: Family<LimitLabels, Counter>,
    measurements: Family<DeviceLabels, Counter>,
    booking_moves: Counter,
}

impl Metrics {
    pub fn new() -> Self {
        Self {
            failures: Family::default(),
            budget_calls: Family::default(),
            // 100 µs .. ~100 s
            grant_wait: Histogram::new(exponential_buckets(0.0001, 4.0, 11)),
            // 10 µs .. ~10 s per batch
            hardware_create: Histogram::new(exponential_buckets(0.00001, 4.0, 11)),
            reclaimed: Family::default(),
            connections_refused: Family::default(),
            measurements: Family::default(),
            booking_moves: Counter::default(),
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

    /// A Unix-socket connection was closed at once: its tenant (`limit` "tenant") or all
    /// tenants together ("total") had the most connections they may.
    pub fn connection_refused(&self, limit: &str) {
        self.connections_refused.get_or_create(&LimitLabels { limit: limit.to_string() }).inc();
    }

    /// A pod's booking moved to the devices its processes hold open.
    pub fn booking_moved(&self) {
        self.booking_moves.inc();
    }

    /// npud compared its books with `device`'s own count once more (reconciliation).
    pub fn measured(&self, device: u32) {
        self.measurements.get_or_create(&DeviceLabels { device: device.to_string() }).inc();
    }

    /// A create request waited this long for budget.
    pub fn grant_waited(&self, seconds: f64) {
        self.grant_wait.observe(seconds);
    }

    /// One paced creation batch took this long on hardware.
    pub fn hardware_batch(&self, seconds: f64) {
        self.hardware_create.observe(seconds);
    }

    /// Adds the accumulated families to a registry being rendered.
    pub fn register_into(&self, r: &mut Registry) {
        r.register("failures", "Failed requests by reason and native code", self.failures.clone());
        r.register(
            "budget_calls",
            "Calls on budget sessions, by kind (round trips of interposed processes)",
            self.budget_calls.clone(),
        );
        r.register("reclaimed", "Sessions, streams and events reclaimed", self.reclaimed.clone());
        r.register(
            "connections_refused",
            "Unix-socket connections closed at once, by the limit they met",
            self.connections_refused.clone(),
        );
        r.register(
            "device_measurements",
            "Times npud compared its books with the device's own count of streams (reconciliation)",
            self.measurements.clone(),
        );
        r.register(
            "booking_moves",
            "Pods' bookings moved to the devices their processes hold open (Volcano, unknown ids)",
            self.booking_moves.clone(),
        );
        r.register("grant_wait_seconds", "Time create requests waited for budget", self.grant_wait.clone());
        r.register("hardware_create_seconds", "Time one paced creation batch took", self.hardware_create.clone());
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Registers a gauge family with the values read now.
pub fn gauge_family<L: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug + Send + Sync + 'static>(
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantOnly {
    pub tenant: String,
}
