//! Test helper: a client that does random stream, event and callback work until it is
//! killed: waiting creates, blocking synchronizes, unacknowledged blocking callbacks, report
//! streams. The kill-storm test SIGKILLs many of these at random points.
//!
//!     npud-chaos SOCKET SEED

use npud_client::{Client, EventOptions, StreamOptions, Target, proto};
use std::time::Duration;

/// xorshift64*: deterministic per seed, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let socket = args.next().ok_or_else(|| anyhow::anyhow!("usage: npud-chaos SOCKET SEED"))?;
    let seed: u64 = args.next().unwrap_or_else(|| "1".into()).parse()?;
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let client = Client::connect(Target::Socket(socket.into())).await?;
    let dev = client.device(0);
    let mut streams = Vec::new();
    let mut events = Vec::new();
    let _reports = if rng.below(2) == 0 { client.report_stream(0).await.ok() } else { None };
    loop {
        match rng.below(9) {
            0 | 1 => {
                let wait = Duration::from_millis(rng.below(200));
                if let Ok(mut made) =
                    dev.create_streams(1 + rng.below(12) as u32, StreamOptions { wait, ..Default::default() }).await
                {
                    streams.append(&mut made);
                }
            }
            2 if !streams.is_empty() => {
                let i = rng.below(streams.len() as u64) as usize;
                let _ = streams.swap_remove(i).close().await;
            }
            3 => {
                if let Ok(e) = dev.create_event(EventOptions::default()).await {
                    events.push(e);
                }
            }
            4 if !streams.is_empty() && !events.is_empty() => {
                let s = &streams[rng.below(streams.len() as u64) as usize];
                let e = &events[rng.below(events.len() as u64) as usize];
                let _ = s.delay(Duration::from_millis(rng.below(50))).await;
                let _ = s.record(e).await;
                let _ = streams[0].wait(e).await;
            }
            5 if !streams.is_empty() => {
                // Blocks in synchronize: the kill may land here.
                let s = &streams[rng.below(streams.len() as u64) as usize];
                let _ = s.delay(Duration::from_millis(20 + rng.below(150))).await;
                let _ = s.sync().await;
            }
            6 if !streams.is_empty() => {
                // A blocking callback nobody acknowledges holds the stream until the kill.
                let s = &streams[rng.below(streams.len() as u64) as usize];
                let _ = client.subscribe(rng.next(), s.handle()).await;
                let _ = client.launch_callback(s.handle(), vec![1, 2, 3], rng.below(2) == 0).await;
            }
            7 if !events.is_empty() => {
                let i = rng.below(events.len() as u64) as usize;
                let _ = events.swap_remove(i).close().await;
            }
            _ => {
                let _ = client.streams().list(proto::ListStreamsRequest {}).await;
                tokio::time::sleep(Duration::from_millis(rng.below(10))).await;
            }
        }
    }
}
