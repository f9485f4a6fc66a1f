//! DRA claims in the device plugin's books: a prepared ResourceClaim is one allocation
//! per device its allocation result names, bound at once to the claim's pod and placed on
//! that device (the scheduler chose it and counted the streams there). Its unit id,
//! `claim:<uid>:<device>`, is what marks it a claim's and keeps it across restarts.

use super::{Allocation, Allocations, Placement, PodNames, records};
use crate::types::Tenant;

const PREFIX: &str = "claim:";

/// A claim as npud books it for its pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimBooking {
    pub uid: String,
    /// Its pod's uid (the one pod it is reserved for) and tenant.
    pub pod: String,
    pub tenant: Tenant,
    /// The streams it consumes on each device (npud's ids).
    pub streams: Vec<(u32, u32)>,
    pub names: Option<PodNames>,
}

impl Allocation {
    /// The uid of the DRA claim this allocation books, where it is one.
    pub fn claim(&self) -> Option<&str> {
        let [id] = self.ids.as_slice() else { return None };
        id.strip_prefix(PREFIX).and_then(|rest| rest.rsplit_once(':')).map(|(uid, _)| uid)
    }
}

impl Allocations {
    /// The claim `uid`'s allocations that still book (not unprepared).
    pub fn claim(&self, uid: &str) -> Vec<Allocation> {
        self.lock().map.values().filter(|a| !a.ended && a.claim() == Some(uid)).cloned().collect()
    }

    /// Every claim the books hold files of, booking or ended.
    pub fn claim_uids(&self) -> std::collections::HashSet<String> {
        self.lock().map.values().filter_map(|a| a.claim().map(str::to_string)).collect()
    }

    /// Books `c`: one allocation per device, bound to its pod and placed on that device,
    /// its files written (a restart reads it back). Idempotent: a claim booked already
    /// is returned as it is.
    pub fn book_claim(&self, c: &ClaimBooking, library: Option<String>) -> Result<Vec<Allocation>, String> {
        let booked = self.claim(&c.uid);
        if !booked.is_empty() {
            return Ok(booked);
        }
        let made = self.book_each(c, library);
        if made.is_err() {
            // All or nothing: a retry books the claim whole.
            let mut inner = self.lock();
            let super::Books { map, order, .. } = &mut *inner;
            map.retain(|_, a| {
                let mine = a.claim() == Some(c.uid.as_str());
                if mine {
                    records::remove_files(&a.file);
                }
                !mine
            });
            order.retain(|t| map.contains_key(t));
        }
        made
    }

    fn book_each(&self, c: &ClaimBooking, library: Option<String>) -> Result<Vec<Allocation>, String> {
        let mut out = Vec::new();
        for (device, streams) in &c.streams {
            let ids = vec![format!("{PREFIX}{}:{device}", c.uid)];
            let (token, _) = self
                .allocate(ids, vec![(*device, *streams)], library.clone())
                .map_err(|e| format!("writing the claim's allocation files: {e}"))?;
            let placement = Some(Placement::Devices(vec![*device]));
            let bound = self.bind(&token, &c.tenant, Some(&c.pod), placement, c.names.clone());
            out.push(bound.map_err(|e| e.message)?.allocation);
        }
        Ok(out)
    }

    /// The kubelet unprepared claim `uid`: its allocations book nothing from now on
    /// (written down), and their files go once its pod's cgroup does (`sweep`). Returns
    /// those that booked until now.
    pub fn end_claim(&self, uid: &str) -> Vec<Allocation> {
        let mut inner = self.lock();
        let mut out = Vec::new();
        for a in inner.map.values_mut().filter(|a| !a.ended && a.claim() == Some(uid)) {
            a.ended = true;
            records::write_binding(a);
            out.push(a.clone());
        }
        out
    }
}
