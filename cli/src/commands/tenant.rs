use super::Ctx;
use crate::output::{emit, table};
use npud_proto::v1 as pb;
use serde_json::json;

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
