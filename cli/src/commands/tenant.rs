use super::Ctx;
use crate::output::{emit, table};
use clap::Subcommand;
use npud_proto::v1 as pb;
use serde_json::json;

#[derive(Debug, Subcommand)]
pub enum TenantCmd {
    /// Tenants with explicit quotas (and yours).
    #[command(after_help = "Example:\n  npuctl tenant list")]
    List,
}

impl TenantCmd {
    pub async fn run(self, ctx: &Ctx) -> anyhow::Result<()> {
        match self {
            TenantCmd::List => list(ctx).await?,
        }
        Ok(())
    }
}

#[derive(Debug, Subcommand)]
pub enum QuotaCmd {
    /// Set quota fields of TENANT; fields not given keep their value. Persisted.
    #[command(after_help = "Example:\n  npuctl quota set team-a --max-streams 256 --reserved-streams 64")]
    Set {
        /// The tenant's name, as `tenant list` and `status` show it.
        tenant: String,
        /// Most streams the tenant may hold on each device.
        #[arg(long)]
        max_streams: Option<u32>,
        /// Streams kept for the tenant on each device, whoever else waits.
        #[arg(long)]
        reserved_streams: Option<u32>,
        /// Most events the tenant may hold on each device.
        #[arg(long)]
        max_events: Option<u32>,
        /// The tenant's share of contended budget against other waiting tenants (1..=1000).
        #[arg(long)]
        weight: Option<u32>,
        /// The most urgent stream priority the tenant may ask for (lower is more urgent).
        #[arg(long, allow_negative_numbers = true)]
        highest_priority: Option<i32>,
    },
}

impl QuotaCmd {
    pub async fn run(self, ctx: &Ctx) -> anyhow::Result<()> {
        match self {
            QuotaCmd::Set { tenant, max_streams, reserved_streams, max_events, weight, highest_priority } => {
                let req =
                    pb::SetQuotaRequest { tenant, max_streams, reserved_streams, max_events, weight, highest_priority };
                set(ctx, req).await?
            }
        }
        Ok(())
    }
}

fn quota_json(q: &pb::Quota) -> serde_json::Value {
    json!({"max_streams": q.max_streams, "reserved_streams": q.reserved_streams, "max_events": q.max_events, "weight": q.weight, "highest_priority": q.highest_priority})
}

fn limit(n: u32) -> String {
    if n == u32::MAX { "unlimited".into() } else { n.to_string() }
}

pub async fn list(ctx: &Ctx) -> npud_client::Result<()> {
    let tenants = ctx.admin().await?.list_tenants(pb::ListTenantsRequest {}).await?.into_inner().tenants;
    let json = json!(
        tenants
            .iter()
            .map(|t| json!({"name": t.name, "source": t.source, "quota": t.quota.as_ref().map(quota_json)}))
            .collect::<Vec<_>>()
    );
    emit(ctx.output, json, || {
        let rows: Vec<Vec<String>> = tenants
            .iter()
            .map(|t| {
                let q = t.quota.unwrap_or_default();
                vec![
                    t.name.clone(),
                    limit(q.max_streams),
                    q.reserved_streams.to_string(),
                    limit(q.max_events),
                    q.weight.to_string(),
                    t.source.clone(),
                ]
            })
            .collect();
        table(&["TENANT", "MAX STREAMS", "RESERVED", "MAX EVENTS", "WEIGHT", "SOURCE"], &rows)
    });
    Ok(())
}

pub async fn set(ctx: &Ctx, req: pb::SetQuotaRequest) -> npud_client::Result<()> {
    let t = ctx.admin().await?.set_quota(req).await?.into_inner();
    let q = t.quota.unwrap_or_default();
    emit(ctx.output, json!({"name": t.name, "source": t.source, "quota": quota_json(&q)}), || {
        format!(
            "{}: max streams {}, reserved {}, max events {}, weight {}",
            t.name,
            limit(q.max_streams),
            q.reserved_streams,
            limit(q.max_events),
            q.weight
        )
    });
    Ok(())
}
