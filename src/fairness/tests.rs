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
async fn a_noisy_clients_queue_does_not_delay_a_kubelet() {
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
    assert!(matches!(at_once, Ok(Ok(_))), "a kubelet's LIST waits behind another level's queue");
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

/// A body built as it is read (no exact length, as a compressed answer):
/// `frames` frames, each available at once, then its end (`None`: never
/// ends).
struct Building {
    frames: Option<usize>,
}

impl Body for Building {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        match &mut self.frames {
            Some(0) => Poll::Ready(None),
            left => {
                if let Some(n) = left {
                    *n -= 1;
                }
                Poll::Ready(Some(Ok(Frame::data(Chunk::from(Bytes::from_static(b"part"))))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.frames == Some(0)
    }
}

fn one_seat() -> Arc<Fairness> {
    let settings = FairnessSettings { seats: 1, queue_wait: Duration::from_millis(10), ..Default::default() };
    Fairness::new(settings, true).unwrap()
}

/// Whether the one seat is free now (taken and given back at once), with
/// no time passing.
async fn seat_is_free(f: &Fairness) -> bool {
    matches!(tokio::time::timeout(Duration::ZERO, f.admit(&noisy(), false)).await, Ok(Ok(_)))
}

async fn answer(f: &Fairness, watch: bool, body: ProxyBody) -> ProxyBody {
    f.admit(&noisy(), watch).await.unwrap().held_by(Response::new(body)).into_body()
}

#[tokio::test(start_paused = true)]
async fn a_built_list_gives_its_seat_back_before_a_byte_is_read() {
    let f = one_seat();
    // An empty LIST's answer, whole in memory: its client never reads it.
    let list = crate::body::ChunkList::new([Chunk::from(Bytes::from_static(b"{\"items\":[]}\n"))].into());
    let unread = answer(&f, false, body::boxed_chunks(list)).await;
    assert!(seat_is_free(&f).await, "an unread built LIST keeps no seat");
    // Nor does any complete body of known length (an error, a GET).
    let _unread = answer(&f, false, body::full(Bytes::from_static(b"{}"))).await;
    assert!(seat_is_free(&f).await);
    // The answer is still whole for a client that reads it later.
    assert_eq!(&unread.collect().await.unwrap().to_bytes()[..], b"{\"items\":[]}\n");
}

#[tokio::test(start_paused = true)]
async fn an_answer_built_as_it_is_read_holds_its_seat_until_written() {
    let f = one_seat();
    let mut body = answer(&f, false, body::boxed_chunks(Building { frames: Some(3) })).await;
    assert!(!seat_is_free(&f).await, "the seat is held while the answer is being built");
    // Read at a pace well inside the budget: still held after the budget's
    // length in all.
    for _ in 0..2 {
        assert!(body.frame().await.is_some());
        tokio::time::advance(READ_WAIT_BUDGET / 4).await;
        assert!(!seat_is_free(&f).await);
    }
    assert!(body.frame().await.is_some());
    assert!(seat_is_free(&f).await, "the last frame out: nothing more to build");
    assert!(body.frame().await.is_none());

    // A compressed LIST (compressed as it is read) is one of these.
    let list = crate::body::ChunkList::new([Chunk::from(Bytes::from(vec![b'x'; 300_000]))].into());
    let gzip = body::boxed_chunks(crate::compress::GzipBody::new(body::boxed_chunks(list)));
    let body = answer(&f, false, gzip).await;
    assert!(!seat_is_free(&f).await, "compressing is building");
    let bytes = body.collect().await.unwrap().to_bytes();
    assert!(!bytes.is_empty() && bytes.len() < 300_000);
    assert!(seat_is_free(&f).await);
}

#[tokio::test(start_paused = true)]
async fn a_watch_holds_its_seat_until_its_initial_events_are_written() {
    let f = one_seat();
    // A watch's body: one initial event, then nothing for now.
    let (mut tx, rx) = http_body_util::channel::Channel::<Chunk, BoxError>::new(4);
    tx.send_data(Chunk::from(Bytes::from_static(b"ADDED"))).await.unwrap();
    let mut body = answer(&f, true, rx.boxed()).await;
    assert!(body.frame().await.is_some());
    assert!(!seat_is_free(&f).await, "the initial event was not yet followed by a wait");
    let waited = tokio::time::timeout(Duration::from_millis(1), body.frame()).await;
    assert!(waited.is_err(), "the watch body has nothing more to send");
    assert!(seat_is_free(&f).await, "a watch gives its seat back when it first waits");
    drop(tx);
}

#[tokio::test(start_paused = true)]
async fn an_answer_its_client_does_not_read_gives_its_seat_back_after_the_read_wait_budget() {
    let f =
        Fairness::new(FairnessSettings { seats: 1, queue_wait: Duration::from_secs(90), ..Default::default() }, true)
            .unwrap();
    // A compressed LIST or a watch with initial events whose client never
    // reads (a zero window): its body is never polled.
    let unread = answer(&f, false, body::boxed_chunks(Building { frames: None })).await;
    let started = Instant::now();
    drop(f.admit(&noisy(), false).await.expect("the seat comes back"));
    assert_eq!(started.elapsed(), READ_WAIT_BUDGET, "given back once the budget is spent, not before");
    // The body that kept it gives nothing back twice.
    drop(unread);
    let _held = f.admit(&noisy(), false).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(1), f.admit(&noisy(), false)).await.is_err(),
        "one seat, held: the late drop did not free a second one"
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_reader_spends_the_budget_over_its_waits() {
    let f = one_seat();
    let mut body = answer(&f, true, body::boxed_chunks(Building { frames: None })).await;
    // Each wait is under the budget; together they are over it.
    for _ in 0..3 {
        tokio::time::advance(READ_WAIT_BUDGET * 2 / 5).await;
        assert!(body.frame().await.is_some());
    }
    assert!(seat_is_free(&f).await, "1.2 s waited in three waits of 0.4 s");
    // The rest is still written, without a seat.
    assert!(body.frame().await.is_some());
}

#[tokio::test(start_paused = true)]
async fn a_client_reading_at_once_keeps_the_seat_for_the_request_timeout_at_most() {
    let f = one_seat();
    // An answer whose building takes time (a frame every 100 ms), read as
    // soon as each frame is out: the client never makes it wait.
    let (mut tx, rx) = http_body_util::channel::Channel::<Chunk, BoxError>::new(1);
    let producer = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if tx.send_data(Chunk::from(Bytes::from_static(b"part"))).await.is_err() {
                break;
            }
        }
    });
    let mut body = answer(&f, false, rx.boxed()).await;
    let started = Instant::now();
    while !seat_is_free(&f).await {
        assert!(body.frame().await.is_some());
        assert!(started.elapsed() <= SEAT_MAX_HOLD + Duration::from_millis(100), "held past the request timeout");
    }
    let held = started.elapsed();
    assert!(held >= SEAT_MAX_HOLD - Duration::from_millis(100), "given back early, after {held:?}");
    producer.abort();
}
