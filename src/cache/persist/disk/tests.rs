use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use rand::Rng;

use super::*;

fn key(name: &str) -> ObjectKey {
    ObjectKey { namespace: "ns".into(), name: name.into() }
}

fn state(loaded: &Loaded) -> BTreeMap<ObjectKey, Bytes> {
    loaded.objects.iter().cloned().collect()
}

#[test]
fn a_new_store_loads_nothing_and_a_commit_loads_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("configmaps.v1.redb");
    let store = DiskStore::open(&path).unwrap();
    assert!(store.load().unwrap().is_none(), "never written: nothing to load");
    let mut batch = Batch { rv: 7, whole: true, header: Some(Header::about(b"{}")), ..Batch::default() };
    batch.changes.push((key("a"), Some(Bytes::from_static(b"{\"a\":1}"))));
    batch.changes.push((key("b"), Some(Bytes::from_static(b"{\"b\":1}"))));
    store.commit(&batch).unwrap();
    let next = Batch { rv: 9, changes: vec![(key("a"), None), (key("c"), Some("c".into()))], ..Batch::default() };
    store.commit(&next).unwrap();
    drop(store);
    let loaded = DiskStore::open(&path).unwrap().load().unwrap().unwrap();
    assert_eq!(loaded.rv, 9);
    assert_eq!(&loaded.header.about[..], b"{}", "kept from the whole batch");
    let names: Vec<_> = loaded.objects.iter().map(|(k, v)| (k.name.as_str(), &v[..])).collect();
    assert_eq!(names, [("b", &b"{\"b\":1}"[..]), ("c", b"c")]);
    // A whole batch forgets what it does not name.
    let store = DiskStore::open(&path).unwrap();
    store
        .commit(&Batch { rv: 12, whole: true, changes: vec![(key("z"), Some("z".into()))], ..Batch::default() })
        .unwrap();
    let loaded = store.load().unwrap().unwrap();
    assert_eq!(loaded.objects.len(), 1);
    assert_eq!(loaded.objects[0].0.name, "z");
}

/// A whole rewrite after a large one leaves the first one's pages free in
/// the file (copy-on-write): the store gives them back once they are many,
/// and the state loads back the same; a tight file is left alone.
#[test]
fn a_loose_file_is_compacted_and_loads_back_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pods.v1.redb");
    let mut store = DiskStore::open(&path).unwrap();
    let whole = |rv: u64, n: usize, size: usize| Batch {
        rv,
        whole: true,
        header: Some(Header::about(b"{}")),
        changes: (0..n)
            .map(|i| (key(&format!("pod-{i:05}")), Some(Bytes::from(vec![b'x' + (rv % 2) as u8; size]))))
            .collect(),
        ..Batch::default()
    };
    store.commit(&whole(1, 4_000, 2_000)).unwrap();
    assert_eq!(store.compact_if_loose().unwrap(), None, "one commit: the file is its pages");
    // Most objects gone: their pages are free, the file as large as before.
    store.commit(&whole(2, 400, 2_000)).unwrap();
    let loose = std::fs::metadata(&path).unwrap().len();
    let compacted = store.compact_if_loose().unwrap().expect("compacted");
    assert_eq!(compacted.before, loose);
    assert!(compacted.after * 2 < compacted.before, "{compacted:?}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), compacted.after);
    assert_eq!(store.compact_if_loose().unwrap(), None, "tight again");
    drop(store);
    let loaded = DiskStore::open(&path).unwrap().load().unwrap().unwrap();
    assert_eq!((loaded.rv, loaded.objects.len()), (2, 400));
    assert!(loaded.objects.iter().all(|(_, v)| v.len() == 2_000 && v[0] == b'x'));
}

#[test]
fn the_directory_and_the_files_are_the_users_only() {
    let dir = tempfile::tempdir().unwrap();
    let persist = dir.path().join("a/b");
    fs::create_dir_all(&persist).unwrap();
    fs::set_permissions(&persist, fs::Permissions::from_mode(0o755)).unwrap();
    prepare_dir(&persist).unwrap();
    assert_eq!(fs::metadata(&persist).unwrap().permissions().mode() & 0o777, 0o700, "narrowed");
    let path = persist.join("pods.v1.redb");
    fs::write(&path, b"").unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    DiskStore::open(&path).unwrap();
    assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn a_damaged_or_foreign_file_fails_its_check_and_can_be_moved_aside() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.redb");
    fs::write(&garbage, vec![0x5a; 8192]).unwrap();
    assert!(matches!(DiskStore::open(&garbage), Err(DiskError::Open { .. })), "not a redb file");
    let aside = move_aside(&garbage).unwrap();
    assert!(!garbage.exists() && aside.exists());
    // A redb file someone else wrote: opens, but is not ours.
    let foreign = dir.path().join("foreign.redb");
    {
        let db = Database::create(&foreign).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META).unwrap().insert("format", &b"something-else"[..]).unwrap();
        txn.commit().unwrap();
    }
    let err = DiskStore::open(&foreign).unwrap().load().unwrap_err();
    assert!(matches!(err, DiskError::Integrity { .. }), "{err}");
}

/// A store cut short (a disk that lost its tail, a copy that did not
/// finish) at any length: opening and loading it is an error or a state it
/// committed, never a panic (redb panics on some of these: caught), and a
/// file cut to a tenth or to one page never loads.
#[test]
fn a_truncated_store_is_an_error_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pods.v1.redb");
    let store = DiskStore::open(&path).unwrap();
    let whole = Batch {
        rv: 5,
        whole: true,
        header: Some(Header::about(b"{}")),
        changes: (0..3_000).map(|i| (key(&format!("pod-{i:05}")), Some(Bytes::from(vec![b'p'; 700])))).collect(),
        ..Batch::default()
    };
    store.commit(&whole).unwrap();
    drop(store);
    let full = fs::read(&path).unwrap();
    assert!(full.len() > 1 << 20, "a store of {} bytes", full.len());
    let mut panicked = 0;
    for (what, len) in [
        ("a tenth", full.len() / 10),
        ("one page", 4096),
        ("a header's worth", 512),
        ("one byte", 1),
        ("half", full.len() / 2),
        ("all but a page", full.len() - 4096),
    ] {
        let cut = dir.path().join(format!("cut-{len}.redb"));
        fs::write(&cut, &full[..len]).unwrap();
        let result = DiskStore::open(&cut).and_then(|s| s.load());
        if let Err(err) = &result {
            panicked += usize::from(error_chain_text(err).contains("panicked"));
        }
        match (what, result) {
            ("a tenth" | "one page", Ok(loaded)) => panic!("{what}: loaded {:?}", loaded.map(|l| l.objects.len())),
            (_, Ok(Some(loaded))) => assert_eq!((loaded.rv, loaded.objects.len()), (5, 3_000), "{what}: a mix"),
            _ => {}
        }
    }
    println!("redb panicked on {panicked} of the cut files (caught)");
}

fn error_chain_text(err: &DiskError) -> String {
    crate::error::error_chain(err)
}

/// A store of the first format (JSON values, before `squeeze.rs`) still
/// loads after an upgrade; a commit then writes the current format.
#[test]
fn a_store_of_the_first_format_loads_and_is_rewritten_in_the_current_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pods.v1.redb");
    let store = DiskStore::open(&path).unwrap();
    let mut batch = Batch { rv: 3, whole: true, header: Some(Header::about(b"{}")), ..Batch::default() };
    batch.changes.push((key("a"), Some(Bytes::from_static(b"{\"a\":1}"))));
    store.commit(&batch).unwrap();
    {
        let txn = store.db.as_ref().unwrap().begin_write().unwrap();
        txn.open_table(META).unwrap().insert("format", &b"watchmux-persist-1"[..]).unwrap();
        txn.commit().unwrap();
    }
    let loaded = store.load().unwrap().unwrap();
    assert_eq!(state(&loaded), BTreeMap::from([(key("a"), Bytes::from_static(b"{\"a\":1}"))]));
    store.commit(&Batch { rv: 4, ..Batch::default() }).unwrap();
    let txn = store.db.as_ref().unwrap().begin_read().unwrap();
    assert_eq!(txn.open_table(META).unwrap().get("format").unwrap().unwrap().value(), FORMAT);
}

/// The workload of the crash test: batch `v` is a pure function of `v`, so
/// the state after any committed version can be computed again.
fn batch_for(v: u64) -> Batch {
    let mut changes = vec![(
        key(&format!("o{}", v % 37)),
        Some(Bytes::from(format!("{{\"v\":{v},\"pad\":\"{}\"}}", "x".repeat((v % 300) as usize)))),
    )];
    if v.is_multiple_of(5) {
        changes.push((key(&format!("o{}", (v * 7 + 3) % 37)), None));
    }
    if v.is_multiple_of(3) {
        changes.push((key(&format!("p{}", v % 11)), Some(Bytes::from(format!("{v}")))));
    }
    // Now and then a whole batch, as after a relist: everything at `v`.
    let whole = v.is_multiple_of(50);
    if whole {
        changes = expected_at(v).into_iter().map(|(k, b)| (k, Some(b))).collect();
    }
    Batch { rv: v, generation: v, whole, header: (whole || v == 1).then(|| Header::about(b"{}")), changes }
}

fn expected_at(v: u64) -> BTreeMap<ObjectKey, Bytes> {
    let mut state = BTreeMap::new();
    for at in 1..=v {
        if at.is_multiple_of(50) {
            continue; // a whole batch restates what the others built
        }
        for (k, b) in batch_for(at).changes {
            match b {
                Some(b) => state.insert(k, b),
                None => state.remove(&k),
            };
        }
    }
    state
}

const CHILD_ENV: &str = "WATCHMUX_PERSIST_CRASH_CHILD";

/// The crash test's store is sealed: its MAC must verify after any kill,
/// as it is written in the same transaction as what it covers.
fn crash_sealer() -> Arc<Sealer> {
    Arc::new(Sealer::from_bytes(&[9; 32]).unwrap())
}

/// The child of the crash test (does nothing unless the test runs it):
/// commits the workload's batches after what the store holds, printing each
/// version once its commit returned, until it is killed.
#[test]
fn crash_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else { return };
    let store = DiskStore::open_with(Path::new(&path), Some(crash_sealer())).unwrap();
    let from = store.load().unwrap().map_or(0, |l| l.rv);
    for v in from + 1..from + 100_000 {
        store.commit(&batch_for(v)).unwrap();
        println!("committed {v}");
    }
}

/// Kills a child process that commits batches to a sealed store with
/// SIGKILL at random instants, `WATCHMUX_PERSIST_CRASH_ITERATIONS` times (20 by default; `make
/// chaos` runs 1,000): every reload must be exactly the state at some
/// version that was committed, never a mix, never an error, never older
/// than the last commit the child saw return, and authenticated by its MAC.
#[test]
fn a_store_killed_at_any_instant_reloads_a_committed_state() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let iterations: u32 =
        std::env::var("WATCHMUX_PERSIST_CRASH_ITERATIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    let mut rng = rand::rng();
    let mut last_loaded = 0;
    let mut progressed = 0;
    for i in 0..iterations {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "cache::persist::disk::tests::crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(20..200)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let mut out = String::new();
        child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        let acknowledged = out.lines().filter_map(|l| l.strip_prefix("committed ")?.parse::<u64>().ok()).max();
        let loaded = match DiskStore::open(&path).and_then(|s| s.load()) {
            Ok(loaded) => loaded,
            // Killed while redb was laying out a new file: nothing had been
            // committed, so nothing is lost; the restore moves such a file
            // aside and starts cold. After any commit, never.
            Err(e) => {
                assert!(last_loaded == 0 && acknowledged.is_none(), "iteration {i}: {e}");
                fs::remove_file(&path).unwrap();
                continue;
            }
        };
        if let Some(loaded) = &loaded {
            assert_eq!(crash_sealer().manifest().verify(&loaded.meta, &loaded.objects), Ok(()), "iteration {i}");
            assert_eq!(loaded.generation, loaded.rv, "iteration {i}: the generation of another commit");
        }
        let (rv, got) = loaded.as_ref().map_or((0, BTreeMap::new()), |l| (l.rv, state(l)));
        if let Some(ack) = acknowledged {
            assert!(rv >= ack, "iteration {i}: loaded {rv}, but {ack} had been committed");
            assert!(rv <= ack + 1, "iteration {i}: loaded {rv}, beyond what was being written after {ack}");
        }
        assert!(rv >= last_loaded, "iteration {i}: went back from {last_loaded} to {rv}");
        assert_eq!(got, expected_at(rv), "iteration {i}: the state at {rv} is a mix");
        progressed += u32::from(rv > last_loaded);
        last_loaded = rv;
    }
    assert!(progressed > iterations / 2, "the child committed in only {progressed} of {iterations} runs");
}

/// Two stores moved aside in the same second (a crash loop) keep both: the
/// second never renames over the first's post-mortem copy.
#[test]
fn stores_moved_aside_in_one_second_keep_both() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pods.v1.core.redb");
    let mut aside = Vec::new();
    for content in [&b"first"[..], b"second", b"third"] {
        fs::write(&path, content).unwrap();
        aside.push(move_aside(&path).unwrap());
    }
    assert!(!path.exists());
    let kept: Vec<_> = aside.iter().map(|p| fs::read(p).unwrap()).collect();
    assert_eq!(kept, [b"first".to_vec(), b"second".to_vec(), b"third".to_vec()], "{aside:?}");
}
