use super::*;

fn tenant(name: &str) -> Tenant {
    Arc::from(name)
}

const LONG: Duration = Duration::from_secs(3600);

/// A task's wait for a turn on device 0: whether it got one.
fn turn_of(pacing: &Pacing, tenant: &Tenant) -> impl std::future::Future<Output = bool> + Send + 'static {
    let inner = Arc::clone(&pacing.inner);
    let tenant = Tenant::clone(tenant);
    async move { Pacing { inner }.turn(0, &tenant, LONG).await.is_some() }
}

/// Whether `turn` is still waiting after a moment.
async fn waits<F: std::future::Future + Unpin>(turn: &mut F) -> bool {
    tokio::time::timeout(Duration::from_millis(50), turn).await.is_err()
}

#[tokio::test]
async fn a_second_batch_waits_until_the_first_ends() {
    let pacing = Pacing::new(LONG);
    let a = tenant("a");
    let first = pacing.turn(0, &a, LONG).await.expect("paced");
    assert!(pacing.turn(1, &a, LONG).await.is_some(), "devices are paced independently");
    let mut second = Box::pin(pacing.turn(0, &a, LONG));
    assert!(waits(&mut second).await, "the device is busy with the first batch");
    drop(first);
    assert!(second.await.is_some(), "the first batch ended");
}

#[tokio::test]
async fn turns_go_round_tenants_not_connections() {
    let pacing = Pacing::new(LONG);
    let (a, b) = (tenant("a"), tenant("b"));
    let first = pacing.turn(0, &a, LONG).await.expect("paced");
    // Tenant a queues three more connections before tenant b queues one.
    let mut a2 = Box::pin(pacing.turn(0, &a, LONG));
    let mut a3 = Box::pin(pacing.turn(0, &a, LONG));
    assert!(waits(&mut a2).await && waits(&mut a3).await);
    let mut b1 = Box::pin(pacing.turn(0, &b, LONG));
    assert!(waits(&mut b1).await);
    drop(first);
    let second = a2.await.expect("a's next connection is first in the round");
    assert!(waits(&mut a3).await, "a had its turn");
    drop(second);
    let third = b1.await.expect("then b, ahead of a's third connection");
    assert!(waits(&mut a3).await);
    drop(third);
    assert!(a3.await.is_some());
}

#[tokio::test(start_paused = true)]
async fn a_silent_batch_gives_way_after_the_window_and_its_tenant_holds_no_turn_for_one_more() {
    let window = Duration::from_secs(2);
    let pacing = Pacing::new(window);
    let (a, b) = (tenant("a"), tenant("b"));
    let _silent = pacing.turn(0, &a, LONG).await.expect("paced");
    // Seven more connections of a wait ahead of b's.
    let queued: Vec<_> = (0..7).map(|_| tokio::spawn(turn_of(&pacing, &a))).collect();
    tokio::task::yield_now().await;
    // Paused time: the runtime jumps to the window's end once everything is idle.
    let started = tokio::time::Instant::now();
    let held = pacing.turn(0, &b, LONG).await.expect("b's turn came after the window");
    assert_eq!(started.elapsed(), window, "one window, not eight");
    for q in queued {
        assert!(!q.await.unwrap(), "a's waiting connections went ahead without the turn");
    }
    assert!(pacing.turn(0, &a, LONG).await.is_none(), "a goes ahead without holding the turn");
    drop(held);
    tokio::time::sleep(window).await;
    assert!(pacing.turn(0, &a, LONG).await.is_some(), "one window later a takes turns again");
}

#[tokio::test(start_paused = true)]
async fn the_wait_for_a_turn_is_bounded_by_the_callers_wait() {
    let pacing = Pacing::new(LONG);
    let (a, b) = (tenant("a"), tenant("b"));
    let first = pacing.turn(0, &a, LONG).await.expect("paced");
    let started = tokio::time::Instant::now();
    assert!(pacing.turn(0, &b, Duration::from_secs(3)).await.is_none(), "goes ahead without the turn");
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    assert!(pacing.turn(0, &b, Duration::ZERO).await.is_none(), "a grant that does not wait skips the turn");
    // The timed-out waiter left the queue: the next waiter gets the turn when a's ends.
    let mut next = Box::pin(pacing.turn(0, &b, LONG));
    assert!(waits(&mut next).await);
    drop(first);
    assert!(next.await.is_some());
}

#[tokio::test]
async fn a_cancelled_waiter_takes_no_turn_and_passes_on_one_it_was_handed() {
    let pacing = Pacing::new(LONG);
    let (a, b, c) = (tenant("a"), tenant("b"), tenant("c"));
    let first = pacing.turn(0, &a, LONG).await.expect("paced");
    let mut cancelled = Box::pin(pacing.turn(0, &b, LONG));
    assert!(waits(&mut cancelled).await);
    let mut last = Box::pin(pacing.turn(0, &c, LONG));
    assert!(waits(&mut last).await);
    // The turn is handed to b's waiter, which is dropped before it ever polls again.
    drop(first);
    drop(cancelled);
    assert!(last.await.is_some(), "the turn passed on to c");
}

#[tokio::test]
async fn no_window_means_no_pacing() {
    let pacing = Pacing::new(Duration::ZERO);
    assert!(pacing.turn(0, &tenant("a"), LONG).await.is_none());
}

/// A batch that ends before its window takes its window timer with it: a daemon that
/// starts thousands of processes is not woken a window later for each of them.
#[tokio::test]
async fn a_batch_that_ends_early_leaves_no_timer_behind() {
    let pacing = Pacing::new(LONG);
    let a = tenant("a");
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    for _ in 0..100 {
        let batch = pacing.turn(0, &a, LONG).await.expect("paced");
        assert_eq!(metrics.num_alive_tasks(), before + 1, "the batch's window timer");
        drop(batch);
        tokio::task::yield_now().await;
        assert_eq!(metrics.num_alive_tasks(), before, "the ended batch's timer is gone");
    }
}
