//! npud as the kubelet's device plugin for streams (issue 15): streams become the
//! extended resource `npud.io/streams` in units of `stream_unit`, and a container's
//! allocation becomes its tenant's quota.
//!
//! Allocate carries no pod identity (shared/reference/kubelet.md §6, §10), so the binding
//! goes the other way: Allocate mints a random token, writes it to a file npud owns and
//! mounts that file read-only into the container (`$NPUD_ALLOCATION`). The first tenant
//! that presents the token (session open's `npud-allocation` metadata, the budget wire's
//! hello) is bound to it and gets the allocation as its quota: `max_streams` and a
//! reservation of units × stream_unit. Another tenant presenting the same token is
//! refused, so a token copied out of one container does not buy another its streams.

pub mod plugin;
pub mod pods;
pub mod register;
