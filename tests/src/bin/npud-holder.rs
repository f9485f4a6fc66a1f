//! Test helper: opens an anonymous session (lease renewed in the background), creates
//! streams, prints their handles, then waits for ever. Tests SIGKILL it to prove that a
//! dead client's streams are reclaimed once its lease lapses.

use npud_client::{Client, StreamOptions, Target};

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let socket = args.next().ok_or_else(|| anyhow::anyhow!("usage: npud-holder SOCKET COUNT"))?;
    let count: u32 = args.next().unwrap_or_else(|| "1".into()).parse()?;
    let client = Client::connect(Target::Socket(socket.into())).await?;
    let streams = client.device(0).create_streams(count, StreamOptions::default()).await?;
    for s in &streams {
        println!("{}", s.handle());
    }
    println!("ready");
    std::future::pending::<()>().await;
    Ok(())
}
