//! Per-tenant request rate limiting: a token bucket per tenant, so one tenant's flood
//! is refused with RESOURCE_EXHAUSTED without slowing anyone else.

use crate::error::{NpudError, NpudResult, Reason};
use crate::types::Tenant;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

struct Bucket {
    tokens: f64,
    refilled: Instant,
}

pub struct RateLimiter {
    /// Tokens added per second; 0 turns limiting off.
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<Tenant, Bucket>>,
}

/// Buckets idle this long are dropped so the map stays bounded by active tenants.
const IDLE_SECS: f64 = 60.0;

impl RateLimiter {
    pub fn new(rate: u32, burst: u32) -> Self {
        Self { rate: f64::from(rate), burst: f64::from(burst.max(1)), buckets: Mutex::new(HashMap::new()) }
    }

    pub fn check(&self, tenant: &Tenant) -> NpudResult<()> {
        if self.rate == 0.0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() > 4096 {
            buckets.retain(|_, b| now.duration_since(b.refilled).as_secs_f64() < IDLE_SECS);
        }
        let b = buckets.entry(Arc::clone(tenant)).or_insert(Bucket { tokens: self.burst, refilled: now });
        let elapsed = now.duration_since(b.refilled).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.rate).min(self.burst);
        b.refilled = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(NpudError::new(
                Reason::RateLimited,
                format!("tenant {tenant} exceeds {} requests per second (burst {})", self.rate, self.burst),
            )
            .with_figures(vec![("rate", self.rate as i64), ("burst", self.burst as i64)]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_then_refuses_then_refills() {
        let r = RateLimiter::new(1000, 5);
        let t: Tenant = Arc::from("t");
        for _ in 0..5 {
            r.check(&t).unwrap();
        }
        assert_eq!(r.check(&t).unwrap_err().reason, Reason::RateLimited);
        r.check(&Arc::from("other")).expect("another tenant is not affected");
        std::thread::sleep(std::time::Duration::from_millis(20));
        r.check(&t).expect("refilled");
        RateLimiter::new(0, 0).check(&t).expect("rate 0 is off");
    }
}
