use super::Ctx;
use crate::output::{emit, table};
use clap::Subcommand;
use npud_proto::v1 as pb;
use serde_json::json;

#[derive(Debug, Subcommand)]
pub enum SessionCmd {
    /// Sessions with their holdings and lease.
    #[command(after_help = "Example:\n  npuctl session list")]
    List,
    /// Close a named session: everything it holds is reclaimed.
    #[command(after_help = "Example:\n  npuctl session close job-7")]
    Close { name: String },
}

impl SessionCmd {
    pub async fn run(self, ctx: &Ctx) -> anyhow::Result<()> {
        match self {
            SessionCmd::List => list(ctx).await?,
            SessionCmd::Close { name } => close(ctx, &name).await?,
        }
        Ok(())
    }
}

pub async fn list(ctx: &Ctx) -> npud_client::Result<()> {
    let sessions = ctx.sessions().await?.list(pb::ListSessionsRequest {}).await?.into_inner().sessions;
    let json = json!(sessions
        .iter()
        .map(|s| json!({"session": s.session, "name": s.name, "tenant": s.tenant, "streams": s.streams, "events": s.events, "lease_remaining_ms": s.lease_remaining_ms, "report_stream_open": s.report_stream_open}))
        .collect::<Vec<_>>());
    emit(ctx.output, json, || {
        let rows: Vec<Vec<String>> = sessions
            .iter()
            .map(|s| {
                let lease = if s.report_stream_open {
                    "held open".to_string()
                } else {
                    format!("{:.1}s", s.lease_remaining_ms as f64 / 1000.0)
                };
                vec![
                    s.session.to_string(),
                    s.name.clone(),
                    s.tenant.clone(),
                    s.streams.to_string(),
                    s.events.to_string(),
                    lease,
                ]
            })
            .collect();
        table(&["SESSION", "NAME", "TENANT", "STREAMS", "EVENTS", "LEASE"], &rows)
    });
    Ok(())
}

pub async fn close(ctx: &Ctx, name: &str) -> npud_client::Result<()> {
    let r =
        ctx.sessions().await?.close(pb::CloseSessionRequest { session: 0, name: name.to_string() }).await?.into_inner();
    emit(
        ctx.output,
        json!({ "name": name, "streams_released": r.streams_released, "events_released": r.events_released }),
        || format!("closed {name}: released {} stream(s), {} event(s)", r.streams_released, r.events_released),
    );
    Ok(())
}
