use std::time::Duration;

use http_body_util::BodyExt;

use super::*;

fn fairness(seats: usize) -> Arc<Fairness> {
    Fairness::new(FairnessSettings { seats, ..FairnessSettings::default() }, true).unwrap()
}

fn user(name: &str, groups: &[&str], resource: &str) -> Flow {
    let groups: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
    Flow::of_user(name, &groups, "", resource)
}

fn noisy() -> Flow {
    user("noisy", &["system:authenticated"], "pods")
}

fn kubelet(n: usize) -> Flow {
    user(&format!("system:node:n{n}"), &["system:nodes", "system:authenticated"], "pods")
}

fn seats_of(f: &Fairness, level: PriorityLevel) -> usize {
    f.levels[&level].seats.total()
}

#[test]
fn seats_are_split_by_the_api_servers_nominal_shares_rounded_up() {
    let f = fairness(100);
    // 245 shares in all: node-high 40, system 30, workload-high 40,
    // workload-low 100, global-default 20, leader-election 10, catch-all 5.
    assert_eq!(seats_of(&f, PriorityLevel::NodeHigh), 17);
    assert_eq!(seats_of(&f, PriorityLevel::System), 13);
    assert_eq!(seats_of(&f, PriorityLevel::WorkloadLow), 41);
    assert_eq!(seats_of(&f, PriorityLevel::GlobalDefault), 9);
    assert_eq!(seats_of(&f, PriorityLevel::CatchAll), 3);
    assert!(Fairness::new(FairnessSettings { seats: 0, ..FairnessSettings::default() }, true).is_none());
    // trusted-local: one level, every seat.
    let one = Fairness::new(FairnessSettings::default(), false).unwrap();
    assert_eq!(one.levels.len(), 1);
    assert_eq!(seats_of(&one, PriorityLevel::GlobalDefault), 100);
}

#[tokio::test(start_paused = true)]
async fn a_noisy_clients_backlog_does_not_delay_a_kubelet() {
    let f = fairness(100);
    let mut held = Vec::new();
    for _ in 0..9 {
        held.push(f.admit(&noisy(), false).await.unwrap());
    }
    // Its level is full and it has a queue behind it.
    let queued: Vec<_> = (0..QUEUE_LENGTH)
        .map(|_| {
            let f = f.clone();
            tokio::spawn(async move { f.admit(&noisy(), false).await.map(drop) })
        })
        .collect();
    // Each queued task runs once (they queue in their first poll).
    for _ in 0..QUEUE_LENGTH {
        tokio::task::yield_now().await;
    }
    let at_once = tokio::time::timeout(Duration::from_millis(1), f.admit(&kubelet(1), false)).await;
    assert!(matches!(at_once, Ok(Ok(_))), "a kubelet's LIST waits behind another level's backlog");
    // The noisy flow's next request finds its queue full: 429 at once.
    let refused = tokio::time::timeout(Duration::from_millis(1), f.admit(&noisy(), false)).await;
    let resp = match refused {
        Ok(Err(resp)) => *resp,
        _ => panic!("a full queue must be refused at once"),
    };
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "text/plain; charset=utf-8");
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&bytes[..], b"Too many requests, please try again later.\n");
    queued.iter().for_each(|t| t.abort());
}

#[tokio::test(start_paused = true)]
async fn a_request_that_waits_past_the_queue_wait_gets_429() {
    let f =
        Fairness::new(FairnessSettings { seats: 1, queue_wait: Duration::from_secs(15), ..Default::default() }, true)
            .unwrap();
    let _held = f.admit(&noisy(), false).await.unwrap();
    let started = Instant::now();
    let refused = f.admit(&noisy(), false).await;
    assert!(refused.is_err());
    assert_eq!(started.elapsed(), Duration::from_secs(15));
}

#[tokio::test(start_paused = true)]
async fn watch_starts_are_limited_per_flow_and_refill_over_time() {
    let f = Fairness::new(
        FairnessSettings { watch_starts_per_second: 2.0, watch_start_burst: 3.0, ..FairnessSettings::default() },
        true,
    )
    .unwrap();
    for _ in 0..3 {
        drop(f.admit(&noisy(), true).await.unwrap());
    }
    assert!(f.admit(&noisy(), true).await.is_err(), "the fourth watch at once is over the burst");
    // Another flow's starts are its own; LISTs take no watch start.
    assert!(f.admit(&user("other", &["system:authenticated"], "pods"), true).await.is_ok());
    assert!(f.admit(&noisy(), false).await.is_ok());
    tokio::time::advance(Duration::from_millis(500)).await;
    assert!(f.admit(&noisy(), true).await.is_ok(), "one start back after 1/rate seconds");
    assert!(f.admit(&noisy(), true).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn system_masters_are_never_limited() {
    let f = fairness(1);
    let admin = user("admin", &["system:masters", "system:authenticated"], "pods");
    let mut held = Vec::new();
    for _ in 0..1_000 {
        held.push(f.admit(&admin, true).await.unwrap());
    }
}

#[tokio::test(start_paused = true)]
async fn a_list_holds_its_seat_until_its_body_ends_and_a_watch_until_it_first_waits() {
    let f =
        Fairness::new(FairnessSettings { seats: 1, queue_wait: Duration::from_millis(10), ..Default::default() }, true)
            .unwrap();
    // A LIST's body: two chunks.
    let list = f
        .admit(&noisy(), false)
        .await
        .unwrap()
        .held_by(Response::new(body::chunk(Chunk::from(Bytes::from_static(b"[1,2]")))));
    assert!(f.admit(&noisy(), false).await.is_err(), "the LIST's seat is held while its body is unsent");
    let mut body = list.into_body();
    while body.frame().await.is_some() {}
    drop(f.admit(&noisy(), false).await.expect("the seat is back once the body ended"));

    // A watch's body: one initial event, then nothing for now.
    let (mut tx, rx) = http_body_util::channel::Channel::<Chunk, BoxError>::new(4);
    tx.send_data(Chunk::from(Bytes::from_static(b"ADDED"))).await.unwrap();
    let watch = f.admit(&noisy(), true).await.unwrap().held_by(Response::new(rx.boxed()));
    let mut body = watch.into_body();
    assert!(body.frame().await.is_some());
    assert!(f.admit(&noisy(), false).await.is_err(), "the initial event was not yet followed by a wait");
    let waited = tokio::time::timeout(Duration::from_millis(1), body.frame()).await;
    assert!(waited.is_err(), "the watch body has nothing more to send");
    drop(f.admit(&noisy(), false).await.expect("a watch gives its seat back when it first waits"));
    drop(tx);
}

#[tokio::test(start_paused = true)]
async fn a_seat_whose_answer_is_never_read_is_given_back_after_the_request_timeout() {
    let f =
        Fairness::new(FairnessSettings { seats: 1, queue_wait: Duration::from_secs(90), ..Default::default() }, true)
            .unwrap();
    // A LIST whose client never reads: its body is never polled.
    let unread = f
        .admit(&noisy(), false)
        .await
        .unwrap()
        .held_by(Response::new(body::chunk(Chunk::from(Bytes::from_static(b"[1,2]")))));
    let started = Instant::now();
    drop(f.admit(&noisy(), false).await.expect("the seat comes back"));
    assert_eq!(started.elapsed(), SEAT_MAX_HOLD, "given back at the request timeout, not before");
    // The body that kept it gives nothing back twice.
    drop(unread);
    let mut held = Vec::new();
    held.push(f.admit(&noisy(), false).await.unwrap());
    assert!(
        tokio::time::timeout(Duration::from_millis(1), f.admit(&noisy(), false)).await.is_err(),
        "one seat, held: the late drop did not free a second one"
    );
}
