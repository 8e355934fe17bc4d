//! The budget's shares, and the watchdog against bodies whose client does
//! not read, in paused time with channel bodies standing in for upstream
//! streams.

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::channel::Channel;

use super::*;

const STALL: Duration = Duration::from_secs(30);

fn client(last: u8) -> Option<IpAddr> {
    Some(IpAddr::from([10, 0, 0, last]))
}

fn upstream() -> (http_body_util::channel::Sender<Bytes, BoxError>, ProxyBody) {
    let (tx, rx) = Channel::<Bytes, BoxError>::new(8);
    (tx, crate::body::boxed(rx))
}

fn data(frame: Option<Result<Frame<Chunk>, BoxError>>) -> Bytes {
    use bytes::Buf;
    let mut chunk = frame.unwrap().unwrap().into_data().unwrap();
    chunk.copy_to_bytes(chunk.remaining())
}

#[test]
fn one_client_holds_a_quarter_and_the_rest_is_for_others() {
    let budget = AnswerBudget::new(16 << 20, 1 << 20).unwrap();
    let held: Vec<_> = std::iter::from_fn(|| budget.take(client(1))).take(100).collect();
    assert_eq!(held.len(), 4);
    let others: Vec<_> = (2..=20).filter_map(|c| budget.take(client(c))).collect();
    assert_eq!(others.len(), 12, "the rest of the 16 windows");
    assert!(budget.take(client(30)).is_none());
    drop(held);
    assert_eq!(budget.held(), 12);
    assert!(budget.take(client(1)).is_some());
}

/// A body nobody polls after its first chunk, with more waiting upstream,
/// is cut off at the deadline: the upstream body is dropped (its sender sees
/// the close) and the next poll fails; its window goes back.
#[tokio::test(start_paused = true)]
async fn a_body_behind_with_bytes_waiting_is_cut_off_at_the_deadline() {
    let budget = AnswerBudget::new(4 << 20, 1 << 20).unwrap();
    let (mut tx, body) = upstream();
    let mut body = watch(body, Hold::Whole(budget.take(client(1))), STALL);
    tx.send_data(Bytes::from_static(b"first")).await.unwrap();
    assert_eq!(data(body.frame().await), "first");
    tx.send_data(Bytes::from_static(b"waiting")).await.unwrap();
    tokio::time::sleep(STALL - Duration::from_secs(1)).await;
    assert_eq!(budget.held(), 1, "cut off before the deadline");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(budget.held(), 0, "the window was not given back");
    let err = body.frame().await.unwrap().unwrap_err();
    assert!(err.to_string().contains("did not read"), "{err}");
    assert!(tx.send_data(Bytes::from_static(b"more")).await.is_err(), "the upstream body was not dropped");
}

/// A watch whose client is behind but with nothing waiting upstream holds
/// nothing: it is left alone however long, and what comes later is still
/// delivered.
#[tokio::test(start_paused = true)]
async fn a_quiet_watch_is_never_cut_off() {
    let budget = AnswerBudget::new(4 << 20, 1 << 20).unwrap();
    let (mut tx, body) = upstream();
    let hold = Hold::WhileBehind { budget: Some(budget.clone()), client: client(1) };
    let mut body = watch(body, hold, STALL);
    tx.send_data(Bytes::from_static(b"event")).await.unwrap();
    body.frame().await.unwrap().unwrap();
    assert_eq!(budget.held(), 1, "behind: a window is held");
    tokio::time::sleep(STALL * 10).await;
    tx.send_data(Bytes::from_static(b"later")).await.unwrap();
    assert_eq!(data(body.frame().await), "later");
    // Caught up (polled with nothing there): no window held.
    let pending = tokio::time::timeout(Duration::from_millis(10), body.frame()).await;
    assert!(pending.is_err());
    assert_eq!(budget.held(), 0);
}

/// A watch behind without a window of the budget gets the short deadline.
#[tokio::test(start_paused = true)]
async fn a_watch_behind_without_a_window_is_cut_off_sooner() {
    let budget = AnswerBudget::new(1 << 20, 1 << 20).unwrap();
    let _all = budget.take(client(9)).unwrap();
    let (mut tx, body) = upstream();
    let hold = Hold::WhileBehind { budget: Some(budget.clone()), client: client(1) };
    let mut body = watch(body, hold, STALL);
    tx.send_data(Bytes::from_static(b"a")).await.unwrap();
    body.frame().await.unwrap().unwrap();
    tx.send_data(Bytes::from_static(b"b")).await.unwrap();
    tokio::time::sleep(UNBUDGETED_STALL + Duration::from_millis(100)).await;
    assert!(body.frame().await.unwrap().is_err());
}

/// A body read as fast as it comes is never behind long, however long it
/// runs.
#[tokio::test(start_paused = true)]
async fn a_body_that_is_read_is_never_cut_off() {
    let (mut tx, body) = upstream();
    let mut body = watch(body, Hold::Whole(None), STALL);
    let writer = tokio::spawn(async move {
        for _ in 0..100 {
            tx.send_data(Bytes::from_static(b"x")).await.unwrap();
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    });
    let mut got = 0;
    while let Some(frame) = body.frame().await {
        frame.unwrap();
        got += 1;
    }
    writer.await.unwrap();
    assert_eq!(got, 100);
}
